/* pattern: separates an allocator's address pattern from its code. `record`
 * allocates like the sizes benchmark (64-256 B by default) under whatever
 * allocator is preloaded and writes one cycle's block addresses and sizes to a file;
 * `replay` reads two such files and walks each pattern over plain mmap'd
 * memory, one after the other, timing the reads: no allocator runs while it
 * measures. Diagnostic only (docs/benchmarks.md, "sizes at 64-256 B"). */
#define _GNU_SOURCE
#include <sys/mman.h>

#include "bench.h"

#define N_OBJ  65536 /* most blocks a cycle records (and a replay loads) */
#define BUF_SZ ((size_t)64 << 20)

static void usage(void) {
  fprintf(stderr, "usage: pattern record FILE [-c cycle] [-n blocks] [-m min] [-M max]\n"
                  "       pattern replay FILE_A FILE_B [-r rounds]\n"
                  "  record: the addresses of cycle `cycle` (100) of a sizes-like loop of\n"
                  "          `blocks` blocks a cycle (65536; fewer for big sizes, so that a\n"
                  "          cycle fits the replay's 64 MiB)\n"
                  "  replay: time 4 read passes over each pattern per round (300 rounds);\n"
                  "          prints the last pass's total time for A and for B\n");
  exit(2);
}

static int record(const char *file, uint64_t cycle, size_t nobj, uint64_t min, uint64_t max) {
  char **obj = bench_xmalloc(nobj * sizeof *obj);
  size_t *size = bench_xmalloc(nobj * sizeof *size);
  struct bench_rng rng;
  bench_rng_seed(&rng, 1, 0);
  FILE *f = fopen(file, "w");
  if (!f) bench_die("%s: %s", file, strerror(errno));
  for (uint64_t c = 0; c <= cycle; c++) {
    for (size_t i = 0; i < nobj; i++) {
      size_t sz = bench_rng_range(&rng, (size_t)min, (size_t)max);
      char *p = bench_xmalloc(sz);
      p[0] = 1;
      p[sz - 1] = 2;
      obj[i] = p;
      size[i] = sz;
    }
    if (c == cycle)
      for (size_t i = 0; i < nobj; i++)
        fprintf(f, "%" PRIxPTR " %zu\n", (uintptr_t)obj[i], size[i]);
    for (size_t i = 0; i < nobj; i++) free(obj[i]);
  }
  free(obj);
  free(size);
  return fclose(f) == 0 ? 0 : 1;
}

/* Maps a recorded pattern onto buf at the same offsets from its lowest page. */
static size_t load(const char *file, char *buf, char **at) {
  FILE *f = fopen(file, "r");
  if (!f) bench_die("%s: %s", file, strerror(errno));
  static uintptr_t a[N_OBJ];
  size_t n = 0;
  uintptr_t lo = UINTPTR_MAX, x;
  while (n < N_OBJ && fscanf(f, "%" SCNxPTR "%*[^\n]", &x) == 1) {
    a[n++] = x;
    if (x < lo) lo = x;
  }
  fclose(f);
  lo &= ~(uintptr_t)4095;
  for (size_t i = 0; i < n; i++) {
    if (a[i] - lo >= BUF_SZ - 4096) bench_die("%s: pattern spans over %zu MiB", file, BUF_SZ >> 20);
    at[i] = buf + (a[i] - lo);
  }
  return n;
}

static char *fresh(void) {
  char *b = mmap(NULL, BUF_SZ, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (b == MAP_FAILED) bench_die("mmap: %s", strerror(errno));
  memset(b, 1, BUF_SZ);
  return b;
}

static double walk(char **at, size_t n, uint64_t *sum) {
  double t0 = bench_now();
  uint64_t s = 0;
  for (size_t i = 0; i < n; i++) s += (unsigned char)at[i][0];
  *sum += s;
  return bench_now() - t0;
}

static int replay(const char *fa, const char *fb, uint64_t rounds) {
  static char *a[N_OBJ], *b[N_OBJ];
  size_t na = load(fa, fresh(), a), nb = load(fb, fresh(), b);
  double ta = 0, tb = 0;
  uint64_t sum = 0;
  for (uint64_t r = 0; r < rounds; r++) {
    double t = 0;
    for (int k = 0; k < 4; k++) t = walk(a, na, &sum);
    ta += t;
    for (int k = 0; k < 4; k++) t = walk(b, nb, &sum);
    tb += t;
  }
  printf("A %s %.4f s  B %s %.4f s  (sum %" PRIu64 ")\n", fa, ta, fb, tb, sum);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) usage();
  uint64_t cycle = 100, min = 64, max = 256, rounds = 300, nobj = N_OBJ;
  bool rec = strcmp(argv[1], "record") == 0;
  if (!rec && (strcmp(argv[1], "replay") != 0 || argc < 4)) usage();
  int first = rec ? 3 : 4, c;
  optind = first;
  while ((c = getopt(argc, argv, "c:n:m:M:r:")) != -1) {
    switch (c) {
    case 'c':
      cycle = bench_parse_u64(optarg, 'c');
      break;
    case 'n':
      nobj = bench_parse_u64(optarg, 'n');
      break;
    case 'm':
      min = bench_parse_u64(optarg, 'm');
      break;
    case 'M':
      max = bench_parse_u64(optarg, 'M');
      break;
    case 'r':
      rounds = bench_parse_u64(optarg, 'r');
      break;
    default:
      usage();
    }
  }
  if (optind != argc || min < 1 || max < min || nobj < 1 || nobj > N_OBJ) usage();
  return rec ? record(argv[2], cycle, (size_t)nobj, min, max) : replay(argv[2], argv[3], rounds);
}
