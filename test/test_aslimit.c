/* test_aslimit.c - proves rill works under an address-space limit (ulimit -v): it sizes its
 * arena to half the limit, large blocks that no longer fit the arena get mappings of their
 * own, threads still start, and a limit too small for any arena makes malloc fail with ENOMEM
 * and one message. Each case re-runs this program under setrlimit(RLIMIT_AS), and one under
 * RLIMIT_DATA. */
#include <malloc.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "rill_test.h"

static void *worker(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  void *held[64] = {0};
  for (int i = 0; i < 20000; i++) {
    seed = seed * 1103515245u + 12345u;
    unsigned k = (seed >> 8) % 64;
    free(held[k]);
    size_t n = 16 + (seed >> 16) % 2000;
    held[k] = malloc(n);
    if (!held[k]) {
      FAIL("a thread's malloc(%zu) failed", n);
      return NULL;
    }
    memset(held[k], (int)k, n);
  }
  for (unsigned k = 0; k < 64; k++) free(held[k]);
  return NULL;
}

/* Under the limit: fill half the arena with small blocks, run threads, then take large
 * blocks past the arena's end, and check every block kept its bytes. */
static int child_fits(size_t limit) {
  struct rill_stats st;
  void *first = malloc(64); /* rill starts up under the limit */
  rill_stats_get(&st);
  size_t arena = (size_t)st.bytes_reserved;
  CHECK(arena >= 64 * MiB && arena <= limit / 2, "arena of %zu MiB under a %zu MiB limit",
        arena >> 20, limit >> 20);
  /* half the limit in whole 32 MiB spans, not the power of two below it (a 3 GiB limit took
   * 1 GiB, a 768 MiB one 256) */
  CHECK(arena + 32 * MiB > limit / 2, "arena of %zu MiB under a %zu MiB limit: not half of it",
        arena >> 20, limit >> 20);
  size_t nsmall = arena / 2 / 1024, nlarge = (arena / 2 + 32 * MiB) / MiB;
  unsigned char **small = malloc(nsmall * sizeof *small);
  unsigned char **large = malloc(nlarge * sizeof *large);
  CHECK(small && large, "index arrays");
  if (!small || !large) return 1;
  for (size_t i = 0; i < nsmall; i++) {
    small[i] = malloc(1024);
    CHECK(small[i] != NULL, "small block %zu of %zu", i, nsmall);
    if (!small[i]) return 1;
    memset(small[i], (int)(i & 0xff), 1024);
  }
  /* threads while the arena has room: small blocks live in the arena only */
  pthread_t t[8];
  for (uintptr_t i = 0; i < 8; i++)
    CHECK(pthread_create(&t[i], NULL, worker, (void *)(i + 1)) == 0, "thread %zu", (size_t)i);
  for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
  for (size_t i = 0; i < nlarge; i++) {
    large[i] = malloc(MiB);
    CHECK(large[i] != NULL, "large block %zu of %zu (arena %zu MiB)", i, nlarge, arena >> 20);
    if (!large[i]) return 1;
    memset(large[i], (int)(i & 0xff), MiB);
  }
  rill_stats_get(&st);
  size_t outside = (size_t)st.huge_bytes;
  CHECK(outside >= 16 * MiB, "large blocks past the %zu MiB arena: %zu MiB mapped outside it",
        arena >> 20, outside >> 20);
  /* the arena is full: blocks of a page up to 256 KiB, which have classes, take mappings of
   * their own too (they failed with ENOMEM before): 320 blocks of 64 KiB and 320 of 8 KiB,
   * 24 MiB in pages */
  enum { NMID = 640 };
  unsigned char *mid[NMID];
  for (size_t i = 0; i < NMID; i++) {
    size_t n = i % 2 ? 64 * 1024 : 8 * 1024 + 8;
    mid[i] = malloc(n);
    CHECK(mid[i] != NULL, "block %zu of %zu B past the %zu MiB arena", i, n, arena >> 20);
    if (!mid[i]) return 1;
    memset(mid[i], (int)(i & 0xff), n);
  }
  rill_stats_get(&st);
  CHECK(st.huge_bytes >= outside + 20 * MiB,
        "blocks of 8-64 KiB past the arena: %zu MiB mapped outside it, %zu before",
        (size_t)(st.huge_bytes >> 20), outside >> 20);
  for (size_t i = 0; i < NMID; i++) {
    CHECK(mid[i][0] == (i & 0xff) && malloc_usable_size(mid[i]) >= (i % 2 ? 65536u : 8200u),
          "block %zu past the arena", i);
    free(mid[i]);
  }
  /* the arena is full: calloc, aligned and grown blocks take mappings of their own too */
  unsigned char *z = calloc(1, 2 * MiB);
  CHECK(z && first_nonzero(z, 2 * MiB) == SIZE_MAX, "calloc(2 MiB) past the arena: not zero");
  void *al = aligned_alloc(MiB, MiB);
  CHECK(al && ((uintptr_t)al & (MiB - 1)) == 0, "aligned_alloc(1 MiB, 1 MiB) past the arena: %p",
        al);
  unsigned char *g = realloc(large[1], 3 * MiB);
  CHECK(g && g[0] == 1 && g[MiB - 1] == 1, "realloc of a block past the arena lost its bytes");
  if (g) large[1] = g;
  free(z);
  free(al);
  for (size_t i = 0; i < nsmall; i++) {
    CHECK(small[i][0] == (i & 0xff) && small[i][1023] == (i & 0xff), "small block %zu", i);
    free(small[i]);
  }
  for (size_t i = 0; i < nlarge; i++) {
    CHECK(large[i][0] == (i & 0xff) && large[i][MiB - 1] == (i & 0xff), "large block %zu", i);
    free(large[i]);
  }
  free(small);
  free(large);
  free(first);
  printf("limit %zu MiB: arena %zu MiB, %zu small and %zu large blocks (%zu MiB outside it)\n",
         limit >> 20, arena >> 20, nsmall, nlarge, outside >> 20);
  return atomic_load(&t_failures) != 0;
}

/* A limit no arena fits: malloc fails cleanly, every time. */
static int child_tiny(void) {
  for (int i = 0; i < 100; i++) {
    errno = 0;
    void *p = malloc(16);
    if (p != NULL || errno != ENOMEM) return 1;
  }
  return 0;
}

/* Runs this program under `resource` = limit; returns its exit status and its stderr. */
static int run_limited(const char *self, const char *mode, int resource, size_t limit, char *err,
                       size_t cap) {
  int fd[2];
  if (pipe(fd) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 2);
    close(fd[0]);
    struct rlimit rl = {limit, limit};
    if (setrlimit(resource, &rl) != 0) _exit(90);
    char arg[32];
    snprintf(arg, sizeof arg, "%zu", limit);
    execl(self, self, mode, arg, (char *)NULL);
    _exit(91);
  }
  close(fd[1]);
  size_t n = 0;
  ssize_t r;
  while (n + 1 < cap && (r = read(fd[0], err + n, cap - 1 - n)) > 0) n += (size_t)r;
  err[n] = 0;
  close(fd[0]);
  int status;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "fits") == 0) return child_fits(strtoull(argv[2], NULL, 10));
  if (argc == 3 && strcmp(argv[1], "tiny") == 0) return child_tiny();
  static char err[8192];
  const size_t limits[] = {384 * MiB, 768 * MiB, 3072 * MiB};
  for (size_t i = 0; i < sizeof limits / sizeof *limits; i++) {
    int rc = run_limited("/proc/self/exe", "fits", RLIMIT_AS, limits[i], err, sizeof err);
    CHECK(rc == 0, "under a %zu MiB limit: exit %d; stderr:\n%s", limits[i] >> 20, rc, err);
  }
  /* ulimit -d counts private writable mappings too (Linux 4.7 and later) */
  int rcd = run_limited("/proc/self/exe", "fits", RLIMIT_DATA, 768 * MiB, err, sizeof err);
  CHECK(rcd == 0, "under a 768 MiB data limit: exit %d; stderr:\n%s", rcd, err);
  int rc = run_limited("/proc/self/exe", "tiny", RLIMIT_AS, 40 * MiB, err, sizeof err);
  size_t said = 0;
  for (const char *s = err; (s = strstr(s, "cannot reserve")) != NULL; s++) said++;
  CHECK(rc == 0, "under a 40 MiB limit malloc must fail with ENOMEM: exit %d\n%s", rc, err);
  CHECK(said == 1, "under a 40 MiB limit rill must say so once, said it %zu times:\n%s", said, err);
  if (atomic_load(&t_failures)) return 1;
  printf("ok: arena within half of the limit, large blocks past it mapped, threads ran; a "
         "40 MiB limit fails with ENOMEM and one message\n");
  return 0;
}
