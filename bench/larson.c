/* larson: server simulation; threads replace random blocks with new random-size ones, then hand
 * their blocks to a new thread and exit ("bleeding"); fixed time, reports malloc+free calls/s.
 * Reproduces LKmalloc (ISMM'98) sec. 7, Hoard (ASPLOS'00) sec. 5.2, scalloc (OOPSLA'15) 7.2. */
#include "bench.h"

/* One slot per concurrently running thread; the blocks and statistics stay in
 * the slot while threads come and go. */
struct slot {
  _Alignas(BENCH_CACHE_LINE) char **blk;
  uint32_t *size;
  struct bench_rng rng;
  struct bench_live live;
  uint64_t ops;         /* malloc + free calls */
  uint64_t generations; /* threads that have run on this slot */
  uint64_t check;
  pthread_t prev; /* thread to reap: the one that created the current one */
  int has_prev;
  int create_error;
  pthread_t last; /* the final thread, joined by main */
  _Atomic int done;
};

static struct slot slots[BENCH_MAX_THREADS];
static _Atomic int stop;
static uint64_t opt_blocks = 1000, opt_rounds = 50000, opt_min = 10, opt_max = 1000;
static uint64_t opt_seed = 1;

static char *new_block(struct slot *s, size_t i) {
  size_t sz = bench_rng_range(&s->rng, (size_t)opt_min, (size_t)opt_max);
  char *p = bench_xmalloc(sz);
  p[0] = (char)i;
  p[sz - 1] = (char)sz;
  s->size[i] = (uint32_t)sz;
  bench_live_add(&s->live, (int64_t)sz);
  return p;
}

static void *run(void *arg) {
  struct slot *s = arg;
  if (s->has_prev) bench_join(s->prev);
  s->generations++;
  uint64_t r = 0, check = 0;
  uint32_t n = (uint32_t)opt_blocks;
  while (r < opt_rounds) {
    if ((r & 63) == 0 && atomic_load_explicit(&stop, memory_order_relaxed)) break;
    uint32_t i = bench_rng_below(&s->rng, n);
    check += (unsigned char)s->blk[i][s->size[i] - 1];
    free(s->blk[i]);
    bench_live_add(&s->live, -(int64_t)s->size[i]);
    s->blk[i] = new_block(s, i);
    r++;
  }
  s->ops += 2 * r;
  s->check += check;
  if (r == opt_rounds && !atomic_load_explicit(&stop, memory_order_relaxed)) {
    /* hand the blocks to a fresh thread; it reaps this one */
    s->prev = pthread_self();
    s->has_prev = 1;
    pthread_t next;
    int rc = pthread_create(&next, NULL, run, s);
    if (rc == 0) return NULL; /* the slot now belongs to the new thread */
    s->create_error = rc;
  }
  s->last = pthread_self();
  atomic_store_explicit(&s->done, 1, memory_order_release);
  return NULL;
}

static void usage(void) {
  fprintf(stderr,
          "usage: larson [-t threads] [-d seconds] [-n blocks] [-r rounds] [-m min] [-M max]\n"
          "              [-S seed]\n"
          "  -t  concurrently running threads (1)   -d run time in seconds (5)\n"
          "  -n  blocks per thread (1000)\n"
          "  -r  malloc/free replacements per thread lifetime (50000)\n"
          "  -m/-M  block size range, inclusive (10..1000; scalloc used 7..8)\n");
  exit(2);
}

int main(int argc, char **argv) {
  unsigned threads = 1;
  double duration = 5.0;
  int c;
  while ((c = getopt(argc, argv, "t:d:n:r:m:M:S:h")) != -1) {
    switch (c) {
    case 't':
      threads = bench_parse_threads(optarg, 't');
      break;
    case 'd':
      duration = bench_parse_double(optarg, 'd');
      break;
    case 'n':
      opt_blocks = bench_parse_u64(optarg, 'n');
      break;
    case 'r':
      opt_rounds = bench_parse_u64(optarg, 'r');
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
  if (optind != argc || opt_blocks < 1 || opt_blocks > UINT32_MAX || opt_rounds < 1 ||
      opt_min < 1 || opt_max < opt_min || opt_max > UINT32_MAX)
    usage();

  /* the main thread allocates every slot's initial blocks, so the first
   * generation of threads frees blocks it did not allocate */
  for (unsigned t = 0; t < threads; t++) {
    struct slot *s = &slots[t];
    bench_rng_seed(&s->rng, opt_seed, t);
    s->blk = bench_xmalloc((size_t)opt_blocks * sizeof *s->blk);
    s->size = bench_xmalloc((size_t)opt_blocks * sizeof *s->size);
    for (size_t i = 0; i < opt_blocks; i++) s->blk[i] = new_block(s, i);
  }

  double t0 = bench_now();
  for (unsigned t = 0; t < threads; t++) {
    pthread_t tid;
    bench_spawn(&tid, run, &slots[t]);
  }
  bench_sleep(duration);
  atomic_store_explicit(&stop, 1, memory_order_relaxed);
  for (unsigned t = 0; t < threads; t++) {
    while (!atomic_load_explicit(&slots[t].done, memory_order_acquire)) bench_sleep(0.0005);
  }
  double elapsed = bench_now() - t0;

  uint64_t ops = 0, generations = 0, check = 0;
  int create_error = 0;
  for (unsigned t = 0; t < threads; t++) {
    struct slot *s = &slots[t];
    bench_join(s->last);
    ops += s->ops;
    generations += s->generations;
    check += s->check;
    if (s->create_error) create_error = s->create_error;
    for (size_t i = 0; i < opt_blocks; i++) free(s->blk[i]);
    free(s->blk);
    free(s->size);
    bench_live_done(&s->live);
  }
  bench_check_add(check);
  if (create_error) bench_die("pthread_create: %s", strerror(create_error));

  bench_result_begin("larson", threads, "ops_per_s", (double)ops / elapsed, "ops/s");
  bench_kv_u64("ops", ops);
  bench_kv_dbl("elapsed_s", elapsed);
  bench_kv_u64("thread_generations", generations);
  bench_kv_u64("blocks", opt_blocks);
  bench_kv_u64("rounds", opt_rounds);
  bench_kv_u64("min", opt_min);
  bench_kv_u64("max", opt_max);
  bench_result_end();
  return 0;
}
