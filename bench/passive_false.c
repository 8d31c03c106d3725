/* passive-false: main allocates one small object per thread back to back and hands them out;
 * each thread frees its object, then allocates, writes and frees its own; run time shows false
 * sharing the allocator lets in by reusing freed pieces. Reproduces Hoard (ASPLOS'00) sec. 5.3. */
#include "bench.h"

struct worker {
  _Alignas(BENCH_CACHE_LINE) uint64_t objects;
  void *given; /* the object allocated by the main thread */
  unsigned id;
};

static struct worker workers[BENCH_MAX_THREADS];
static pthread_barrier_t start_barrier;
static struct bench_span span = BENCH_SPAN_INIT;
static uint64_t opt_writes = 1000, opt_size = 8;

static void *run(void *arg) {
  struct worker *w = arg;
  uint64_t check = 0;
  pthread_barrier_wait(&start_barrier);
  bench_span_begin(&span);
  free(w->given);
  for (uint64_t i = 0; i < w->objects; i++) {
    volatile unsigned char *p = bench_xmalloc(opt_size);
    for (size_t j = 0; j < opt_size; j++) p[j] = 0;
    for (uint64_t k = 0; k < opt_writes; k++)
      for (size_t j = 0; j < opt_size; j++) p[j] = (unsigned char)(p[j] + 1);
    check += p[0];
    free((void *)p);
  }
  bench_check_add(check);
  bench_span_end(&span);
  return NULL;
}

static void usage(void) {
  fprintf(stderr, "usage: passive_false [-t threads] [-n objects] [-w writes] [-s size]\n"
                  "  -n  objects allocated in total, split over the threads (100000)\n"
                  "  -w  times every byte of an object is written (1000)\n"
                  "  -s  object size in bytes (8)\n");
  exit(2);
}

int main(int argc, char **argv) {
  unsigned threads = 1;
  uint64_t total = 100000;
  int c;
  while ((c = getopt(argc, argv, "t:n:w:s:h")) != -1) {
    switch (c) {
    case 't':
      threads = bench_parse_threads(optarg, 't');
      break;
    case 'n':
      total = bench_parse_u64(optarg, 'n');
      break;
    case 'w':
      opt_writes = bench_parse_u64(optarg, 'w');
      break;
    case 's':
      opt_size = bench_parse_u64(optarg, 's');
      break;
    default:
      usage();
    }
  }
  if (optind != argc || opt_size < 1) usage();

  /* consecutive allocations: with most allocators these share cache lines */
  for (unsigned i = 0; i < threads; i++) {
    char *p = bench_xmalloc(opt_size);
    memset(p, 0, opt_size);
    workers[i].given = p;
  }
  for (unsigned i = 0; i < threads; i++) {
    workers[i].id = i;
    workers[i].objects = bench_share(total, threads, i);
  }
  double elapsed =
      bench_run_workers(threads, run, workers, sizeof workers[0], &start_barrier, &span);

  bench_live_note_peak((int64_t)(threads * opt_size));
  bench_result_begin("passive-false", threads, "time_s", elapsed, "s");
  bench_kv_u64("ops", 2 * (total + threads));
  bench_kv_u64("objects", total);
  bench_kv_u64("writes", opt_writes);
  bench_kv_u64("size", opt_size);
  bench_result_end();
  return 0;
}
