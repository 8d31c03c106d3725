/* sizes: threads allocate, touch and free objects with sizes from one interval, [16,64) B up to
 * [1,4) MiB, one interval per run; reports run time per interval (object-size robustness).
 * Reproduces the object-size experiment of scalloc (OOPSLA'15) sec. 7.5. */
#include "bench.h"

#define PAGE 4096

struct worker {
  _Alignas(BENCH_CACHE_LINE) unsigned id;
};

static struct worker workers[BENCH_MAX_THREADS];
static pthread_barrier_t start_barrier;
static struct bench_span span = BENCH_SPAN_INIT;
static uint64_t opt_min = 16, opt_max = 63, opt_cycles = 30, opt_count = 0, opt_seed = 1;

static void *run(void *arg) {
  struct worker *w = arg;
  size_t n = (size_t)opt_count;
  char **obj = bench_xmalloc(n * sizeof *obj);
  struct bench_rng rng;
  bench_rng_seed(&rng, opt_seed, w->id);
  uint64_t check = 0;
  pthread_barrier_wait(&start_barrier);
  bench_span_begin(&span);
  for (uint64_t c = 0; c < opt_cycles; c++) {
    int64_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
      size_t sz = bench_rng_range(&rng, (size_t)opt_min, (size_t)opt_max);
      char *p = bench_xmalloc(sz);
      /* touch the object: first byte, one byte per page, last byte */
      for (size_t off = PAGE; off < sz; off += PAGE) p[off] = (char)off;
      p[0] = (char)sz;
      p[sz - 1] = (char)i;
      obj[i] = p;
      bytes += (int64_t)sz;
    }
    bench_live_shared(bytes);
    for (size_t i = 0; i < n; i++) {
      check += (unsigned char)obj[i][0];
      free(obj[i]);
    }
    bench_live_shared(-bytes);
  }
  free(obj);
  bench_check_add(check);
  bench_span_end(&span);
  return NULL;
}

static void usage(void) {
  fprintf(
      stderr,
      "usage: sizes [-t threads] [-m min] [-M max] [-c cycles] [-b bytes | -n count] [-S seed]\n"
      "  -m/-M  object size range in bytes, inclusive (16..63)\n"
      "  -c  allocate/touch/free cycles per thread (30)\n"
      "  -b  bytes each thread allocates per cycle (16M), or\n"
      "  -n  objects per cycle (overrides -b; at least 1)\n");
  exit(2);
}

int main(int argc, char **argv) {
  unsigned threads = 1;
  uint64_t budget = 16u << 20;
  int c;
  while ((c = getopt(argc, argv, "t:m:M:c:b:n:S:h")) != -1) {
    switch (c) {
    case 't':
      threads = bench_parse_threads(optarg, 't');
      break;
    case 'm':
      opt_min = bench_parse_u64(optarg, 'm');
      break;
    case 'M':
      opt_max = bench_parse_u64(optarg, 'M');
      break;
    case 'c':
      opt_cycles = bench_parse_u64(optarg, 'c');
      break;
    case 'b':
      budget = bench_parse_u64(optarg, 'b');
      break;
    case 'n':
      opt_count = bench_parse_u64(optarg, 'n');
      break;
    case 'S':
      opt_seed = bench_parse_u64(optarg, 'S');
      break;
    default:
      usage();
    }
  }
  if (optind != argc || opt_min < 1 || opt_max < opt_min || opt_max > (1ull << 40)) usage();
  if (opt_count == 0) {
    /* enough objects to allocate about `budget` bytes, within [8, 65536] */
    uint64_t avg = opt_min + (opt_max - opt_min) / 2;
    opt_count = budget / avg;
    if (opt_count < 8) opt_count = 8;
    if (opt_count > 65536) opt_count = 65536;
  }
  if (opt_count > (1u << 24)) usage();

  for (unsigned i = 0; i < threads; i++) workers[i].id = i;
  double elapsed =
      bench_run_workers(threads, run, workers, sizeof workers[0], &start_barrier, &span);

  bench_result_begin("sizes", threads, "time_s", elapsed, "s");
  bench_kv_u64("ops", 2 * opt_count * opt_cycles * threads);
  bench_kv_u64("min", opt_min);
  bench_kv_u64("max", opt_max);
  bench_kv_u64("count", opt_count);
  bench_kv_u64("cycles", opt_cycles);
  bench_result_end();
  return 0;
}
