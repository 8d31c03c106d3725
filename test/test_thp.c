/* test_thp.c - transparent huge pages: rill's memory is in them only when RILL_HUGEPAGES=1
 * asks for them (Streamflow §3.2 superpages), and then only past the arena's first 32 MiB,
 * whatever the kernel's mode; thp_always.sh runs it with the mode set to "always".
 *   --small  eight threads hold small, medium and large blocks (about 8 MiB in all)
 *   --big    one thread holds 160 MiB of 256 B blocks
 * It sums Rss and AnonHugePages over the mappings of /proc/self/smaps that hold its blocks,
 * prints "thp: rill_rss_kib=N rill_huge_kib=M", and checks that no huge page backs them
 * unless RILL_HUGEPAGES=1 and --big (then at least 16 MiB must; exit 77 when the kernel's
 * THP mode is "never" or it has none). */
#include <pthread.h>
#include <sys/mman.h>

#include "rill_test.h"

#define THREADS      8
#define SMALL_BLOCKS 2000
#define BIG_BYTES    (160 * MiB)
#define BIG_SIZE     256

static void **ptrs;
static size_t nptrs;
static pthread_mutex_t ptrs_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t held, looked;

static void record(void *p) {
  pthread_mutex_lock(&ptrs_lock);
  ptrs[nptrs++] = p;
  pthread_mutex_unlock(&ptrs_lock);
}

/* A block of n bytes, written through (so it is resident), and remembered. */
static void *take(size_t n) {
  void *p = T_malloc(n);
  if (!p) DIE("malloc(%zu) failed", n);
  memset(p, 0xa5, n);
  record(p);
  return p;
}

/* One thread's share of --small: blocks of 16-1,024 B, 40 KiB and 300 KiB, held until the
 * main thread has read the mappings. */
static void *small_worker(void *arg) {
  uint64_t s = 0x9E3779B97F4A7C15ull * ((uintptr_t)arg + 1);
  void *mine[SMALL_BLOCKS + 10];
  size_t k = 0;
  for (int i = 0; i < SMALL_BLOCKS; i++) mine[k++] = take(16 + rng_next(&s) % 1009);
  for (int i = 0; i < 8; i++) mine[k++] = take(40 * KiB);
  for (int i = 0; i < 2; i++) mine[k++] = take(300 * KiB);
  pthread_barrier_wait(&held);
  pthread_barrier_wait(&looked);
  for (size_t i = 0; i < k; i++) T_free(mine[i]);
  return NULL;
}

static int by_address(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
  return x < y ? -1 : x > y;
}

/* Sums Rss and AnonHugePages (KiB) over the mappings holding any recorded block, and counts
 * those the kernel would back with huge pages (THPeligible: 1). */
static void measure(unsigned long *rss, unsigned long *huge, int *eligible, int *maps) {
  qsort(ptrs, nptrs, sizeof ptrs[0], by_address);
  char *buf = t_read_smaps();
  *rss = *huge = 0;
  *eligible = *maps = 0;
  bool ours = false;
  for (char *line = buf; *line;) {
    char *end = strchr(line, '\n');
    if (end) *end = 0;
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      /* the first block at or above lo: is it below hi? */
      size_t a = 0, b = nptrs;
      while (a < b) {
        size_t m = (a + b) / 2;
        if ((uintptr_t)ptrs[m] < lo)
          a = m + 1;
        else
          b = m;
      }
      ours = a < nptrs && (uintptr_t)ptrs[a] < hi;
      *maps += ours;
    } else if (ours) {
      unsigned long v;
      if (sscanf(line, "Rss: %lu kB", &v) == 1) *rss += v;
      if (sscanf(line, "AnonHugePages: %lu kB", &v) == 1) *huge += v;
      if (sscanf(line, "THPeligible: %lu", &v) == 1) *eligible += v != 0;
    }
    if (!end) break;
    line = end + 1;
  }
}

/* The kernel's THP mode, the bracketed word of the sysfs file; "" when it has none. */
static const char *thp_mode(void) {
  static char mode[32];
  char line[128] = "";
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (f) {
    if (!fgets(line, sizeof line, f)) line[0] = 0;
    fclose(f);
  }
  char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
  if (a && b && b - a - 1 < (long)sizeof mode) {
    memcpy(mode, a + 1, (size_t)(b - a - 1));
    mode[b - a - 1] = 0;
  }
  return mode;
}

int main(int argc, char **argv) {
  bool big = argc > 1 && strcmp(argv[1], "--big") == 0;
  if (argc < 2 || (!big && strcmp(argv[1], "--small") != 0)) {
    fprintf(stderr, "usage: %s --small|--big\n", argv[0]);
    return 2;
  }
  const char *env = getenv("RILL_HUGEPAGES");
  bool asked = env && strcmp(env, "1") == 0;
  const char *mode = thp_mode();
  bool expect = asked && big;
  if (expect && (!*mode || strcmp(mode, "never") == 0)) {
    printf("test_thp: not run: the kernel's THP mode is \"%s\"\n", *mode ? mode : "absent");
    return 77;
  }

  size_t cap = big ? BIG_BYTES / BIG_SIZE : THREADS * (SMALL_BLOCKS + 10);
  ptrs =
      mmap(NULL, cap * sizeof ptrs[0], PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ptrs == MAP_FAILED) DIE("mmap of the pointer table failed");
  pthread_t t[THREADS];
  if (big) {
    for (size_t i = 0; i < cap; i++) take(BIG_SIZE);
  } else {
    pthread_barrier_init(&held, NULL, THREADS + 1);
    pthread_barrier_init(&looked, NULL, THREADS + 1);
    for (uintptr_t i = 0; i < THREADS; i++)
      if (pthread_create(&t[i], NULL, small_worker, (void *)i)) DIE("pthread_create failed");
    pthread_barrier_wait(&held);
  }

  unsigned long rss, huge;
  int eligible, maps;
  measure(&rss, &huge, &eligible, &maps);
  printf("thp: mode=%s RILL_HUGEPAGES=%s %s: rill_rss_kib=%lu rill_huge_kib=%lu mappings=%d "
         "eligible=%d\n",
         mode, env ? env : "", big ? "big" : "small", rss, huge, maps, eligible);
  CHECK(maps > 0, "no mapping of /proc/self/smaps holds the blocks");
  if (expect) {
    /* past the first 32 MiB about 128 MiB are advised; the kernel may find fewer huge pages
     * free than that, not none */
    CHECK(huge >= 16 * KiB, "RILL_HUGEPAGES=1: %lu KiB of 160 MiB of blocks in huge pages", huge);
  } else {
    CHECK(huge == 0, "%lu KiB of rill's memory in huge pages (THP mode %s, RILL_HUGEPAGES=%s)",
          huge, mode, env ? env : "unset");
    if (!asked)
      CHECK(eligible == 0, "%d of rill's %d mappings may take huge pages (THP mode %s)", eligible,
            maps, mode);
  }

  if (!big) {
    pthread_barrier_wait(&looked);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  }
  return t_finish(big ? "test_thp --big" : "test_thp --small");
}
