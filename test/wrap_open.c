/* wrap_open.c - a preloaded library that wraps open and openat and allocates in the wrapper,
 * as tracing and sandboxing libraries do when they look the real function up with dlsym
 * (which allocates). Preloaded ahead of librill (test/CMakeLists.txt, preload_open_wrapper):
 * rill reads /proc at start-up under its start-up lock, and through the C library's open that
 * reached this wrapper, whose calloc then waited for that lock forever. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static int (*real_open)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);

/* The mode argument, which exists only with O_CREAT or O_TMPFILE; `last` is the argument
 * before it. */
#define MODE_ARG(flags, last)                                                                      \
  __extension__({                                                                                  \
    int mode_ = 0;                                                                                 \
    if (((flags)&O_CREAT) || ((flags)&O_TMPFILE) == O_TMPFILE) {                                   \
      va_list ap_;                                                                                 \
      va_start(ap_, last);                                                                         \
      mode_ = va_arg(ap_, int);                                                                    \
      va_end(ap_);                                                                                 \
    }                                                                                              \
    mode_;                                                                                         \
  })

/* Allocates, as dlsym's error buffer would, then finds the real function. The buffer is
 * kept where the compiler cannot see it unused, so the calloc stays. */
static char *volatile scratch;
static void *lookup(const char *name) {
  char *buf = calloc(1, 64);
  if (buf) strcpy(buf, name);
  scratch = buf;
  void *f = dlsym(RTLD_NEXT, name);
  free(scratch);
  return f;
}

int open(const char *path, int flags, ...) {
  int mode = MODE_ARG(flags, flags);
  if (!real_open) real_open = (int (*)(const char *, int, ...))lookup("open");
  return real_open(path, flags, mode);
}

int open64(const char *path, int flags, ...) {
  int mode = MODE_ARG(flags, flags);
  return open(path, flags, mode);
}

int openat(int dir, const char *path, int flags, ...) {
  int mode = MODE_ARG(flags, flags);
  if (!real_openat) real_openat = (int (*)(int, const char *, int, ...))lookup("openat");
  return real_openat(dir, path, flags, mode);
}
