/* test_eager.c - proves scalloc's eager return for reusable spans: a span on
 * its owner's reusable list goes back to the global pool (or to the free
 * runs it was cut from) the moment its last block is freed, whether another
 * thread or the owner frees it, and while the owner sits idle (no later
 * allocation needed). Also races owner and remote frees over many spans and
 * checks no empty span is left behind, and that a span orphaned by an
 * exited thread goes back at its last free too. */
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>

#include "rill_test.h"

static pthread_barrier_t bar;
static void **objs;
static size_t nobj, cap, size;
/* --batch: the freer keeps running while the owner looks at its kept frees,
 * since a thread that waits may have its batch pushed by the purger
 * meanwhile (heap_lend); they step through an atomic counter. */
static _Atomic unsigned step;

static struct rill_stats snap(void) {
  struct rill_stats s;
  rill_stats_get(&s);
  return s;
}

/* Spans of the class of `size` that hold blocks or are listed (any state but
 * FREE). An emptied span leaves this count when it goes back, whether to
 * the pool (spans_free + 1) or, if it was cut from a free run, to the runs,
 * where it merges with its free neighbours (spans_free may not move). */
static uint64_t class_spans(void) {
  struct rill_class_stats rows[128];
  size_t n = rill_class_stats_get(rows, 128);
  for (size_t i = 0; i < n && i < 128; i++)
    if (rows[i].block_size == size) return rows[i].spans;
  return 0;
}

/* Span k holds objs[k*cap .. (k+1)*cap): a fresh thread fills spans in order. */
static void fill(void) {
  for (size_t i = 0; i < nobj; i++) {
    objs[i] = rill_malloc(size);
    if (!objs[i]) DIE("rill_malloc(%zu) returned NULL", size);
  }
  for (size_t k = 0; k + 1 < nobj / cap; k++) {
    uintptr_t a = (uintptr_t)objs[k * cap], z = (uintptr_t)objs[(k + 1) * cap - 1];
    if (z - a != (cap - 1) * size) DIE("span %zu of size %zu is not contiguous", k, size);
  }
}

/* The array of block pointers lives outside rill: main waits in pthread_join while the
 * threads count spans, and the purger lends an idle thread's hot spans, so the array's own
 * span would be counted as reusable (a listed loan with a block out). */
static void objs_new(void) {
  objs =
      mmap(NULL, nobj * sizeof *objs, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (objs == MAP_FAILED) DIE("mmap of %zu pointers failed", nobj);
}
static void objs_drop(void) {
  munmap(objs, nobj * sizeof *objs);
}

/* Runs two threads over objs[0..nobj) (size and cap set by the caller), first
 * started first, with a fresh two-party barrier. */
static void run_two(void *(*first)(void *), void *(*second)(void *)) {
  objs_new();
  atomic_store(&step, 0);
  pthread_barrier_init(&bar, NULL, 2);
  pthread_t a, b;
  pthread_create(&a, NULL, first, NULL);
  pthread_create(&b, NULL, second, NULL);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  pthread_barrier_destroy(&bar);
  objs_drop();
}

static void free_range(size_t from, size_t to) {
  for (size_t i = from; i < to; i++) rill_free(objs[i]);
}

/* --batch, run with RILL_REMOTE_BATCH=1: a thread keeps its remote frees of
 * blocks up to BATCH_BSIZE and pushes them BATCH_N at a time (src/heap.c,
 * "remote frees in batches"), or at its rill_collect, its exit, or the
 * purger's look while it waits. So a span its frees empty goes back at the
 * push, not at once; this mode checks both halves of that. */
#define T_BATCH_N     64   /* BATCH_N */
#define T_BATCH_BSIZE 1024 /* BATCH_BSIZE */
static bool batch;

static void spin_until(unsigned s) {
  while (atomic_load(&step) < s) {
  }
}

/* Would the last of n remote frees of `size` blocks still be kept? */
static bool batch_keeps(size_t n) {
  return batch && size <= T_BATCH_BSIZE && n % T_BATCH_N != 0;
}

/* Thread B: the remote freer, driven step by step by the owner. */
static void *remote(void *arg) {
  (void)arg;
  pthread_barrier_wait(&bar); /* step 1: empty span 0 (owner freed its first block) */
  free_range(1, cap);
  if (batch) {
    atomic_store(&step, 1);
    spin_until(2);       /* the owner saw the span kept */
    rill_collect(false); /* pushes this thread's batch */
  }
  pthread_barrier_wait(&bar);
  pthread_barrier_wait(&bar); /* step 2: all of span 1 but its last block */
  free_range(cap, 2 * cap - 2);
  if (batch) rill_collect(false);
  pthread_barrier_wait(&bar);
  return NULL;
}

static void *owner(void *arg) {
  (void)arg;
  fill();                           /* spans 0 and 1 full (floating), span 2 hot */
  rill_free(objs[0]);               /* owner frees into span 0: it becomes reusable */
  rill_free(objs[2 * cap - 1 - 1]); /* and into span 1 */
  struct rill_stats s0 = snap();
  uint64_t c0 = class_spans();
  pthread_barrier_wait(&bar);
  if (batch) {
    spin_until(1); /* B freed the rest of span 0, and keeps the last frees */
    struct rill_stats k = snap();
    if (batch_keeps(cap - 1))
      CHECK(k.spans_reusable == s0.spans_reusable && class_spans() == c0,
            "--batch: size %zu: span 0 went back before its freer pushed its batch "
            "(reusable %llu -> %llu): are remote frees kept (RILL_REMOTE_BATCH=1)?",
            size, (unsigned long long)s0.spans_reusable, (unsigned long long)k.spans_reusable);
    atomic_store(&step, 2);
  }
  pthread_barrier_wait(&bar); /* B freed the rest of span 0; this thread did nothing */
  struct rill_stats s1 = snap();
  uint64_t c1 = class_spans();
  CHECK(s1.spans_reusable + 1 == s0.spans_reusable && c1 + 1 == c0,
        "size %zu: span emptied by remote frees not pooled at once "
        "(reusable %llu -> %llu, the class's spans %llu -> %llu)",
        size, (unsigned long long)s0.spans_reusable, (unsigned long long)s1.spans_reusable,
        (unsigned long long)c0, (unsigned long long)c1);
  pthread_barrier_wait(&bar);
  pthread_barrier_wait(&bar); /* B freed span 1 but objs[2cap-1] (objs[2cap-2] was ours) */
  struct rill_stats s2 = snap();
  CHECK(s2.spans_reusable == s1.spans_reusable, "size %zu: span 1 left the list too early", size);
  uint64_t c2 = class_spans();
  rill_free(objs[2 * cap - 1]); /* the owner frees the last block */
  struct rill_stats s3 = snap();
  CHECK(s3.spans_reusable + 1 == s2.spans_reusable && class_spans() + 1 == c2,
        "size %zu: span emptied by its owner's last free not pooled at once", size);
  free_range(2 * cap, nobj);
  return NULL;
}

/* ---- race: owner and remote frees interleaved over many reusable spans -- */
/* The owner's last free into a listed span and a remote free of its other
 * last block can miss each other: each writes its own counter and then reads
 * the other's without a fence on the owner's side (a store-buffering race;
 * docs/design.md, "Eager return"). Such a span is not pooled at once but
 * stays, empty and reusable, on its owner's list; rill_collect from any
 * thread finds it (here the remote thread's, while the owner waits). This
 * asserts that guarantee, and counts the misses. With --purger nobody
 * collects: the owner sits idle, never changing span again, and the purger
 * thread's passes must find the span (heap_sweep_all). */
#define RACE_SPANS 24
static unsigned race_missed, race_rounds, race_wait_ms;
static bool by_purger;
static void *race_remote(void *arg) {
  (void)arg;
  pthread_barrier_wait(&bar);
  for (size_t i = 1; i < nobj; i += 2) rill_free(objs[i]);
  if (batch) rill_collect(false); /* its last frees, kept, before the owner counts */
  pthread_barrier_wait(&bar);
  pthread_barrier_wait(&bar); /* the owner has counted the misses */
  if (!by_purger) rill_collect(false);
  pthread_barrier_wait(&bar); /* the owner exits only after this, so nothing is orphaned */
  return NULL;
}

/* The owner's early free into span k: an even index (the owner's half) near
 * the span's end (a coloured class's cap is odd: test/rill_test.h). */
static size_t race_pick(size_t k) {
  size_t j = k * cap + cap - 2;
  return j & 1 ? j - 1 : j;
}

static void *race_owner(void *arg) {
  (void)arg;
  fill();
  for (size_t k = 0; k < RACE_SPANS; k++) rill_free(objs[race_pick(k)]);
  pthread_barrier_wait(&bar);
  for (size_t i = 0; i < nobj; i += 2)
    if (i / cap >= RACE_SPANS || i != race_pick(i / cap)) rill_free(objs[i]);
  pthread_barrier_wait(&bar);
  struct rill_stats s = snap(); /* before exit: the owner's hot span is its only one */
  race_rounds++;
  race_missed += (unsigned)s.spans_reusable;
  CHECK(s.spans_floating == 0, "size %zu: %llu floating spans left after every block was freed",
        size, (unsigned long long)s.spans_floating);
  pthread_barrier_wait(&bar);
  pthread_barrier_wait(&bar); /* the other thread's rill_collect ran */
  s = snap();
  /* idle: no allocation, so no span change that would sweep this heap's lists */
  for (unsigned ms = 0; by_purger && s.spans_reusable && ms < 10000; ms++, race_wait_ms++) {
    nanosleep(&(struct timespec){0, 1000000}, NULL);
    s = snap();
  }
  CHECK(s.spans_reusable == 0 && s.spans_floating == 0,
        "size %zu: %llu reusable and %llu floating spans left after every block was freed and "
        "%s",
        size, (unsigned long long)s.spans_reusable, (unsigned long long)s.spans_floating,
        by_purger ? "the owner waited 10 s for the purger" : "another thread collected");
  return NULL;
}

/* ---- orphans: a span left by an exited thread goes back at its last free */
static void *orphan_maker(void *arg) {
  (void)arg;
  fill();
  free_range(0, cap / 2); /* span 0 half free: at exit it is orphaned, not floated */
  free_range(cap, nobj);  /* everything else back: span 1 and the hot span pool */
  return NULL;
}

static void orphan_case(void) {
  size = 128;
  cap = T_SPAN_CAP(size);
  nobj = 2 * cap;
  objs_new();
  pthread_t t;
  pthread_create(&t, NULL, orphan_maker, NULL);
  pthread_join(t, NULL);
  struct rill_stats s0 = snap();
  CHECK(s0.spans_reusable >= 1, "orphan: the exited thread's half-free span is not reusable");
  free_range(cap / 2, cap - 1);
  struct rill_stats s1 = snap();
  CHECK(s1.spans_reusable == s0.spans_reusable, "orphan: pooled before its last free");
  rill_free(objs[cap - 1]);
  struct rill_stats s2 = snap();
  CHECK(s2.spans_reusable + 1 == s1.spans_reusable && s2.spans_free == s1.spans_free + 1,
        "orphan: span emptied after its owner exited not pooled at once "
        "(reusable %llu -> %llu, free %llu -> %llu)",
        (unsigned long long)s1.spans_reusable, (unsigned long long)s2.spans_reusable,
        (unsigned long long)s1.spans_free, (unsigned long long)s2.spans_free);
  objs_drop();
}

/* ---- --batch: kept remote frees pushed at the freer's exit, or by the purger */
/* The owner (this thread) frees the first block of span 0, so it is listed;
 * the freer frees the rest and keeps the last of them. With `idle` the
 * freer then waits, and the purger must push its batch (--batch-idle, with
 * RILL_PURGE_THREAD=1; --batch-idle-control, without the purger, shows the
 * batch stays while the freer waits); else it exits, and its exit pushes
 * them. */
static bool idle, idle_control;
static void *batch_freer(void *arg) {
  (void)arg;
  free_range(1, cap);
  atomic_store(&step, 1);
  spin_until(2);                        /* the owner looks: kept */
  if (idle) pthread_barrier_wait(&bar); /* waits, while the owner waits for the purger */
  return NULL;
}

static void batch_case(void) {
  size = 64;
  cap = T_SPAN_CAP(size);
  nobj = 2 * cap;
  objs_new();
  pthread_barrier_init(&bar, NULL, 2);
  fill();
  rill_free(objs[0]);
  struct rill_stats s0 = snap();
  uint64_t c0 = class_spans();
  pthread_t t;
  atomic_store(&step, 0);
  pthread_create(&t, NULL, batch_freer, NULL);
  spin_until(1);
  struct rill_stats s1 = snap();
  if (batch_keeps(cap - 1))
    CHECK(s1.spans_reusable == s0.spans_reusable && class_spans() == c0,
          "--batch: span 0 went back while its freer still kept its last frees");
  atomic_store(&step, 2);
  /* a span of its own emptied into the pool: the purger wakes for it */
  void *big = rill_malloc(256 * 1024);
  rill_free(big);
  unsigned waited = 0;
  if (idle) {
    for (; class_spans() == c0 && waited < (idle_control ? 500 : 10000); waited++)
      nanosleep(&(struct timespec){0, 1000000}, NULL);
    if (idle_control)
      CHECK(class_spans() == c0,
            "--batch-idle-control: span 0 went back while its freer waited with no purger "
            "thread: the test does not show what pushes the batch");
    pthread_barrier_wait(&bar);
  }
  pthread_join(t, NULL);
  struct rill_stats s2 = snap();
  CHECK(s2.spans_reusable + 1 == s0.spans_reusable && class_spans() + 1 == c0,
        "--batch: span 0 not back after its freer %s (reusable %llu -> %llu)",
        idle && !idle_control ? "waited 10 s with the purger running" : "exited",
        (unsigned long long)s0.spans_reusable, (unsigned long long)s2.spans_reusable);
  if (idle && !idle_control)
    printf("batch: the purger pushed an idle thread's batch within %u ms\n", waited);
  free_range(cap, nobj);
  pthread_barrier_destroy(&bar);
  objs_drop();
}

/* ---- missed: spans that lost the race, while their owner sits idle ------ */
/* Linked with a build whose owner frees lose every eager-return race
 * (RILL_TEST_MISS_EAGER), the owner empties MISSED spans by its own frees and
 * then sits idle: the spans stay listed, empty. A remote thread empties one
 * more span meanwhile, which goes to the pool as usual and so wakes the
 * purger. With the purger (--missed) its passes must pool the idle owner's
 * spans; without it (--missed-control, RILL_PURGE_THREAD=0) they stay until
 * the owner changes span again, which shows what pooled them. */
#define MISSED 8
static void *missed_remote(void *arg) {
  (void)arg;
  pthread_barrier_wait(&bar);
  free_range(MISSED * cap, (MISSED + 1) * cap); /* a floating span, emptied remotely */
  pthread_barrier_wait(&bar);
  return NULL;
}

static void *missed_owner(void *arg) {
  (void)arg;
  fill(); /* spans 0..MISSED full and floating, the last block's span hot */
  free_range(0, MISSED * cap);
  struct rill_stats s = snap();
  if (s.spans_reusable < MISSED)
    DIE("--missed: only %llu listed spans after the owner emptied %d: is this the "
        "RILL_TEST_MISS_EAGER build?",
        (unsigned long long)s.spans_reusable, MISSED);
  pthread_barrier_wait(&bar);
  pthread_barrier_wait(&bar); /* the remote thread pooled its span */
  unsigned waited = 0;        /* idle: no allocation, so no span change */
  for (unsigned limit = by_purger ? 10000 : 1000; s.spans_reusable && waited < limit; waited++) {
    nanosleep(&(struct timespec){0, 1000000}, NULL);
    s = snap();
  }
  if (by_purger) {
    CHECK(s.spans_reusable == 0,
          "--missed: %llu of %d empty listed spans still listed after "
          "their owner sat idle %u ms with the purger running",
          (unsigned long long)s.spans_reusable, MISSED, waited);
    if (!s.spans_reusable)
      printf("missed: the purger pooled an idle owner's %d empty listed spans within %u ms\n",
             MISSED, waited);
  } else {
    CHECK(s.spans_reusable >= MISSED,
          "--missed-control: the empty listed spans went without "
          "a purger (%llu left): the test does not show what pools them",
          (unsigned long long)s.spans_reusable);
    printf("missed-control: %llu listed spans after %u ms idle without a purger\n",
           (unsigned long long)s.spans_reusable, waited);
  }
  return NULL;
}

static void missed_case(void) {
  size = 256;
  cap = T_SPAN_CAP(size);
  nobj = (MISSED + 1) * cap + 1;
  run_two(missed_remote, missed_owner);
}

/* The purger thread is started from this thread, which stays, so what
 * pthread_create allocates for it does not sit on a race thread's span,
 * listed on the orphanage once that thread exits. It starts at a slow path
 * once the pool holds pages, by default only in a process that has run a
 * second thread. */
static void *one_malloc(void *arg) {
  (void)arg;
  rill_free(rill_malloc(64));
  return NULL;
}

static void start_purger(void) {
  bool blocked;
  pthread_t t;
  pthread_create(&t, NULL, one_malloc, NULL);
  pthread_join(t, NULL);
  for (size_t i = 0; i < 100 && t_purger_threads(&blocked) == 0; i++) {
    void *p[512];
    for (int k = 0; k < 512; k++) p[k] = rill_malloc(256);
    for (int k = 0; k < 512; k++) rill_free(p[k]);
    rill_collect(false);                   /* the emptied spans go to the pool */
    rill_free(rill_malloc(2000 + i * 64)); /* a class's first malloc: a slow path */
  }
  if (by_purger && t_purger_threads(&blocked) != 1)
    DIE("--purger: no purger thread (RILL_PURGE_THREAD=1?)");
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  by_purger = strcmp(mode, "--purger") == 0 || strcmp(mode, "--missed") == 0;
  batch = strncmp(mode, "--batch", 7) == 0;
  idle = strncmp(mode, "--batch-idle", 12) == 0;
  idle_control = strcmp(mode, "--batch-idle-control") == 0;
  start_purger();
  if (batch) batch_case();
  if (idle) return t_finish("test_eager");
  if (strncmp(mode, "--missed", 8) == 0) {
    missed_case();
    return t_finish("test_eager");
  }
  if (!by_purger) orphan_case();
  size_t sizes[] = {48, 1024, 4096};
  for (int t = 0; t < (by_purger ? 0 : 3); t++) {
    size = sizes[t];
    cap = T_SPAN_CAP(size);
    nobj = 3 * cap - cap / 2;
    run_two(owner, remote);
  }
  /* the race, many times: afterwards no span may sit empty on a reusable list */
  for (int r = 0; r < 200; r++) {
    size = r % 2 ? 64 : 256;
    cap = T_SPAN_CAP(size);
    nobj = RACE_SPANS * cap + 1;
    run_two(race_remote, race_owner);
    if (atomic_load(&t_failures)) break;
  }
  printf("race: %u of %u emptied listed spans missed eager return (%s pooled them)\n", race_missed,
         race_rounds * RACE_SPANS, by_purger ? "the purger thread" : "another thread's collect");
  if (by_purger) printf("race: the idle owners waited %u ms in all for the purger\n", race_wait_ms);
  return t_finish("test_eager");
}
