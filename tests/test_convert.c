/* test_convert: the library's f16 / bf16 conversions.
     all 65536 f16 and bf16 patterns: widening is exact, and narrowing the widened value gives the
       pattern back (NaN stays NaN, sign kept);
     f32 -> f16 / bf16 round to nearest even against a double-based reference (tc_round) and,
       where gcc has it, _Float16: every midpoint between neighbouring 16-bit values and its two
       f32 neighbours, plus millions of random f32 bit patterns and random values in the f16 range;
     special cases: +-0, +-inf, NaN payloads that would truncate to inf, overflow to inf at the
       exact boundary, subnormals in and out. */
#include "../selscan.h" /* the implementation: tests/selscan_impl.c, linked by the Makefile */
#include "common.h"

#if defined(__FLT16_MAX__) && !defined(SELSCAN_TEST_NO_FLOAT16)
#define HAVE_FLOAT16 1
#endif

static float bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static int is_nan16(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
static int is_nanb16(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }

/* The library's f32 -> T result for f, compared with the reference rounding. */
static int ok16(float f, uint16_t got) {
    double r = tc_round(SELSCAN_F16, (double)f);
    if (isnan(f)) return is_nan16(got) && ((got >> 15) == (f_bits(f) >> 31));
    return tc_f16_decode(got) == r && (signbit(tc_f16_decode(got)) != 0) == (signbit(r) != 0);
}
static int okb16(float f, uint16_t got) {
    double r = tc_round(SELSCAN_BF16, (double)f);
    if (isnan(f)) return is_nanb16(got) && ((got >> 15) == (f_bits(f) >> 31));
    return tc_bf16_decode(got) == r && (signbit(tc_bf16_decode(got)) != 0) == (signbit(r) != 0);
}

int main(void) {
    const int quick = tc_quick();
    uint32_t i;
    int64_t bad, bad2, n;
    tc_init("test_convert");
#ifdef HAVE_FLOAT16
    printf("test_convert: comparing with the compiler's _Float16 too\n");
#else
    printf("test_convert: no _Float16 in this compiler; double-based reference only\n");
#endif

    /* exhaustive 16-bit patterns */
    bad = bad2 = 0;
    for (i = 0; i < 65536; i++) {
        const uint16_t h = (uint16_t)i;
        const float f = selscan_f16_to_f32(h);
        const double want = tc_f16_decode(h);
        const uint16_t back = selscan_f32_to_f16(f);
        if (is_nan16(h)) {
            bad += !isnan(f) || (signbit(f) != 0) != ((h >> 15) != 0);
            bad2 += !is_nan16(back);
        } else {
            bad += (double)f != want || (signbit(f) != 0) != ((h >> 15) != 0);
            bad2 += back != h;
        }
    }
    CHECK(bad == 0, "f16 -> f32 wrong for %lld of 65536 patterns", (long long)bad);
    CHECK(bad2 == 0, "f16 -> f32 -> f16 does not round-trip for %lld of 65536 patterns", (long long)bad2);
    bad = bad2 = 0;
    for (i = 0; i < 65536; i++) {
        const uint16_t h = (uint16_t)i;
        const float f = selscan_bf16_to_f32(h);
        const uint16_t back = selscan_f32_to_bf16(f);
        if (is_nanb16(h)) {
            bad += !isnan(f);
            bad2 += !is_nanb16(back) || (back >> 15) != (h >> 15);
        } else {
            bad += f_bits(f) != ((uint32_t)h << 16);
            bad2 += back != h;
        }
    }
    CHECK(bad == 0, "bf16 -> f32 wrong for %lld of 65536 patterns", (long long)bad);
    CHECK(bad2 == 0, "bf16 -> f32 -> bf16 does not round-trip for %lld of 65536 patterns", (long long)bad2);

    /* every midpoint between neighbouring finite 16-bit values, and its f32 neighbours */
    bad = bad2 = 0;
    for (i = 0; i < 0x7c00; i++) {
        const double lo = tc_f16_decode((uint16_t)i), hi = i == 0x7bff ? 65536.0 : tc_f16_decode((uint16_t)(i + 1));
        const float mid = (float)((lo + hi) / 2); /* exact in f32 */
        const float cand[3] = {nextafterf(mid, 0), mid, nextafterf(mid, INFINITY)};
        int k, s;
        for (k = 0; k < 3; k++)
            for (s = 0; s < 2; s++) {
                const float f = s ? -cand[k] : cand[k];
                bad += !ok16(f, selscan_f32_to_f16(f));
#ifdef HAVE_FLOAT16
                {
                    _Float16 hh = (_Float16)f;
                    uint16_t hb;
                    memcpy(&hb, &hh, 2);
                    bad2 += hb != selscan_f32_to_f16(f);
                }
#endif
            }
    }
    CHECK(bad == 0, "f32 -> f16 wrong at %lld midpoints / neighbours", (long long)bad);
    CHECK(bad2 == 0, "f32 -> f16 differs from _Float16 at %lld midpoints / neighbours", (long long)bad2);
    bad = 0;
    for (i = 0; i < 0x7f80; i++) {
        const uint32_t lo = i << 16, hi = (i + 1) << 16, mid = lo + 0x8000;
        const uint32_t cand[3] = {mid - 1, mid, mid + 1};
        int k, s;
        (void)hi;
        for (k = 0; k < 3; k++)
            for (s = 0; s < 2; s++) {
                const float f = bits_f(cand[k] | (s ? 0x80000000u : 0));
                bad += !okb16(f, selscan_f32_to_bf16(f));
            }
    }
    CHECK(bad == 0, "f32 -> bf16 wrong at %lld midpoints / neighbours", (long long)bad);

    /* random f32 bit patterns (every exponent, NaNs included) and random values in f16's range */
    n = quick ? (1 << 20) : (1 << 22);
    bad = bad2 = 0;
    {
        int64_t j, badb = 0, badr = 0;
        for (j = 0; j < n; j++) {
            const uint32_t u = (uint32_t)tc_u64();
            const float f = bits_f(u);
            const float g = (float)(tc_uniform(-1, 1) * ldexp(1.0, (int)tc_randint(-26, 16)));
            bad += !ok16(f, selscan_f32_to_f16(f));
            badr += !ok16(g, selscan_f32_to_f16(g));
            badb += !okb16(f, selscan_f32_to_bf16(f));
#ifdef HAVE_FLOAT16
            if (!isnan(f)) {
                _Float16 hh = (_Float16)f;
                uint16_t hb;
                memcpy(&hb, &hh, 2);
                bad2 += hb != selscan_f32_to_f16(f);
            }
#endif
        }
        CHECK(bad == 0, "f32 -> f16 wrong for %lld of %lld random bit patterns", (long long)bad, (long long)n);
        CHECK(badr == 0, "f32 -> f16 wrong for %lld of %lld random values in range", (long long)badr, (long long)n);
        CHECK(bad2 == 0, "f32 -> f16 differs from _Float16 for %lld of %lld random bit patterns", (long long)bad2, (long long)n);
        CHECK(badb == 0, "f32 -> bf16 wrong for %lld of %lld random bit patterns", (long long)badb, (long long)n);
    }

    /* special values */
    CHECK(selscan_f32_to_f16(0.0f) == 0x0000 && selscan_f32_to_f16(-0.0f) == 0x8000, "f16 of +-0");
    CHECK(selscan_f32_to_bf16(0.0f) == 0x0000 && selscan_f32_to_bf16(-0.0f) == 0x8000, "bf16 of +-0");
    CHECK(selscan_f32_to_f16(INFINITY) == 0x7c00 && selscan_f32_to_f16(-INFINITY) == 0xfc00, "f16 of +-inf");
    CHECK(selscan_f32_to_bf16(INFINITY) == 0x7f80 && selscan_f32_to_bf16(-INFINITY) == 0xff80, "bf16 of +-inf");
    CHECK(selscan_f32_to_f16(65504.0f) == 0x7bff && selscan_f32_to_f16(65519.996f) == 0x7bff &&
              selscan_f32_to_f16(65520.0f) == 0x7c00 && selscan_f32_to_f16(-65520.0f) == 0xfc00 &&
              selscan_f32_to_f16(1e10f) == 0x7c00 && selscan_f32_to_f16(3.4e38f) == 0x7c00,
          "f16 overflow boundary (65520 rounds to inf, 65519.996 to 65504)");
    CHECK(selscan_f32_to_bf16(bits_f(0x7f7fffffu)) == 0x7f80 && selscan_f32_to_bf16(bits_f(0x7f7f7fffu)) == 0x7f7f &&
              selscan_f32_to_bf16(bits_f(0x7f7f8000u)) == 0x7f80 && selscan_f32_to_bf16(bits_f(0x7f7e8000u)) == 0x7f7e,
          "bf16 overflow boundary and ties to even");
    CHECK(selscan_f32_to_f16(ldexpf(1, -24)) == 0x0001 && selscan_f32_to_f16(ldexpf(1, -25)) == 0x0000 &&
              selscan_f32_to_f16(nextafterf(ldexpf(1, -25), 1)) == 0x0001 && selscan_f32_to_f16(ldexpf(3, -25)) == 0x0002 &&
              selscan_f32_to_f16(ldexpf(1, -14)) == 0x0400 && selscan_f32_to_f16(ldexpf(1023, -24)) == 0x03ff &&
              selscan_f32_to_f16(ldexpf(2047, -25)) == 0x0400 && selscan_f32_to_f16(-ldexpf(1, -26)) == 0x8000 &&
              selscan_f32_to_f16(bits_f(1)) == 0x0000,
          "f16 subnormals (2^-25 ties to 0, 3*2^-25 ties to 2, carry into the normal range)");
    CHECK(selscan_f16_to_f32(0x0001) == ldexpf(1, -24) && selscan_f16_to_f32(0x03ff) == ldexpf(1023, -24) &&
              selscan_f16_to_f32(0x8001) == -ldexpf(1, -24),
          "f16 subnormals widen exactly");
    CHECK(selscan_f32_to_bf16(bits_f(0x00008000u)) == 0x0000 && selscan_f32_to_bf16(bits_f(0x00018000u)) == 0x0002 &&
              selscan_f32_to_bf16(bits_f(0x00008001u)) == 0x0001 && selscan_f32_to_bf16(bits_f(0x00010000u)) == 0x0001,
          "bf16 of f32 subnormals (ties to even)");
    CHECK(selscan_f32_to_f16(1.0f) == 0x3c00 && selscan_f32_to_f16(1.0f + ldexpf(1, -11)) == 0x3c00 &&
              selscan_f32_to_f16(1.0f + ldexpf(3, -11)) == 0x3c02 && selscan_f32_to_f16(-2.5f) == 0xc100,
          "f16 ties to even near 1");
    {
        /* NaNs whose payload sits only in bits a narrowing drops must not become inf */
        const uint32_t nans[] = {0x7f800001u, 0xff800001u, 0x7f801000u, 0x7fc00000u, 0xffffffffu, 0x7f80ffffu, 0x7fbfffffu};
        int k, ok = 1, okb = 1;
        for (k = 0; k < 7; k++) {
            const uint16_t h = selscan_f32_to_f16(bits_f(nans[k])), b = selscan_f32_to_bf16(bits_f(nans[k]));
            ok &= is_nan16(h) && (h >> 15) == (nans[k] >> 31);
            okb &= is_nanb16(b) && (b >> 15) == (nans[k] >> 31);
        }
        CHECK(ok, "f32 NaN -> f16 stays NaN with its sign");
        CHECK(okb, "f32 NaN -> bf16 stays NaN with its sign");
        CHECK(isnan(selscan_f16_to_f32(0x7c01)) && isnan(selscan_f16_to_f32(0xfe00)) && isnan(selscan_bf16_to_f32(0x7f81)) &&
                  isinf(selscan_f16_to_f32(0x7c00)) && isinf(selscan_bf16_to_f32(0xff80)),
              "16-bit NaN / inf widen to NaN / inf");
    }
    return tc_finish();
}
