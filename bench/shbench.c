/* shbench-style: threads keep a pool of random-size blocks, free a random half in random order
 * each round and refill it, so lifetimes span rounds; reports run time. Reproduces shbench from
 * Hoard (ASPLOS'00) sec. 5.2 (8-100 B) and scalloc (OOPSLA'15) sec. 7.2 (1-8 B). */
#include "bench.h"

struct worker {
  _Alignas(BENCH_CACHE_LINE) uint64_t allocs; /* allocations this thread performs */
  unsigned id;
};

static struct worker workers[BENCH_MAX_THREADS];
static pthread_barrier_t start_barrier;
static struct bench_span span = BENCH_SPAN_INIT;
static uint64_t opt_min = 8, opt_max = 100, opt_pool = 10000, opt_seed = 1;

static void *run(void *arg) {
  struct worker *w = arg;
  size_t pool = (size_t)opt_pool;
  char **slot = bench_xmalloc(pool * sizeof *slot);
  uint32_t *size = bench_xmalloc(pool * sizeof *size);
  for (size_t i = 0; i < pool; i++) slot[i] = NULL;
  struct bench_rng rng;
  bench_rng_seed(&rng, opt_seed, w->id);
  struct bench_live live = {0};
  uint64_t check = 0, left = w->allocs;
  pthread_barrier_wait(&start_barrier);
  bench_span_begin(&span);
  while (left > 0) {
    /* free about half of the pool, picked at random (so in random order) */
    for (size_t k = 0; k < pool / 2; k++) {
      uint32_t i = bench_rng_below(&rng, (uint32_t)pool);
      if (slot[i] != NULL) {
        check += (unsigned char)slot[i][size[i] - 1];
        free(slot[i]);
        slot[i] = NULL;
        bench_live_add(&live, -(int64_t)size[i]);
      }
    }
    /* refill every empty slot with a block of random size */
    for (size_t i = 0; i < pool && left > 0; i++) {
      if (slot[i] != NULL) continue;
      size_t s = bench_rng_range(&rng, (size_t)opt_min, (size_t)opt_max);
      char *p = bench_xmalloc(s);
      p[0] = (char)i;
      p[s - 1] = (char)s;
      slot[i] = p;
      size[i] = (uint32_t)s;
      bench_live_add(&live, (int64_t)s);
      left--;
    }
  }
  for (size_t i = 0; i < pool; i++) {
    if (slot[i] != NULL) {
      check += (unsigned char)slot[i][0];
      free(slot[i]);
    }
  }
  bench_live_done(&live);
  free(size);
  free(slot);
  bench_check_add(check);
  bench_span_end(&span);
  return NULL;
}

static void usage(void) {
  fprintf(stderr,
          "usage: shbench [-t threads] [-n allocations] [-m min] [-M max] [-p pool] [-S seed]\n"
          "  -n  total allocations, split over the threads (2000000)\n"
          "  -m/-M  block size range in bytes, inclusive (8..100)\n"
          "  -p  blocks each thread keeps in its pool (10000)\n");
  exit(2);
}

int main(int argc, char **argv) {
  unsigned threads = 1;
  uint64_t total = 2000000;
  int c;
  while ((c = getopt(argc, argv, "t:n:m:M:p:S:h")) != -1) {
    switch (c) {
    case 't':
      threads = bench_parse_threads(optarg, 't');
      break;
    case 'n':
      total = bench_parse_u64(optarg, 'n');
      break;
    case 'm':
      opt_min = bench_parse_u64(optarg, 'm');
      break;
    case 'M':
      opt_max = bench_parse_u64(optarg, 'M');
      break;
    case 'p':
      opt_pool = bench_parse_u64(optarg, 'p');
      break;
    case 'S':
      opt_seed = bench_parse_u64(optarg, 'S');
      break;
    default:
      usage();
    }
  }
  if (optind != argc || opt_min < 1 || opt_max < opt_min || opt_max > UINT32_MAX || opt_pool < 2 ||
      opt_pool > UINT32_MAX)
    usage();

  for (unsigned i = 0; i < threads; i++) {
    workers[i].id = i;
    workers[i].allocs = bench_share(total, threads, i);
  }
  double elapsed =
      bench_run_workers(threads, run, workers, sizeof workers[0], &start_barrier, &span);

  bench_result_begin("shbench", threads, "time_s", elapsed, "s");
  bench_kv_u64("ops", 2 * total);
  bench_kv_u64("allocs", total);
  bench_kv_u64("min", opt_min);
  bench_kv_u64("max", opt_max);
  bench_kv_u64("pool", opt_pool);
  bench_result_end();
  return 0;
}
