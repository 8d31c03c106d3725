/* test_cache.c - proves the block cache (heap.c): a thread's frees of blocks over 8 KiB into
 * its own full spans are kept for its next mallocs, are counted free by the statistics, and
 * go back to their spans at rill_collect, at thread exit, at the beats that find them unused,
 * and to the purger while their thread waits.
 *   (default)  each free lowers the class's blocks and bytes in use by one block; mallocs
 *              after the frees take the kept blocks; the contents of live blocks survive
 *   --collect  64 blocks freed leave spans of the class kept; rill_collect(true) frees them
 *   --exit     a thread frees 64 blocks and exits: its kept blocks do not pin spans
 *   --trim     kept blocks no malloc takes go back within some beats, while the thread
 *              changes spans of another class
 *   --idle     a thread frees 64 blocks and waits in a condition wait: the purger takes its
 *              kept blocks; woken, the thread allocates and frees again
 *   --idle-control  the same without the purger: they stay (the check above can fail)
 * test_lend --race-big races the purger's drain with owners that wake. */
#include <pthread.h>

#include "rill_test.h"

#define BS  (24u << 10) /* a class of four blocks a span */
#define NB  64u
#define CLS "24 KiB"

static void *blk[NB];

/* The class row of BS-byte blocks; zeros if the class has no spans. */
static struct rill_class_stats row(void) {
  struct rill_class_stats rows[80], r = {0};
  size_t n = rill_class_stats_get(rows, 80);
  for (size_t i = 0; i < n && i < 80; i++)
    if (rows[i].block_size == BS) r = rows[i];
  return r;
}

static void fill(uint64_t salt) {
  for (unsigned i = 0; i < NB; i++) {
    blk[i] = rill_malloc(BS);
    if (!blk[i]) DIE("malloc(%u) failed", BS);
    pat_fill(blk[i], BS, pat_seed(blk[i], BS) ^ salt);
  }
}
static void drop(void) {
  for (unsigned i = 0; i < NB; i++) rill_free(blk[i]);
}

static void nap_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Polls the class row until it has no spans, for up to ms; true if it got there. */
static bool spans_gone(unsigned ms) {
  for (unsigned t = 0; t < ms; t += 10) {
    if (row().spans == 0) return true;
    nap_ms(10);
  }
  return row().spans == 0;
}

static int run_default(void) {
  fill(1);
  struct rill_class_stats r = row();
  CHECK(r.blocks_in_use == NB, "%u blocks of " CLS " out, stats say %llu", NB,
        (unsigned long long)r.blocks_in_use);
  /* free the blocks of the full spans, the hot one last: each free is one block less in use */
  for (unsigned i = 0; i < NB / 2; i++) {
    rill_free(blk[i]);
    blk[i] = NULL;
    r = row();
    uint64_t out = NB - i - 1;
    CHECK(r.blocks_in_use == out && r.bytes_in_use == out * BS,
          "after %u frees: blocks in use %llu, bytes %llu (want %llu, %llu)", i + 1,
          (unsigned long long)r.blocks_in_use, (unsigned long long)r.bytes_in_use,
          (unsigned long long)out, (unsigned long long)(out * BS));
    struct rill_stats s;
    rill_stats_get(&s);
    CHECK(s.bytes_in_use >= out * BS && s.bytes_in_use < out * BS + (4u << 20),
          "after %u frees: in_use %llu, blocks of " CLS " out %llu", i + 1,
          (unsigned long long)s.bytes_in_use, (unsigned long long)(out * BS));
  }
  /* the next mallocs take the freed blocks back, not fresh memory */
  uint64_t committed = row().bytes_committed;
  for (unsigned i = 0; i < NB / 2; i++) {
    blk[i] = rill_malloc(BS);
    if (!blk[i]) DIE("malloc(%u) failed", BS);
    pat_fill(blk[i], BS, pat_seed(blk[i], BS) ^ 2);
  }
  r = row();
  CHECK(r.blocks_in_use == NB, "%u blocks out again, stats say %llu", NB,
        (unsigned long long)r.blocks_in_use);
  CHECK(r.bytes_committed <= committed, "the mallocs after the frees took new spans: %llu -> %llu",
        (unsigned long long)committed, (unsigned long long)r.bytes_committed);
  for (unsigned i = 0; i < NB; i++)
    PAT_CHECK(blk[i], BS, pat_seed(blk[i], BS) ^ (i < NB / 2 ? 2 : 1), "block %u", i);
  drop();
  return t_finish("test_cache");
}

static int run_collect(void) {
  fill(1);
  drop();
  CHECK(row().spans > 0, "no span of " CLS " kept after the frees: is the block cache on?");
  rill_collect(true);
  struct rill_class_stats r = row();
  CHECK(r.spans == 0, "rill_collect(true) left %llu spans of " CLS " (%llu blocks out)",
        (unsigned long long)r.spans, (unsigned long long)r.blocks_in_use);
  return t_finish("test_cache --collect");
}

static void *fill_drop(void *arg) {
  (void)arg;
  fill(3);
  drop();
  return NULL;
}

static int run_exit(void) {
  pthread_t th;
  if (pthread_create(&th, NULL, fill_drop, NULL)) DIE("pthread_create");
  pthread_join(th, NULL);
  rill_collect(false); /* spans the exit handed back, pooled */
  struct rill_class_stats r = row();
  CHECK(r.spans == 0, "a thread's exit left %llu spans of " CLS " (%llu blocks out)",
        (unsigned long long)r.spans, (unsigned long long)r.blocks_in_use);
  return t_finish("test_cache --exit");
}

static int run_trim(void) {
  fill(1);
  drop();
  CHECK(row().spans > 0, "no span of " CLS " kept after the frees: is the block cache on?");
  /* span changes of 1 KiB blocks, beat after beat (RILL_PURGE_DELAY_MS is short) */
  static void *small[1000];
  bool gone = false;
  for (unsigned round = 0; round < 400 && !gone; round++) {
    for (unsigned i = 0; i < 1000; i++) small[i] = rill_malloc(1024);
    for (unsigned i = 0; i < 1000; i++) rill_free(small[i]);
    nap_ms(5);
    gone = row().spans == 0;
  }
  CHECK(gone, "blocks of " CLS " kept unused through 2 s of beats: %llu spans left",
        (unsigned long long)row().spans);
  return t_finish("test_cache --trim");
}

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int step; /* 1: the waiter has freed its blocks; 2: main has looked */

static void *waiter(void *arg) {
  (void)arg;
  fill(4);
  drop();
  pthread_mutex_lock(&m);
  step = 1;
  pthread_cond_broadcast(&cv);
  while (step != 2) pthread_cond_wait(&cv, &m);
  pthread_mutex_unlock(&m);
  /* its cache was taken (or not, under the control): it goes on as before */
  fill(5);
  for (unsigned i = 0; i < NB; i++) PAT_CHECK(blk[i], BS, pat_seed(blk[i], BS) ^ 5, "block %u", i);
  drop();
  return NULL;
}

static int run_idle(bool control) {
  pthread_t th;
  if (pthread_create(&th, NULL, waiter, NULL)) DIE("pthread_create");
  pthread_mutex_lock(&m);
  while (step != 1) pthread_cond_wait(&cv, &m);
  pthread_mutex_unlock(&m);
  if (control) {
    nap_ms(300);
    CHECK(row().spans > 0, "without the purger, the waiting thread's kept blocks went back");
  } else {
    CHECK(spans_gone(3000), "the purger left %llu spans of " CLS " to a waiting thread",
          (unsigned long long)row().spans);
  }
  pthread_mutex_lock(&m);
  step = 2;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&m);
  pthread_join(th, NULL);
  rill_collect(false);
  CHECK(row().spans == 0, "%llu spans of " CLS " left after the thread's exit",
        (unsigned long long)row().spans);
  return t_finish(control ? "test_cache --idle-control" : "test_cache --idle");
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (!*mode) return run_default();
  if (!strcmp(mode, "--collect")) return run_collect();
  if (!strcmp(mode, "--exit")) return run_exit();
  if (!strcmp(mode, "--trim")) return run_trim();
  if (!strcmp(mode, "--idle")) return run_idle(false);
  if (!strcmp(mode, "--idle-control")) return run_idle(true);
  fprintf(stderr, "usage: test_cache [--collect | --exit | --trim | --idle | --idle-control]\n");
  return 2;
}
