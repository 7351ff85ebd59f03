/* Build check: a private SELSCAN_STATIC copy of the implementation next to the extern one. */
#define SELSCAN_STATIC
#define SELSCAN_IMPLEMENTATION
#include "../../selscan.h"

#ifdef __cplusplus
extern "C"
#endif
    int static_user(void); /* C linkage also when compiled as C++ */
int static_user(void) { return selscan_status_string(SELSCAN_ERR_ALIAS)[0] != '\0' && selscan_f32_to_bf16(1.0f) == 0x3f80 ? 0 : 1; }
