/* cuda_check.h - the CUDA suites' counters and checks (tests/test_cuda.cu, tests/test_cuda_conv.cu):
   CHECK counts a pass or prints the failure, CU stops the suite on a failed CUDA call,
   report_no_gpu ends a run on a machine without a GPU; tol_lowp.h's f16 / bf16 tolerance rule.
   Include after selscan_cuda.cuh. */
#ifndef SELSCAN_TESTS_CUDA_CHECK_H
#define SELSCAN_TESTS_CUDA_CHECK_H
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include "tol_lowp.h"

static int g_pass = 0, g_fail = 0;
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
