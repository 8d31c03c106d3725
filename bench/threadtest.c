/* threadtest: t threads each repeatedly allocate and then free N/t objects of
 * one size, with no sharing between threads; reports the run time.
 * Reproduces threadtest from Hoard (ASPLOS'00) sec. 5.2 and scalloc (OOPSLA'15) sec. 7.2. */
#include "bench.h"

struct worker {
  _Alignas(BENCH_CACHE_LINE) size_t count; /* objects per round for this thread */
  unsigned id;
};

static struct worker workers[BENCH_MAX_THREADS];
static pthread_barrier_t start_barrier;
static struct bench_span span = BENCH_SPAN_INIT;
static uint64_t opt_rounds = 100, opt_size = 64, opt_work = 0;

static void *run(void *arg) {
  struct worker *w = arg;
  size_t n = w->count;
  char **obj = bench_xmalloc((n ? n : 1) * sizeof *obj);
  uint64_t check = 0;
  pthread_barrier_wait(&start_barrier);
  bench_span_begin(&span);
  for (uint64_t r = 0; r < opt_rounds; r++) {
    for (size_t i = 0; i < n; i++) {
      char *p = bench_xmalloc(opt_size);
      p[0] = (char)i;
      obj[i] = p;
      /* optional busy work between allocations, as in the original */
      for (uint64_t k = 0; k < opt_work; k++) check = check * 31 + k;
    }
    bench_live_shared((int64_t)(n * opt_size));
    for (size_t i = 0; i < n; i++) {
      check += (unsigned char)obj[i][0];
      free(obj[i]);
    }
    bench_live_shared(-(int64_t)(n * opt_size));
  }
  free(obj);
  bench_check_add(check);
  bench_span_end(&span);
  return NULL;
}

static void usage(void) {
  fprintf(stderr,
          "usage: threadtest [-t threads] [-n objects] [-r rounds] [-s size] [-w work]\n"
          "  -n  objects allocated per round, split over the threads (100000)\n"
          "  -r  rounds (100)   -s object size in bytes (64)   -w busy work per object (0)\n");
  exit(2);
}

int main(int argc, char **argv) {
  unsigned threads = 1;
  uint64_t total = 100000;
  int c;
  while ((c = getopt(argc, argv, "t:n:r:s:w:h")) != -1) {
    switch (c) {
    case 't':
      threads = bench_parse_threads(optarg, 't');
      break;
    case 'n':
      total = bench_parse_u64(optarg, 'n');
      break;
    case 'r':
      opt_rounds = bench_parse_u64(optarg, 'r');
      break;
    case 's':
      opt_size = bench_parse_u64(optarg, 's');
      break;
    case 'w':
      opt_work = bench_parse_u64(optarg, 'w');
      break;
    default:
      usage();
    }
  }
  if (optind != argc || opt_size < 1) usage();

  for (unsigned i = 0; i < threads; i++) {
    workers[i].id = i;
    workers[i].count = (size_t)bench_share(total, threads, i);
  }
  double elapsed =
      bench_run_workers(threads, run, workers, sizeof workers[0], &start_barrier, &span);

  bench_result_begin("threadtest", threads, "time_s", elapsed, "s");
  bench_kv_u64("ops", 2 * total * opt_rounds);
  bench_kv_u64("objects", total);
  bench_kv_u64("rounds", opt_rounds);
  bench_kv_u64("size", opt_size);
  bench_kv_u64("work", opt_work);
  bench_result_end();
  return 0;
}
