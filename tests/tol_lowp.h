/* tests/tol_lowp.h - the one rule for the f16 / bf16 tolerances of the C suites (through
 * common.h), the CUDA suites (through cuda_check.h) and tests/fuzz/fuzz_selscan.c; the torch
 * tests' _common.lowp_tol and the TF tests' lowp_tol state the same rule. Include after selscan.h
 * (selscan_dtype).
 *
 *   tc_unit_roundoff(dt)         u = 2^-p, the unit roundoff of round-to-nearest in dt (p
 *                                significand bits, the implicit one counted): 2^-24 f32, 2^-11
 *                                f16, 2^-8 bf16. Rounding x to dt moves it by at most u |x|, so
 *                                rounding a whole result once moves a relative error (2-norm or
 *                                max-norm ratio, or element by element) by at most u.
 *   tc_tol_lowp(dt, f32_tol, k)  f32_tol + k u(dt) for f16 / bf16, f32_tol for f32: the same
 *                                comparison's f32 tolerance (the library computes in f32, that
 *                                error stays) plus k roundings to dt between the compared values
 *                                (1: a result rounded once vs a reference that is not; 2: two
 *                                results each rounded from its own f32 value), k stated where used.
 *   tc_class(v)                  v's class for the special-value tests (an output's class against
 *                                the reference's): 0 finite, 1 +inf, 2 -inf, 3 NaN. */
#ifndef SELSCAN_TESTS_TOL_LOWP_H
#define SELSCAN_TESTS_TOL_LOWP_H
#include <math.h>

static inline double tc_unit_roundoff(selscan_dtype dt) {
    return dt == SELSCAN_F16 ? 1.0 / 2048 : dt == SELSCAN_BF16 ? 1.0 / 256 : 1.0 / 16777216;
}
static inline double tc_tol_lowp(selscan_dtype dt, double f32_tol, double k) {
    return dt == SELSCAN_F16 || dt == SELSCAN_BF16 ? f32_tol + k * tc_unit_roundoff(dt) : f32_tol;
}
static inline int tc_class(double v) { return isnan(v) ? 3 : isinf(v) ? (v > 0 ? 1 : 2) : 0; }

#endif
