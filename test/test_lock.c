/* test_lock.c - proves rill's lock (spin_lock, internal.h): a waiter spins, yields, then
 * sleeps in a futex wait until the holder's unlock wakes it. Linked with the static library
 * and the internal header, to take the lock itself.
 *   exclusion  8 threads add to a plain counter under the lock, now and then holding it
 *              across a 200 us sleep so that waiters sleep too: no increment may be lost
 *   sleep      a waiter whose holder sleeps 200 ms in the lock must sleep too: its thread's
 *              CPU time stays under 50 ms (a waiter that only yielded used the 200 ms)
 *   realtime   a SCHED_FIFO waiter and a normal holder pinned to one CPU: the waiter must
 *              let the holder run. Yielding never does for a real-time thread; it burned
 *              0.95 s of CPU until the kernel's real-time throttling ran the holder. Checked
 *              by the waiter's CPU time, under 100 ms (where the system refuses SCHED_FIFO,
 *              the part says so and checks nothing)
 *   realtime-fork  the same with a fork holding the lock (fork_hold): the waiter sleeps
 *              until the fork lets its locks go (fork_locks_release wakes it)
 *   realtime-pause  the same for os_pause, the step of rill's waits for a thread that has
 *              no wake to give (the purger draining an owner's block cache, the first
 *              thread setting up the exit key): yielding, then napping. Its naps' system
 *              calls cost CPU, so it must stay under half of the wait (yielding: 95%)
 *   fork       a fork's mark (fork_hold) wakes the threads asleep on the lock, since
 *              nothing else would once the fork lets its locks go (fork_locks_release)
 *   lend       a thread asleep on a rill lock is inside rill: the lender (heap_lend_idle)
 *              must leave its spans alone, and lends them once it waits on a condition */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* CPU_SET, pthread_setaffinity_np */
#endif
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include "internal.h"
#include "rill_test.h"

static void nap_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
  nanosleep(&ts, NULL);
}
static double wall_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static double cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
/* Waits until l holds v (a waiter has marked it), for 5 s at most. */
static void until_word(_Atomic int *l, int v) {
  for (int i = 0; i < 5000 && atomic_load(l) != v; i++) nap_us(1000);
  CHECK(atomic_load(l) == v, "lock word %d, expected %d", atomic_load(l), v);
}

/* ---- exclusion ----------------------------------------------------------------------- */
#define EX_THREADS 8
#define EX_ROUNDS  20000
static _Atomic int ex_lock;
static volatile unsigned long ex_count;

static void *ex_run(void *arg) {
  unsigned id = (unsigned)(uintptr_t)arg;
  for (unsigned i = 0; i < EX_ROUNDS; i++) {
    spin_lock(&ex_lock);
    ex_count = ex_count + 1;
    if ((i + id * 97) % 2000 == 0) nap_us(200); /* a long hold: the others sleep */
    spin_unlock(&ex_lock);
  }
  return NULL;
}

static void part_exclusion(void) {
  pthread_t t[EX_THREADS];
  for (unsigned i = 0; i < EX_THREADS; i++)
    pthread_create(&t[i], NULL, ex_run, (void *)(uintptr_t)i);
  for (unsigned i = 0; i < EX_THREADS; i++) pthread_join(t[i], NULL);
  CHECK(ex_count == (unsigned long)EX_THREADS * EX_ROUNDS, "count %lu, expected %lu", ex_count,
        (unsigned long)EX_THREADS * EX_ROUNDS);
  CHECK(atomic_load(&ex_lock) == 0, "lock word %d after the last unlock", atomic_load(&ex_lock));
  printf("exclusion: %lu increments under the lock, none lost\n", ex_count);
}

/* ---- a waiter sleeps ------------------------------------------------------------------ */
static _Atomic int sl_lock;
static double sl_cpu;

static void *sl_wait(void *arg) {
  (void)arg;
  double c0 = cpu_s();
  spin_lock(&sl_lock);
  sl_cpu = cpu_s() - c0;
  spin_unlock(&sl_lock);
  return NULL;
}

static void part_sleep(void) {
  pthread_t t;
  spin_lock(&sl_lock);
  pthread_create(&t, NULL, sl_wait, NULL);
  until_word(&sl_lock, LOCK_SLEEPERS); /* the waiter has spun and yielded: asleep now */
  nap_us(200000);
  spin_unlock(&sl_lock);
  pthread_join(t, NULL);
  printf("sleep: the waiter used %.1f ms of CPU while the holder slept 200 ms\n", sl_cpu * 1e3);
  CHECK(sl_cpu < 0.05, "the waiter used %.1f ms of CPU waiting", sl_cpu * 1e3);
}

/* ---- a real-time waiter --------------------------------------------------------------- */
static _Atomic int rt_lock;
static _Atomic int rt_held, rt_refused;
enum { RT_LOCK, RT_FORK, RT_PAUSE };
static int rt_mode; /* the holder takes the lock, marks it as a fork does (fork_hold), or
                     * the waiter waits for a flag in os_pause steps */
static _Atomic int rt_flag;
static double rt_cpu, rt_wall;

static void pin_cpu0(void) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(0, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void *rt_holder(void *arg) {
  (void)arg;
  pin_cpu0();
  if (rt_mode == RT_FORK)
    fork_hold(&rt_lock);
  else if (rt_mode == RT_LOCK)
    spin_lock(&rt_lock);
  atomic_store(&rt_held, 1);
  /* the waiter, real-time on this CPU, runs now and waits; 20 ms of work once it lets us */
  for (double c0 = cpu_s(); cpu_s() - c0 < 0.02;) {
  }
  if (rt_mode == RT_FORK)
    fork_locks_release();
  else if (rt_mode == RT_LOCK)
    spin_unlock(&rt_lock);
  atomic_store(&rt_flag, 1);
  return NULL;
}

static void *rt_waiter(void *arg) {
  (void)arg;
  pin_cpu0();
  struct sched_param p = {.sched_priority = 1};
  if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &p) != 0) {
    atomic_store(&rt_refused, 1);
    return NULL;
  }
  /* asleep until the holder has the lock: a real-time spin here would starve it */
  while (!atomic_load(&rt_held)) nap_us(1000);
  double c0 = cpu_s(), w0 = wall_s();
  if (rt_mode == RT_PAUSE) {
    for (unsigned i = 0; !atomic_load(&rt_flag); i++) os_pause(i);
  } else {
    spin_lock(&rt_lock);
    spin_unlock(&rt_lock);
  }
  rt_cpu = cpu_s() - c0;
  rt_wall = wall_s() - w0;
  return NULL;
}

static void part_realtime(int mode) {
  const char *who = mode == RT_FORK   ? "a fork holding the lock"
                    : mode == RT_LOCK ? "the lock's holder"
                                      : "the thread it paused for";
  pthread_t w, h;
  rt_mode = mode;
  atomic_store(&rt_held, 0);
  atomic_store(&rt_flag, 0);
  atomic_store(&rt_lock, 0);
  pthread_create(&w, NULL, rt_waiter, NULL);
  nap_us(20000); /* the waiter is real-time (or refused) before the holder starts */
  pthread_create(&h, NULL, rt_holder, NULL);
  pthread_join(h, NULL);
  pthread_join(w, NULL);
  if (atomic_load(&rt_refused)) {
    printf("realtime: SCHED_FIFO refused here (no CAP_SYS_NICE or RLIMIT_RTPRIO): "
           "nothing checked\n");
    return;
  }
  printf("realtime: the SCHED_FIFO waiter used %.1f ms of CPU in %.1f ms while %s worked "
         "20 ms on the same CPU\n",
         rt_cpu * 1e3, rt_wall * 1e3, who);
  if (mode == RT_PAUSE) /* naps cost a system call each: a share of the wait, not nothing */
    CHECK(rt_cpu < rt_wall / 2, "the real-time waiter used %.1f of its %.1f ms waiting for %s",
          rt_cpu * 1e3, rt_wall * 1e3, who);
  else
    CHECK(rt_cpu < 0.1, "the real-time waiter used %.1f ms of CPU waiting for %s", rt_cpu * 1e3,
          who);
}

/* ---- a fork's mark wakes the sleepers ------------------------------------------------- */
#define FK_WAITERS 4
static _Atomic int fk_lock, fk_done;

static void *fk_wait(void *arg) {
  (void)arg;
  spin_lock(&fk_lock);
  spin_unlock(&fk_lock);
  atomic_fetch_add(&fk_done, 1);
  return NULL;
}

/* What fork_prepare and fork_parent do to every rill lock. Asleep on the lock before the
 * waiters, it is woken first when the holder lets go (futex waiters wake in order), and
 * marks the lock with the waiters still asleep on it. */
static void *fk_forker(void *arg) {
  (void)arg;
  fork_hold(&fk_lock);
  nap_us(50000); /* the fork */
  CHECK(atomic_load(&fk_done) == 0, "a waiter took a lock a fork holds");
  fork_locks_release(); /* over: the mark is stale, the lock free */
  return NULL;
}

static void part_fork(void) {
  pthread_t f, t[FK_WAITERS];
  spin_lock(&fk_lock);
  pthread_create(&f, NULL, fk_forker, NULL);
  until_word(&fk_lock, LOCK_SLEEPERS);
  nap_us(50000);
  for (int i = 0; i < FK_WAITERS; i++) pthread_create(&t[i], NULL, fk_wait, NULL);
  nap_us(100000); /* all asleep, most likely */
  spin_unlock(&fk_lock);
  pthread_join(f, NULL);
  for (int i = 0; i < 500 && atomic_load(&fk_done) < FK_WAITERS; i++) nap_us(10000);
  CHECK(atomic_load(&fk_done) == FK_WAITERS,
        "%d of %d waiters got the lock in 5 s after the fork let it go", atomic_load(&fk_done),
        FK_WAITERS);
  if (atomic_load(&fk_done) < FK_WAITERS) DIE("waiters left asleep");
  for (int i = 0; i < FK_WAITERS; i++) pthread_join(t[i], NULL);
  printf("fork: %d sleepers got the lock once the fork let it go\n", FK_WAITERS);
}

/* ---- the lender leaves a thread asleep on a lock alone -------------------------------- */
#define LN_BLOCKS 40000
#define LN_SIZE   256
static void *ln_blocks[LN_BLOCKS];
static _Atomic int ln_lock, ln_phase; /* 1 filled, 2 waiting on the lock, 3 on a condition */
static pthread_mutex_t ln_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ln_c = PTHREAD_COND_INITIALIZER;

static void *ln_owner(void *arg) {
  (void)arg;
  for (size_t i = 0; i < LN_BLOCKS; i++)
    if (!(ln_blocks[i] = rill_malloc(LN_SIZE))) DIE("malloc(%d) returned NULL", LN_SIZE);
  atomic_store(&ln_phase, 1);
  while (atomic_load(&ln_phase) == 1) nap_us(1000);
  spin_lock(&ln_lock); /* main holds it: asleep here, inside rill */
  spin_unlock(&ln_lock);
  pthread_mutex_lock(&ln_m);
  atomic_store(&ln_phase, 3);
  while (atomic_load(&ln_phase) == 3) pthread_cond_wait(&ln_c, &ln_m);
  pthread_mutex_unlock(&ln_m);
  for (size_t i = 0; i < LN_BLOCKS; i += 2) rill_free(ln_blocks[i]);
  return NULL;
}

static void part_lend(void) {
  pthread_t t;
  spin_lock(&ln_lock);
  pthread_create(&t, NULL, ln_owner, NULL);
  while (atomic_load(&ln_phase) == 0) nap_us(1000);
  for (size_t i = 1; i < LN_BLOCKS; i += 2) rill_free(ln_blocks[i]); /* its spans get room */
  atomic_store(&ln_phase, 2);
  until_word(&ln_lock, LOCK_SLEEPERS);
  nap_us(20000);
  size_t asleep = heap_lend_idle(true);
  spin_unlock(&ln_lock);
  while (atomic_load(&ln_phase) != 3) nap_us(1000);
  nap_us(20000); /* in its condition wait */
  size_t waiting = heap_lend_idle(true);
  pthread_mutex_lock(&ln_m);
  atomic_store(&ln_phase, 4);
  pthread_cond_signal(&ln_c);
  pthread_mutex_unlock(&ln_m);
  pthread_join(t, NULL);
  printf("lend: %zu spans lent while the owner slept on a lock, %zu while it waited on a "
         "condition\n",
         asleep, waiting);
  CHECK(asleep == 0, "%zu spans lent while their owner was asleep on a lock inside rill", asleep);
  CHECK(waiting > 0, "no span lent while the owner waited on a condition (the control)");
}

int main(int argc, char **argv) {
  rill_free(rill_malloc(1)); /* start-up */
  alarm(120);                /* a waiter left asleep for good fails the test, not CI's clock */
  const char *only = argc > 1 ? argv[1] : NULL;
  if (!only || !strcmp(only, "exclusion")) part_exclusion();
  if (!only || !strcmp(only, "sleep")) part_sleep();
  if (!only || !strcmp(only, "realtime")) part_realtime(RT_LOCK);
  if (!only || !strcmp(only, "realtime-fork")) part_realtime(RT_FORK);
  if (!only || !strcmp(only, "realtime-pause")) part_realtime(RT_PAUSE);
  if (!only || !strcmp(only, "fork")) part_fork();
  if (!only || !strcmp(only, "lend")) part_lend();
  return t_finish("test_lock");
}
