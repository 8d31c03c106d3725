/* recycle: each thread allocates n objects of random size, freeing all it holds after every
 * `rate` allocations (thread-local; work grows with threads); reports run time.
 * Reproduces Recycle from Streamflow (ISMM'06) sec. 4.2.2. */
#include "bench.h"

struct worker {
  _Alignas(BENCH_CACHE_LINE) unsigned id;
};

static struct worker workers[BENCH_MAX_THREADS];
static pthread_barrier_t start_barrier;
static struct bench_span span = BENCH_SPAN_INIT;
static uint64_t opt_objects = 10000000, opt_rate = 1000, opt_min = 8, opt_max = 8, opt_seed = 1;

static void *run(void *arg) {
  struct worker *w = arg;
  size_t rate = (size_t)opt_rate;
  char **obj = bench_xmalloc(rate * sizeof *obj);
  struct bench_rng rng;
  bench_rng_seed(&rng, opt_seed, w->id);
  uint64_t check = 0;
  size_t held = 0;
  int64_t held_bytes = 0;
  pthread_barrier_wait(&start_barrier);
  bench_span_begin(&span);
  for (uint64_t i = 0; i < opt_objects; i++) {
    size_t sz = bench_rng_range(&rng, (size_t)opt_min, (size_t)opt_max);
    char *p = bench_xmalloc(sz);
    p[0] = (char)sz;
    obj[held++] = p;
    held_bytes += (int64_t)sz;
    if (held == rate || i + 1 == opt_objects) {
      bench_live_shared(held_bytes);
      for (size_t k = 0; k < held; k++) {
        check += (unsigned char)obj[k][0];
        free(obj[k]);
      }
      bench_live_shared(-held_bytes);
      held = 0;
      held_bytes = 0;
    }
  }
  free(obj);
  bench_check_add(check);
  bench_span_end(&span);
  return NULL;
}

static void usage(void) {
  fprintf(stderr, "usage: recycle [-t threads] [-n objects] [-r rate] [-m min] [-M max] [-S seed]\n"
                  "  -n  objects each thread allocates (10000000)\n"
                  "  -r  free everything held after this many allocations (1000)\n"
                  "  -m/-M  object size range, inclusive (8..8)\n");
  exit(2);
}

int main(int argc, char **argv) {
  unsigned threads = 1;
  int c;
  while ((c = getopt(argc, argv, "t:n:r:m:M:S:h")) != -1) {
    switch (c) {
    case 't':
      threads = bench_parse_threads(optarg, 't');
      break;
    case 'n':
      opt_objects = bench_parse_u64(optarg, 'n');
      break;
    case 'r':
      opt_rate = bench_parse_u64(optarg, 'r');
      break;
    case 'm':
      opt_min = bench_parse_u64(optarg, 'm');
      break;
    case 'M':
      opt_max = bench_parse_u64(optarg, 'M');
      break;
    case 'S':
      opt_seed = bench_parse_u64(optarg, 'S');
      break;
    default:
      usage();
    }
  }
  if (optind != argc || opt_rate < 1 || opt_rate > (1u << 28) || opt_min < 1 || opt_max < opt_min)
    usage();

  for (unsigned i = 0; i < threads; i++) workers[i].id = i;
  double elapsed =
      bench_run_workers(threads, run, workers, sizeof workers[0], &start_barrier, &span);

  bench_result_begin("recycle", threads, "time_s", elapsed, "s");
  bench_kv_u64("ops", 2 * opt_objects * threads);
  bench_kv_u64("objects", opt_objects);
  bench_kv_u64("rate", opt_rate);
  bench_kv_u64("min", opt_min);
  bench_kv_u64("max", opt_max);
  bench_result_end();
  return 0;
}
