/* copy: one thread copies an -s byte message into a new block that has an -H byte header in
 * front of it (a string or buffer object), then frees both, -n times. On an AMD Zen 3, glibc
 * 2.36 copies 4 KiB and more with `rep movsb`, 20-30x slower when the destination lies 8-24
 * bytes past the source modulo 4 KiB, so the time follows where the allocator puts its blocks
 * of a page and more (docs/benchmarks.md, "Run classes at varying page offsets"). */
#include "bench.h"

int main(int argc, char **argv) {
  uint64_t iters = 100000, size = 18000, header = 24;
  int c;
  while ((c = getopt(argc, argv, "t:n:s:H:h")) != -1) {
    switch (c) {
    case 't': /* accepted for uniformity with the others; always one thread */
      if (bench_parse_u64(optarg, 't') != 1) bench_die("copy runs one thread only (-t 1)");
      break;
    case 'n':
      iters = bench_parse_u64(optarg, 'n');
      break;
    case 's':
      size = bench_parse_u64(optarg, 's');
      break;
    case 'H':
      header = bench_parse_u64(optarg, 'H');
      break;
    default:
      fprintf(stderr, "usage: copy [-t 1] [-n copies] [-s bytes] [-H header bytes]\n"
                      "  -n  copies (100000)   -s  message size (18000)   -H  header (24)\n");
      return 2;
    }
  }
  if (optind != argc || size < 1 || size > ((uint64_t)1 << 30) || header > 4096) {
    fprintf(stderr, "copy: bad arguments (try -h)\n");
    return 2;
  }
  uint64_t check = 0;
  double t0 = bench_now();
  for (uint64_t i = 0; i < iters; i++) {
    char *msg = bench_xmalloc((size_t)size);
    msg[0] = (char)i;
    msg[size - 1] = (char)(i >> 8);
    char *obj = bench_xmalloc((size_t)(size + header));
    memcpy(obj + header, msg, (size_t)size);
    check += (unsigned char)obj[header] + (unsigned char)obj[header + size - 1];
    free(msg);
    free(obj);
  }
  double elapsed = bench_now() - t0;
  bench_check_add(check);
  bench_live_note_peak((int64_t)(2 * size + header));
  bench_result_begin("copy", 1, "time_s", elapsed, "s");
  bench_kv_u64("ops", 2 * iters);
  bench_kv_u64("size", size);
  bench_kv_u64("header", header);
  bench_result_end();
  return 0;
}
