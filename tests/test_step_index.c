/* test_step_index: the step's duplicate check of state_index (issue 21 item 6: linear, no
   allocation, a sliding stack bitmap over the index range) against the pairwise rule on random
   index sets (duplicates near and far, padding, indices spread past one 65536-value window), and
   timed at batch 4096 / 16384 (printed, not asserted). */
#define SELSCAN_IMPLEMENTATION
#include "../selscan.h"
#include "common.h"
#include <time.h>

static int pairwise_unique(const int32_t *idx, int64_t n) {
    int64_t i, j;
    for (i = 0; i < n; i++)
        for (j = i + 1; j < n && idx[i] >= 0; j++)
            if (idx[j] == idx[i]) return 0;
    return 1;
}


int main(void) {
    static int32_t idx[16384];
    int t;
    tc_init("test_step_index");
    for (t = 0; t < 3000; t++) {
        const int64_t n = 1 + (int64_t)(tc_u64() % (t < 2000 ? 300 : 3000));
        const int64_t range = (int64_t[]){n, 2 * n, 70000, 1 << 20, 2000000000}[tc_u64() % 5];
        int64_t i;
        /* distinct values, spread or dense */
        for (i = 0; i < n; i++) idx[i] = (int32_t)((i * (range / n > 0 ? range / n : 1) + (int64_t)(tc_u64() % 3)) % range);
        for (i = 0; i < n; i++) { /* shuffle */
            const int64_t k = (int64_t)(tc_u64() % (uint64_t)n);
            const int32_t tmp = idx[i]; idx[i] = idx[k]; idx[k] = tmp;
        }
        if (tc_u64() % 4 == 0) idx[tc_u64() % n] = -1 - (int32_t)(tc_u64() % 3); /* padding */
        if (tc_u64() % 2 && n > 1) idx[tc_u64() % n] = idx[tc_u64() % n]; /* maybe a duplicate (or padding twice) */
        CHECK(selscan__idx_unique(idx, n) == pairwise_unique(idx, n), "case %d: n %lld range %lld: %d vs %d", t,
              (long long)n, (long long)range, selscan__idx_unique(idx, n), pairwise_unique(idx, n));
    }
    { /* a duplicate in the last window of a spread set */
        int64_t i;
        for (i = 0; i < 5000; i++) idx[i] = (int32_t)(i * 100000);
        CHECK(selscan__idx_unique(idx, 5000) == 1, "spread distinct refused");
        idx[0] = idx[4999];
        CHECK(selscan__idx_unique(idx, 5000) == 0, "spread duplicate missed");
    }
    { /* timing: the full validation of a step at batch 4096 / 16384 (n_cache = batch) */
        int64_t nb;
        for (nb = 4096; nb <= 16384; nb *= 4) {
            int64_t i;
            struct timespec a, b;
            int rep;
            double best = 1e9;
            for (i = 0; i < nb; i++) idx[i] = (int32_t)(nb - 1 - i);
            for (rep = 0; rep < 5; rep++) {
                int ok;
                clock_gettime(CLOCK_MONOTONIC, &a);
                ok = selscan__idx_unique(idx, nb);
                clock_gettime(CLOCK_MONOTONIC, &b);
                CHECK(ok == 1, "batch %lld refused", (long long)nb);
                if ((b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3 < best)
                    best = (b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3;
            }
            clock_gettime(CLOCK_MONOTONIC, &a);
            CHECK(pairwise_unique(idx, nb) == 1, "pairwise");
            clock_gettime(CLOCK_MONOTONIC, &b);
            printf("state_index duplicate check, batch %lld: %.1f us (pairwise: %.1f us)\n", (long long)nb, best,
                   (b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3);
        }
    }
    return tc_finish();
}
