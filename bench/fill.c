/* fill: mallocs blocks of -s bytes (1,000), writing each, until malloc returns NULL, and
 * reports the MiB it got: how much of an address-space limit (ulimit -v) an allocator
 * lets a program use. Run it under a limit, e.g.
 *   bash -c "ulimit -v 3145728; LD_PRELOAD=LIB build/bench/bench_fill"
 * Not run by the driver; see docs/benchmarks.md, "Under an address-space limit". */
#include "bench.h"

int main(int argc, char **argv) {
  uint64_t size = 1000, cap = (uint64_t)1 << 40;
  int c;
  while ((c = getopt(argc, argv, "t:s:M:h")) != -1) {
    switch (c) {
    case 't':
      if (bench_parse_u64(optarg, 't') != 1) bench_die("fill runs one thread only (-t 1)");
      break;
    case 's':
      size = bench_parse_u64(optarg, 's');
      break;
    case 'M': /* stop after this many bytes even if malloc never fails */
      cap = bench_parse_u64(optarg, 'M');
      break;
    default:
      bench_die("usage: fill [-s block bytes] [-M stop after bytes]");
    }
  }
  if (size == 0) bench_die("-s must be at least 1");
  uint64_t got = 0;
  for (;;) {
    if (got + size > cap) break;
    char *p = malloc(size);
    if (!p) break;
    memset(p, 1, size);
    got += size;
  }
  bench_result_begin("fill", 1, "mib", (double)got / (1 << 20), "MiB");
  bench_kv_u64("block_bytes", size);
  bench_kv_u64("bytes", got);
  bench_result_end();
  return 0;
}
