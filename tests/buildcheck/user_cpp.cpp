// Build check: C++ code calling the C implementation (extern "C" linkage).
#include "../../selscan.h"
#include <cstring>

extern "C" int user_cpp(void);
extern "C" int user_cpp(void) {
    selscan_problem p = selscan_problem();
    return selscan_validate(&p) == SELSCAN_ERR_SHAPE && std::strlen(selscan_status_string(SELSCAN_OK)) > 0 ? 0 : 1;
}
