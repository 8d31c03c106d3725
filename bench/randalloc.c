/* randalloc: each thread randomly allocates an 8-1024 B block or frees a random one of its
 * blocks; reports run time for a fixed total number of operations. Reproduces the random
 * alloc/free test of the ar_malloc note ("Analysis of a Parallel Memory Allocator"). */
#include "bench.h"

struct worker {
  _Alignas(BENCH_CACHE_LINE) uint64_t ops;
  unsigned id;
};

static struct worker workers[BENCH_MAX_THREADS];
static pthread_barrier_t start_barrier;
static struct bench_span span = BENCH_SPAN_INIT;
static uint64_t opt_min = 8, opt_max = 1024, opt_slots = 1000, opt_seed = 1;
static bool opt_untouched; /* -x: the blocks are never written or read, so only the allocator's
                            * own work is timed (what the program's touches cost is apart) */

static void *run(void *arg) {
  struct worker *w = arg;
  size_t cap = (size_t)opt_slots;
  char **blk = bench_xmalloc(cap * sizeof *blk);
  uint32_t *size = bench_xmalloc(cap * sizeof *size);
  size_t live_count = 0;
  struct bench_rng rng;
  bench_rng_seed(&rng, opt_seed, w->id);
  struct bench_live live = {0};
  uint64_t check = 0;
  /* start in the steady state: half of the slots already hold blocks */
  while (live_count < cap / 2) {
    size_t sz = bench_rng_range(&rng, (size_t)opt_min, (size_t)opt_max);
    char *p = bench_xmalloc(sz);
    p[0] = (char)sz;
    blk[live_count] = p;
    size[live_count] = (uint32_t)sz;
    live_count++;
    bench_live_add(&live, (int64_t)sz);
  }
  pthread_barrier_wait(&start_barrier);
  bench_span_begin(&span);
  for (uint64_t op = 0; op < w->ops; op++) {
    uint64_t r = bench_rng_next(&rng);
    int do_alloc = live_count == 0 || (live_count < cap && (r & 1));
    if (do_alloc) {
      size_t sz = (size_t)opt_min + (size_t)((r >> 32) % (opt_max - opt_min + 1));
      char *p = bench_xmalloc(sz);
      if (!opt_untouched) {
        p[0] = (char)sz;
        p[sz - 1] = (char)op;
      }
      blk[live_count] = p;
      size[live_count] = (uint32_t)sz;
      live_count++;
      bench_live_add(&live, (int64_t)sz);
    } else {
      /* the live blocks are kept dense: free one, move the last into its place */
      size_t i = bench_rng_below(&rng, (uint32_t)live_count);
      check += opt_untouched ? (uintptr_t)blk[i] & 1 : (unsigned char)blk[i][0];
      free(blk[i]);
      bench_live_add(&live, -(int64_t)size[i]);
      live_count--;
      blk[i] = blk[live_count];
      size[i] = size[live_count];
    }
  }
  for (size_t i = 0; i < live_count; i++) free(blk[i]);
  bench_live_done(&live);
  free(size);
  free(blk);
  bench_check_add(check);
  bench_span_end(&span);
  return NULL;
}

static void usage(void) {
  fprintf(stderr,
          "usage: randalloc [-t threads] [-n ops] [-m min] [-M max] [-k slots] [-S seed] [-x]\n"
          "  -n  malloc/free operations in total, split over the threads (10000000)\n"
          "  -m/-M  block size range, inclusive (8..1024)\n"
          "  -k  most blocks a thread holds at once (1000); it starts with half\n"
          "  -x  never touch the blocks: time the allocator's work alone\n");
  exit(2);
}

int main(int argc, char **argv) {
  unsigned threads = 1;
  uint64_t total = 10000000;
  int c;
  while ((c = getopt(argc, argv, "t:n:m:M:k:S:xh")) != -1) {
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
    case 'k':
      opt_slots = bench_parse_u64(optarg, 'k');
      break;
    case 'S':
      opt_seed = bench_parse_u64(optarg, 'S');
      break;
    case 'x':
      opt_untouched = true;
      break;
    default:
      usage();
    }
  }
  if (optind != argc || opt_min < 1 || opt_max < opt_min || opt_max > UINT32_MAX || opt_slots < 1 ||
      opt_slots > UINT32_MAX)
    usage();

  for (unsigned i = 0; i < threads; i++) {
    workers[i].id = i;
    workers[i].ops = bench_share(total, threads, i);
  }
  double elapsed =
      bench_run_workers(threads, run, workers, sizeof workers[0], &start_barrier, &span);

  bench_result_begin("randalloc", threads, "time_s", elapsed, "s");
  bench_kv_u64("ops", total);
  bench_kv_u64("min", opt_min);
  bench_kv_u64("max", opt_max);
  bench_kv_u64("slots", opt_slots);
  bench_result_end();
  return 0;
}
