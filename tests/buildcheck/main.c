/* Build check: links the implementation, a plain user, a SELSCAN_STATIC copy (and, from C++,
   user_cpp.cpp) into one program and runs it. */
#include <stdio.h>
#include "../../selscan.h"

int user_forward(void);
int static_user(void);
#ifdef WITH_CPP
int user_cpp(void);
#endif

int main(void) {
    int r = user_forward() * 10 + static_user();
#ifdef WITH_CPP
    r = r * 10 + user_cpp();
#endif
    if (r) printf("build check program failed: %d\n", r);
    return r;
}
