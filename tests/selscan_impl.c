/* The library's implementation for the test suites: one object the Makefile links into every
   suite that does not define SELSCAN_IMPLEMENTATION itself (saves compiling it per suite). */
#define SELSCAN_IMPLEMENTATION
#include "../selscan.h"
