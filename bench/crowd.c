/* crowd: thousands of threads live at once, each holding -b small blocks (16-512 B), then
 * all joined. What an allocator keeps per thread (its heap, and a span or a page for each
 * size class the thread touched), times the thread count: the footprint of a server with a
 * thread per connection (LKmalloc sec. 4, thread independence). Joining them also pushes
 * the C library's cache of thread stacks past its bound, so it frees the cached stacks' TLS
 * while it holds the cache's lock: an allocator that starts a thread from such a free hangs.
 * Metric: RSS with every thread live, less RSS before, per thread (KiB); the threads' 64 KiB
 * stacks count the same under every allocator. With -k, each thread leaves -k of its blocks
 * live when it exits, and after the joins (and -w) the main thread allocates -a blocks of the
 * same sizes: how much of the room the crowd left between its leftovers serves them
 * (after_grow_kib, the RSS that allocation added). */
#include "bench.h"

static unsigned nthreads = 1000, opt_blocks = 64;
static uint64_t opt_seed = 1;
static double opt_wait;              /* -w: idle seconds after the joins, then RSS again */
static unsigned opt_keep, opt_after; /* -k: blocks each thread leaves live; -a: then allocated */
static unsigned char **kept;         /* nthreads * opt_keep leftovers */
static pthread_barrier_t all_up, go;

static void *run(void *arg) {
  unsigned id = (unsigned)(uintptr_t)arg;
  struct bench_rng r;
  bench_rng_seed(&r, opt_seed, id);
  unsigned char *b[256];
  size_t n[256];
  uint64_t check = 0;
  for (unsigned i = 0; i < opt_blocks; i++) {
    n[i] = bench_rng_range(&r, 16, 512);
    b[i] = bench_xmalloc(n[i]);
    memset(b[i], (int)(id + i), n[i]);
  }
  pthread_barrier_wait(&all_up); /* every thread live, holding its blocks */
  pthread_barrier_wait(&go);     /* main has read RSS */
  for (unsigned i = 0; i < opt_blocks; i++) {
    check += b[i][n[i] - 1];
    unsigned step = opt_keep ? opt_blocks / opt_keep : 0; /* leftovers spread over sizes */
    if (step && i % step == 0 && i / step < opt_keep)
      kept[(size_t)id * opt_keep + i / step] = b[i];
    else
      free(b[i]);
  }
  bench_check_add(check);
  return NULL;
}

static void usage(void) {
  fprintf(stderr, "usage: crowd [-t threads] [-b blocks] [-w seconds] [-k keep] [-a after] "
                  "[-S seed]\n"
                  "  -t  threads live at once (1000; up to 100000)\n"
                  "  -b  blocks of 16-512 B each thread holds (64; up to 256)\n"
                  "  -w  idle seconds after the joins, then RSS again (0)\n"
                  "  -k  blocks each thread leaves live when it exits (0; up to -b)\n"
                  "  -a  blocks of 16-512 B the main thread then allocates (0)\n");
  exit(2);
}

int main(int argc, char **argv) {
  int c;
  while ((c = getopt(argc, argv, "t:b:w:k:a:S:h")) != -1) {
    switch (c) {
    case 't':
      nthreads = (unsigned)bench_parse_u64(optarg, 't');
      break;
    case 'b':
      opt_blocks = (unsigned)bench_parse_u64(optarg, 'b');
      break;
    case 'w':
      opt_wait = bench_parse_double(optarg, 'w');
      break;
    case 'k':
      opt_keep = (unsigned)bench_parse_u64(optarg, 'k');
      break;
    case 'a':
      opt_after = (unsigned)bench_parse_u64(optarg, 'a');
      break;
    case 'S':
      opt_seed = bench_parse_u64(optarg, 'S');
      break;
    default:
      usage();
    }
  }
  if (optind != argc || nthreads < 1 || nthreads > 100000 || opt_blocks < 1 || opt_blocks > 256 ||
      opt_keep > opt_blocks || opt_after > 10000000)
    usage();
  if (opt_keep) kept = bench_xmalloc(sizeof *kept * nthreads * opt_keep);

  pthread_t *tid = bench_xmalloc(sizeof(pthread_t) * nthreads);
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setstacksize(&at, 64 << 10);
  bench_barrier_init(&all_up, nthreads + 1);
  bench_barrier_init(&go, nthreads + 1);
  long base = bench_rss_kib();
  double t0 = bench_now();
  for (unsigned i = 0; i < nthreads; i++) {
    int rc = pthread_create(&tid[i], &at, run, (void *)(uintptr_t)i);
    if (rc != 0) bench_die("pthread_create (thread %u of %u): %s", i, nthreads, strerror(rc));
  }
  pthread_barrier_wait(&all_up);
  long live = bench_rss_kib();
  pthread_barrier_wait(&go);
  for (unsigned i = 0; i < nthreads; i++) bench_join(tid[i]);
  double secs = bench_now() - t0;
  long end = bench_rss_kib();
  pthread_attr_destroy(&at);
  free(tid);
  long idle = end;
  if (opt_wait > 0) { /* no allocator call meanwhile: what the allocator gives back alone */
    bench_sleep(opt_wait);
    idle = bench_rss_kib();
  }
  long after = idle;
  if (opt_after) { /* blocks of the crowd's sizes, written, kept until the end */
    unsigned char **a = bench_xmalloc(sizeof *a * opt_after);
    struct bench_rng r;
    bench_rng_seed(&r, opt_seed, nthreads);
    for (unsigned i = 0; i < opt_after; i++) {
      size_t n = bench_rng_range(&r, 16, 512);
      a[i] = bench_xmalloc(n);
      memset(a[i], (int)i, n);
    }
    after = bench_rss_kib();
    for (unsigned i = 0; i < opt_after; i++) free(a[i]);
    free(a);
  }
  for (size_t i = 0; i < (size_t)nthreads * opt_keep; i++) free(kept[i]);
  free(kept);

  bench_result_begin("crowd", nthreads, "kib_per_thread", (double)(live - base) / (double)nthreads,
                     "KiB");
  bench_kv_u64("blocks", opt_blocks);
  bench_kv_u64("rss_base_kib", (uint64_t)base);
  bench_kv_u64("rss_live_kib", (uint64_t)live);
  bench_kv_u64("rss_end_kib", (uint64_t)end);
  bench_kv_u64("rss_idle_kib", (uint64_t)idle);
  if (opt_after) {
    bench_kv_u64("keep", opt_keep);
    bench_kv_u64("after", opt_after);
    bench_kv_dbl("after_grow_kib", (double)(after - idle));
  }
  bench_kv_dbl("seconds", secs);
  bench_result_end();
  return 0;
}
