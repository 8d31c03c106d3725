/* charge: what an allocator leaves charged against the kernel's commit limit once memory is
 * freed (vm.overcommit_memory=2 charges every private writable mapping in full). It allocates
 * -b bytes in blocks of -s bytes and writes them, frees them all, then either calls
 * malloc_trim(0) (-m trim) or keeps making small allocations for -w ms (-m wait), so that
 * timed purging has its chance. It reports the system's Committed_AS and its own private
 * writable mappings before, with the blocks and after, as deltas. With -m churn it instead
 * cycles for -w ms through batches of mixed blocks (3% of them 0.1-3 MiB), half freed, then a
 * trim every third cycle, the rest freed, a trim every second: the most mappings the process
 * had at once and at the end (what decommitting memory costs the memory map). */
#include <malloc.h>
#include <stdbool.h>

#include "bench.h"

static uint64_t opt_bytes = (uint64_t)1 << 30, opt_size = 1000, opt_wait_ms = 2000;

static void idle_activity(uint64_t ms) {
  double end = bench_now() + (double)ms / 1000;
  while (bench_now() < end) {
    for (int k = 0; k < 100; k++) free(bench_xmalloc(64 + (size_t)k));
    free(bench_xmalloc(200000));
    usleep(1000);
  }
}

static int churn(void) {
  enum { N = 20000 };
  static char *b[N];
  struct bench_rng rng;
  bench_rng_seed(&rng, 1, 0);
  double end = bench_now() + (double)opt_wait_ms / 1000;
  long most = 0;
  uint64_t cycles = 0;
  for (; bench_now() < end; cycles++) {
    for (int i = 0; i < N; i++) {
      size_t sz = bench_rng_below(&rng, 100) < 97 ? bench_rng_range(&rng, 16, 2000)
                                                  : bench_rng_range(&rng, 100000, 3000000);
      b[i] = bench_xmalloc(sz);
      memset(b[i], 1, sz < 4096 ? sz : 4096);
    }
    for (int i = 0; i < N; i++)
      if (bench_rng_below(&rng, 2)) {
        free(b[i]);
        b[i] = NULL;
      }
    if (cycles % 3 == 0) malloc_trim(0);
    for (int i = 0; i < N; i++) free(b[i]);
    if (cycles % 2 == 0) malloc_trim(0);
    long m = bench_maps_kib(true);
    if (m > most) most = m;
  }
  bench_result_begin("charge-churn", 1, "most_mappings", (double)most, "mappings");
  bench_kv_u64("end_mappings", (uint64_t)bench_maps_kib(true));
  bench_kv_u64("cycles", cycles);
  bench_result_end();
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = "trim";
  int c;
  while ((c = getopt(argc, argv, "b:s:m:w:h")) != -1) {
    if (c == 'b')
      opt_bytes = bench_parse_u64(optarg, 'b');
    else if (c == 's')
      opt_size = bench_parse_u64(optarg, 's');
    else if (c == 'm')
      mode = optarg;
    else if (c == 'w')
      opt_wait_ms = bench_parse_u64(optarg, 'w');
    else {
      fprintf(stderr, "usage: charge [-b bytes (1G)] [-s block size (1000)] [-m trim|wait|churn] "
                      "[-w ms (2000)]\n");
      return 2;
    }
  }
  bool trim = !strcmp(mode, "trim");
  if (!strcmp(mode, "churn")) return churn();
  if (optind != argc || opt_size == 0 || opt_size > opt_bytes || (!trim && strcmp(mode, "wait")))
    bench_die("bad arguments (-m takes trim, wait or churn)");
  size_t n = opt_bytes / opt_size;
  char **b = bench_xmalloc(n * sizeof *b);
  long c0 = bench_committed_kib(), w0 = bench_maps_kib(false);
  for (size_t i = 0; i < n; i++) {
    b[i] = bench_xmalloc(opt_size);
    memset(b[i], 1, opt_size);
  }
  long c1 = bench_committed_kib(), w1 = bench_maps_kib(false);
  uint64_t check = 0;
  for (size_t i = 0; i < n; i++) {
    check += (unsigned char)b[i][opt_size - 1];
    free(b[i]);
  }
  if (trim)
    malloc_trim(0);
  else
    idle_activity(opt_wait_ms);
  long c2 = bench_committed_kib(), w2 = bench_maps_kib(false);
  bench_check_add(check);
  bench_result_begin("charge", 1, "committed_after_kib", (double)(c2 - c0), "KiB");
  bench_kv_str("mode", mode);
  bench_kv_u64("size", opt_size);
  bench_kv_dbl("committed_with_kib", (double)(c1 - c0));
  bench_kv_dbl("writable_with_kib", (double)(w1 - w0));
  bench_kv_dbl("writable_after_kib", (double)(w2 - w0));
  bench_result_end();
  free(b);
  return 0;
}
