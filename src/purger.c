/* purger.c - the optional background purger (RILL_PURGE_THREAD=1): one thread
 * that runs the pool's timed purge while the program is idle, so RSS falls
 * after a burst even when no thread allocates or frees again. It sleeps on
 * the pool's futex whenever no pooled span holds pages. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>

#include "internal.h"

/* PURGER_OFF: not asked for, or could not start; PURGER_WANTED: start at the
 * next point where no rill lock is held; PURGER_RUNNING: the thread exists. */
_Atomic int rill_purger_state;

static void *purger_main(void *arg) {
  (void)arg;
  uint32_t d = rill_opt.purge_delay, step = d / 4 > 10 ? d / 4 : 10;
  for (;;) {
    pool_wait_pages();
    os_sleep_ms(step);
    /* a pass leaves the spans too young to go; when none are left, settle */
    if (pool_purge_timed(os_now_ms()) == 0) pool_settle();
  }
  return NULL;
}

static void purger_create(void) {
  pthread_attr_t at;
  pthread_t t;
  sigset_t all, old;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&at, 64 * 1024);
  /* the thread blocks every signal, so none meant for the program lands on it */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int err = pthread_create(&t, &at, purger_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&at);
  if (err) {
    atomic_store_explicit(&rill_purger_state, PURGER_OFF, RLX);
    rill_message("RILL_PURGE_THREAD: cannot start the purger thread; ",
                 "pages are given back on allocator activity only");
    return;
  }
  pthread_setname_np(t, "rill-purger");
  pool_watch();
}

/* The comparison variants run every operation under their own locks, and
 * pthread_create allocates: they have no purger. */
void purger_init(bool on) {
  atomic_store_explicit(&rill_purger_state, on && RILL_VARIANT == 0 ? PURGER_WANTED : PURGER_OFF,
                        RLX);
}

/* Called through purger_poll where no rill lock is held (the allocation slow
 * path, and frees that pooled or handed back a span). The state moves first,
 * so the allocations of pthread_create do not come back here. */
void purger_start_slow(void) {
  int expect = PURGER_WANTED;
  if (!pool_waiting()) return;
  if (atomic_compare_exchange_strong_explicit(&rill_purger_state, &expect, PURGER_RUNNING, ACQREL,
                                              RLX))
    purger_create();
}

/* The child of fork has no purger: it starts a new one at its next slow
 * path (a pre-forked server's workers want one too). */
void purger_fork_child(void) {
  if (atomic_load_explicit(&rill_purger_state, RLX) == PURGER_RUNNING)
    atomic_store_explicit(&rill_purger_state, PURGER_WANTED, RLX);
}
