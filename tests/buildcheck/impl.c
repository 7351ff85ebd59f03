/* Build check: the implementation translation unit. Includes the header twice (plain, then with
   SELSCAN_IMPLEMENTATION), as a project that includes it from another header would. */
#include "../../selscan.h"
#define SELSCAN_IMPLEMENTATION
#include "../../selscan.h"
#include "../../selscan.h"
