/* purger.c - the background purger: one thread that runs the pool's timed
 * purge while the program is idle, so RSS falls after a burst even when no
 * thread allocates or frees again. It sleeps on the pool's futex whenever no
 * pooled span holds pages. By default (RILL_PURGE_THREAD=auto) only processes
 * that already run a second thread get it. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

/* PURGER_OFF: not asked for, or could not start; PURGER_AUTO: wanted once a
 * second thread of the process has a heap; PURGER_WANTED: start at the next
 * point where no rill lock is held; PURGER_RUNNING: the thread exists. */
_Atomic int rill_purger_state;
static unsigned mode;            /* RILL_PURGE_THREAD: PURGE_THREAD_* */
static _Atomic uint32_t threads; /* threads that took a heap, since start or fork */

static _Atomic uint32_t kicked; /* purger_kick: lend idle owners' spans now */
static _Atomic int stop_asked;  /* purger_stop: end the thread at its next wait */
static pthread_t purger;        /* joinable, so that purger_stop knows when it is gone */

static void *purger_main(void *arg) {
  (void)arg;
  uint32_t d = rill_opt.purge_delay, step = d / 4 > 10 ? d / 4 : 10;
  while (!atomic_load_explicit(&stop_asked, ACQ)) {
    pool_wait_pages();
    /* a beat's nap, cut short to lend when a thread has just taken a span
     * of never-used memory (purger_kick) */
    uint64_t now = os_now_ms(), until = now + step;
    for (; now < until && !atomic_load_explicit(&stop_asked, ACQ); now = os_now_ms()) {
      os_wait_ms(&kicked, 0, (uint32_t)(until - now));
      if (atomic_exchange_explicit(&kicked, 0, ACQ)) heap_lend_idle(false);
    }
    if (atomic_load_explicit(&stop_asked, ACQ)) break;
    heap_stashes_flush(); /* heaps' stashes to the pool, so the pass sees them */
    heap_sweep_all(true); /* and what idle owners' lists hold empty */
    heap_lend_idle(true); /* and their spans with room, to the other threads */
    /* a pass leaves the spans too young to go; when none are left, settle.
     * A stash pushed meanwhile either sees the flag down (and raises it) or
     * is seen here: settle's fence and the pusher's pair up. */
    size_t left = pool_purge_timed(os_now_ms(), true);
    /* a pass that ran out of time goes on after a breath, in which a fork
     * or rill_collect waiting for the purge lock gets it */
    while (left && pool_purge_cut() && !atomic_load_explicit(&stop_asked, ACQ)) {
      os_wait_ms(&kicked, atomic_load_explicit(&kicked, RLX), 1);
      left = pool_purge_more();
    }
    if (left) pool_entries_tick(os_now_ms()); /* settling gives them back otherwise */
    if (left == 0) {
      /* before sleeping, the lists of owners idle since that pass turned the
       * beat: nothing wakes this thread for what they hold */
      heap_sweep_all(true);
      pool_settle();
      if (heap_stashed()) pool_pages_arrived();
    }
  }
  return NULL;
}

static void purger_create(void) {
  pthread_attr_t at;
  pthread_t t;
  sigset_t all, old;
  pthread_attr_init(&at);
  pthread_attr_setstacksize(&at, 64 * 1024);
  /* the thread blocks every signal, so none meant for the program lands on it */
  sigfillset(&all);
  pool_watch(true);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int err = pthread_create(&t, &at, purger_main, NULL);
  /* The C library carves a thread's static TLS (the program's __thread
   * variables) out of its stack: a program with more than about 60 KiB of
   * them left no room in 64 KiB, the create failed (EINVAL), and by default
   * the program ran without a purger, silently. Then the default size. */
  if (err == EINVAL) err = pthread_create(&t, NULL, purger_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&at);
  if (err) {
    pool_watch(false);
    atomic_store_explicit(&rill_purger_state, PURGER_OFF, RLX);
    if (mode == PURGE_THREAD_ON) /* by default, no word: the program did not ask */
      rill_message("RILL_PURGE_THREAD: cannot start the purger thread; ",
                   "pages are given back on allocator activity only");
    return;
  }
  purger = t;
  pthread_setname_np(t, "rill-purger");
}

/* The rest replaces the C library's unshare and setns; builds that keep only
 * the rill_ names leave them alone. */
#ifndef RILL_NO_OVERRIDE

/* Ends the purger thread, if it runs, and waits until it is gone; it starts
 * again as after a fork (purger_fork_child): at the next slow path if asked
 * for, by default once a new thread has a heap. False if there was none. */
static bool purger_stop(void) {
  if (atomic_load_explicit(&rill_purger_state, ACQ) != PURGER_RUNNING) return false;
  atomic_store_explicit(&stop_asked, 1, REL);
  atomic_store_explicit(&kicked, 1, REL);
  os_wake(&kicked);
  pool_pages_arrived(); /* out of its wait for pooled pages */
  pthread_join(purger, NULL);
  pool_watch(false);
  atomic_store_explicit(&stop_asked, 0, RLX);
  atomic_store_explicit(&rill_purger_state, mode == PURGE_THREAD_ON ? PURGER_WANTED : PURGER_AUTO,
                        REL);
  return true;
}

/* "Threads:" of /proc/self/status, or 0 if it cannot be read. */
static unsigned threads_now(void) {
  char buf[4096];
  if (os_read_file("/proc/self/status", buf, sizeof buf) <= 0) return 0;
  const char *at = strstr(buf, "\nThreads:");
  return at ? (unsigned)strtoul(at + strlen("\nThreads:"), NULL, 10) : 0;
}

/* unshare(CLONE_NEWUSER), and setns into a user or mount namespace, need a
 * process of one thread. A program that ran threads, joined them and then
 * sandboxed itself got EINVAL under rill, whose purger had started meanwhile
 * and was the one other thread. So when the purger is the only other thread,
 * these calls end it first, and wait until the kernel counts one thread
 * (the join returns when the thread has cleared its id, which is before the
 * kernel has taken it out of the process). */
static void purger_out_of_the_way(void) {
  if (atomic_load_explicit(&rill_purger_state, ACQ) != PURGER_RUNNING || threads_now() != 2) return;
  if (!purger_stop()) return;
  for (int i = 0; i < 10000 && threads_now() > 1; i++) sched_yield();
}

int unshare(int flags) EXPORT;
int unshare(int flags) {
  purger_out_of_the_way();
  return (int)syscall(SYS_unshare, flags);
}
int setns(int fd, int nstype) EXPORT;
int setns(int fd, int nstype) {
  purger_out_of_the_way();
  return (int)syscall(SYS_setns, fd, nstype);
}
#endif

/* The comparison variants run every operation under their own locks, and
 * pthread_create allocates: they have no purger. */
void purger_init(unsigned m) {
  static const int first[] = {[PURGE_THREAD_AUTO] = PURGER_AUTO,
                              [PURGE_THREAD_OFF] = PURGER_OFF,
                              [PURGE_THREAD_ON] = PURGER_WANTED};
  mode = m;
  atomic_store_explicit(&rill_purger_state, RILL_VARIANT == 0 ? first[m] : PURGER_OFF, RLX);
}

/* Each thread's first heap (heap_get_slow). The default mode starts the
 * purger only in a process that is already multithreaded: a single-threaded
 * one may need to stay so (unshare(CLONE_NEWUSER) and setns into a user
 * namespace fail in a multithreaded process), and one more thread in a
 * process that has several costs nothing it would notice. Idle servers are
 * multithreaded, and they are the programs whose RSS must come down. */
void purger_thread_seen(void) {
  if (atomic_fetch_add_explicit(&threads, 1, RLX) + 1 < 2) return;
  int expect = PURGER_AUTO;
  atomic_compare_exchange_strong_explicit(&rill_purger_state, &expect, PURGER_WANTED, RLX, RLX);
}

/* Called through purger_poll by the allocation slow path and by a thread's
 * exit (its key destructor), where no rill lock is held. Never by a free:
 * the C library frees the TLS of cached thread stacks while it holds its
 * stack-cache lock, which pthread_create takes as well, so a purger started
 * from such a free deadlocked the thread (a program
 * joining 3,000 threads: inside pthread_join the cache passed its bound, and
 * the first span that a freed TLS block emptied went to the pool).
 * It starts once the pool holds pages, or once the program has cut four heap
 * chunks of never-used memory for spans and runs (1 MiB; 4 MiB with
 * RILL_COMMIT=demand): a program that grows that far has the thread before
 * the frees that may leave it idle with pages to give back (it may allocate
 * nothing after them: test_stash's idle worker grows 1.3 MiB, empties it
 * into its stash and waits), and a small one never gets it (the runtime of
 * UBSan builds alone cuts 624 KiB before main). The state moves first, so
 * the allocations of pthread_create do not come back here. */
void purger_start_slow(void) {
  int expect = PURGER_WANTED;
  unsigned chunk = rill_opt.commit_demand ? CHUNK_ORDER_DEMAND : CHUNK_ORDER;
  size_t grown = atomic_load_explicit(&rill_grown, RLX);
  if (!pool_waiting() && grown < (size_t)4 << chunk) return;
  if (atomic_compare_exchange_strong_explicit(&rill_purger_state, &expect, PURGER_RUNNING, ACQREL,
                                              RLX))
    purger_create();
}

/* A thread has just taken a span of never-used or purged memory (its own
 * lists, the orphanage and its stash had none): spans an idle owner holds
 * with room (heap_lend_idle) would do for its next ones, and waiting for the
 * purger's next beat let a burst fault in tens of MiB meanwhile (RocksDB's
 * cache_bench: its main thread's spans filled with evictions while four
 * workers grew). Only after a remote free gave some listed span room
 * (lend_hint), and at most once per 4 ms. */
void purger_kick(void) {
  static _Atomic uint64_t last;
  if (!atomic_load_explicit(&lend_hint, RLX)) return; /* no span listed for an owner since */
  int st = atomic_load_explicit(&rill_purger_state, RLX);
  if (st == PURGER_WANTED) { /* not started yet: the next purger_poll starts it */
    pool_pages_arrived();
    return;
  }
  if (st != PURGER_RUNNING) return;
  uint64_t now = os_now_ms(), prev = atomic_load_explicit(&last, RLX);
  if (now < prev + 4 || !atomic_compare_exchange_strong_explicit(&last, &prev, now, RLX, RLX))
    return;
  if (atomic_exchange_explicit(&kicked, 1, REL) == 0) os_wake(&kicked);
  /* out of its wait for pooled pages, too, even if an earlier kick is still
   * pending: one that came while it settled would otherwise leave it asleep
   * there with the kick unread */
  pool_pages_arrived();
}

/* The child of fork has no purger. Asked for with RILL_PURGE_THREAD=1, it
 * starts a new one at its next slow path (a pre-forked server's workers want
 * one too); by default, only once the child itself runs a second thread: a
 * child that sets up a namespace before exec is single-threaded. */
void purger_fork_child(void) {
  STORE_NEW(&threads, 1u); /* the forking thread */
  int st = atomic_load_explicit(&rill_purger_state, RLX);
  if (st == PURGER_OFF) return;
  STORE_NEW(&rill_purger_state, mode == PURGE_THREAD_ON ? PURGER_WANTED : PURGER_AUTO);
}
