/* test_fast_pcache: tests/test_fast.c with a small backward prep cache (SELSCAN__PCMAX: segments of
   up to 4 chunks with z, 6 without, are cached), so that the random problems run both the cached
   walk back and the one that prepares its chunks itself, and their boundary (L, packed sequences
   of both kinds in one problem); test_fast checks each against the reference and bitwise against
   the backward with the forward's checkpoints (which never caches). Standalone: test_fast.c does
   #define SELSCAN_IMPLEMENTATION itself. */
#define SELSCAN__PCMAX (6 * 4 * 64 * 64)
#include "test_fast.c"
