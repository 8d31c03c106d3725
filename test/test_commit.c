/* test_commit.c - proves commit on demand (RILL_COMMIT=demand, and what RILL_COMMIT=auto does
 * under the kernel's strict overcommit): the arena and its tables are reserved without access
 * and made writable only as far as they are used, so the memory a strict kernel would charge
 * stays near what the program uses, while threads, large runs, huge blocks, thread churn and
 * fork all work across many commit steps. strict_overcommit.sh runs it under
 * vm.overcommit_memory = 2 as well (--hold, --give-back, --exhaust). */
#include <pthread.h>
#include <sys/wait.h>

#include "rill_test.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* What a strict kernel charges: the private writable mappings of this process, and the
 * protection of the mapping that holds `p` (0 if none does). */
static size_t writable_bytes(uintptr_t p, char *perm_of_p) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) DIE("cannot open /proc/self/maps");
  char line[512];
  size_t sum = 0;
  if (perm_of_p) perm_of_p[0] = 0;
  while (fgets(line, sizeof line, f)) {
    uintptr_t lo, hi;
    char perm[8];
    if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s", &lo, &hi, perm) != 3) continue;
    if (perm[1] == 'w' && perm[3] == 'p') sum += hi - lo;
    if (perm_of_p && p >= lo && p < hi) memcpy(perm_of_p, perm, 5);
  }
  fclose(f);
  return sum;
}

/* Each worker allocates small blocks of many classes, big classes' runs, a large block grown
 * in place by realloc and a huge block, fills them all, checks them and frees them: a few
 * hundred MiB of arena in all, reached by four threads at once, commit by commit. */
#define NSMALL 40000
#define NBIG   24
static void *worker(void *arg) {
  uint64_t rng = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15u + 1;
  void **small = malloc(NSMALL * sizeof *small), *big[NBIG];
  if (!small) DIE("malloc of the index");
  size_t bign[NBIG];
  for (size_t i = 0; i < NSMALL; i++) {
    size_t n = 8 + rng_next(&rng) % 2040;
    small[i] = malloc(n);
    if (!small[i]) DIE("malloc(%zu) failed", n);
    pat_fill(small[i], n, pat_seed(small[i], n));
  }
  for (size_t i = 0; i < NBIG; i++) {
    bign[i] = 40 * 1024 + rng_next(&rng) % (3 * MiB);
    big[i] = malloc(bign[i]);
    if (!big[i]) DIE("malloc(%zu) failed", bign[i]);
    pat_fill(big[i], bign[i], pat_seed(big[i], bign[i]));
  }
  size_t gn = 64 * 1024;
  char *grow = malloc(gn);
  if (!grow) DIE("malloc(%zu) failed", gn);
  pat_fill(grow, gn, 7);
  for (; gn < 24 * MiB; gn *= 2) {
    char *g = realloc(grow, gn * 2);
    if (!g) DIE("realloc to %zu failed", gn * 2);
    grow = g;
    PAT_CHECK(grow, 64 * 1024, 7, "grown block after realloc to %zu", gn * 2);
  }
  char *huge = malloc(40 * MiB);
  if (!huge) DIE("malloc(40 MiB) failed");
  pat_fill(huge, 40 * MiB, 9);
  rng = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15u + 1; /* the sizes again */
  for (size_t i = 0; i < NSMALL; i++) {
    size_t n = 8 + rng_next(&rng) % 2040;
    PAT_CHECK(small[i], n, pat_seed(small[i], n), "small block of %zu", n);
    free(small[i]);
  }
  free(small);
  PAT_CHECK(huge, 40 * MiB, 9, "huge block");
  for (size_t i = 0; i < NBIG; i++) {
    PAT_CHECK(big[i], bign[i], pat_seed(big[i], bign[i]), "big block of %zu", bign[i]);
    free(big[i]);
  }
  free(grow);
  free(huge);
  return NULL;
}

static void *churn_one(void *arg) {
  void *p = malloc(100 + (size_t)(uintptr_t)arg % 900);
  if (!p) DIE("a new thread's malloc failed");
  memset(p, 2, 100);
  free(p);
  return NULL;
}

static size_t mappings(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) DIE("cannot open /proc/self/maps");
  size_t n = 0;
  for (int c; (c = fgetc(f)) != EOF;) n += c == '\n';
  fclose(f);
  return n;
}

/* Freed memory gives its commit back once collected: 384 MiB of blocks of one size, written,
 * freed and collected, must leave under 64 MiB more writable than before them and the memory
 * map about as long; the same blocks again must work (written and read back, calloc'd ones
 * zero), and give it back again. 1 KiB blocks live in the pool's spans, 300 KiB and 8 MiB
 * ones in runs. */
#define GB_BYTES (384 * MiB)
static void give_back_round(char **b, size_t size, unsigned round) {
  size_t n = GB_BYTES / size, step = size < 4096 ? 1 : 4096;
  rill_collect(true);
  size_t w0 = writable_bytes(0, NULL), m0 = mappings();
  for (size_t i = 0; i < n; i++) {
    bool zeroed = (i & 7) == 0;
    b[i] = zeroed ? calloc(1, size) : malloc(size);
    CHECK(b[i] != NULL, "%zu-byte blocks, round %u: block %zu", size, round, i);
    if (!b[i]) DIE("out of memory");
    if (zeroed) {
      size_t nz = 0;
      for (size_t k = 0; k < size; k += step) nz += b[i][k] != 0;
      nz += b[i][size - 1] != 0;
      if (nz) CHECK(0, "%zu-byte blocks, round %u: calloc'd block %zu not zero", size, round, i);
    }
    memset(b[i], (int)(i * 31 + round), size);
  }
  size_t w1 = writable_bytes(0, NULL);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    char c = (char)(i * 31 + round);
    bad += b[i][0] != c || b[i][size / 2] != c || b[i][size - 1] != c;
    free(b[i]);
  }
  CHECK(bad == 0, "%zu-byte blocks, round %u: %zu blocks lost their contents", size, round, bad);
  rill_collect(true);
  size_t w2 = writable_bytes(0, NULL), m2 = mappings();
  CHECK(w1 >= w0 + 300 * MiB, "%zu-byte blocks, round %u: 384 MiB made only %zu MiB writable", size,
        round, (w1 - w0) / MiB);
  CHECK(w2 < w0 + 64 * MiB,
        "%zu-byte blocks, round %u: %zu MiB writable after freeing and collecting, %zu with the "
        "blocks, %zu before",
        size, round, w2 / MiB, w1 / MiB, w0 / MiB);
  CHECK(m2 < m0 + 64, "%zu-byte blocks, round %u: the memory map grew from %zu to %zu mappings",
        size, round, m0, m2);
}

static void give_back_checks(void) {
  static const size_t sizes[] = {1024, 300 * 1024, 8 * MiB};
  char **b = malloc(GB_BYTES / sizes[0] * sizeof *b);
  if (!b) DIE("malloc");
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
    for (unsigned round = 0; round < 2; round++) give_back_round(b, sizes[k], round);
  free(b);
}

static int run_checks(void) {
  char perm[8];
  void *first = malloc(64);
  CHECK(first != NULL, "first malloc");
  struct rill_stats st;
  rill_stats_get(&st);
  CHECK(st.bytes_reserved >= 64 * GiB, "arena of %zu GiB: not shrunk to what could be charged",
        (size_t)(st.bytes_reserved / GiB));

  /* At start-up: the block's page is writable, the arena 1 GiB above it is not mapped
   * with any access, and everything writable is a few MiB. */
  size_t w0 = writable_bytes((uintptr_t)first, perm);
  CHECK(perm[0] == 'r' && perm[1] == 'w', "a block's mapping is %s, not writable", perm);
  writable_bytes((uintptr_t)first + GiB, perm);
  CHECK(strcmp(perm, "---p") == 0,
        "the arena 1 GiB above the first block is '%s', not reserved without access", perm);
  CHECK(w0 < 64 * MiB, "%zu MiB writable at start-up (demand mode commits as it goes)", w0 / MiB);

  /* Four threads at once, across many covers. */
  pthread_t t[4];
  for (unsigned i = 0; i < 4; i++)
    if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1))) DIE("pthread_create");
  for (unsigned i = 0; i < 4; i++) pthread_join(t[i], NULL);
  rill_stats_get(&st);
  size_t w1 = writable_bytes(0, NULL);
  /* Each worker holds at most about 45 MiB of small blocks and 40 MiB of runs in the arena
   * (the huge block is a mapping of its own and gone), so under 1 GiB is what was used;
   * reserving the tables writable would have been well over 16 GiB. */
  CHECK(w1 < GiB, "%zu MiB writable after the workers, with %zu MiB of arena committed", w1 / MiB,
        (size_t)(st.bytes_committed / MiB));
  CHECK(st.bytes_in_use < 16 * MiB, "%zu MiB still in use after every free",
        (size_t)(st.bytes_in_use / MiB));

  give_back_checks();

  /* Thread churn: new heap records are committed 16 at a time. */
  for (unsigned round = 0; round < 8; round++) {
    pthread_t c[40];
    for (unsigned i = 0; i < 40; i++)
      if (pthread_create(&c[i], NULL, churn_one, (void *)(uintptr_t)i)) DIE("pthread_create");
    for (unsigned i = 0; i < 40; i++) pthread_join(c[i], NULL);
  }

  /* A forked child grows the arena past the parent's bound, on its own copy. */
  pid_t pid = fork();
  if (pid == 0) {
    char *b[8];
    for (unsigned i = 0; i < 8; i++) {
      b[i] = malloc(20 * MiB);
      if (!b[i]) _exit(2);
      memset(b[i], 3, 20 * MiB);
    }
    for (unsigned i = 0; i < 8; i++) free(b[i]);
    _exit(0);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "forked child growing the arena: status %d", status);
  free(first);
  return 0;
}

/* --hold MB: takes MB MiB in 1 MiB blocks, says "ready", waits 3 s, frees. */
static int hold(size_t mb) {
  void **b = malloc(mb * sizeof *b);
  if (!b) DIE("malloc");
  for (size_t i = 0; i < mb; i++) {
    b[i] = malloc(MiB);
    if (!b[i]) DIE("malloc(1 MiB) failed");
    memset(b[i], 4, 4096);
  }
  printf("ready\n");
  fflush(stdout);
  sleep(3);
  for (size_t i = 0; i < mb; i++) free(b[i]);
  free(b);
  return 0;
}

/* --give-back: under strict overcommit, 512 MiB of 1 KiB blocks and 512 MiB of 8 MiB blocks
 * raise the system's committed memory (Committed_AS) by most of what they take, and once they
 * are freed and malloc_trim(0) has run, by under 128 MiB: purged memory leaves the charge. */
static long committed_kib(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) DIE("cannot open /proc/meminfo");
  char line[256];
  long v = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "Committed_AS: %ld", &v) == 1) break;
  fclose(f);
  return v;
}
static int give_back_strict(void) {
  static const size_t sizes[] = {1024, 8 * MiB};
  char **b = malloc(512 * MiB / 1024 * sizeof *b);
  if (!b) DIE("malloc");
  for (size_t k = 0; k < 2; k++) {
    size_t size = sizes[k], n = 512 * MiB / size;
    long c0 = committed_kib();
    for (size_t i = 0; i < n; i++) {
      b[i] = malloc(size);
      if (!b[i]) DIE("malloc(%zu) failed at block %zu", size, i);
      memset(b[i], 7, size);
    }
    long c1 = committed_kib();
    for (size_t i = 0; i < n; i++) free(b[i]);
    T_trim();
    long c2 = committed_kib();
    printf("give-back: %zu-byte blocks: Committed_AS +%ld MiB with 512 MiB of them, +%ld MiB "
           "after freeing and trimming\n",
           size, (c1 - c0) / 1024, (c2 - c0) / 1024);
    CHECK(c1 - c0 >= 400 * 1024, "%zu-byte blocks: 512 MiB charged only %ld MiB", size,
          (c1 - c0) / 1024);
    CHECK(c2 - c0 < 128 * 1024, "%zu-byte blocks: %ld MiB still charged after freeing and trimming",
          size, (c2 - c0) / 1024);
  }
  free(b);
  return 0;
}

/* --exhaust: under strict overcommit, takes 16 MiB blocks (barely touched) until the kernel
 * refuses to commit more; malloc must then fail with ENOMEM, not crash, and work again once
 * the blocks are freed. */
static int exhaust(void) {
  enum { MAXB = 8192 }; /* 128 GiB: more than this machine's commit limit */
  static void *b[MAXB];
  size_t n = 0;
  errno = 0;
  while (n < MAXB && (b[n] = malloc(16 * MiB)) != NULL) {
    memset(b[n], 5, 64);
    n++;
  }
  int e = errno;
  CHECK(n < MAXB, "128 GiB taken under strict overcommit without a failure");
  CHECK(n > 0 && e == ENOMEM, "malloc failed after %zu blocks with errno %d, not ENOMEM", n, e);
  void *small = malloc(100); /* may fail: the limit is reached; must not crash */
  free(small);
  for (size_t i = 0; i < n; i++) free(b[i]);
  T_trim();
  void *again = malloc(16 * MiB);
  CHECK(again != NULL, "malloc(16 MiB) after freeing %zu blocks", n);
  if (again) memset(again, 6, 16 * MiB);
  free(again);
  printf("exhaust: %zu blocks of 16 MiB (%zu GiB) before ENOMEM\n", n, n * 16 * MiB / GiB);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 2 && !strcmp(argv[1], "--hold")) return hold((size_t)atol(argv[2]));
  if (argc > 1 && !strcmp(argv[1], "--give-back")) {
    give_back_strict();
    return t_finish("commit_give_back");
  }
  if (argc > 1 && !strcmp(argv[1], "--exhaust")) {
    exhaust();
    return t_finish("commit_exhaust");
  }
  run_checks();
  return t_finish("commit_demand");
}
