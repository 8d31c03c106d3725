/* phases: a program whose block size changes from phase to phase, as a server's does when
 * its load shifts between kinds of request. In each phase every one of t threads allocates
 * and writes b bytes of blocks of the phase's size, all threads hold them at once, then
 * free them all. The sizes cycle through 48 B, 1,000 B, 3,000 B, 300 KB, 20 KB, 100 B,
 * 6,000 B, 700 B and 2 MB, which rill serves from spans of four orders and from runs, so
 * one phase's freed memory seldom fits the next one's blocks. Reports the time, the
 * peak live bytes and the highest resident set seen at a phase's peak (LKmalloc sec. 4:
 * a server's footprint must follow what it uses). */
#include "bench.h"

static const size_t sizes[] = {48, 1000, 3000, 300000, 20000, 100, 6000, 700, 2000000};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static pthread_barrier_t phase_barrier;
static struct bench_span span = BENCH_SPAN_INIT;
static uint64_t opt_rounds = 3, opt_bytes = 24u << 20;
static _Atomic int64_t rss_peak_kib;

static void *run(void *arg) {
  (void)arg;
  uint64_t check = 0;
  pthread_barrier_wait(&phase_barrier);
  bench_span_begin(&span);
  for (uint64_t r = 0; r < opt_rounds; r++)
    for (size_t k = 0; k < NSIZES; k++) {
      size_t sz = sizes[k], n = opt_bytes / sz ? opt_bytes / sz : 1;
      char **v = bench_xmalloc(n * sizeof *v);
      for (size_t i = 0; i < n; i++) {
        v[i] = bench_xmalloc(sz);
        memset(v[i], (int)(i + k), sz);
      }
      bench_live_shared((int64_t)(n * (sz + sizeof *v)));
      /* every thread holds its blocks: the phase's peak */
      if (pthread_barrier_wait(&phase_barrier) == PTHREAD_BARRIER_SERIAL_THREAD)
        bench_atomic_max(&rss_peak_kib, bench_rss_kib());
      pthread_barrier_wait(&phase_barrier);
      for (size_t i = 0; i < n; i++) {
        check += (unsigned char)v[i][sz - 1];
        free(v[i]);
      }
      free(v);
      bench_live_shared(-(int64_t)(n * (sz + sizeof *v)));
      pthread_barrier_wait(&phase_barrier);
    }
  bench_check_add(check);
  bench_span_end(&span);
  return NULL;
}

static void usage(void) {
  fprintf(stderr, "usage: phases [-t threads] [-r rounds] [-b bytes]\n"
                  "  -r  rounds through the nine sizes (3)\n"
                  "  -b  bytes each thread holds per phase (24M; K, M and G suffixes)\n");
  exit(2);
}

int main(int argc, char **argv) {
  unsigned threads = 4;
  int c;
  while ((c = getopt(argc, argv, "t:r:b:h")) != -1) {
    switch (c) {
    case 't':
      threads = bench_parse_threads(optarg, 't');
      break;
    case 'r':
      opt_rounds = bench_parse_u64(optarg, 'r');
      break;
    case 'b':
      opt_bytes = bench_parse_u64(optarg, 'b');
      break;
    default:
      usage();
    }
  }
  if (optind != argc || opt_bytes < 1) usage();

  pthread_t tid[BENCH_MAX_THREADS];
  bench_barrier_init(&phase_barrier, threads);
  for (unsigned i = 1; i < threads; i++) bench_spawn(&tid[i], run, NULL);
  run(NULL);
  for (unsigned i = 1; i < threads; i++) bench_join(tid[i]);
  double elapsed = bench_span_seconds(&span);
  pthread_barrier_destroy(&phase_barrier);

  int64_t live = bench_live_peak_bytes(), rss = atomic_load(&rss_peak_kib);
  bench_result_begin("phases", threads, "time_s", elapsed, "s");
  bench_kv_u64("rounds", opt_rounds);
  bench_kv_u64("bytes", opt_bytes);
  bench_kv_u64("peak_live_kib", (uint64_t)(live >> 10));
  bench_kv_u64("phase_rss_kib", (uint64_t)rss);
  bench_kv_dbl("blowup", live > 0 ? (double)rss * 1024.0 / (double)live : 0.0);
  bench_result_end();
  return 0;
}
