/* footprint: what an allocator costs a small program. Threads each allocate -n blocks of -s
 * bytes and write them; with all of them live, and again after every block is freed, the
 * program splits its resident memory, from /proc/self/smaps_rollup, into private dirty pages
 * (heap, stacks, tables: what the allocator really costs) and shared clean pages (code of the
 * program and its libraries, mapped in 64 KiB fault-around chunks when a function is first
 * called). ru_maxrss counts both. It also sums the private writable mappings, from
 * /proc/self/maps: what a kernel with strict overcommit (vm.overcommit_memory=2) charges the
 * program, whether or not the pages were touched. */
#include "bench.h"

static uint64_t opt_blocks = 1000, opt_size = 8;
static pthread_barrier_t live, freed;

static void *run(void *arg) {
  (void)arg;
  char **p = bench_xmalloc(opt_blocks * sizeof *p);
  for (uint64_t i = 0; i < opt_blocks; i++) {
    p[i] = bench_xmalloc(opt_size);
    memset(p[i], (int)(i & 0xff), opt_size);
  }
  pthread_barrier_wait(&live);  /* main looks at the peak */
  pthread_barrier_wait(&freed); /* and lets the threads free */
  uint64_t check = 0;
  for (uint64_t i = 0; i < opt_blocks; i++) {
    check += (unsigned char)p[i][opt_size - 1];
    free(p[i]);
  }
  free(p);
  bench_check_add(check);
  return NULL;
}

/* The value of one "Name:   N kB" line of smaps_rollup, or -1. */
static long rollup_kib(const char *text, const char *name) {
  const char *at = strstr(text, name);
  return at ? strtol(at + strlen(name), NULL, 10) : -1;
}

struct mem {
  long rss, priv, shared, writable;
};

static struct mem measure(void) {
  char text[4096];
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  if (!f) bench_die("cannot open /proc/self/smaps_rollup");
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  struct mem m = {rollup_kib(text, "Rss:"), rollup_kib(text, "Private_Dirty:"),
                  rollup_kib(text, "Shared_Clean:"), bench_maps_kib(false)};
  if (m.rss < 0 || m.priv < 0 || m.shared < 0) bench_die("unexpected smaps_rollup format");
  return m;
}

int main(int argc, char **argv) {
  unsigned threads = 1;
  int c;
  while ((c = getopt(argc, argv, "t:n:s:h")) != -1) {
    if (c == 't')
      threads = bench_parse_threads(optarg, 't');
    else if (c == 'n')
      opt_blocks = bench_parse_u64(optarg, 'n');
    else if (c == 's')
      opt_size = bench_parse_u64(optarg, 's');
    else {
      fprintf(stderr, "usage: footprint [-t threads] [-n blocks per thread (1000)] "
                      "[-s block size (8)]\n");
      return 2;
    }
  }
  if (optind != argc || opt_blocks == 0 || opt_size == 0) bench_die("bad arguments");
  pthread_t tid[BENCH_MAX_THREADS];
  bench_barrier_init(&live, threads + 1);
  bench_barrier_init(&freed, threads + 1);
  for (unsigned i = 0; i < threads; i++) bench_spawn(&tid[i], run, NULL);
  pthread_barrier_wait(&live);
  struct mem peak = measure();
  pthread_barrier_wait(&freed);
  for (unsigned i = 0; i < threads; i++) bench_join(tid[i]);
  struct mem end = measure();
  bench_result_begin("footprint", threads, "private_dirty_kib", (double)peak.priv, "KiB");
  bench_kv_u64("rss_kib", (uint64_t)peak.rss);
  bench_kv_u64("shared_clean_kib", (uint64_t)peak.shared);
  bench_kv_u64("end_private_dirty_kib", (uint64_t)end.priv);
  bench_kv_u64("end_rss_kib", (uint64_t)end.rss);
  bench_kv_u64("writable_kib", (uint64_t)peak.writable);
  bench_kv_u64("end_writable_kib", (uint64_t)end.writable);
  bench_kv_u64("blocks", opt_blocks);
  bench_kv_u64("size", opt_size);
  bench_result_end();
  return 0;
}
