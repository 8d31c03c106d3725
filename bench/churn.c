/* churn: a tight loop that takes and releases whole spans (300 KiB-4 MiB blocks, and batches of
 * 64 KiB objects that fill and then empty their spans); run under strace to count the mmap,
 * munmap and madvise calls that returning memory costs. After scalloc (OOPSLA'15) sec. 3.3, 7.7. */
#include "bench.h"

/* Every iteration (per thread): replace one of -k held large blocks with a new one of a random
 * size in -m..-M, then allocate a batch of -b objects of -s bytes and free them all (with a
 * span of 8 such objects, a batch fills and empties several spans). Every block is written
 * once per -p bytes, as a program would use it, so memory given back costs page faults when
 * it is used again. Run time is the benchmark's clock; the driver counts the system calls. */

#define MAX_BATCH 4096
#define MAX_HELD  256

struct worker {
  _Alignas(BENCH_CACHE_LINE) unsigned id;
  uint64_t check;
};

static struct worker workers[BENCH_MAX_THREADS];
static pthread_barrier_t start_barrier;
static struct bench_span span = BENCH_SPAN_INIT;
static uint64_t opt_iters = 2000, opt_min = 300u << 10, opt_max = 4u << 20, opt_held = 4,
                opt_batch = 64, opt_bsize = 64u << 10, opt_stride = 4096, opt_seed = 1;

static char *use(size_t size, uint64_t *check) {
  char *p = bench_xmalloc(size);
  if (opt_stride)
    for (size_t off = 0; off < size; off += opt_stride) p[off] = (char)off;
  p[size - 1] = (char)size;
  *check += (unsigned char)p[0];
  return p;
}

static void *run(void *arg) {
  struct worker *w = arg;
  struct bench_rng rng;
  bench_rng_seed(&rng, opt_seed, w->id);
  char *held[MAX_HELD] = {0};
  size_t held_size[MAX_HELD] = {0};
  char *batch[MAX_BATCH];
  uint64_t check = 0;
  int64_t live = 0;
  pthread_barrier_wait(&start_barrier);
  bench_span_begin(&span);
  for (uint64_t it = 0; it < opt_iters; it++) {
    uint32_t i = bench_rng_below(&rng, (uint32_t)opt_held);
    if (held[i] != NULL) {
      check += (unsigned char)held[i][held_size[i] - 1];
      free(held[i]);
      live -= (int64_t)held_size[i];
    }
    held_size[i] = bench_rng_range(&rng, (size_t)opt_min, (size_t)opt_max);
    held[i] = use(held_size[i], &check);
    live += (int64_t)held_size[i];
    for (size_t j = 0; j < opt_batch; j++) batch[j] = use((size_t)opt_bsize, &check);
    bench_live_note_peak(live + (int64_t)(opt_batch * opt_bsize)); /* per thread; see below */
    for (size_t j = 0; j < opt_batch; j++) {
      check += (unsigned char)batch[j][opt_bsize - 1];
      free(batch[j]);
    }
  }
  for (size_t i = 0; i < opt_held; i++) free(held[i]);
  bench_span_end(&span);
  w->check = check;
  return NULL;
}

static void usage(void) {
  fprintf(stderr,
          "usage: churn [-t threads] [-n iterations] [-m min] [-M max] [-k held] [-b batch]\n"
          "             [-s batch-size] [-p stride] [-S seed]\n"
          "  -n  iterations per thread (2000)\n"
          "  -m/-M  size range of the large blocks (300K..4M)\n"
          "  -k  large blocks each thread holds (4, at most 256)\n"
          "  -b  objects per batch (64, at most 4096)   -s  their size (64K)\n"
          "  -p  write one byte every p bytes of each block (4096; 0: first and last only)\n");
  exit(2);
}

int main(int argc, char **argv) {
  unsigned threads = 1;
  int c;
  while ((c = getopt(argc, argv, "t:n:m:M:k:b:s:p:S:h")) != -1) {
    switch (c) {
    case 't':
      threads = bench_parse_threads(optarg, 't');
      break;
    case 'n':
      opt_iters = bench_parse_u64(optarg, 'n');
      break;
    case 'm':
      opt_min = bench_parse_u64(optarg, 'm');
      break;
    case 'M':
      opt_max = bench_parse_u64(optarg, 'M');
      break;
    case 'k':
      opt_held = bench_parse_u64(optarg, 'k');
      break;
    case 'b':
      opt_batch = bench_parse_u64(optarg, 'b');
      break;
    case 's':
      opt_bsize = bench_parse_u64(optarg, 's');
      break;
    case 'p':
      opt_stride = bench_parse_u64(optarg, 'p');
      break;
    case 'S':
      opt_seed = bench_parse_u64(optarg, 'S');
      break;
    default:
      usage();
    }
  }
  if (optind != argc || opt_min < 1 || opt_max < opt_min || opt_max > (1ull << 34) ||
      opt_held < 1 || opt_held > MAX_HELD || opt_batch > MAX_BATCH || opt_bsize < 1 ||
      opt_bsize > (1ull << 30))
    usage();

  pthread_t tid[BENCH_MAX_THREADS];
  bench_barrier_init(&start_barrier, threads + 1);
  for (unsigned i = 0; i < threads; i++) {
    workers[i].id = i;
    bench_spawn(&tid[i], run, &workers[i]);
  }
  pthread_barrier_wait(&start_barrier);
  uint64_t check = 0;
  for (unsigned i = 0; i < threads; i++) {
    bench_join(tid[i]);
    check += workers[i].check;
  }
  double elapsed = bench_span_seconds(&span);
  pthread_barrier_destroy(&start_barrier);
  bench_check_add(check);
  /* the per-thread peak noted above, times the threads (they run the same loop) */
  bench_live_note_peak(bench_live_peak_bytes() * (int64_t)threads);

  bench_result_begin("churn", threads, "time_s", elapsed, "s");
  bench_kv_u64("ops", 2 * (1 + opt_batch) * opt_iters * threads);
  bench_kv_u64("iterations", opt_iters);
  bench_kv_u64("min", opt_min);
  bench_kv_u64("max", opt_max);
  bench_kv_u64("held", opt_held);
  bench_kv_u64("batch", opt_batch);
  bench_kv_u64("batch_size", opt_bsize);
  bench_result_end();
  return 0;
}
