/* cxx.c - C++ operator new and delete in every standard form, written in C
 * under their Itanium-ABI names so librill needs no C++ runtime of its own.
 * Throwing goes through libstdc++'s helpers, present in any C++ program. */
#include <errno.h>
#include <stdlib.h>

#include "internal.h"

#ifndef RILL_NO_OVERRIDE
/* The mangled names have no C header to declare them. */
#pragma GCC diagnostic ignored "-Wmissing-prototypes"

/* Weak: a C program has no libstdc++, and never calls operator new either. */
typedef void (*new_handler_t)(void);
extern new_handler_t _ZSt15get_new_handlerv(void) __attribute__((weak));
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));

/* The standard's loop: retry while a new_handler is installed, else throw. */
static COLD void *new_failed(size_t n, size_t align, bool nothrow) {
  for (;;) {
    new_handler_t handler = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
    if (!handler) break;
    handler();
    void *p = align ? rill_aligned_alloc(align, (n + align - 1) & ~(align - 1)) : rill_malloc(n);
    if (p) return p;
  }
  if (nothrow) return NULL;
  if (_ZSt17__throw_bad_allocv) _ZSt17__throw_bad_allocv();
  rill_message("operator new: out of memory and no C++ runtime to throw", "");
  abort();
}

static inline void *new_plain(size_t n, bool nothrow) {
  void *p = rill_malloc(n);
  return likely(p != NULL) ? p : new_failed(n, 0, nothrow);
}

static inline void *new_aligned(size_t n, size_t a, bool nothrow) {
  void *p = NULL;
  if (a && !(a & (a - 1))) rill_posix_memalign(&p, a < sizeof(void *) ? sizeof(void *) : a, n);
  return p ? p : new_failed(n, a, nothrow);
}

/* new / new[] */
EXPORT void *_Znwm(size_t n) {
  return new_plain(n, false);
}
EXPORT void *_Znam(size_t n) {
  return new_plain(n, false);
}
EXPORT void *_ZnwmRKSt9nothrow_t(size_t n, const void *t) {
  (void)t;
  return new_plain(n, true);
}
EXPORT void *_ZnamRKSt9nothrow_t(size_t n, const void *t) {
  (void)t;
  return new_plain(n, true);
}
EXPORT void *_ZnwmSt11align_val_t(size_t n, size_t a) {
  return new_aligned(n, a, false);
}
EXPORT void *_ZnamSt11align_val_t(size_t n, size_t a) {
  return new_aligned(n, a, false);
}
EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const void *t) {
  (void)t;
  return new_aligned(n, a, true);
}
EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const void *t) {
  (void)t;
  return new_aligned(n, a, true);
}

/* delete / delete[]: plain, sized, aligned, nothrow */
EXPORT void _ZdlPv(void *p) {
  rill_free(p);
}
EXPORT void _ZdaPv(void *p) {
  rill_free(p);
}
EXPORT void _ZdlPvm(void *p, size_t n) {
  rill_free_sized(p, n);
}
EXPORT void _ZdaPvm(void *p, size_t n) {
  rill_free_sized(p, n);
}
EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const void *t) {
  (void)t;
  rill_free(p);
}
EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const void *t) {
  (void)t;
  rill_free(p);
}
EXPORT void _ZdlPvSt11align_val_t(void *p, size_t a) {
  rill_free_aligned_sized(p, a, 0);
}
EXPORT void _ZdaPvSt11align_val_t(void *p, size_t a) {
  rill_free_aligned_sized(p, a, 0);
}
EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t a) {
  rill_free_aligned_sized(p, a, n);
}
EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t a) {
  rill_free_aligned_sized(p, a, n);
}
EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const void *t) {
  (void)t;
  rill_free_aligned_sized(p, a, 0);
}
EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const void *t) {
  (void)t;
  rill_free_aligned_sized(p, a, 0);
}
#endif
