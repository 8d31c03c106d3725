/* deepbind.c - dlopen: a library opened with RTLD_DEEPBIND looks symbols up in
 * itself and its own dependencies first, so its malloc and free bind to the C
 * library's while the program's are rill's, and a block crossing between them
 * is freed by the wrong allocator (PHP's extensions abort at start-up so under
 * every preloaded allocator). rill drops the flag unless RILL_DEEPBIND=keep,
 * from dlopen and from dlmopen into the program's own namespace. */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "internal.h"

/* Only the shared library replaces dlopen: a static program's dlopen is the
 * C library's own, whose definition a second one would clash with. */
#if !defined(RILL_NO_OVERRIDE) && defined(RILL_SHARED)
typedef void *(*dlopen_fn)(const char *, int);
typedef void *(*dlmopen_fn)(Lmid_t, const char *, int);

/* The next definition of NAME after rill's, the C library's, kept in *SLOT;
 * every thread finds the same. */
static void *next_sym(void **slot, const char *name) {
  void *f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (unlikely(!f)) {
    f = dlsym(RTLD_NEXT, name);
    __atomic_store_n(slot, f, __ATOMIC_RELEASE);
  }
  if (unlikely(!f)) rill_message(name, ": the C library's definition was not found");
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
  static void *next;
  dlopen_fn f = (dlopen_fn)next_sym(&next, "dlopen");
  if (unlikely(!f)) return NULL;
  if ((mode & RTLD_DEEPBIND) && !deepbind_kept()) mode &= ~RTLD_DEEPBIND;
  TAIL_CALL return f(file, mode);
}

/* A new namespace (LM_ID_NEWLM, or one made by an earlier dlmopen) loads a C
 * library of its own and not rill, whose malloc its libraries use with or
 * without the flag; so the flag is dropped in the program's namespace only. */
EXPORT SIBLING_CALLS void *dlmopen(Lmid_t ns, const char *file, int mode) {
  static void *next;
  dlmopen_fn f = (dlmopen_fn)next_sym(&next, "dlmopen");
  if (unlikely(!f)) return NULL;
  if (ns == LM_ID_BASE && (mode & RTLD_DEEPBIND) && !deepbind_kept()) mode &= ~RTLD_DEEPBIND;
  TAIL_CALL return f(ns, file, mode);
}
#endif
