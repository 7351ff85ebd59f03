// Build check: nvcc compiles a CUDA translation unit that holds the host implementation.
#define SELSCAN_IMPLEMENTATION
#include "../../selscan.h"

__global__ void touch(float *x) { x[threadIdx.x] += 1.0f; }

int cuda_tu_status(void) { return selscan_status_string(SELSCAN_OK)[0] == 'o' ? 0 : 1; }
