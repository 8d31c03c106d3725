/* pattern: separates an allocator's address pattern from its code. `record`
 * allocates like the sizes benchmark (64-256 B by default) under whatever
 * allocator is preloaded and writes one cycle's block addresses and sizes to a file;
 * `replay` reads two such files and walks each pattern over plain mmap'd
 * memory, one after the other, timing the reads: no allocator runs while it
 * measures. `spread` runs randalloc's loop (one thread) and counts the distinct
 * cache lines and pages its touches (a block's first and last byte) reach:
 * what the program's caches and TLB must hold. Diagnostic only
 * (docs/benchmarks.md, "sizes at 64-256 B" and "A block-cache hit, shorter"). */
#define _GNU_SOURCE
#include <sys/mman.h>

#include "bench.h"

#define N_OBJ  65536 /* most blocks a cycle records (and a replay loads) */
#define BUF_SZ ((size_t)64 << 20)

static void usage(void) {
  fprintf(stderr, "usage: pattern record FILE [-c cycle] [-n blocks] [-m min] [-M max]\n"
                  "       pattern replay FILE_A FILE_B [-r rounds]\n"
                  "       pattern spread [-n ops] [-m min] [-M max] [-k slots]\n"
                  "  record: the addresses of cycle `cycle` (100) of a sizes-like loop of\n"
                  "          `blocks` blocks a cycle (65536; fewer for big sizes, so that a\n"
                  "          cycle fits the replay's 64 MiB)\n"
                  "  replay: time 4 read passes over each pattern per round (300 rounds);\n"
                  "          prints the last pass's total time for A and for B\n"
                  "  spread: randalloc -t 1's loop, `ops` operations (1000000) on blocks of\n"
                  "          min..max bytes (16384..65536) in `slots` slots (400); prints the\n"
                  "          distinct lines and pages its touches reach\n");
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

/* A set of line or page numbers in mmap'd memory (no malloc while the
 * preloaded allocator is measured): open addressing, never more than half full. */
struct set {
  uint64_t *slot, mask, n;
};
static void set_init(struct set *s, uint64_t cap) {
  s->slot =
      mmap(NULL, cap * sizeof *s->slot, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (s->slot == MAP_FAILED) bench_die("mmap: %s", strerror(errno));
  s->mask = cap - 1;
  s->n = 0;
}
static void set_add(struct set *s, uint64_t key) {
  key++; /* 0 marks an empty slot */
  for (uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> 20;; i++) {
    uint64_t *e = &s->slot[i & s->mask];
    if (*e == key) return;
    if (!*e) {
      if (++s->n > s->mask / 2) bench_die("spread: more than %" PRIu64 " keys", s->mask / 2);
      *e = key;
      return;
    }
  }
}
static void touch(struct set *lines, struct set *pages, const char *p) {
  set_add(lines, (uintptr_t)p >> 6);
  set_add(pages, (uintptr_t)p >> 12);
}

static int spread(uint64_t ops, uint64_t min, uint64_t max, uint64_t slots) {
  char **blk = bench_xmalloc(slots * sizeof *blk);
  size_t *size = bench_xmalloc(slots * sizeof *size), live = 0;
  struct set lines, pages;
  set_init(&lines, (uint64_t)1 << 24);
  set_init(&pages, (uint64_t)1 << 22);
  struct bench_rng rng;
  bench_rng_seed(&rng, 1, 0);
  while (live < slots / 2) {
    size[live] = bench_rng_range(&rng, (size_t)min, (size_t)max);
    blk[live] = bench_xmalloc(size[live]);
    blk[live][0] = 1;
    live++;
  }
  for (uint64_t op = 0; op < ops; op++) {
    uint64_t r = bench_rng_next(&rng);
    if (live == 0 || (live < slots && (r & 1))) {
      size_t sz = (size_t)min + (size_t)((r >> 32) % (max - min + 1));
      char *p = bench_xmalloc(sz);
      p[0] = 1;
      p[sz - 1] = 2;
      touch(&lines, &pages, p);
      touch(&lines, &pages, p + sz - 1);
      blk[live] = p;
      size[live++] = sz;
    } else {
      size_t i = bench_rng_below(&rng, (uint32_t)live);
      touch(&lines, &pages, blk[i]);
      free(blk[i]);
      blk[i] = blk[--live];
      size[i] = size[live];
    }
  }
  printf("spread ops=%" PRIu64 " lines=%" PRIu64 " pages=%" PRIu64 "\n", ops, lines.n, pages.n);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) usage();
  uint64_t cycle = 100, min = 64, max = 256, rounds = 300, nobj = N_OBJ;
  uint64_t ops = 1000000, slots = 400;
  bool rec = strcmp(argv[1], "record") == 0, spr = strcmp(argv[1], "spread") == 0;
  if (spr) min = 16384, max = 65536;
  if ((rec && argc < 3) || (!rec && !spr && (strcmp(argv[1], "replay") != 0 || argc < 4))) usage();
  int first = spr ? 2 : rec ? 3 : 4, c;
  optind = first;
  while ((c = getopt(argc, argv, "c:n:m:M:r:k:")) != -1) {
    switch (c) {
    case 'c':
      cycle = bench_parse_u64(optarg, 'c');
      break;
    case 'n':
      nobj = ops = bench_parse_u64(optarg, 'n');
      break;
    case 'k':
      slots = bench_parse_u64(optarg, 'k');
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
  if (spr) {
    if (optind != argc || min < 1 || max < min || slots < 1 || slots > UINT32_MAX) usage();
    return spread(ops, min, max, slots);
  }
  if (optind != argc || min < 1 || max < min || nobj < 1 || nobj > N_OBJ) usage();
  return rec ? record(argv[2], cycle, (size_t)nobj, min, max) : replay(argv[2], argv[3], rounds);
}
