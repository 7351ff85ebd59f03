/* bench/host_prof.c: a sampling profiler of a process's host time for machines without perf or gdb
   (the GPU machines): preloaded, it samples the call stack on SIGPROF (process CPU time) between
   hostprof_start(hz) and hostprof_stop(path), which a Python program calls through ctypes: the
   calling thread's stack, hz times a second of wall time (a CLOCK_MONOTONIC timer aimed at that
   thread: ITIMER_PROF ticks at the kernel's HZ, 100-250 a second). The samples, the time they
   stand for and /proc/self/maps go to `path`; bench/host_prof.py resolves them to functions.

     cc -O2 -shared -fPIC -o build/libhostprof.so bench/host_prof.c
     LD_PRELOAD=build/libhostprof.so python3 bench/host_prof.py run ...

   Each sample: the interrupted instruction (from the signal's context) and the stack above it
   (glibc's backtrace, unwinding through the signal frame). backtrace is primed before the timer
   starts (its first call loads libgcc's unwinder, which is not safe inside a handler). */
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

enum { kDepth = 40, kMaxSamples = 400000 };
static void **g_buf;          /* kMaxSamples x (1 + kDepth): n frames, then the frames */
static volatile long g_n;     /* samples taken */
static volatile int g_on;
static timer_t g_timer;
static int g_have_timer;
static double g_t0, g_in_handler; /* seconds: start, and spent in the handler */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void on_prof(int sig, siginfo_t *si, void *ctx) {
    (void)sig;
    (void)si;
    if (!g_on || g_n >= kMaxSamples) return;
    const double t_in = now();
    void **s = g_buf + g_n * (1 + kDepth);
    void *frames[kDepth + 4];
    int n = backtrace(frames, kDepth + 4);
    /* frames: this handler, the signal trampoline, then the interrupted function's callers as
       unwound from the signal frame; the interrupted pc itself comes from the context */
    const ucontext_t *uc = (const ucontext_t *)ctx;
#if defined(__x86_64__)
    void *pc = (void *)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    void *pc = (void *)uc->uc_mcontext.pc;
#else
    void *pc = 0;
#endif
    int k = 0;
    s[1 + k++] = pc;
    for (int i = 2; i < n && k < kDepth; i++)
        if (frames[i] != pc) s[1 + k++] = frames[i];
    s[0] = (void *)(long)k;
    g_n++;
    g_in_handler += now() - t_in;
}

int hostprof_start(int hz) {
    if (!g_buf && !(g_buf = calloc((size_t)kMaxSamples * (1 + kDepth), sizeof(void *)))) return -1;
    void *prime[4];
    (void)backtrace(prime, 4);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_prof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPROF, &sa, 0) != 0) return -1;
    if (!g_have_timer) {
        struct sigevent ev;
        memset(&ev, 0, sizeof ev);
        ev.sigev_notify = SIGEV_THREAD_ID;
        ev.sigev_signo = SIGPROF;
        ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
        if (timer_create(CLOCK_MONOTONIC, &ev, &g_timer) != 0) return -1;
        g_have_timer = 1;
    }
    g_n = 0;
    g_in_handler = 0;
    g_t0 = now();
    g_on = 1;
    struct itimerspec it;
    memset(&it, 0, sizeof it);
    it.it_interval.tv_nsec = 1000000000L / (hz > 0 ? hz : 10000);
    it.it_value = it.it_interval;
    return timer_settime(g_timer, 0, &it, 0);
}

/* Stops sampling and writes the samples (a line each: hex addresses, innermost first) after the
   process's maps and the wall time between start and stop less the handler's own; returns the sample count, -1 when the file cannot be written. */
long hostprof_stop(const char *path) {
    struct itimerspec it;
    memset(&it, 0, sizeof it);
    if (g_have_timer) timer_settime(g_timer, 0, &it, 0);
    g_on = 0;
    const double wall = now() - g_t0 - g_in_handler;
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    FILE *m = fopen("/proc/self/maps", "r");
    char line[4096];
    fprintf(f, "maps\n");
    while (m && fgets(line, sizeof line, m)) fputs(line, f);
    if (m) fclose(m);
    fprintf(f, "samples %ld seconds %.9f handler %.9f\n", (long)g_n, wall, g_in_handler);
    for (long i = 0; i < g_n; i++) {
        void **s = g_buf + i * (1 + kDepth);
        const long k = (long)s[0];
        for (long j = 0; j < k; j++) fprintf(f, j ? " %lx" : "%lx", (unsigned long)s[1 + j]);
        fputc('\n', f);
    }
    fclose(f);
    return g_n;
}
