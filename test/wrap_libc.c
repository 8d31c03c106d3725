/* wrap_libc.c - a preloaded library that wraps open, openat and mmap and allocates in the
 * wrapper, as tracing, sandboxing and profiling libraries do when they look the real function
 * up with dlsym (which allocates). Preloaded ahead of librill (test/CMakeLists.txt,
 * preload_libc_wrapper): rill reads /proc and reserves its arena at start-up under its
 * start-up lock, and through the C library's functions that reached these wrappers, whose
 * calloc then waited for that lock forever. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>

static int (*real_open)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);

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

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  if (!real_mmap) real_mmap = (void *(*)(void *, size_t, int, int, int, off_t))lookup("mmap");
  return real_mmap(addr, len, prot, flags, fd, off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  return mmap(addr, len, prot, flags, fd, off);
}
