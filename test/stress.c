/* stress.c - proves the allocator keeps every object intact under concurrency: random
 * alloc/free/realloc with cross-thread transfers, producer-consumer, thread churn, relays of
 * short-lived threads that inherit their predecessor's objects, TLS destructors that allocate
 * during thread exit, and fork() while other threads allocate. */
#include "rill_test.h"

#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#ifndef USE_RILL_API
/* Weak so the same program also runs with rill only preloaded, or on plain libc. */
#pragma weak free_sized
#pragma weak free_aligned_sized
#pragma weak rill_stats_get
#pragma weak rill_class_stats_get
#endif

/* ---- parameters -------------------------------------------------------------------- */

static struct {
  unsigned modes;
  int threads[16];
  int nthreads_list;
  long ops;         /* operations per round of the random mode, over all threads */
  size_t max_size;  /* largest request */
  int churn;        /* short-lived threads in churn mode */
  int churn_par;    /* how many of them alive at once */
  int forks;        /* fork() calls in fork mode */
  int fork_threads; /* threads a fork child starts */
  int tls_threads;  /* threads in tls mode */
  int tls_rounds;   /* destructor rounds each TLS key runs in */
  long pc_items;    /* objects per producer-consumer configuration */
  uint64_t seed;
  int relay_chains; /* relay mode: chains of threads running at once */
  long relay_ms;    /* relay mode: how long the chains run */
  int stats_poll;   /* a thread reads rill's statistics all through the run */
} opt = {0,   {1, 2, 4, 8, 16, 32},          6,      300000, 4 * MiB, 10000, 32, 16, 2,
         256, PTHREAD_DESTRUCTOR_ITERATIONS, 200000, 1,      8,       2000,  0};

enum { M_RANDOM = 1, M_PRODCONS = 2, M_CHURN = 4, M_TLS = 8, M_FORK = 16, M_RELAY = 32 };
#define M_ALL 63

/* ---- objects ----------------------------------------------------------------------- */

struct obj {
  unsigned char *p;
  size_t n;
  uint32_t align; /* 0 when allocated without an alignment request */
  uint8_t sized;  /* free with free_sized / free_aligned_sized */
  uint8_t from_aligned_alloc;
};

#define DENSE_MAX (64 * KiB)

/* Objects up to DENSE_MAX carry the pattern in every byte; larger ones in their first and
 * last 4 KiB and in 64 bytes of every 4 KiB page between, to bound the cost of 4 MiB
 * objects. Each region is a prefix-consistent pattern, so realloc prefixes can be checked. */
static size_t region_next(size_t off, size_t n) {
  return off + 4096 + 64 <= n - 4096 ? off + 4096 : n - 4096;
}
#define FOR_REGIONS(n, seed, OFF, LEN, SEED, BODY)                                                 \
  do {                                                                                             \
    if ((n) <= DENSE_MAX) {                                                                        \
      size_t OFF = 0, LEN = (n);                                                                   \
      uint64_t SEED = (seed);                                                                      \
      BODY;                                                                                        \
    } else {                                                                                       \
      for (size_t OFF = 0;; OFF = region_next(OFF, (n))) {                                         \
        size_t LEN = (OFF == 0 || OFF == (n)-4096) ? 4096 : 64;                                    \
        uint64_t SEED = (seed) + OFF;                                                              \
        BODY;                                                                                      \
        if (OFF == (n)-4096) break;                                                                \
      }                                                                                            \
    }                                                                                              \
  } while (0)

static void obj_fill(struct obj *o) {
  uint64_t seed = pat_seed(o->p, o->n);
  FOR_REGIONS(o->n, seed, off, len, s, pat_fill(o->p + off, len, s));
}

/* Checks the pattern an object got for size `filled_n` at address `orig` over its first
 * `limit` bytes (after a realloc the object may have moved and shrunk). */
static bool obj_check_prefix(const struct obj *o, const void *orig, size_t filled_n, size_t limit,
                             const char *ctx) {
  uint64_t seed = pat_seed(orig, filled_n);
  bool ok = true;
  FOR_REGIONS(filled_n, seed, off, len, s, {
    if (ok && off < limit) {
      size_t l = off + len <= limit ? len : limit - off;
      size_t bad = pat_find_bad(o->p + off, l, s);
      if (bad != SIZE_MAX) {
        FAIL("%s: object %p (allocated at %p, %zu bytes) corrupted at offset %zu: 0x%02x", ctx,
             (void *)o->p, orig, filled_n, off + bad, o->p[off + bad]);
        ok = false;
      }
    }
  });
  return ok;
}

static bool obj_check(const struct obj *o, const char *ctx) {
  return obj_check_prefix(o, o->p, o->n, o->n, ctx);
}

static bool obj_is_zero(const struct obj *o) {
  bool ok = true;
  FOR_REGIONS(o->n, 0, off, len, s, {
    (void)s;
    if (ok && first_nonzero(o->p + off, len) != SIZE_MAX) ok = false;
  });
  return ok;
}

/* Skewed to small: 90% 1..1 KiB, 9% to 64 KiB, 0.9% to 1 MiB, 0.1% to max_size. */
static size_t rand_size(uint64_t *rs) {
  uint64_t r = rng_next(rs);
  unsigned pct = (unsigned)(r % 1000);
  size_t lo, hi;
  if (pct < 900)
    lo = 1, hi = 1024;
  else if (pct < 990)
    lo = 1025, hi = 64 * KiB;
  else if (pct < 999)
    lo = 64 * KiB + 1, hi = 1 * MiB;
  else
    lo = 1 * MiB + 1, hi = opt.max_size;
  if (hi > opt.max_size) hi = opt.max_size;
  if (lo > hi) lo = hi;
  /* log-uniform inside [lo, hi] */
  int lb = 63 - __builtin_clzll(lo), hb = 63 - __builtin_clzll(hi);
  int b = lb + (int)((r >> 16) % (uint64_t)(hb - lb + 1));
  size_t a = (size_t)1 << b, z = a * 2 - 1;
  if (a < lo) a = lo;
  if (z > hi) z = hi;
  return a + (size_t)((r >> 32) % (z - a + 1));
}

static size_t need_align(size_t n, size_t align) {
  size_t m = n >= 16 ? 16 : 8;
  return align > m ? align : m;
}

static bool obj_alloc(struct obj *o, size_t n, uint64_t *rs) {
  uint64_t r = rng_next(rs) % 100;
  size_t align = 0;
  bool zero = false;
  void *p = NULL;
  errno = 0;
  if (r < 78) {
    p = T_malloc(n);
  } else if (r < 86) {
    p = (r & 1) ? T_calloc(1, n) : T_calloc(n, 1);
    zero = true;
  } else if (r < 92) {
    align = (size_t)16 << (rng_next(rs) % 9); /* 16 .. 4096 */
    p = T_memalign(align, n);
  } else if (r < 96) {
    align = (size_t)8 << (rng_next(rs) % 10);
    p = T_aligned_alloc(align, n);
  } else {
    align = (size_t)8 << (rng_next(rs) % 14); /* up to 64 KiB */
    if (T_posix_memalign(&p, align, n)) p = NULL;
  }
  if (!p) {
    FAIL("allocation of %zu bytes (alignment %zu) returned NULL, errno %d", n, align, errno);
    return false;
  }
  o->p = p;
  o->n = n;
  o->align = (uint32_t)align;
  o->from_aligned_alloc = (r >= 92 && r < 96);
  /* C23: free_sized for malloc/calloc/realloc blocks, free_aligned_sized for aligned_alloc. */
  o->sized = (rng_next(rs) % 8 == 0) && (align == 0 || o->from_aligned_alloc);
  if ((uintptr_t)p % need_align(n, align))
    FAIL("%zu-byte block at %p not aligned to %zu", n, p, need_align(n, align));
  size_t u = T_usable(p);
  if (u < n) FAIL("%zu-byte block at %p has usable size %zu", n, p, u);
  if (zero && !obj_is_zero(o)) FAIL("calloc'ed %zu-byte block at %p is not zeroed", n, p);
  obj_fill(o);
  return true;
}

static void raw_free(struct obj *o) {
  if (o->sized) {
#ifndef USE_RILL_API
    if (!free_sized) { /* not provided: plain libc run */
      T_free(o->p);
      o->p = NULL;
      return;
    }
#endif
    if (o->align)
      T_free_aligned_sized(o->p, o->align, o->n);
    else
      T_free_sized(o->p, o->n);
  } else {
    T_free(o->p);
  }
  o->p = NULL;
}

static void obj_free(struct obj *o, const char *ctx) {
  if (!o->p) return;
  obj_check(o, ctx);
  raw_free(o);
}

/* Resizes an object, checking the kept prefix, and fills it anew. */
static void obj_realloc(struct obj *o, size_t n) {
  void *old = o->p;
  size_t old_n = o->n;
  errno = 0;
  void *q = T_realloc(o->p, n);
  if (!q) {
    FAIL("realloc(%p, %zu) from %zu bytes returned NULL, errno %d", old, n, old_n, errno);
    return;
  }
  o->p = q;
  o->n = n;
  o->align = 0; /* realloc keeps no alignment promise */
  o->sized = 0;
  o->from_aligned_alloc = 0;
  if ((uintptr_t)q % need_align(n, 0)) FAIL("realloc to %zu gave unaligned %p", n, q);
  obj_check_prefix(o, old, old_n, old_n < n ? old_n : n, "realloc");
  obj_fill(o);
}

/* ---- random mode ------------------------------------------------------------------- */

#define SLOTS       512
#define MAILBOX_CAP 4096

struct mailbox {
  pthread_mutex_t mu;
  struct obj *items;
  size_t count;
};

struct rnd_shared {
  int nthreads;
  long ops_per_thread;
  struct mailbox *boxes;
  pthread_barrier_t barrier;
};

struct rnd_arg {
  struct rnd_shared *sh;
  int id;
};

static void drain(struct mailbox *b) {
  struct obj local[64];
  for (;;) {
    pthread_mutex_lock(&b->mu);
    size_t k = b->count < 64 ? b->count : 64;
    b->count -= k;
    memcpy(local, b->items + b->count, k * sizeof *local);
    pthread_mutex_unlock(&b->mu);
    if (!k) return;
    for (size_t i = 0; i < k; i++) obj_free(&local[i], "object received from another thread");
  }
}

static void *rnd_thread(void *arg) {
  struct rnd_arg *a = arg;
  struct rnd_shared *sh = a->sh;
  uint64_t rs = opt.seed * 7919 + (uint64_t)a->id * 104729 + 1;
  struct obj *slots = calloc(SLOTS, sizeof *slots);
  if (!slots) DIE("calloc");
  for (long i = 0; i < sh->ops_per_thread; i++) {
    uint64_t r = rng_next(&rs);
    struct obj *o = &slots[(r >> 8) % SLOTS];
    unsigned op = (unsigned)(r % 100);
    if (op < 45) {
      obj_free(o, "random mode");
      obj_alloc(o, rand_size(&rs), &rs);
    } else if (op < 72) {
      obj_free(o, "random mode");
    } else if (op < 82) {
      if (o->p)
        obj_realloc(o, rand_size(&rs));
      else
        obj_alloc(o, rand_size(&rs), &rs);
    } else if (op < 96) {
      if (!o->p) continue;
      int to = (int)(rng_next(&rs) % (uint64_t)sh->nthreads);
      struct mailbox *b = &sh->boxes[to];
      pthread_mutex_lock(&b->mu);
      bool sent = b->count < MAILBOX_CAP;
      if (sent) b->items[b->count++] = *o;
      pthread_mutex_unlock(&b->mu);
      if (sent)
        o->p = NULL;
      else
        obj_free(o, "random mode (mailbox full)");
    } else {
      drain(&sh->boxes[a->id]);
    }
  }
  for (int i = 0; i < SLOTS; i++) obj_free(&slots[i], "random mode end");
  free(slots);
  pthread_barrier_wait(&sh->barrier);
  drain(&sh->boxes[a->id]);
  return NULL;
}

static void mode_random(void) {
  for (int t = 0; t < opt.nthreads_list; t++) {
    int n = opt.threads[t];
    struct rnd_shared sh = {.nthreads = n, .ops_per_thread = opt.ops / n + 1};
    sh.boxes = calloc((size_t)n, sizeof *sh.boxes);
    struct rnd_arg *args = calloc((size_t)n, sizeof *args);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    if (!sh.boxes || !args || !th) DIE("calloc");
    pthread_barrier_init(&sh.barrier, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
      pthread_mutex_init(&sh.boxes[i].mu, NULL);
      sh.boxes[i].items = calloc(MAILBOX_CAP, sizeof(struct obj));
      if (!sh.boxes[i].items) DIE("calloc");
      args[i] = (struct rnd_arg){&sh, i};
    }
    for (int i = 0; i < n; i++)
      if (pthread_create(&th[i], NULL, rnd_thread, &args[i])) DIE("pthread_create");
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < n; i++) {
      if (sh.boxes[i].count) FAIL("mailbox %d still holds %zu objects", i, sh.boxes[i].count);
      free(sh.boxes[i].items);
      pthread_mutex_destroy(&sh.boxes[i].mu);
    }
    pthread_barrier_destroy(&sh.barrier);
    free(sh.boxes);
    free(args);
    free(th);
    printf("  random: %d thread(s), %ld ops\n", n, opt.ops);
  }
}

/* ---- producer-consumer ------------------------------------------------------------- */

#define QCAP 1024
struct queue {
  pthread_mutex_t mu;
  pthread_cond_t not_empty, not_full;
  struct obj items[QCAP];
  size_t head, count;
  int producers_left;
};

static void q_push(struct queue *q, struct obj o) {
  pthread_mutex_lock(&q->mu);
  while (q->count == QCAP) pthread_cond_wait(&q->not_full, &q->mu);
  q->items[(q->head + q->count++) % QCAP] = o;
  pthread_cond_signal(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
}

/* Returns false once every producer is done and the queue is empty. */
static bool q_pop(struct queue *q, struct obj *o) {
  pthread_mutex_lock(&q->mu);
  while (q->count == 0 && q->producers_left > 0) pthread_cond_wait(&q->not_empty, &q->mu);
  bool got = q->count > 0;
  if (got) {
    *o = q->items[q->head];
    q->head = (q->head + 1) % QCAP;
    q->count--;
    pthread_cond_signal(&q->not_full);
  }
  pthread_mutex_unlock(&q->mu);
  return got;
}

struct pc_arg {
  struct queue *q;
  long items;
  int id;
};

static void *producer(void *arg) {
  struct pc_arg *a = arg;
  uint64_t rs = opt.seed * 31 + (uint64_t)a->id * 977 + 5;
  for (long i = 0; i < a->items; i++) {
    struct obj o;
    if (obj_alloc(&o, rand_size(&rs), &rs)) q_push(a->q, o);
  }
  pthread_mutex_lock(&a->q->mu);
  if (--a->q->producers_left == 0) pthread_cond_broadcast(&a->q->not_empty);
  pthread_mutex_unlock(&a->q->mu);
  return NULL;
}

/* Consumers hold up to 64 objects before freeing them in a batch, and sometimes grow one. */
static void *consumer(void *arg) {
  struct pc_arg *a = arg;
  uint64_t rs = opt.seed * 17 + (uint64_t)a->id * 331 + 9;
  struct obj held[64];
  int nh = 0;
  struct obj o;
  while (q_pop(a->q, &o)) {
    if (rng_next(&rs) % 16 == 0) obj_realloc(&o, rand_size(&rs));
    held[nh++] = o;
    if (nh == 64 || rng_next(&rs) % 4 == 0) {
      while (nh) obj_free(&held[--nh], "producer-consumer");
    }
  }
  while (nh) obj_free(&held[--nh], "producer-consumer");
  return NULL;
}

static void mode_prodcons(void) {
  const int conf[][2] = {{1, 1}, {4, 1}, {1, 4}, {8, 8}};
  for (size_t c = 0; c < sizeof conf / sizeof conf[0]; c++) {
    int np = conf[c][0], nc = conf[c][1];
    struct queue *q = calloc(1, sizeof *q);
    if (!q) DIE("calloc");
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->not_empty, NULL);
    pthread_cond_init(&q->not_full, NULL);
    q->producers_left = np;
    pthread_t th[16];
    struct pc_arg args[16];
    for (int i = 0; i < np + nc; i++) {
      args[i] = (struct pc_arg){q, opt.pc_items / np, i};
      if (pthread_create(&th[i], NULL, i < np ? producer : consumer, &args[i]))
        DIE("pthread_create");
    }
    for (int i = 0; i < np + nc; i++) pthread_join(th[i], NULL);
    if (q->count) FAIL("producer-consumer queue still holds %zu objects", q->count);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->not_empty);
    pthread_cond_destroy(&q->not_full);
    free(q);
    printf("  prodcons: %d producer(s), %d consumer(s), %ld objects\n", np, nc, opt.pc_items);
  }
}

/* ---- thread churn ------------------------------------------------------------------ */

/* A pool of objects left behind by exited (or exiting) threads, freed by reapers. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct obj *items;
  size_t count, cap;
  bool done;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0, false};

static sem_t churn_slots;
static atomic_int detached_alive;

struct churn_arg {
  int id;
  bool detached;
  int nobj;
  struct obj objs[24];
};

static void *churn_thread(void *arg) {
  struct churn_arg *a = arg;
  uint64_t rs = opt.seed * 13 + (uint64_t)a->id * 7 + 3;
  a->nobj = 0;
  int n = 8 + (int)(rng_next(&rs) % 16);
  for (int i = 0; i < n; i++) {
    struct obj o;
    if (!obj_alloc(&o, rand_size(&rs), &rs)) continue;
    if (i % 2 == 0)
      obj_free(&o, "churn thread's own object");
    else
      a->objs[a->nobj++] = o;
  }
  if (a->detached) {
    pthread_mutex_lock(&pool.mu);
    for (int i = 0; i < a->nobj && pool.count < pool.cap; i++)
      pool.items[pool.count++] = a->objs[i];
    pthread_cond_signal(&pool.cv);
    pthread_mutex_unlock(&pool.mu);
    T_free(a);
    sem_post(&churn_slots);
    atomic_fetch_sub(&detached_alive, 1);
  } else {
    sem_post(&churn_slots);
  }
  return NULL;
}

static void *reaper(void *arg) {
  (void)arg;
  pthread_mutex_lock(&pool.mu);
  for (;;) {
    while (pool.count == 0 && !pool.done) pthread_cond_wait(&pool.cv, &pool.mu);
    if (pool.count == 0 && pool.done) break;
    struct obj o = pool.items[--pool.count];
    pthread_mutex_unlock(&pool.mu);
    obj_free(&o, "object of an exited churn thread");
    pthread_mutex_lock(&pool.mu);
  }
  pthread_mutex_unlock(&pool.mu);
  return NULL;
}

static uint64_t live_heaps(void) {
  struct rill_stats s;
  memset(&s, 0, sizeof s);
#ifndef USE_RILL_API
  if (!rill_stats_get) return 0;
#endif
  rill_stats_get(&s);
  return s.threads;
}

static void mode_churn(void) {
  sem_init(&churn_slots, 0, (unsigned)opt.churn_par);
  pool.cap = (size_t)opt.churn * 24;
  pool.items = calloc(pool.cap, sizeof *pool.items);
  if (!pool.items) DIE("calloc");
  pool.done = false;
  pthread_t reapers[2];
  for (int i = 0; i < 2; i++)
    if (pthread_create(&reapers[i], NULL, reaper, NULL)) DIE("pthread_create");
  /* Joined threads are joined in FIFO order; their objects are freed after the join. */
  enum { FIFO = 16 };
  pthread_t fifo_th[FIFO];
  struct churn_arg *fifo_arg[FIFO];
  int fh = 0, fn = 0;
  uint64_t rs = opt.seed + 99;
  pthread_attr_t det;
  pthread_attr_init(&det);
  pthread_attr_setdetachstate(&det, PTHREAD_CREATE_DETACHED);
  for (int i = 0; i < opt.churn; i++) {
    if (fn == FIFO) {
      pthread_join(fifo_th[fh], NULL);
      struct churn_arg *a = fifo_arg[fh];
      for (int k = 0; k < a->nobj; k++) obj_free(&a->objs[k], "object of a joined churn thread");
      T_free(a);
      fh = (fh + 1) % FIFO;
      fn--;
    }
    while (sem_wait(&churn_slots) != 0) {
    }
    struct churn_arg *a = T_malloc(sizeof *a);
    if (!a) DIE("malloc(churn_arg)");
    a->id = i;
    a->detached = rng_next(&rs) % 2;
    pthread_t th;
    if (a->detached) {
      atomic_fetch_add(&detached_alive, 1);
      int e = pthread_create(&th, &det, churn_thread, a);
      if (e) DIE("pthread_create (detached) failed: %s, thread %d", strerror(e), i);
    } else {
      int e = pthread_create(&th, NULL, churn_thread, a);
      if (e) DIE("pthread_create failed: %s, thread %d", strerror(e), i);
      int slot = (fh + fn) % FIFO;
      fifo_th[slot] = th;
      fifo_arg[slot] = a;
      fn++;
    }
  }
  while (fn) {
    pthread_join(fifo_th[fh], NULL);
    struct churn_arg *a = fifo_arg[fh];
    for (int k = 0; k < a->nobj; k++) obj_free(&a->objs[k], "object of a joined churn thread");
    T_free(a);
    fh = (fh + 1) % FIFO;
    fn--;
  }
  pthread_attr_destroy(&det);
  while (atomic_load(&detached_alive) > 0) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  pthread_mutex_lock(&pool.mu);
  pool.done = true;
  pthread_cond_broadcast(&pool.cv);
  pthread_mutex_unlock(&pool.mu);
  for (int i = 0; i < 2; i++) pthread_join(reapers[i], NULL);
  free(pool.items);
  pool.items = NULL;
  pool.count = 0;
  sem_destroy(&churn_slots);
  /* Thread heaps of exited threads must not pile up. Detached threads may still be in
   * their exit path, so allow them plenty of time (a hang guard, not a timing check). */
  uint64_t heaps = live_heaps();
  for (int i = 0; i < 1000 && heaps > 16; i++) {
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
    heaps = live_heaps();
  }
  CHECK(heaps <= 16, "after %d threads exited, rill still counts %" PRIu64 " live thread heaps",
        opt.churn, heaps);
  printf("  churn: %d short-lived threads, %" PRIu64 " live heaps after\n", opt.churn, heaps);
}

/* ---- relay ----------------------------------------------------------------------- */
/* Larson's "bleeding" with short lives (LKmalloc §7): each thread of a chain replaces random
 * objects of its predecessor's set, then starts its successor and exits. The successor frees
 * blocks from spans whose owner is exiting or gone, so it takes over floating spans and
 * adopts orphans while other chains do the same: the allocator's thread-exit and take-over
 * paths race each other. A span taken by two heaps at once hands one block out twice, and the
 * pattern check of the first holder's free fails (larson -r 2000 at 8 threads once did so in
 * about 1 run of 10). */
enum { RELAY_OBJS = 1000, RELAY_ROUNDS = 2000 };
/* Light objects, so threads turn over as fast as larson's (about 16,000 a second at 8 chains
 * here; the full pattern of `struct obj` cut that to 3,700): a tag in the first and the last 8
 * bytes, checked before each free. */
struct relay_obj {
  unsigned char *p;
  size_t n;
  uint64_t tag;
};
struct relay {
  struct relay_obj objs[RELAY_OBJS];
  uint64_t rs;
  pthread_t prev, last; /* predecessor, joined by its successor; the final thread */
  bool has_prev;
  atomic_bool done;
  long generations;
};
static atomic_bool relay_stop;

static void relay_alloc(struct relay *c, struct relay_obj *o) {
  o->n = 16 + rng_next(&c->rs) % 985; /* 16 .. 1000 bytes */
  o->p = T_malloc(o->n);
  if (!o->p) DIE("malloc(%zu) returned NULL", o->n);
  o->tag = rng_next(&c->rs) ^ (uint64_t)(uintptr_t)o->p;
  memcpy(o->p, &o->tag, 8);
  memcpy(o->p + o->n - 8, &o->tag, 8);
}

static void relay_free(struct relay_obj *o) {
  uint64_t a, z;
  memcpy(&a, o->p, 8);
  memcpy(&z, o->p + o->n - 8, 8);
  if (a != o->tag || z != o->tag)
    FAIL("relay: %zu-byte object at %p was overwritten while held (tags %016" PRIx64 " %016" PRIx64
         ", expected %016" PRIx64 "): handed out twice?",
         o->n, (void *)o->p, a, z, o->tag);
  T_free(o->p);
  o->p = NULL;
}

static void *relay_thread(void *arg) {
  struct relay *c = arg;
  if (c->has_prev) pthread_join(c->prev, NULL);
  c->generations++;
  for (int r = 0; r < RELAY_ROUNDS; r++) {
    struct relay_obj *o = &c->objs[rng_next(&c->rs) % RELAY_OBJS];
    relay_free(o);
    relay_alloc(c, o);
  }
  if (!atomic_load(&relay_stop)) {
    c->prev = pthread_self();
    c->has_prev = true;
    pthread_t next;
    if (pthread_create(&next, NULL, relay_thread, c) == 0) return NULL;
  }
  c->last = pthread_self();
  atomic_store(&c->done, true);
  return NULL;
}

static void mode_relay(void) {
  int n = opt.relay_chains;
  struct relay *chains = calloc((size_t)n, sizeof *chains);
  if (!chains) DIE("calloc");
  atomic_store(&relay_stop, false);
  for (int i = 0; i < n; i++) {
    struct relay *c = &chains[i];
    c->rs = opt.seed * 7919 + (uint64_t)i;
    for (int k = 0; k < RELAY_OBJS; k++) relay_alloc(c, &c->objs[k]);
    pthread_t th;
    if (pthread_create(&th, NULL, relay_thread, c)) DIE("pthread_create");
  }
  struct timespec ts = {opt.relay_ms / 1000, (opt.relay_ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
  atomic_store(&relay_stop, true);
  long gens = 0;
  for (int i = 0; i < n; i++) {
    while (!atomic_load(&chains[i].done)) {
      struct timespec w = {0, 1000000};
      nanosleep(&w, NULL);
    }
    pthread_join(chains[i].last, NULL);
    gens += chains[i].generations;
    for (int k = 0; k < RELAY_OBJS; k++) relay_free(&chains[i].objs[k]);
  }
  free(chains);
  printf("  relay: %d chains, %ld threads in %ld ms\n", n, gens, opt.relay_ms);
}

/* ---- TLS destructors --------------------------------------------------------------- */

static pthread_key_t key_early, key_late; /* created before / after the first malloc */
static atomic_long tls_calls, tls_first_alloc_in_dtor;
static pthread_mutex_t leftover_mu = PTHREAD_MUTEX_INITIALIZER;
static struct obj *leftovers;
static size_t nleftovers, leftover_cap;
static char tls_marker; /* a key value that is not a heap object */

struct tls_val {
  int round;
  struct obj o;
};

static void tls_dtor(void *v);

static struct tls_val *tls_new(int round, uint64_t *rs) {
  struct tls_val *t = T_malloc(sizeof *t);
  if (!t) DIE("malloc in TLS destructor");
  t->round = round;
  if (!obj_alloc(&t->o, rand_size(rs), rs)) t->o.p = NULL;
  return t;
}

static void tls_dtor_key(void *v, pthread_key_t key) {
  atomic_fetch_add(&tls_calls, 1);
  uint64_t rs = (uint64_t)(uintptr_t)v * 31 + 7;
  int round = 0;
  if (v == &tls_marker) {
    /* This thread never allocated: its first allocation happens here, during its exit. */
    atomic_fetch_add(&tls_first_alloc_in_dtor, 1);
  } else {
    struct tls_val *t = v;
    obj_free(&t->o, "object owned by a TLS value, freed in its destructor");
    round = t->round;
    T_free(t);
  }
  /* Allocate and free a burst during thread teardown. */
  struct obj burst[8];
  for (int i = 0; i < 8; i++) obj_alloc(&burst[i], rand_size(&rs), &rs);
  for (int i = 0; i < 8; i++) obj_free(&burst[i], "TLS destructor burst");
  if (round + 1 < opt.tls_rounds) {
    pthread_setspecific(key, tls_new(round + 1, &rs)); /* run again in the next round */
  } else {
    /* The last round leaves an object for the main thread to free after the exit. */
    struct obj o;
    if (obj_alloc(&o, rand_size(&rs), &rs)) {
      pthread_mutex_lock(&leftover_mu);
      if (nleftovers < leftover_cap)
        leftovers[nleftovers++] = o;
      else
        obj_free(&o, "leftover");
      pthread_mutex_unlock(&leftover_mu);
    }
  }
}

static void tls_dtor(void *v) {
  tls_dtor_key(v, key_early);
}
static void tls_dtor_late(void *v) {
  tls_dtor_key(v, key_late);
}

static void *tls_thread(void *arg) {
  int id = (int)(intptr_t)arg;
  uint64_t rs = (uint64_t)id * 5 + opt.seed;
  if (id % 2 == 0) {
    pthread_setspecific(key_early, &tls_marker); /* no malloc in this thread until exit */
    pthread_setspecific(key_late, &tls_marker);
  } else {
    pthread_setspecific(key_early, tls_new(0, &rs));
    pthread_setspecific(key_late, tls_new(0, &rs));
  }
  return NULL;
}

static void mode_tls(void) {
  T_free(keep(T_malloc(64))); /* key_late is created after this process allocated */
  if (pthread_key_create(&key_late, tls_dtor_late)) DIE("pthread_key_create");
  leftover_cap = (size_t)opt.tls_threads * 2;
  leftovers = calloc(leftover_cap, sizeof *leftovers);
  if (!leftovers) DIE("calloc");
  atomic_store(&tls_calls, 0);
  atomic_store(&tls_first_alloc_in_dtor, 0);
  const int wave = 16;
  for (int base = 0; base < opt.tls_threads; base += wave) {
    pthread_t th[16];
    int n = opt.tls_threads - base < wave ? opt.tls_threads - base : wave;
    for (int i = 0; i < n; i++)
      if (pthread_create(&th[i], NULL, tls_thread, (void *)(intptr_t)(base + i)))
        DIE("pthread_create");
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  }
  /* Every key of every thread gets a destructor call in each of tls_rounds rounds. */
  long even = (opt.tls_threads + 1) / 2;
  long want = 2L * opt.tls_threads * opt.tls_rounds;
  long got = atomic_load(&tls_calls);
  CHECK(got == want, "TLS destructors ran %ld times, want %ld (%d threads, 2 keys, %d rounds)", got,
        want, opt.tls_threads, opt.tls_rounds);
  CHECK(atomic_load(&tls_first_alloc_in_dtor) == 2 * even,
        "%ld threads made their first allocation in a TLS destructor, want %ld",
        atomic_load(&tls_first_alloc_in_dtor), 2 * even);
  CHECK(nleftovers == (size_t)(2 * opt.tls_threads),
        "%zu objects left by last-round TLS destructors, want %d", nleftovers, 2 * opt.tls_threads);
  for (size_t i = 0; i < nleftovers; i++)
    obj_free(&leftovers[i], "object left by a TLS destructor");
  free(leftovers);
  pthread_key_delete(key_late);
  printf("  tls: %d threads, %ld destructor calls\n", opt.tls_threads, got);
}

/* ---- fork -------------------------------------------------------------------------- */

static atomic_bool busy_stop;

static void *busy_thread(void *arg) {
  uint64_t rs = (uint64_t)(intptr_t)arg * 1234567 + opt.seed;
  struct obj slots[128];
  memset(slots, 0, sizeof slots);
  while (!atomic_load(&busy_stop)) {
    for (int i = 0; i < 256; i++) {
      struct obj *o = &slots[rng_next(&rs) % 128];
      if (o->p)
        obj_free(o, "busy thread during forks");
      else
        obj_alloc(o, rand_size(&rs), &rs);
    }
  }
  for (int i = 0; i < 128; i++) obj_free(&slots[i], "busy thread end");
  return NULL;
}

static void *child_thread(void *arg) {
  uint64_t rs = (uint64_t)(intptr_t)arg + 77;
  for (int i = 0; i < 5000; i++) {
    struct obj o;
    if (obj_alloc(&o, rand_size(&rs), &rs)) obj_free(&o, "fork child thread");
  }
  return NULL;
}

static void fork_child(struct obj *pre, int npre, int f) {
  alarm(60); /* a deadlocked child is killed and reported, never left hanging */
  uint64_t rs = (uint64_t)f * 3 + 1;
  for (int i = 0; i < npre; i += 2) obj_free(&pre[i], "parent's object freed in fork child");
  struct obj live[256];
  memset(live, 0, sizeof live);
  for (int i = 0; i < 20000; i++) {
    struct obj *o = &live[rng_next(&rs) % 256];
    if (o->p)
      obj_free(o, "fork child");
    else
      obj_alloc(o, rand_size(&rs), &rs);
  }
  pthread_t th[8];
  int nt = opt.fork_threads < 8 ? opt.fork_threads : 8;
  for (int i = 0; i < nt; i++)
    if (pthread_create(&th[i], NULL, child_thread, (void *)(intptr_t)i))
      DIE("child pthread_create");
  for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 256; i++) obj_free(&live[i], "fork child end");
  for (int i = 1; i < npre; i += 2) obj_check(&pre[i], "parent's object in fork child");
  exit(atomic_load(&t_failures) ? 1 : 0);
}

static void mode_fork(void) {
  enum { NBUSY = 4, NPRE = 1000 };
  pthread_t busy[NBUSY];
  atomic_store(&busy_stop, false);
  for (int i = 0; i < NBUSY; i++)
    if (pthread_create(&busy[i], NULL, busy_thread, (void *)(intptr_t)i)) DIE("pthread_create");
  struct obj *pre = calloc(NPRE, sizeof *pre);
  if (!pre) DIE("calloc");
  uint64_t rs = opt.seed + 4242;
  for (int i = 0; i < NPRE; i++) obj_alloc(&pre[i], rand_size(&rs), &rs);
  for (int f = 0; f < opt.forks; f++) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) DIE("fork failed: %s", strerror(errno));
    if (pid == 0) fork_child(pre, NPRE, f);
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) DIE("waitpid");
    if (WIFSIGNALED(st)) {
      FAIL("fork child %d killed by signal %d%s", f, WTERMSIG(st),
           WTERMSIG(st) == SIGALRM ? " (hung for 60 s: deadlock after fork?)" : "");
      if (WTERMSIG(st) == SIGALRM) break; /* one deadlock is enough to know */
    } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      FAIL("fork child %d exited with status %d", f, WEXITSTATUS(st));
    /* The parent goes on allocating between forks too. */
    for (int i = 0; i < 50; i++) {
      int k = (int)(rng_next(&rs) % NPRE);
      obj_free(&pre[k], "parent object between forks");
      obj_alloc(&pre[k], rand_size(&rs), &rs);
    }
  }
  atomic_store(&busy_stop, true);
  for (int i = 0; i < NBUSY; i++) pthread_join(busy[i], NULL);
  for (int i = 0; i < NPRE; i++) obj_free(&pre[i], "parent object after forks");
  free(pre);
  printf("  fork: %d forks with %d busy threads\n", opt.forks, NBUSY);
}

/* ---- main -------------------------------------------------------------------------- */

/* ---- statistics read while the other modes run (--stats-poll 1) ------------------ */
/* A server's health page reads the allocator's statistics while its workers allocate:
 * the walks must neither crash nor race (TSan) nor give rows that contradict themselves. */
static atomic_bool poll_stop;
static long polls;

static void check_rows(const struct rill_class_stats *r, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (r[i].bytes_resident > r[i].bytes_committed || r[i].bytes_in_use > r[i].bytes_committed ||
        !r[i].spans)
      FAIL("class row %zu (block size %" PRIu64 "): %" PRIu64 " spans, in use %" PRIu64
           ", resident %" PRIu64 ", committed %" PRIu64,
           i, r[i].block_size, r[i].spans, r[i].bytes_in_use, r[i].bytes_resident,
           r[i].bytes_committed);
    if (r[i].block_size && r[i].bytes_in_use != r[i].blocks_in_use * r[i].block_size)
      FAIL("class row %zu: %" PRIu64 " bytes in use for %" PRIu64 " blocks of %" PRIu64, i,
           r[i].bytes_in_use, r[i].blocks_in_use, r[i].block_size);
    if (i && r[i].block_size && (!r[i - 1].block_size || r[i].block_size < r[i - 1].block_size))
      FAIL("class rows out of order: %" PRIu64 " after %" PRIu64, r[i].block_size,
           r[i - 1].block_size);
  }
}

static void *stats_poller(void *unused) {
  (void)unused;
  struct rill_class_stats rows[96];
  while (!atomic_load(&poll_stop)) {
    struct rill_stats s;
    rill_stats_get(&s);
    size_t n = rill_class_stats_get(rows, 96);
    if (n > 96) FAIL("rill_class_stats_get: %zu rows, more than there are classes", n);
    check_rows(rows, n);
#ifndef USE_RILL_API
    char *text = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&text, &len);
    if (!fp) DIE("open_memstream");
    if (malloc_info(0, fp) != 0) FAIL("malloc_info failed while threads run");
    fclose(fp);
    if (!text || !strstr(text, "</malloc>")) FAIL("malloc_info wrote: %s", text ? text : "");
    free(text);
#endif
    polls++;
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static void usage(void) {
  fprintf(stderr,
          "usage: stress [--mode random,prodcons,churn,relay,tls,fork|all] [--threads 1,2,4,...]\n"
          "              [--ops N] [--max-size BYTES] [--churn N] [--churn-par N]\n"
          "              [--forks N] [--fork-threads N] [--tls-threads N] [--tls-rounds N]\n"
          "              [--items N] [--relay-chains N] [--relay-ms N]\n"
          "              [--seed N] [--stats-poll 0|1]\n");
  exit(2);
}

static long num_arg(const char *s) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 0);
  if (errno || *end || v < 0) {
    fprintf(stderr, "stress: bad number '%s'\n", s);
    usage();
  }
  return v;
}

int main(int argc, char **argv) {
  /* Before this program's first malloc. */
  if (pthread_key_create(&key_early, tls_dtor)) DIE("pthread_key_create");
  setvbuf(stdout, NULL, _IONBF, 0);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) usage();
    i++;
    if (!strcmp(a, "--mode")) {
      char buf[128];
      snprintf(buf, sizeof buf, "%s", v);
      for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (!strcmp(tok, "random"))
          opt.modes |= M_RANDOM;
        else if (!strcmp(tok, "prodcons"))
          opt.modes |= M_PRODCONS;
        else if (!strcmp(tok, "churn"))
          opt.modes |= M_CHURN;
        else if (!strcmp(tok, "tls"))
          opt.modes |= M_TLS;
        else if (!strcmp(tok, "fork"))
          opt.modes |= M_FORK;
        else if (!strcmp(tok, "relay"))
          opt.modes |= M_RELAY;
        else if (!strcmp(tok, "all"))
          opt.modes |= M_ALL;
        else
          usage();
      }
    } else if (!strcmp(a, "--threads")) {
      char buf[128];
      snprintf(buf, sizeof buf, "%s", v);
      opt.nthreads_list = 0;
      for (char *tok = strtok(buf, ","); tok && opt.nthreads_list < 16; tok = strtok(NULL, ",")) {
        long n = num_arg(tok);
        if (n < 1 || n > 1024) usage();
        opt.threads[opt.nthreads_list++] = (int)n;
      }
    } else if (!strcmp(a, "--ops"))
      opt.ops = num_arg(v);
    else if (!strcmp(a, "--max-size"))
      opt.max_size = (size_t)num_arg(v);
    else if (!strcmp(a, "--churn"))
      opt.churn = (int)num_arg(v);
    else if (!strcmp(a, "--churn-par"))
      opt.churn_par = (int)num_arg(v);
    else if (!strcmp(a, "--forks"))
      opt.forks = (int)num_arg(v);
    else if (!strcmp(a, "--fork-threads"))
      opt.fork_threads = (int)num_arg(v);
    else if (!strcmp(a, "--tls-threads"))
      opt.tls_threads = (int)num_arg(v);
    else if (!strcmp(a, "--tls-rounds"))
      opt.tls_rounds = (int)num_arg(v);
    else if (!strcmp(a, "--items"))
      opt.pc_items = num_arg(v);
    else if (!strcmp(a, "--relay-chains"))
      opt.relay_chains = (int)num_arg(v);
    else if (!strcmp(a, "--relay-ms"))
      opt.relay_ms = num_arg(v);
    else if (!strcmp(a, "--seed"))
      opt.seed = (uint64_t)num_arg(v);
    else if (!strcmp(a, "--stats-poll"))
      opt.stats_poll = num_arg(v) != 0;
    else
      usage();
  }
  if (!opt.modes) opt.modes = M_ALL;
  if (opt.relay_chains < 1) opt.relay_chains = 1;
  if (opt.max_size < 16) opt.max_size = 16;
  if (opt.churn_par < 1) opt.churn_par = 1;
  if (opt.tls_rounds < 1 || opt.tls_rounds > PTHREAD_DESTRUCTOR_ITERATIONS) {
    fprintf(stderr, "stress: --tls-rounds must be 1..%d\n", PTHREAD_DESTRUCTOR_ITERATIONS);
    usage();
  }
  printf("stress (" T_API "names) seed %" PRIu64 "\n", opt.seed);
  pthread_t poller;
#ifndef USE_RILL_API
  if (!rill_class_stats_get || !rill_stats_get) opt.stats_poll = 0; /* not rill */
#endif
  if (opt.stats_poll && pthread_create(&poller, NULL, stats_poller, NULL)) DIE("pthread_create");
  if (opt.modes & M_TLS) mode_tls(); /* first: its early key predates the first malloc */
  if (opt.modes & M_RANDOM) mode_random();
  if (opt.modes & M_PRODCONS) mode_prodcons();
  if (opt.modes & M_CHURN) mode_churn();
  if (opt.modes & M_RELAY) mode_relay();
  if (opt.modes & M_FORK) mode_fork();
  if (opt.stats_poll) {
    atomic_store(&poll_stop, true);
    pthread_join(poller, NULL);
    printf("  statistics read %ld times while the modes ran\n", polls);
    if (!polls) FAIL("the statistics poller never ran");
  }
  return t_finish("stress");
}
