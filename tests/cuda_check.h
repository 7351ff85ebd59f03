/* cuda_check.h - the CUDA suites' counters and checks (tests/test_cuda.cu, test_cuda_conv.cu,
   test_cuda_ssd.cu): CHECK counts a pass or prints the failure, CU stops the suite on a failed CUDA
   call, report_no_gpu ends a run on a machine without a GPU; tol_lowp.h's f16 / bf16 tolerance rule;
   the suites' random numbers (splitmix64 from the suite's CUDA_CHECK_SEED, defined before the
   include). Include after selscan_cuda.cuh. */
#ifndef SELSCAN_TESTS_CUDA_CHECK_H
#define SELSCAN_TESTS_CUDA_CHECK_H
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "tol_lowp.h"

static int g_pass = 0, g_fail = 0;

#ifndef CUDA_CHECK_SEED
#error "define CUDA_CHECK_SEED (the suite's random seed) before including cuda_check.h"
#endif
static uint64_t g_rng = CUDA_CHECK_SEED;
/* uniform in [lo, hi) */
static inline double urand(double lo, double hi) {
    g_rng += 0x9e3779b97f4a7c15ull;
    uint64_t z = g_rng;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return lo + (hi - lo) * (double)(z >> 11) / 9007199254740992.0;
}
/* uniform in [lo, hi] */
static inline int irand(int lo, int hi) { return lo + (int)(urand(0, 1) * (hi - lo + 1)) % (hi - lo + 1); }
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) g_pass++;                                                                        \
        else {                                                                                     \
            g_fail++;                                                                              \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)
#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
/* Without a device only the host-side validation checks ran: the suite's line counts those, as
   what they are, and reports the GPU matrix as skipped; the last line keeps tests/run.sh's
   "N passed, N failed". Returns the exit status. */
static inline int report_no_gpu(const char *suite) {
    printf("%s: host-side validation checks (no GPU needed): %d passed, %d failed\n", suite, g_pass, g_fail);
    printf("%s: skipped: no GPU (the GPU matrix, every kernel against the CPU reference, did not run)\n", suite);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
#endif
