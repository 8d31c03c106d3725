/* test_lend.c - proves that an idle owner's partly free spans serve the other threads
 * (heap_lend_idle, Hoard §4's bound on blowup): a thread that filled memory and then waits
 * in pthread_join keeps nothing its workers' frees gave back, and the lending protocol
 * loses no block while owners wake and sleep around it.
 *   (default)  main fills 40,000 blocks and joins a worker that frees half of them and
 *              allocates as many: most land in main's spans, committed memory barely grows
 *   --control  the same without the purger (RILL_PURGE_THREAD=0): nothing is lent, so the
 *              worker's blocks are all fresh (the default mode's check can fail)
 *   --when     lent only while the owner waits in a futex: not while it runs, nor while it
 *              sleeps in nanosleep (a wait a signal handler may make in the middle of a free)
 *   --fork     the default check in a child of fork, whose thread has a new id
 *   --loan     spans lent while main waits go to a thread that allocates, not to one that
 *              only frees into them: a freer's frees leave them on the orphanage
 *   --loan-back  main's own frees into its lent spans take them back
 *   --race     owners that allocate, hand half their blocks to a freer, nap in a timed
 *              condition wait (where they may be lent) and free the rest, for 1.5 s;
 *              every block's contents are checked, and spans must have been lent
 *   --race-big the same with 96 blocks of 9-64 KiB a round, and a second nap after the
 *              owners' own frees, which went to their block caches (heap.c): the purger
 *              drains those while they nap
 *   --hot      an owner frees most of what its hot spans handed out and waits: another
 *              thread's blocks of those classes are the ones it freed (the hot spans were
 *              lent), and the owner allocates and frees again once it wakes
 *   --hot-control  the same without the purger: none are (the check can fail) */
#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <time.h>

#include "rill_test.h"

#define N  40000u
#define SZ 256u

/* The count of spans lent so far. */
static unsigned long long spans_lent(void) {
  return stats_field(" lent=");
}

static uint64_t committed(void) {
  struct rill_stats s;
  rill_stats_get(&s);
  return s.bytes_committed;
}

static void nap_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- main fills, then waits in pthread_join ------------------------------------------- */
static void *mine[N], *theirs[N / 2];
static bool control_mode;
static unsigned long long lent_start; /* spans_lent() before the worker starts */
static uintptr_t lo, hi;              /* the range main's blocks cover */
static size_t inside;                 /* the worker's new blocks in that range */
static uint64_t grew;                 /* committed bytes while the worker allocated */

static void check_block(void *p, size_t n, const char *who) {
  size_t bad = pat_find_bad(p, n, pat_seed(p, n));
  if (bad != SIZE_MAX) FAIL("%s block %p (%zu B) corrupt at byte %zu", who, p, n, bad);
}

static void *worker(void *arg) {
  (void)arg;
  uint64_t r = 42;
  size_t order[N];
  for (size_t i = 0; i < N; i++) order[i] = i;
  for (size_t i = N - 1; i > 0; i--) {
    size_t j = rng_next(&r) % (i + 1), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (size_t k = 0; k < N / 2; k++) { /* remote frees: main's spans go back to its lists */
    void *p = mine[order[k]];
    check_block(p, SZ, "main's");
    T_free(p);
    mine[order[k]] = NULL;
  }
  uint64_t before = committed();
  for (size_t i = 0; i < N / 2; i++) {
    void *p = T_malloc(SZ);
    if (!p) DIE("malloc(%u) returned NULL", SZ);
    pat_fill(p, SZ, pat_seed(p, SZ));
    theirs[i] = p;
    if ((uintptr_t)p >= lo && (uintptr_t)p < hi) inside++;
    if (i % 500 == 499) nap_ms(1); /* a program's pace: the purger gets to run */
    /* the first fresh span kicked the purger: give it up to 5 s to lend, so a
     * loaded machine cannot fail the check, and an allocator that never lends
     * still does (the control skips the wait; it has no purger) */
    for (int k = 0; i == 499 && !control_mode && k < 5000 && spans_lent() == lent_start; k++)
      nap_ms(1);
  }
  uint64_t after = committed();
  grew = after > before ? after - before : 0;
  return NULL;
}

/* main's N blocks, [lo, hi) around them; `pattern`: filled for a later check. */
static void fill_mine(bool pattern) {
  lo = UINTPTR_MAX;
  for (size_t i = 0; i < N; i++) {
    mine[i] = T_malloc(SZ);
    if (!mine[i]) DIE("malloc(%u) returned NULL", SZ);
    if (pattern) pat_fill(mine[i], SZ, pat_seed(mine[i], SZ));
    if ((uintptr_t)mine[i] < lo) lo = (uintptr_t)mine[i];
    if ((uintptr_t)mine[i] + SZ > hi) hi = (uintptr_t)mine[i] + SZ;
  }
}

static int run_reuse(bool control) {
  fill_mine(true);
  unsigned long long lent0 = lent_start = spans_lent();
  control_mode = control;
  pthread_t t;
  pthread_create(&t, NULL, worker, NULL);
  pthread_join(t, NULL); /* a futex wait: main is idle while the worker runs */
  unsigned long long lent = spans_lent() - lent0;
  double frac = (double)inside / (N / 2);
  printf("worker's blocks in main's spans: %zu of %u (%.2f); committed grew %llu KiB; "
         "spans lent %llu\n",
         inside, N / 2, frac, (unsigned long long)grew >> 10, lent);
  size_t fresh = (size_t)(N / 2) * SZ; /* what the worker would fault in without lending */
  if (control) {
    CHECK(frac < 0.1, "without the purger %.2f of the worker's blocks reused main's spans", frac);
    CHECK(lent == 0, "without the purger %llu spans were lent", lent);
  } else {
    CHECK(frac >= 0.5, "only %.2f of the worker's blocks reused main's free blocks", frac);
    CHECK(grew < fresh / 2, "committed memory grew %llu KiB (%zu KiB if nothing is reused)",
          (unsigned long long)grew >> 10, fresh >> 10);
    CHECK(lent > 0, "no span was lent");
  }
  /* every block intact, and main can free and allocate through the lent spans */
  for (size_t i = 0; i < N; i++)
    if (mine[i]) {
      check_block(mine[i], SZ, "main's");
      T_free(mine[i]);
    }
  for (size_t i = 0; i < N / 2; i++) {
    check_block(theirs[i], SZ, "the worker's");
    T_free(theirs[i]);
  }
  for (size_t i = 0; i < N; i++) {
    mine[i] = T_malloc(SZ);
    if (!mine[i]) DIE("malloc(%u) returned NULL", SZ);
    pat_fill(mine[i], SZ, pat_seed(mine[i], SZ));
  }
  for (size_t i = 0; i < N; i++) {
    check_block(mine[i], SZ, "main's second");
    T_free(mine[i]);
  }
  return t_finish(control ? "test_lend --control" : "test_lend");
}

/* ---- lent only while the owner waits in a futex ---------------------------------------- */
/* The owner fills N blocks and then, in turn, spins (running), sleeps in nanosleep (a wait a
 * signal handler may make in the middle of a free) and waits on a condition variable (a
 * futex). Meanwhile main frees half its blocks and keeps taking fresh memory, so the purger
 * is kicked: spans may be lent in the last phase only. */
static atomic_int phase; /* 0 fill, 1 spin, 2 nanosleep, 3 futex wait, 4 done */
static pthread_mutex_t wm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wc = PTHREAD_COND_INITIALIZER;

static void *waiter(void *arg) {
  (void)arg;
  for (size_t i = 0; i < N; i++) {
    mine[i] = T_malloc(SZ);
    if (!mine[i]) DIE("malloc(%u) returned NULL", SZ);
    pat_fill(mine[i], SZ, pat_seed(mine[i], SZ));
  }
  atomic_store(&phase, 1);
  while (atomic_load(&phase) == 1) {
  }
  while (atomic_load(&phase) == 2) nap_ms(50);
  pthread_mutex_lock(&wm);
  while (atomic_load(&phase) == 3) pthread_cond_wait(&wc, &wm);
  pthread_mutex_unlock(&wm);
  return NULL;
}

/* Takes fresh memory for ms milliseconds (a kick every few ms); returns spans lent. */
static unsigned long long churn_for(unsigned ms, void **held, size_t *nheld) {
  unsigned long long before = spans_lent();
  for (unsigned t = 0; t < ms; t += 2) {
    for (int i = 0; i < 64 && *nheld < N; i++) {
      held[*nheld] = T_malloc(SZ);
      if (!held[*nheld]) DIE("malloc(%u) returned NULL", SZ);
      (*nheld)++;
    }
    nap_ms(2);
  }
  return spans_lent() - before;
}

static int run_when(void) {
  static void *held[N];
  size_t nheld = 0;
  pthread_t t;
  pthread_create(&t, NULL, waiter, NULL);
  while (atomic_load(&phase) == 0) nap_ms(1);
  for (size_t i = 0; i < N; i += 2) { /* remote frees: the owner's spans get listed */
    check_block(mine[i], SZ, "the owner's");
    T_free(mine[i]);
    mine[i] = NULL;
  }
  unsigned long long spin = churn_for(300, held, &nheld);
  atomic_store(&phase, 2);
  nap_ms(60);
  unsigned long long sleep = churn_for(300, held, &nheld);
  pthread_mutex_lock(&wm);
  atomic_store(&phase, 3);
  pthread_mutex_unlock(&wm);
  unsigned long long wait = 0;
  for (int k = 0; k < 30 && !wait; k++) wait += churn_for(100, held, &nheld);
  printf("spans lent while the owner spun %llu, slept in nanosleep %llu, waited on a "
         "condition %llu\n",
         spin, sleep, wait);
  CHECK(spin == 0, "%llu spans lent while their owner was running", spin);
  CHECK(sleep == 0, "%llu spans lent while their owner slept in nanosleep", sleep);
  CHECK(wait > 0, "no span lent in 3 s while their owner waited on a condition");
  pthread_mutex_lock(&wm);
  atomic_store(&phase, 4);
  pthread_cond_signal(&wc);
  pthread_mutex_unlock(&wm);
  pthread_join(t, NULL);
  for (size_t i = 0; i < N; i++)
    if (mine[i]) {
      check_block(mine[i], SZ, "the owner's");
      T_free(mine[i]);
    }
  for (size_t i = 0; i < nheld; i++) T_free(held[i]);
  return t_finish("test_lend --when");
}

/* ---- owners napping while the purger lends ---------------------------------------------- */
#define OWNERS 3
#define BATCH  1500
#define QCAP   8192

static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qcond = PTHREAD_COND_INITIALIZER;
static struct qitem {
  void *p;
  size_t n;
} queue[QCAP];
static size_t qhead, qtail;
static atomic_bool stop;
static atomic_ulong rounds;
static size_t race_min = 16, race_range = 497, race_batch = BATCH; /* --race-big: 9-64 KiB */
static long race_nap_ns = 3000000; /* --race-big: 5 ms, twice a round */

static void put(void *p, size_t n) {
  pthread_mutex_lock(&qlock);
  while (qtail - qhead == QCAP) pthread_cond_wait(&qcond, &qlock);
  queue[qtail++ % QCAP] = (struct qitem){p, n};
  pthread_cond_broadcast(&qcond);
  pthread_mutex_unlock(&qlock);
}

static void nap_timed(pthread_mutex_t *m, pthread_cond_t *c, uint64_t *r) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_nsec += (long)(rng_next(r) % (uint64_t)race_nap_ns);
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(m);
  pthread_cond_timedwait(c, m, &until);
  pthread_mutex_unlock(m);
}

static void *owner(void *arg) {
  uint64_t r = 0x9e3779b97f4a7c15ull * ((uintptr_t)arg + 1);
  void *keep[BATCH], *old[BATCH] = {0};
  size_t keepn[BATCH], oldn[BATCH] = {0};
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  while (!atomic_load(&stop)) {
    size_t k = 0;
    for (size_t i = 0; i < race_batch; i++) {
      size_t n = race_min + rng_next(&r) % race_range;
      void *p = T_malloc(n);
      if (!p) DIE("malloc(%zu) returned NULL", n);
      pat_fill(p, n, pat_seed(p, n));
      if (i % 2) {
        put(p, n); /* freed by the freer: remote frees into this owner's spans */
      } else {
        keep[k] = p;
        keepn[k++] = n;
      }
    }
    /* idle in a futex wait, where the purger may lend this owner's listed spans */
    nap_timed(&m, &c, &r);
    /* then its own frees, into spans that may have been lent (and adopted) meanwhile;
     * the previous round's survivors keep live blocks of this owner in lent spans */
    for (size_t i = 0; i < k; i++) {
      if (old[i]) {
        check_block(old[i], oldn[i], "an owner's old");
        T_free(old[i]);
      }
      if (rng_next(&r) % 4 == 0) {
        old[i] = keep[i];
        oldn[i] = keepn[i];
      } else {
        old[i] = NULL;
        check_block(keep[i], keepn[i], "an owner's");
        T_free(keep[i]);
      }
    }
    /* big blocks: the frees above filled the block cache, which the purger may drain */
    if (race_min > 8192) nap_timed(&m, &c, &r);
    atomic_fetch_add(&rounds, 1);
  }
  for (size_t i = 0; i < BATCH; i++)
    if (old[i]) {
      check_block(old[i], oldn[i], "an owner's old");
      T_free(old[i]);
    }
  return NULL;
}

/* Frees what the owners hand over, and allocates blocks of its own in between (so it
 * adopts lent spans at its span changes and allocates next to the owners' blocks). */
static void *freer(void *arg) {
  (void)arg;
  uint64_t r = 7;
  void *mine_[64] = {0};
  size_t minen[64] = {0};
  for (;;) {
    pthread_mutex_lock(&qlock);
    while (qhead == qtail && !atomic_load(&stop)) pthread_cond_wait(&qcond, &qlock);
    if (qhead == qtail) {
      pthread_mutex_unlock(&qlock);
      break;
    }
    struct qitem it = queue[qhead++ % QCAP];
    pthread_cond_broadcast(&qcond);
    pthread_mutex_unlock(&qlock);
    check_block(it.p, it.n, "a handed-over");
    T_free(it.p);
    size_t j = rng_next(&r) % 64;
    if (mine_[j]) {
      check_block(mine_[j], minen[j], "the freer's");
      T_free(mine_[j]);
    }
    minen[j] = 16 + rng_next(&r) % 497;
    mine_[j] = T_malloc(minen[j]);
    if (!mine_[j]) DIE("malloc(%zu) returned NULL", minen[j]);
    pat_fill(mine_[j], minen[j], pat_seed(mine_[j], minen[j]));
  }
  for (size_t j = 0; j < 64; j++)
    if (mine_[j]) {
      check_block(mine_[j], minen[j], "the freer's");
      T_free(mine_[j]);
    }
  return NULL;
}

static int run_race(bool big) {
  if (big) {
    race_min = 9u << 10;
    race_range = 55u << 10;
    race_batch = 96;
    race_nap_ns = 5000000;
  }
  unsigned long long lent0 = spans_lent();
  pthread_t o[OWNERS], f;
  pthread_create(&f, NULL, freer, NULL);
  for (uintptr_t i = 0; i < OWNERS; i++) pthread_create(&o[i], NULL, owner, (void *)i);
  nap_ms(1500);
  atomic_store(&stop, true);
  for (int i = 0; i < OWNERS; i++) pthread_join(o[i], NULL);
  pthread_mutex_lock(&qlock);
  pthread_cond_broadcast(&qcond);
  pthread_mutex_unlock(&qlock);
  pthread_join(f, NULL);
  unsigned long long lent = spans_lent() - lent0;
  printf("owner rounds %lu, spans lent %llu\n", atomic_load(&rounds), lent);
  CHECK(lent > 0, "no span was lent: the race was not run");
  return t_finish(big ? "test_lend --race-big" : "test_lend --race");
}

/* ---- lent spans go to a thread that needs a span, or back to their lender --------------- */
/* main fills N blocks and joins a thread that frees half of them at random, then takes fresh
 * spans of another size until main's spans are lent. Then every fourth block main still holds
 * is freed, so every lent span gets a free, and an allocator takes blocks of main's size.
 *   --loan       a freer (alive until the end) frees them. The allocator's blocks must come
 *                from main's spans: had the freer's frees adopted the lent spans (as a finished
 *                thread's are adopted), the allocator would find the orphanage empty and take
 *                fresh memory, while the freer, which allocates nothing, held them.
 *   --loan-back  main frees them itself: its frees take its spans back (redis's one thread is
 *                lent while it waits for clients), and the allocator's blocks are fresh. main
 *                spins, not waits, while the allocator runs, so its spans are not lent again. */
static pthread_barrier_t loan_bar;
static size_t loan_inside;
static _Atomic int loan_done;
static void free_fourth(void) {
  for (size_t i = 0; i < N; i += 4)
    if (mine[i]) {
      T_free(mine[i]);
      mine[i] = NULL;
    }
}
static void *loan_freer(void *arg) {
  (void)arg;
  free_fourth();
  pthread_barrier_wait(&loan_bar); /* freed */
  pthread_barrier_wait(&loan_bar); /* the allocator has allocated: stay alive until then */
  return NULL;
}
static void *loan_allocator(void *arg) {
  void **got = arg;
  for (size_t i = 0; i < 256; i++) {
    got[i] = T_malloc(SZ);
    if (!got[i]) DIE("malloc(%u) returned NULL", SZ);
    if ((uintptr_t)got[i] >= lo && (uintptr_t)got[i] < hi) loan_inside++;
  }
  atomic_store(&loan_done, 1);
  return NULL;
}
static void *kick[4096];
static size_t nkick;
static void *loan_lender(void *arg) {
  bool back = (uintptr_t)arg != 0; /* main frees after the lend itself */
  uint64_t r = 7;
  for (size_t k = 0; k < N / 2; k++) { /* at random: no span empties */
    size_t i = rng_next(&r) % N;
    if (mine[i]) {
      T_free(mine[i]);
      mine[i] = NULL;
    }
  }
  for (int k = 0; k < 5000 && spans_lent() == lent_start; k++) { /* fresh spans kick the purger */
    if (nkick < 4096) kick[nkick++] = T_malloc(2048);
    nap_ms(1);
  }
  CHECK(spans_lent() > lent_start, "no span was lent in 5 s");
  if (back) return NULL;
  pthread_t f, a;
  static void *got[256];
  pthread_barrier_init(&loan_bar, NULL, 2);
  pthread_create(&f, NULL, loan_freer, NULL);
  pthread_barrier_wait(&loan_bar);
  pthread_create(&a, NULL, loan_allocator, got);
  pthread_join(a, NULL);
  pthread_barrier_wait(&loan_bar);
  pthread_join(f, NULL);
  for (size_t i = 0; i < 256; i++) T_free(got[i]);
  return NULL;
}
static int run_loan(bool back) {
  fill_mine(false);
  lent_start = spans_lent();
  pthread_t t;
  pthread_create(&t, NULL, loan_lender, (void *)(uintptr_t)back);
  pthread_join(t, NULL); /* a futex wait: main's spans may be lent */
  if (back) {
    free_fourth();
    static void *got[256];
    pthread_create(&t, NULL, loan_allocator, got);
    while (!atomic_load(&loan_done)) sched_yield();
    pthread_join(t, NULL);
    for (size_t i = 0; i < 256; i++) T_free(got[i]);
    printf("the allocator's blocks in main's spans: %zu of 256\n", loan_inside);
    CHECK(loan_inside <= 26,
          "%zu of 256 blocks came from main's lent spans: main's frees did not take them back",
          loan_inside);
  } else {
    printf("the allocator's blocks in main's lent spans: %zu of 256\n", loan_inside);
    CHECK(loan_inside >= 230,
          "only %zu of 256 blocks came from main's lent spans: a thread that only freed into "
          "them took them",
          loan_inside);
  }
  for (size_t i = 0; i < nkick; i++) T_free(kick[i]);
  for (size_t i = 0; i < N; i++)
    if (mine[i]) T_free(mine[i]);
  return t_finish(back ? "test_lend --loan-back" : "test_lend --loan");
}

/* ---- an idle owner's hot spans ------------------------------------------------------------ */
/* The owner cuts HOT_CUT blocks of each of two classes from its hot spans (64 KiB each) and
 * frees all but HOT_KEEP: over 100 KiB free in hot spans, which it keeps while it waits on a
 * condition. Then a second thread allocates as many blocks as were freed. */
#define HOT_KEEP 4
static const size_t hot_size[2] = {1024, 2048}, hot_cut[2] = {60, 30};
static void *hot_kept[2][HOT_KEEP], *hot_freed[2][64], *hot_got[2][64];
static size_t hot_inside;
static _Atomic int hot_phase; /* 0 cutting, 1 waiting, 2 woken */
static pthread_mutex_t hm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hc = PTHREAD_COND_INITIALIZER;

static void *hot_owner(void *arg) {
  (void)arg;
  for (int k = 0; k < 2; k++) {
    void *p[64];
    for (size_t i = 0; i < hot_cut[k]; i++) {
      p[i] = T_malloc(hot_size[k]);
      if (!p[i]) DIE("malloc(%zu) returned NULL", hot_size[k]);
      pat_fill(p[i], hot_size[k], pat_seed(p[i], hot_size[k]));
    }
    for (size_t i = 0; i < hot_cut[k]; i++) {
      if (i < HOT_KEEP) {
        hot_kept[k][i] = p[i];
      } else {
        hot_freed[k][i - HOT_KEEP] = p[i];
        T_free(p[i]);
      }
    }
  }
  pthread_mutex_lock(&hm);
  atomic_store(&hot_phase, 1);
  while (atomic_load(&hot_phase) == 1) pthread_cond_wait(&hc, &hm); /* a futex wait */
  pthread_mutex_unlock(&hm);
  /* awake: its kept blocks intact, and its span changes work */
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < HOT_KEEP; i++) {
      check_block(hot_kept[k][i], hot_size[k], "the owner's kept");
      T_free(hot_kept[k][i]);
    }
    void *p[200];
    for (int i = 0; i < 200; i++) {
      p[i] = T_malloc(hot_size[k]);
      if (!p[i]) DIE("malloc(%zu) returned NULL", hot_size[k]);
      pat_fill(p[i], hot_size[k], pat_seed(p[i], hot_size[k]));
    }
    for (int i = 0; i < 200; i++) {
      check_block(p[i], hot_size[k], "the woken owner's");
      T_free(p[i]);
    }
  }
  return NULL;
}

static void *hot_taker(void *arg) {
  (void)arg;
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < hot_cut[k] - HOT_KEEP; i++) {
      void *q = hot_got[k][i] = T_malloc(hot_size[k]);
      if (!q) DIE("malloc(%zu) returned NULL", hot_size[k]);
      pat_fill(q, hot_size[k], pat_seed(q, hot_size[k]));
      for (size_t j = 0; j < hot_cut[k] - HOT_KEEP; j++)
        if (q == hot_freed[k][j]) hot_inside++;
    }
  return NULL;
}

static int run_hot(bool control) {
  pthread_t o, t;
  pthread_create(&o, NULL, hot_owner, NULL);
  while (atomic_load(&hot_phase) == 0) nap_ms(1);
  unsigned long long lent0 = spans_lent();
  /* empty spans of another class for the pool, so the purger keeps its beat */
  static void *churn[2000];
  for (int r = 0; r < 100 && (control || spans_lent() == lent0); r++) {
    for (int i = 0; i < 2000; i++)
      if (!(churn[i] = T_malloc(96))) DIE("malloc(96) returned NULL");
    for (int i = 0; i < 2000; i++) T_free(churn[i]);
    nap_ms(control ? 5 : 50);
  }
  unsigned long long lent = spans_lent() - lent0;
  pthread_create(&t, NULL, hot_taker, NULL);
  pthread_join(t, NULL);
  size_t total = hot_cut[0] + hot_cut[1] - 2 * HOT_KEEP;
  printf("spans lent while the owner waited %llu; the other thread's blocks that the owner "
         "had freed: %zu of %zu\n",
         lent, hot_inside, total);
  if (control) {
    CHECK(lent == 0, "without the purger %llu spans were lent", lent);
    CHECK(hot_inside <= total / 10, "without the purger %zu of %zu blocks were the owner's",
          hot_inside, total);
  } else {
    CHECK(lent >= 2, "the owner's two hot spans were not lent (%llu spans lent)", lent);
    CHECK(hot_inside >= total * 9 / 10,
          "only %zu of %zu blocks were ones the waiting owner had freed in its hot spans",
          hot_inside, total);
  }
  pthread_mutex_lock(&hm);
  atomic_store(&hot_phase, 2);
  pthread_cond_signal(&hc);
  pthread_mutex_unlock(&hm);
  pthread_join(o, NULL);
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < hot_cut[k] - HOT_KEEP; i++) {
      check_block(hot_got[k][i], hot_size[k], "the other thread's");
      T_free(hot_got[k][i]);
    }
  return t_finish(control ? "test_lend --hot-control" : "test_lend --hot");
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  if (argc > 1 && !strcmp(argv[1], "--hot")) return run_hot(false);
  if (argc > 1 && !strcmp(argv[1], "--hot-control")) return run_hot(true);
  if (argc > 1 && !strcmp(argv[1], "--loan")) return run_loan(false);
  if (argc > 1 && !strcmp(argv[1], "--loan-back")) return run_loan(true);
  if (argc > 1 && !strcmp(argv[1], "--control")) return run_reuse(true);
  if (argc > 1 && !strcmp(argv[1], "--race")) return run_race(false);
  if (argc > 1 && !strcmp(argv[1], "--race-big")) return run_race(true);
  if (argc > 1 && !strcmp(argv[1], "--when")) return run_when();
  if (argc > 1 && !strcmp(argv[1], "--fork")) { /* the same in a child of fork */
    void *keep = T_malloc(64);                  /* the parent's thread has a heap before the fork */
    pid_t pid = fork();
    if (pid < 0) DIE("fork failed");
    if (pid == 0) _exit(run_reuse(false));
    int st = 0;
    waitpid(pid, &st, 0);
    T_free(keep);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the forked child's lending failed");
    return t_finish("test_lend --fork");
  }
  if (argc > 1)
    DIE("usage: test_lend [--control | --when | --race | --fork | --loan | --loan-back | --hot "
        "| --hot-control]");
  return run_reuse(false);
}
