/* lifo: instruction cost of the fast path; one thread does LIFO malloc/free pairs over sizes
 * 16..512 B, run under callgrind at two pair counts to get instructions per pair (the "handful
 * of instructions" of serial allocators, Hoard (ASPLOS'00) sec. 5); also timed natively. */
#include "bench.h"

#define MAX_DEPTH 64

int main(int argc, char **argv) {
  uint64_t pairs = 10000000, depth = 8, min = 16, max = 512, step = 16;
  int c;
  while ((c = getopt(argc, argv, "t:n:d:m:M:g:h")) != -1) {
    switch (c) {
    case 't': /* accepted for uniformity with the others; always one thread */
      if (bench_parse_u64(optarg, 't') != 1) bench_die("lifo runs one thread only (-t 1)");
      break;
    case 'n':
      pairs = bench_parse_u64(optarg, 'n');
      break;
    case 'd':
      depth = bench_parse_u64(optarg, 'd');
      break;
    case 'm':
      min = bench_parse_u64(optarg, 'm');
      break;
    case 'M':
      max = bench_parse_u64(optarg, 'M');
      break;
    case 'g':
      step = bench_parse_u64(optarg, 'g');
      break;
    default:
      fprintf(stderr,
              "usage: lifo [-t 1] [-n pairs] [-d depth] [-m min] [-M max] [-g step]\n"
              "  -n  malloc+free pairs (10000000)   -d blocks live at most (8, max %d)\n"
              "  -m/-M/-g  sizes cycle min, min+step, ..., max (16, 512, 16)\n",
              MAX_DEPTH);
      return 2;
    }
  }
  if (optind != argc || depth < 1 || depth > MAX_DEPTH || min < 1 || max < min || step < 1) {
    fprintf(stderr, "lifo: bad arguments (try -h)\n");
    return 2;
  }

  char *stack[MAX_DEPTH];
  uint64_t check = 0;
  size_t size = (size_t)min;
  double t0 = bench_now();
  for (uint64_t done = 0; done < pairs;) {
    size_t d = 0;
    for (; d < depth && done + d < pairs; d++) {
      char *p = bench_xmalloc(size);
      p[0] = (char)d;
      stack[d] = p;
      size += (size_t)step;
      if (size > max) size = (size_t)min;
    }
    done += d;
    while (d > 0) {
      d--;
      check += (unsigned char)stack[d][0];
      free(stack[d]);
    }
  }
  double elapsed = bench_now() - t0;
  bench_check_add(check);

  bench_live_note_peak((int64_t)(depth * max));
  bench_result_begin("lifo", 1, "ns_per_pair", pairs ? elapsed * 1e9 / (double)pairs : 0.0, "ns");
  bench_kv_u64("ops", 2 * pairs);
  bench_kv_dbl("elapsed_s", elapsed);
  bench_kv_u64("pairs", pairs);
  bench_kv_u64("depth", depth);
  bench_kv_u64("min", min);
  bench_kv_u64("max", max);
  bench_result_end();
  return 0;
}
