/* deepbind.c - dlopen: a library opened with RTLD_DEEPBIND looks symbols up in
 * itself and its own dependencies first, so its malloc and free bind to the C
 * library's while the program's are rill's, and a block crossing between them
 * is freed by the wrong allocator (PHP's extensions abort at start-up so under
 * every preloaded allocator). rill drops the flag unless RILL_DEEPBIND=keep. */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "internal.h"

/* Only the shared library replaces dlopen: a static program's dlopen is the
 * C library's own, whose definition a second one would clash with. */
#if !defined(RILL_NO_OVERRIDE) && defined(RILL_SHARED)
#define EXPORT __attribute__((visibility("default")))
typedef void *(*dlopen_fn)(const char *, int);

/* The next dlopen after rill's, the C library's; every thread finds the same. */
static dlopen_fn next_dlopen(void) {
  static dlopen_fn next;
  dlopen_fn f = __atomic_load_n(&next, __ATOMIC_ACQUIRE);
  if (unlikely(!f)) {
    f = (dlopen_fn)dlsym(RTLD_NEXT, "dlopen");
    __atomic_store_n(&next, f, __ATOMIC_RELEASE);
  }
  return f;
}

/* Whether RILL_DEEPBIND=keep: the options are read at start-up, which a
 * program may not have reached when it first calls dlopen. */
static bool deepbind_kept(void) {
  if (!atomic_load_explicit(&rill_ready, ACQ)) rill_init();
  return rill_opt.deepbind_keep;
}

/* The C library's dlopen finds its caller from its return address: the
 * caller's DT_RUNPATH and $ORIGIN name the directories it searches. So this
 * must jump to it, not call it, or a program's plugins found through its own
 * run path would be looked for through rill's (test_deepbind --runpath).
 * clang's musttail says so; gcc (before 15) jumps only when it optimises,
 * which O2 for this one function ensures in -O0 and sanitizer builds too. */
#if defined(__clang__)
#define TAIL_CALL __attribute__((musttail))
#define SIBLING_CALLS
#elif defined(__GNUC__)
#define TAIL_CALL
#define SIBLING_CALLS __attribute__((optimize("O2")))
#else /* another compiler: a call, so the caller's run path is not searched */
#define TAIL_CALL
#define SIBLING_CALLS
#endif

EXPORT SIBLING_CALLS void *dlopen(const char *file, int mode) {
  dlopen_fn f = next_dlopen();
  if (unlikely(!f)) {
    rill_message("dlopen", ": the C library's dlopen was not found");
    return NULL;
  }
  if ((mode & RTLD_DEEPBIND) && !deepbind_kept()) mode &= ~RTLD_DEEPBIND;
  TAIL_CALL return f(file, mode);
}
#endif
