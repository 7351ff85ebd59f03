/* test_fast_portable: tests/test_fast.c built with SELSCAN_NO_SIMD, so the portable path is the
   only one (and the header compiles without any vector extension). Standalone: test_fast.c does
   #define SELSCAN_IMPLEMENTATION itself. */
#define SELSCAN_NO_SIMD
#include "test_fast.c"
