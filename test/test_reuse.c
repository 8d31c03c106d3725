/* test_reuse.c - proves how a thread heap reuses partly free spans: a listed span
 * with fewer free blocks than a sixteenth of the span (an emptiness threshold,
 * as in Hoard) is passed over for a fresh span and taken once it has enough, and one with an
 * eighth free (by its owner's frees or another thread's) is taken before one with a
 * sixteenth, and every listed span is looked at in turn; remote frees that
 * arrive while a span's local lists are in use (a thread's exit, an orphan's adoption) are neither
 * lost nor handed out twice; and a thread freeing an exited thread's blocks takes their spans
 * over, while a live thread's spans stay its own. */
#include <pthread.h>

#include "rill_test.h"

/* The sizes used here (256 and 96 B) have one-slot spans, which start at multiples of their
 * size: a block's span is its address divided by the span size. */
#define SPAN_BYTES T_SLOT_BYTES
_Static_assert(T_SPAN_BYTES(256) == SPAN_BYTES && T_SPAN_BYTES(96) == SPAN_BYTES,
               "test_reuse's sizes must have one-slot spans");

static void *xmalloc(size_t n) {
  void *p = rill_malloc(n);
  if (!p) DIE("rill_malloc(%zu) returned NULL", n);
  return p;
}

static uintptr_t span_of(const void *p) {
  return (uintptr_t)p / SPAN_BYTES;
}

/* ---- the reuse mark ----------------------------------------------------- */
#define A_SIZE  256
#define A_CAP   T_SPAN_CAP(A_SIZE)
#define A_MARK  (A_CAP / 16)
#define A_SPANS 4

/* A fresh thread fills A_SPANS spans in order; the last is its hot span. */
static void fill_spans(void **o) {
  for (size_t i = 0; i < A_SPANS * A_CAP; i++) o[i] = xmalloc(A_SIZE);
  for (size_t k = 0; k < A_SPANS; k++)
    if (span_of(o[k * A_CAP]) != span_of(o[k * A_CAP + A_CAP - 1]))
      DIE("span %zu is not contiguous; the test's premise is wrong", k);
}

static void *mark_case(void *arg) {
  (void)arg;
  static void *o[A_SPANS * A_CAP];
  fill_spans(o);
  /* the hot span is full; blocks back in each of the others re-list them,
   * one block short of the mark */
  for (size_t k = 0; k + 1 < A_SPANS; k++)
    for (size_t i = 0; i + 1 < A_MARK; i++) rill_free(o[k * A_CAP + i]);
  void *f = xmalloc(A_SIZE);
  int in_old = 0;
  for (size_t k = 0; k < A_SPANS; k++) in_old |= span_of(f) == span_of(o[k * A_CAP]);
  CHECK(!in_old,
        "a span with %d free blocks of %d was reused (malloc returned %p); a fresh span "
        "should have served it",
        A_MARK - 1, A_CAP, f);
  /* span 0 reaches the mark: it is taken when the fresh span runs out */
  rill_free(o[A_MARK - 1]);
  static void *g[A_CAP];
  size_t n = 0, from_fresh = 1;
  while (n < A_CAP) {
    g[n] = xmalloc(A_SIZE);
    if (span_of(g[n]) != span_of(f)) break;
    n++;
    from_fresh++;
  }
  CHECK(from_fresh == A_CAP, "the fresh span served %zu of %d blocks before another was taken",
        from_fresh, A_CAP);
  CHECK(n < A_CAP && span_of(g[n]) == span_of(o[0]),
        "once the fresh span was full, the span with %d free blocks (the mark) was not the "
        "next one used",
        A_MARK);
  if (n < A_CAP) n++;
  for (size_t i = 0; i < n; i++) rill_free(g[i]);
  rill_free(f);
  /* still live: span 0 from the mark, the next ones from one short of it, the last whole */
  for (size_t k = 0; k < A_SPANS; k++)
    for (size_t i = k == 0 ? A_MARK : k + 1 < A_SPANS ? A_MARK - 1 : 0; i < A_CAP; i++)
      rill_free(o[k * A_CAP + i]);
  return NULL;
}

/* ---- which listed span: an eighth free before a sixteenth ---------------- */
/* Two listed spans pass the mark: the lower-addressed one with a sixteenth
 * of its blocks free, the other with an eighth. The span change takes the
 * one with an eighth; the one with a sixteenth comes next, before a fresh
 * span (a span that served a few mallocs per change set the soak's p99).
 * With `remote` set, all but one of the eighth's blocks come back through
 * another thread's frees: a listed span's weight counts them once its
 * `check` says they are pending (list_pop reads the remote word only then). */
static void **tier_blocks;
static size_t tier_from, tier_to;
static void *tier_remote_free(void *arg) {
  (void)arg;
  for (size_t i = tier_from; i < tier_to; i++) rill_free(tier_blocks[i]);
  return NULL;
}

static void *tier_case(void *arg) {
  bool remote = arg != NULL;
  static void *o[A_SPANS * A_CAP];
  fill_spans(o);
  size_t lo = span_of(o[0]) < span_of(o[A_CAP]) ? 0 : 1, hi = 1 - lo;
  const size_t n_lo = A_CAP / 16 + 2, n_hi = A_CAP / 8 + 2; /* below / above an eighth */
  for (size_t i = 0; i < n_lo; i++) rill_free(o[lo * A_CAP + i]);
  for (size_t i = 0; i < (remote ? 1 : n_hi); i++) rill_free(o[hi * A_CAP + i]); /* lists it */
  if (remote) {
    tier_blocks = o;
    tier_from = hi * A_CAP + 1;
    tier_to = hi * A_CAP + n_hi;
    pthread_t t;
    if (pthread_create(&t, NULL, tier_remote_free, NULL) != 0) DIE("pthread_create failed");
    pthread_join(t, NULL);
  }
  static void *g[A_CAP];
  size_t n = 0;
  while (n < n_hi) g[n++] = xmalloc(A_SIZE);
  size_t in_hi = 0;
  for (size_t i = 0; i < n; i++) in_hi += span_of(g[i]) == span_of(o[hi * A_CAP]);
  CHECK(in_hi == n_hi,
        "the span with %zu free blocks of %d (an eighth; %s) served %zu of the next %zu "
        "mallocs; the lower-addressed one with %zu free (a sixteenth) should have waited",
        n_hi, A_CAP, remote ? "all but one freed by another thread" : "freed by its owner", in_hi,
        n_hi, n_lo);
  void *f = xmalloc(A_SIZE);
  CHECK(span_of(f) == span_of(o[lo * A_CAP]),
        "once the span with an eighth free was used up, the next malloc (%p) did not come "
        "from the span with a sixteenth free",
        f);
  for (size_t i = 0; i < n; i++) rill_free(g[i]);
  rill_free(f);
  for (size_t k = 0; k < A_SPANS; k++)
    for (size_t i = k == lo ? n_lo : k == hi ? n_hi : 0; i < A_CAP; i++)
      rill_free(o[k * A_CAP + i]);
  return NULL;
}

/* ---- every listed span in turn ----------------------------------------- */
/* T_SPANS - 2 listed spans with a sixteenth free each lie in front of one with
 * an eighth free (each span's first free by its owner lists it at the head).
 * A span change looks at eight and takes one; the others it looked at go to
 * the back, so the third change reaches the span with an eighth. When the
 * spans that passed stayed in front, every change looked at the same few:
 * the span with an eighth waited a dozen changes, and in RocksDB's
 * cache_bench spans further down a worker's list filled with free blocks
 * while the workers faulted in fresh ones. */
#define T_SPANS 21
static void *turn_case(void *arg) {
  (void)arg;
  static void *o[T_SPANS * A_CAP];
  for (size_t i = 0; i < T_SPANS * A_CAP; i++) o[i] = xmalloc(A_SIZE);
  for (size_t k = 0; k < T_SPANS; k++)
    if (span_of(o[k * A_CAP]) != span_of(o[k * A_CAP + A_CAP - 1]))
      DIE("span %zu is not contiguous; the test's premise is wrong", k);
  const size_t n0 = A_CAP / 8 + 1, n1 = A_CAP / 16;
  for (size_t i = 0; i < n0; i++) rill_free(o[i]); /* span 0: listed first, so last */
  for (size_t k = 1; k + 1 < T_SPANS; k++)
    for (size_t i = 0; i < n1; i++) rill_free(o[k * A_CAP + i]);
  /* the last span, hot, is full: each change takes a span with n1 free
   * until the look reaches span 0 */
  enum { TRIES = 3 * A_CAP / 16 };
  static void *g[TRIES];
  size_t n = 0, at = 0;
  while (n < TRIES && !at) {
    g[n] = xmalloc(A_SIZE);
    if (span_of(g[n]) == span_of(o[0])) at = n + 1;
    n++;
  }
  CHECK(at != 0,
        "behind %d listed spans with %zu free blocks each, the span with %zu of %d free "
        "served none of the next %d mallocs (three span changes)",
        T_SPANS - 2, n1, n0, A_CAP, (int)TRIES);
  for (size_t i = 0; i < n; i++) rill_free(g[i]);
  for (size_t k = 0; k < T_SPANS; k++)
    for (size_t i = k == 0 ? n0 : k + 1 < T_SPANS ? n1 : 0; i < A_CAP; i++)
      rill_free(o[k * A_CAP + i]);
  return NULL;
}

/* ---- remote frees while both local lists are in use --------------------- */
/* A fills half a span S and frees a few blocks itself; B frees 20 remotely,
 * which A's rill_collect(true) takes onto S's second local list. B frees 30
 * more, which stay pending on S since both local lists are in use, and A
 * exits: S goes to the orphanage with its remote list pending. C adopts S.
 * C must get every free block of S exactly once: the ones A freed, the
 * never-used rest, and both batches of B's. (Had B freed into S after A's
 * exit, B would have taken S over at its first free.) */
#define B_SIZE 96
#define B_CAP  T_SPAN_CAP(B_SIZE)
#define B_HALF (B_CAP / 2)
static void *objs[B_HALF];
static pthread_barrier_t bar;

static void *b_owner(void *arg) {
  (void)arg;
  for (size_t i = 0; i < B_HALF; i++) objs[i] = xmalloc(B_SIZE);
  if (span_of(objs[0]) != span_of(objs[B_HALF - 1]))
    DIE("the owner's blocks span two spans; the test's premise is wrong");
  for (size_t i = 0; i < 10; i++) rill_free(objs[i]); /* local list in use */
  pthread_barrier_wait(&bar);
  pthread_barrier_wait(&bar); /* B freed 20 remotely */
  rill_collect(true);         /* they go to S's second local list */
  pthread_barrier_wait(&bar);
  pthread_barrier_wait(&bar); /* B freed 30 more: they wait on S */
  return NULL;
}

static void *b_remote(void *arg) {
  size_t from = (size_t)(uintptr_t)arg;
  for (size_t i = from; i < from + (from == 10 ? 20 : 30); i++) rill_free(objs[i]);
  return NULL;
}

static void *b_adopter(void *arg) {
  void **got = arg;
  for (size_t i = 0; i <= B_CAP; i++) got[i] = xmalloc(B_SIZE);
  return NULL;
}

static void run(void *(*fn)(void *), void *arg) {
  pthread_t t;
  pthread_create(&t, NULL, fn, arg);
  pthread_join(t, NULL);
}

static void *wait_bar(void *arg) {
  pthread_barrier_wait(&bar);
  return arg;
}

static void pending_case(void) {
  /* the C library keeps the stacks of exited threads, each with a block it
   * allocated: two threads run at once below, so two run first */
  pthread_barrier_init(&bar, NULL, 2);
  pthread_t w[2];
  for (int i = 0; i < 2; i++) pthread_create(&w[i], NULL, wait_bar, NULL);
  for (int i = 0; i < 2; i++) pthread_join(w[i], NULL);
  pthread_barrier_destroy(&bar);
  struct rill_stats s0;
  rill_stats_get(&s0);
  pthread_barrier_init(&bar, NULL, 2);
  pthread_t a;
  pthread_create(&a, NULL, b_owner, NULL);
  pthread_barrier_wait(&bar);
  run(b_remote, (void *)(uintptr_t)10); /* objs[10..30) */
  pthread_barrier_wait(&bar);
  pthread_barrier_wait(&bar);
  run(b_remote, (void *)(uintptr_t)30); /* objs[30..60) */
  pthread_barrier_wait(&bar);
  pthread_join(a, NULL); /* S orphaned */
  static void *got[B_CAP + 1];
  run(b_adopter, got);

  /* S had B_CAP - (B_HALF - 60) free blocks: C's first ones must be exactly those */
  size_t want = B_CAP - (B_HALF - 60), in_s = 0;
  uintptr_t s = span_of(objs[0]);
  while (in_s < B_CAP + 1 && span_of(got[in_s]) == s) in_s++;
  CHECK(in_s == want,
        "the adopter got %zu blocks of the orphaned span before moving on; it had "
        "%zu free (10 local, 20 remote taken by a collect, 30 remote pending, %d never "
        "used)",
        in_s, want, B_CAP - B_HALF);
  for (size_t i = 0; i < in_s; i++) {
    for (size_t j = 60; j < B_HALF; j++)
      if (got[i] == objs[j]) {
        FAIL("block %p handed out while still live", got[i]);
        break;
      }
    for (size_t j = 0; j < i; j++)
      if (got[i] == got[j]) {
        FAIL("block %p handed out twice", got[i]);
        break;
      }
  }
  for (size_t i = 0; i <= B_CAP; i++) rill_free(got[i]);
  for (size_t i = 60; i < B_HALF; i++) rill_free(objs[i]);
  pthread_barrier_destroy(&bar);
  struct rill_stats s1;
  rill_stats_get(&s1);
  CHECK(s1.bytes_in_use == s0.bytes_in_use,
        "bytes in use %llu after everything was freed, %llu before: a block was lost",
        (unsigned long long)s1.bytes_in_use, (unsigned long long)s0.bytes_in_use);
}

/* ---- frees into spans nobody allocates from ------------------------------ */
/* A fills C_SPANS spans and exits: they float, full, their owner gone. The
 * first free by D into each takes the span over, so D's other frees into it
 * are its own, without the remote word: the remote-free count must not grow
 * by a block per free. A live owner's floating spans stay its own: frees
 * into them by another thread are remote, one each. */
#define C_SIZE  256
#define C_CAP   T_SPAN_CAP(C_SIZE)
#define C_SPANS 4
static void *c_objs[C_SPANS * C_CAP];

static void *c_fill(void *arg) {
  for (size_t i = 0; i < C_SPANS * C_CAP; i++) c_objs[i] = xmalloc(C_SIZE);
  for (size_t k = 0; k < C_SPANS; k++)
    if (span_of(c_objs[k * C_CAP]) != span_of(c_objs[k * C_CAP + C_CAP - 1]))
      DIE("span %zu is not contiguous; the test's premise is wrong", k);
  if (arg) { /* stay alive while the other thread frees */
    pthread_barrier_wait(&bar);
    pthread_barrier_wait(&bar);
  }
  return NULL;
}

static void *c_free(void *arg) {
  size_t n = (size_t)(uintptr_t)arg;
  for (size_t i = 0; i < n; i++) rill_free(c_objs[i]);
  return NULL;
}

static uint64_t remote_frees(void) {
  struct rill_stats s;
  rill_stats_get(&s);
  return s.remote_frees;
}

/* Holds a heap (the exited thread's record, reused last in, first out) until released, so
 * that the freeing thread does not get that record and with it the spans as its own. */
static void *c_hold(void *arg) {
  (void)arg;
  rill_free(xmalloc(C_SIZE));
  pthread_barrier_wait(&bar);
  pthread_barrier_wait(&bar);
  return NULL;
}

static void inherit_case(void) {
  struct rill_stats s0, s1;
  rill_stats_get(&s0);
  run(c_fill, NULL);
  pthread_barrier_init(&bar, NULL, 2);
  pthread_t holder;
  pthread_create(&holder, NULL, c_hold, NULL);
  pthread_barrier_wait(&bar);
  uint64_t r0 = remote_frees();
  run(c_free, (void *)(uintptr_t)(C_SPANS * C_CAP));
  uint64_t r1 = remote_frees();
  pthread_barrier_wait(&bar);
  pthread_join(holder, NULL);
  pthread_barrier_destroy(&bar);
  CHECK(r1 - r0 <= C_SPANS,
        "freeing %d blocks of an exited thread's %d full spans made %llu remote frees; the "
        "first free into each span should take it over",
        C_SPANS * C_CAP, C_SPANS, (unsigned long long)(r1 - r0));
  rill_stats_get(&s1);
  CHECK(s1.bytes_in_use == s0.bytes_in_use && s1.spans_floating == s0.spans_floating,
        "after the exited thread's blocks were freed: %llu bytes in use (%llu before), %llu "
        "floating spans (%llu before)",
        (unsigned long long)s1.bytes_in_use, (unsigned long long)s0.bytes_in_use,
        (unsigned long long)s1.spans_floating, (unsigned long long)s0.spans_floating);

  pthread_barrier_init(&bar, NULL, 2);
  pthread_t a;
  pthread_create(&a, NULL, c_fill, &bar);
  pthread_barrier_wait(&bar);
  r0 = remote_frees();
  run(c_free, (void *)(uintptr_t)(2 * C_CAP)); /* two full spans of a live owner */
  r1 = remote_frees();
  CHECK(r1 - r0 == 2 * C_CAP,
        "freeing %d blocks of a live thread's full spans made %llu remote frees; the spans "
        "should have stayed the owner's",
        2 * C_CAP, (unsigned long long)(r1 - r0));
  pthread_barrier_wait(&bar);
  pthread_join(a, NULL);
  pthread_barrier_destroy(&bar);
  for (size_t i = 2 * C_CAP; i < C_SPANS * C_CAP; i++) rill_free(c_objs[i]);
  rill_stats_get(&s1);
  CHECK(s1.bytes_in_use == s0.bytes_in_use,
        "bytes in use %llu after everything was freed, %llu before",
        (unsigned long long)s1.bytes_in_use, (unsigned long long)s0.bytes_in_use);
}

int main(void) {
  run(mark_case, NULL);
  run(tier_case, NULL);
  run(tier_case, (void *)1); /* the eighth freed by another thread */
  run(turn_case, NULL);
  pending_case();
  inherit_case();
  return t_finish("test_reuse");
}
