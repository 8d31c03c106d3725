/* test_stash.c - proves the heap's stash (src/heap.c): a span that the
 * owner's own frees emptied is the thread's next span of its order, the most
 * recently emptied first; and a stash never strands pages: the spans an idle
 * thread stashed reach the pool and are purged, by the purger thread or, with
 * none, by another thread's span changes on the beat of the timed passes.
 *
 *   test_stash reuse   the next span is the one emptied last
 *   test_stash rewarm  back for its own class, it keeps the list its frees
 *                      built (nothing is carved again)
 *   test_stash scrambled  unless they freed it in random order: then it is
 *                      carved afresh, its blocks in address order
 *   test_stash idle    an idle thread's stash is purged (run it with the
 *                      purger: the default, since the test is multithreaded)
 *   test_stash beat    the same with RILL_PURGE_THREAD=0, while the main
 *                      thread allocates and frees in spans of another order
 *   test_stash steal   a thread that would take never-used memory takes an
 *                      idle thread's stashed spans first (run it with a
 *                      long delay, so no beat hands them to the pool)
 *   test_stash busy    but not those of a thread that keeps using its stash
 *
 * CTest runs the last two with RILL_PURGE_DELAY_MS=100. */
#include <pthread.h>
#include <semaphore.h>
#include <sys/mman.h>
#include <time.h>

#include "rill_test.h"

#define SMALL 128   /* a class whose spans are one 16 KiB slot, its first block at the start */
#define OTHER 400   /* a class whose spans are two slots */
#define SPAN  16384 /* bytes of a SMALL span */
/* spans a worker fills and empties: well inside the stash (128 slots), and
 * past the 1 MiB of growth that starts the purger thread (purger_start_slow):
 * the idle worker allocates nothing after its frees, and frees never start it */
#define NSPANS 80

static sem_t filled, done;
static uintptr_t emptied[NSPANS + 1]; /* an address inside each span the worker emptied */
static size_t nemptied;

static void sleep_ms(unsigned ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* Fills NSPANS + 1 spans with SMALL blocks and frees all of them, in address
 * order: the owner's own frees empty each, the hot one last (it is let go
 * too: hot_emptied). Records one page of each emptied span. */
static void fill_and_empty(void) {
  size_t per = SPAN / SMALL, n = per * (NSPANS + 1);
  void **o = malloc(n * sizeof *o);
  if (!o) DIE("malloc failed");
  for (size_t i = 0; i < n; i++) {
    o[i] = keep(malloc(SMALL));
    if (!o[i]) DIE("malloc(%d) failed", SMALL);
    memset(o[i], 0x6b, SMALL);
  }
  nemptied = 0;
  for (size_t i = 0; i < n; i++) {
    uintptr_t a = (uintptr_t)o[i];
    if (i % per == 0 && nemptied <= NSPANS && (a & (SPAN - 1)) == 0) emptied[nemptied++] = a;
    free(o[i]);
  }
  free(o);
}

/* The stashed spans' pages that are still resident. */
static size_t resident_pages(void) {
  size_t n = 0;
  for (size_t i = 0; i < nemptied; i++) {
    unsigned char v[SPAN / 4096];
    size_t pages = SPAN / page_size() ? SPAN / page_size() : 1;
    if (mincore((void *)emptied[i], SPAN, v) != 0) DIE("mincore failed");
    for (size_t k = 0; k < pages; k++) n += v[k] & 1;
  }
  return n;
}

static void *worker(void *arg) {
  (void)arg;
  fill_and_empty();
  sem_post(&filled);
  sem_wait(&done); /* idle, with its stash, until main has looked */
  return NULL;
}

/* The next span of the order is the one emptied last, not the pool's
 * lowest address (which is where a span went before the stash). */
static void *reuse(void *arg) {
  (void)arg;
  fill_and_empty();
  CHECK(nemptied >= 2, "only %zu spans recorded", nemptied);
  /* another class of the same order (224 B) takes a new span */
  char *p = keep(malloc(200));
  uintptr_t last = emptied[nemptied - 1], span = (uintptr_t)p & ~(uintptr_t)(SPAN - 1);
  CHECK(span == last, "the next span is %#lx, not the one emptied last (%#lx; first %#lx)",
        (unsigned long)span, (unsigned long)last, (unsigned long)emptied[0]);
  free(p);
  return NULL;
}

/* Back for its own class, the span keeps the list its frees built: the
 * first block handed out is the one freed last (the span's highest), not
 * its first (a formatted span is carved from the bottom). */
static void *rewarm(void *arg) {
  (void)arg;
  fill_and_empty(); /* the hot span went to the stash last */
  char *p = keep(malloc(SMALL));
  uintptr_t last = emptied[nemptied - 1];
  CHECK((uintptr_t)p == last + SPAN - SMALL,
        "the stashed span came back at %#lx, not at its last freed block %#lx (span %#lx)",
        (unsigned long)p, (unsigned long)(last + SPAN - SMALL), (unsigned long)last);
  free(p);
  return NULL;
}

/* Freed in random order, a stashed span's list would hand out its blocks
 * scattered over the span (a list built next, walked in allocation order,
 * misses at every node: the locality benchmark at 100% lists ran 1.8x
 * mimalloc's time). Such a span is carved afresh: its blocks come out
 * neighbour after neighbour again. */
static void *scrambled(void *arg) {
  (void)arg;
  size_t per = SPAN / SMALL, n = per * NSPANS, next = 0;
  void **o = malloc(n * sizeof *o);
  if (!o) DIE("malloc failed");
  for (size_t i = 0; i < n; i++) o[i] = keep(malloc(SMALL));
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = n - 1; i > 0; i--) { /* shuffle, then free in that order */
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    size_t j = (size_t)(x % (i + 1));
    void *t = o[i];
    o[i] = o[j];
    o[j] = t;
  }
  for (size_t i = 0; i < n; i++) free(o[i]);
  for (size_t i = 0; i < n; i++) o[i] = keep(malloc(SMALL));
  for (size_t i = 1; i < n; i++) next += (uintptr_t)o[i] == (uintptr_t)o[i - 1] + SMALL;
  printf("  %zu of %zu blocks follow their predecessor after frees in random order\n", next, n - 1);
  CHECK(next * 10 >= (n - 1) * 9,
        "after %zu blocks were freed in random order, only %zu of the next %zu followed the "
        "block before them: stashed spans handed out their scrambled lists",
        n, next, n);
  for (size_t i = 0; i < n; i++) free(o[i]);
  free(o);
  return NULL;
}

/* The worker, busy: between main's span changes it takes a span from its
 * stash and stashes it again (2 * per blocks: its hot span, then one more). */
static sem_t go, cycled;
static void *busy_worker(void *arg) {
  (void)arg;
  fill_and_empty();
  sem_post(&filled);
  size_t per = SPAN / SMALL;
  void *o[2 * SPAN / SMALL];
  for (;;) {
    sem_wait(&go);
    if (!nemptied) return NULL; /* main is done */
    for (size_t i = 0; i < 2 * per; i++) o[i] = keep(malloc(SMALL));
    for (size_t i = 0; i < 2 * per; i++) free(o[i]);
    sem_post(&cycled);
  }
}

/* Main takes NSPANS + 1 SMALL spans (nothing of this order is pooled, and
 * the long delay keeps the beat from pooling the worker's stash). With the
 * worker idle, the first look only notes its stash and each later span must
 * be one the worker stashed; with it busy (`cycle`), none may be. */
static void steal(bool cycle) {
  size_t per = SPAN / SMALL, n = per * (NSPANS + 1), got = 0;
  void **o = malloc(n * sizeof *o);
  if (!o) DIE("malloc failed");
  uintptr_t seen[NSPANS + 1];
  size_t nseen = 0;
  for (size_t i = 0; i < n; i++) {
    if (cycle && i % per == 0 && i) {
      sem_post(&go);
      sem_wait(&cycled);
    }
    o[i] = keep(malloc(SMALL));
    if (!o[i]) DIE("malloc(%d) failed", SMALL);
    uintptr_t span = (uintptr_t)o[i] & ~(uintptr_t)(SPAN - 1);
    bool known = false;
    for (size_t k = 0; k < nseen; k++) known = known || seen[k] == span;
    if (known || nseen == NSPANS + 1) continue;
    seen[nseen++] = span;
    for (size_t k = 0; k < nemptied; k++) got += emptied[k] == span;
  }
  printf("steal%s: %zu of the %zu spans the main thread took were the worker's stashed ones\n",
         cycle ? " (busy worker)" : "", got, nseen);
  CHECK(nemptied == NSPANS + 1, "the worker stashed %zu spans, not %d", nemptied, NSPANS + 1);
  if (cycle)
    CHECK(got == 0, "%zu spans taken from the stash of a thread that was using it", got);
  else
    CHECK(got + 1 == nseen,
          "%zu of %zu stashed spans reused (of %zu the main thread took, the first before it "
          "looked): it took never-used memory while an idle thread's stash held spans",
          got, nemptied, nseen);
  for (size_t i = 0; i < n; i++) free(o[i]);
  free(o);
}

static void run_thread(void *(*fn)(void *), pthread_t *t) {
  if (pthread_create(t, NULL, fn, NULL) != 0) DIE("pthread_create failed");
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  pthread_t t;
  free(keep(malloc(16))); /* the main thread's heap first */
  if (!strcmp(mode, "scrambled")) {
    run_thread(scrambled, &t);
    pthread_join(t, NULL);
    return t_finish("test_stash scrambled");
  }
  if (!strcmp(mode, "reuse") || !strcmp(mode, "rewarm")) {
    bool re = !strcmp(mode, "rewarm");
    run_thread(re ? rewarm : reuse, &t);
    pthread_join(t, NULL);
    return t_finish(re ? "test_stash rewarm" : "test_stash reuse");
  }
  sem_init(&filled, 0, 0);
  sem_init(&done, 0, 0);
  if (!strcmp(mode, "busy")) {
    sem_init(&go, 0, 0);
    sem_init(&cycled, 0, 0);
    run_thread(busy_worker, &t);
    sem_wait(&filled);
    steal(true);
    nemptied = 0;
    sem_post(&go);
    pthread_join(t, NULL);
    return t_finish("test_stash busy");
  }
  bool beat = !strcmp(mode, "beat");
  if (!beat && strcmp(mode, "idle") && strcmp(mode, "steal"))
    DIE("usage: test_stash reuse|rewarm|scrambled|idle|beat|steal|busy");
  run_thread(worker, &t);
  sem_wait(&filled);
  if (!strcmp(mode, "steal")) {
    steal(false);
    sem_post(&done);
    pthread_join(t, NULL);
    return t_finish("test_stash steal");
  }
  size_t before = resident_pages();
  CHECK(before > 0, "the emptied spans' pages were gone at once: the test shows nothing");
  size_t now = before;
  unsigned ms = 0;
  for (; ms < 4000 && now > 0; ms += 20) {
    if (beat) { /* span changes of another order, in this thread */
      void *o[200];
      for (int i = 0; i < 200; i++) o[i] = keep(malloc(OTHER));
      for (int i = 0; i < 200; i++) free(o[i]);
    }
    sleep_ms(20);
    now = resident_pages();
  }
  printf("%s: %zu of the idle worker's stashed pages resident at first, %zu after %u ms\n", mode,
         before, now, ms);
  CHECK(now == 0, "%s: %zu pages of an idle thread's stash still resident after %u ms", mode, now,
        ms);
  sem_post(&done);
  pthread_join(t, NULL);
  return t_finish(beat ? "test_stash beat" : "test_stash idle");
}
