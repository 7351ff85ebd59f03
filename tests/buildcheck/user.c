/* Build check: a translation unit that only includes the header and calls the API. */
#include <string.h>
#include "../../selscan.h"

#ifdef __cplusplus
extern "C"
#endif
    int user_forward(void); /* C linkage also when compiled as C++ */ /* also called from main.c */

int user_forward(void) {
    float u[6] = {1, 2, 3, 4, 5, 6}, delta[6] = {.1f, .2f, .3f, .4f, .5f, .6f}, A[2] = {-1, -2}, B[3] = {1, 2, 3},
          C[3] = {3, 2, 1}, y[6];
    static unsigned char big[(1 << 20) + 64];
    selscan_problem p;
    size_t bytes = 0;
    void *w;
    memset(&p, 0, sizeof p);
    p.batch = 1; p.dim = 2; p.seqlen = 3; p.dstate = 1;
    p.u.data = u; p.delta.data = delta; p.A.data = A; p.B.data = B; p.C.data = C; p.y.data = y;
    if (selscan_workspace_size(&p, NULL, &bytes) != SELSCAN_OK) return 1;
    if (bytes > 0) {
        w = big + (SELSCAN_WORKSPACE_ALIGN - (uintptr_t)big % SELSCAN_WORKSPACE_ALIGN) % SELSCAN_WORKSPACE_ALIGN;
        if (bytes > sizeof big - 64) return 2;
    } else {
        w = NULL;
    }
    if (selscan_forward_cpu(&p, w, bytes) != SELSCAN_OK) return 3;
    return y[0] == y[0] ? 0 : 4;
}
