// Build check: a user's .cu file that has its own helpers, types and kernels named like the CUDA
// implementation's internals (cdiv, al, mk, ld, st, flat, fill_problem, scan_params, ...), defined
// before and after the implementation's include, compiles warnings-clean: the implementation's
// names live in namespace selscan_cuda_detail, none in the user's global namespace.
#include <stddef.h>
#include <stdint.h>
#include <math.h>

// before the include
static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static size_t al(size_t x) { return (x + 255) / 256 * 256; }
static int pow2ceil(int64_t x) {
    int p = 1;
    while (p < x) p <<= 1;
    return p;
}
static unsigned nblocks(int64_t n, int t) { return static_cast<unsigned>(cdiv(n, t)); }
struct ct { void *p; int64_t s[4]; };
struct kparams { int64_t batch, dim; };
struct scan_params { int64_t batch; };
struct h16 { unsigned short bits; };
struct fwd_plan { int n; };
struct bwd_plan { int n; };
struct sizecalc { int64_t v; };
template <typename T> struct dtype_tag { T v; };
const int kThreads = 256;
const int kCK = 32;
static ct mk(void *p) { ct r = {p, {1, 0, 0, 0}}; return r; }
static void fill_problem(kparams &P, int64_t b, int64_t d) { P.batch = b; P.dim = d; }
static scan_params scan_of(const kparams &P) { scan_params r = {P.batch}; return r; }
static int flat(const void *p, int64_t bytes) { return p ? static_cast<int>(bytes) : 0; }
template <typename T> __device__ float ld(const void *p, int64_t i) { return static_cast<float>(static_cast<const T *>(p)[i]); }
template <typename T> __device__ void st(void *p, int64_t i, float v) { static_cast<T *>(p)[i] = static_cast<T>(v); }
__device__ float ex2(float x) { return exp2f(x); }
__device__ float softplus(float x) { return log1pf(expf(x)); }
__device__ float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }
__global__ void carry_kernel(float *x, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) st<float>(x, i, softplus(ld<float>(x, i)) + ex2(0.0f) * sigm(0.0f));
}

#define SELSCAN_VALIDATION_ONLY
#define SELSCAN_IMPLEMENTATION
#define SELSCAN_CUDA_IMPLEMENTATION
#include "../../selscan_cuda.cuh"

// after the include
static int64_t sm_count() { return 132; }
static int fail(const char *what) { return what ? 1 : 0; }
static selscan_status forward(const selscan_problem *p, void *ws, size_t bytes, cudaStream_t s) { return selscan_forward_cuda(p, ws, bytes, s); }
static selscan_status backward(const selscan_problem *p, const selscan_grads *g, void *ws, size_t bytes, cudaStream_t s) {
    return selscan_backward_cuda(p, g, ws, bytes, s);
}
static selscan_status step(const selscan_step_problem *s, const selscan_cuda_ext *x, cudaStream_t st) { return selscan_step_cuda_ex(s, x, st); }
template <typename F> static int with_dtype(selscan_dtype dt, F f) { return f(static_cast<int>(dt)); }
__global__ void reduce_rows_kernel(float *x) { x[threadIdx.x] = 0.0f; }
__global__ void empty_seq_kernel(float *x) { x[threadIdx.x] = 1.0f; }

int cuda_user_names_check(void) {
    kparams P;
    fill_problem(P, 2, 3);
    fwd_plan f = {1};
    bwd_plan b = {2};
    sizecalc c = {3};
    dtype_tag<int> t = {4};
    h16 h = {5};
    int64_t n = cdiv(P.batch * P.dim, kThreads) + static_cast<int64_t>(al(7)) + pow2ceil(9) + nblocks(100, kCK) + mk(NULL).s[0];
    n += flat(&n, 8) + f.n + b.n + c.v + t.v + h.bits + sm_count() + fail("x") + scan_of(P).batch;
    n += with_dtype(SELSCAN_BF16, [](int v) { return v; });
    selscan_status s1 = forward(NULL, NULL, 0, 0), s2 = backward(NULL, NULL, NULL, 0, 0), s3 = step(NULL, NULL, 0);
    void (*k0)(float *, int64_t) = carry_kernel;
    void (*k1)(float *) = reduce_rows_kernel;
    void (*k2)(float *) = empty_seq_kernel;
    return (n > 0 && s1 == SELSCAN_ERR_NULL && s2 == SELSCAN_ERR_NULL && s3 == SELSCAN_ERR_NULL && k0 && k1 && k2) ? 0 : 1;
}
