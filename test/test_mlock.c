/* test_mlock.c - proves mlockall(MCL_CURRENT | MCL_FUTURE) locks the program's memory without
 * faulting in rill's reservations: the kernel's own mlockall populates every writable mapping,
 * and rill's reserved arena is one (1 TiB by default; under the `ulimit -v` that ctest runs
 * this with, half the limit, so a broken library costs gigabytes, not the machine). Checks:
 * resident memory grows by the program's own untouched mapping and little else; that mapping
 * is resident whole (MCL_CURRENT kept its meaning); rill's blocks, those written before and
 * those allocated after, are locked (smaps "Locked:"); a mapping made afterwards is resident
 * at once (MCL_FUTURE); munlockall undoes it; with --grow, the arena grows under MCL_FUTURE
 * without its new stretch faulted in. First, a large block locked with mlock and
 * freed: calloc from its run reads zero. Needs CAP_IPC_LOCK or an unlimited RLIMIT_MEMLOCK,
 * and says so otherwise; --limit is the opposite case (under_memlock_limit). */
#include "rill_test.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/resource.h>

#include "syscall_hook.h"

#define OWN (8 * MiB)

/* A field of /proc/self/status, in KiB. */
static size_t status_kib(const char *field) {
  char buf[4096];
  int fd = open("/proc/self/status", O_RDONLY);
  if (fd < 0) DIE("open /proc/self/status: %s", strerror(errno));
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) DIE("read /proc/self/status");
  buf[n] = 0;
  const char *at = strstr(buf, field);
  return at ? strtoul(at + strlen(field), NULL, 10) : 0;
}

/* "Locked:" of the mapping holding p, in KiB, from /proc/self/smaps, read a piece at a time:
 * --limit runs under an 8 MiB RLIMIT_MEMLOCK that counts every mapping, a buffer too. */
static size_t locked_kib(const void *p) {
  static char buf[8192];
  int fd = open("/proc/self/smaps", O_RDONLY);
  if (fd < 0) DIE("open /proc/self/smaps: %s", strerror(errno));
  size_t have = 0, kib = 0;
  bool inside = false, found = false;
  ssize_t got;
  while (!found && (got = read(fd, buf + have, sizeof buf - 1 - have)) > 0) {
    have += (size_t)got;
    buf[have] = 0;
    char *line = buf, *nl;
    while (!found && (nl = strchr(line, '\n')) != NULL) {
      *nl = 0;
      unsigned long lo, hi;
      if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
        inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
      else if (inside && !strncmp(line, "Locked:", 7))
        kib = strtoul(line + 7, NULL, 10), found = true;
      line = nl + 1;
    }
    have -= (size_t)(line - buf);
    memmove(buf, line, have);
  }
  close(fd);
  return kib;
}

static size_t resident_pages(const void *p, size_t n) {
  static unsigned char vec[OWN / 4096 + 1];
  size_t pages = n / (size_t)sysconf(_SC_PAGESIZE), res = 0;
  if (pages > sizeof vec || mincore((void *)p, n, vec)) DIE("mincore: %s", strerror(errno));
  for (size_t i = 0; i < pages; i++) res += vec[i] & 1;
  return res;
}

/* A large block locked with mlock and freed without munlock: the kernel refuses to purge
 * locked pages, so they keep their bytes, and a calloc served from them must still read zero
 * (rill counted them purged and zero, and calloc returned the old bytes). Returns false if
 * this process may not lock a MiB. */
static bool locked_then_calloc(void) {
  size_t n = MiB;
  unsigned char *p = malloc(n);
  if (!p) DIE("malloc(1 MiB) failed");
  memset(p, 0xab, n);
  if (mlock(p, n) != 0) {
    free(p);
    return false;
  }
  free(p);
  malloc_trim(0);
  unsigned char *q = calloc(1, n);
  if (!q) DIE("calloc(1 MiB) failed");
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += q[i] != 0;
  printf("  calloc after a locked block was freed: %s, %zu bytes not zero\n",
         q == p ? "the same run" : "another run", bad);
  CHECK(bad == 0, "calloc(1 MiB) returned %zu bytes that are not zero (%s as the locked block)",
        bad, q == p ? "the same run" : "another run");
  free(q);
  return true;
}

/* madvise calls the kernel refused (syscall_hook.h). */
static _Atomic unsigned long madvise_refused;
static void count_refused(long n, const long *a, long r) {
  (void)a;
  if (n == SYS_madvise && r == -1) madvise_refused++;
}

static void trim_hung(int sig) {
  (void)sig;
  static const char msg[] = "FAIL: malloc_trim under mlockall did not return in 30 s\n";
  (void)!write(1, msg, sizeof msg - 1);
  _exit(1);
}

/* Under mlockall the kernel refuses to purge: madvise fails for locked pages. rill went on
 * trying a refused range: malloc_trim with 64 free runs or more never returned (each batch of
 * 64 runs found them due again), and every pass tried every refused range again. Now a
 * refused range is left alone until it has been used. 200 free runs between live ones, and
 * empty spans of small blocks; then malloc_trim three times. */
static void trim_locked(void) {
  enum { R = 200, S = 20000 };
  static char *r[2 * R], *sm[S];
  for (int i = 0; i < 2 * R; i++) {
    if (!(r[i] = malloc(300 * KiB))) DIE("malloc(300 KiB) failed");
    memset(r[i], 6, 300 * KiB);
  }
  for (int i = 0; i < 2 * R; i += 2) free(r[i]);
  for (int i = 0; i < S; i++) {
    if (!(sm[i] = malloc(200))) DIE("malloc(200) failed");
    memset(sm[i], 7, 200);
  }
  for (int i = 0; i < S; i++) free(sm[i]);
  syscall_seen = count_refused;
  signal(SIGALRM, trim_hung);
  alarm(30);
  unsigned long f0 = madvise_refused;
  malloc_trim(0);
  unsigned long f1 = madvise_refused;
  malloc_trim(0);
  malloc_trim(0);
  unsigned long f2 = madvise_refused;
  alarm(0);
  if (!SYSCALL_HOOK) {
    printf("  malloc_trim under mlockall returned (refused madvise calls not counted here)\n");
  } else {
    printf("  malloc_trim under mlockall: %lu madvise calls refused, then %lu in two more\n",
           f1 - f0, f2 - f1);
    CHECK(f1 > f0, "no madvise refused under mlockall: the count does not see rill's calls");
    CHECK(f2 == f1, "%lu refused madvise calls in two more malloc_trims: ranges tried again",
          f2 - f1);
  }
  for (int i = 1; i < 2 * R; i += 2) free(r[i]);
}

/* --grow (ctest runs it under a 768 MiB ulimit -v, where the arena starts at 384 MiB): blocks
 * until the arena grows (arena_grow) under mlockall(MCL_FUTURE). The stretch it grows by, a
 * quarter of it, must not be faulted in and locked whole, as a new mapping under MCL_FUTURE
 * is; the blocks written in it are locked. */
static void grow_locked(void) {
  struct rill_stats st;
  rill_stats_get(&st);
  size_t arena0 = (size_t)st.bytes_reserved, cap = arena0 / 1000 + 65536, n = 0;
  char **g =
      mmap(NULL, cap * sizeof *g, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (g == MAP_FAILED) DIE("mmap: %s", strerror(errno));
  size_t rss0 = status_kib("VmRSS:");
  while (n < cap && (size_t)st.bytes_reserved == arena0) {
    g[n] = malloc(1000);
    if (!g[n]) DIE("malloc %zu after mlockall, arena %zu MiB", n, arena0 >> 20);
    memset(g[n++], 5, 1000);
    if (n % 1024 == 0) rill_stats_get(&st);
  }
  size_t grown = (size_t)st.bytes_reserved, rss1 = status_kib("VmRSS:");
  printf("  arena %zu -> %zu MiB under mlockall(MCL_FUTURE); VmRSS %zu -> %zu KiB for %zu KiB "
         "of blocks\n",
         arena0 >> 20, grown >> 20, rss0, rss1, n * 1000 / KiB);
  CHECK(grown > arena0, "the arena did not grow past %zu MiB", arena0 >> 20);
  /* the blocks' class rounds 1,000 B up to 1,024, and their spans' entries are touched; a
   * stretch faulted in whole would add a quarter of the arena, 96 MiB */
  CHECK(rss1 < rss0 + (n * 1000 / 8 * 9 + 32 * MiB) / KiB,
        "VmRSS %zu -> %zu KiB for %zu KiB of blocks: the arena's growth was faulted in", rss0, rss1,
        n * 1000 / KiB);
  CHECK(n && locked_kib(g[n - 1]) > 0, "a block in the grown arena is not locked");
  for (size_t i = 0; i < n; i++) free(g[i]);
  munmap(g, cap * sizeof *g);
}

/* --limit: as an unprivileged program, under the default 8 MiB RLIMIT_MEMLOCK. The kernel
 * refuses MCL_CURRENT when the whole address space passes the limit, and rill's reservations
 * (1 TiB) always did, so a small program that locked itself with glibc got ENOMEM under rill.
 * Now the test counts the arena as far as it is in use: mlockall(MCL_CURRENT) works and locks
 * the blocks; a program whose own mappings pass the limit still gets ENOMEM; under
 * MCL_FUTURE, blocks allocated later are locked until the limit, then malloc fails, as under
 * glibc; munlockall lifts it. */
static void drop_ipc_lock(void) {
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  if (syscall(SYS_capget, &h, d) != 0) DIE("capget: %s", strerror(errno));
  d[0].effective &= ~(1u << CAP_IPC_LOCK);
  d[0].permitted &= ~(1u << CAP_IPC_LOCK);
  d[0].inheritable &= ~(1u << CAP_IPC_LOCK);
  if (syscall(SYS_capset, &h, d) != 0) DIE("capset: %s", strerror(errno));
}

#define LIMIT (8 * MiB)
static void under_memlock_limit(void) {
  drop_ipc_lock();
  struct rlimit rl;
  getrlimit(RLIMIT_MEMLOCK, &rl);
  if (rl.rlim_max < LIMIT) {
    printf("  RLIMIT_MEMLOCK's hard limit is %zu KiB, under the 8 MiB this needs: not run\n",
           (size_t)rl.rlim_max / KiB);
    exit(77);
  }
  rl.rlim_cur = rl.rlim_max = LIMIT;
  if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0) DIE("setrlimit(RLIMIT_MEMLOCK): %s", strerror(errno));
  char *small = malloc(64), *run = malloc(200 * KiB);
  if (!small || !run) DIE("malloc failed");
  memset(small, 1, 64);
  memset(run, 2, 200 * KiB);

  /* the program's own mappings past the limit: the kernel's answer stands */
  void *big = mmap(NULL, 2 * LIMIT, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (big == MAP_FAILED) DIE("mmap: %s", strerror(errno));
  errno = 0;
  int r = mlockall(MCL_CURRENT);
  CHECK(r == -1 && errno == ENOMEM,
        "mlockall(MCL_CURRENT) with 16 MiB of the program's own "
        "mappings under an 8 MiB limit: %d (%s), not ENOMEM",
        r, strerror(errno));
  if (r == 0) munlockall();
  munmap(big, 2 * LIMIT);

  r = mlockall(MCL_CURRENT);
  CHECK(r == 0, "mlockall(MCL_CURRENT) under an 8 MiB RLIMIT_MEMLOCK: %s", strerror(errno));
  size_t lck = status_kib("VmLck:");
  printf("  under an 8 MiB RLIMIT_MEMLOCK: mlockall(MCL_CURRENT) %d, VmLck %zu KiB\n", r, lck);
  CHECK(r != 0 || (locked_kib(small) > 0 && locked_kib(run) > 0),
        "blocks written before mlockall are not locked (smaps Locked: %zu, %zu KiB)",
        locked_kib(small), locked_kib(run));
  CHECK(munlockall() == 0 && status_kib("VmLck:") == 0, "munlockall");

  r = mlockall(MCL_CURRENT | MCL_FUTURE);
  CHECK(r == 0, "mlockall(MCL_CURRENT | MCL_FUTURE) under an 8 MiB limit: %s", strerror(errno));
  enum { N = 512 }; /* 64 KiB blocks: 32 MiB at most */
  static char *b[N];
  size_t n = 0;
  while (n < N && (b[n] = malloc(64 * KiB)) != NULL) memset(b[n++], 3, 64 * KiB);
  size_t lck2 = status_kib("VmLck:");
  printf("  then MCL_FUTURE: %zu blocks of 64 KiB until malloc failed, VmLck %zu KiB\n", n, lck2);
  CHECK(r != 0 || (n > 8 && n < N), "%zu blocks of 64 KiB under MCL_FUTURE and an 8 MiB limit", n);
  CHECK(r != 0 || n == 0 || locked_kib(b[n - 1]) > 0, "a block allocated after is not locked");
  CHECK(lck2 <= LIMIT / KiB, "VmLck %zu KiB past the 8 MiB limit", lck2);
  CHECK(munlockall() == 0, "munlockall: %s", strerror(errno));
  char *after = malloc(MiB);
  CHECK(after != NULL, "malloc(1 MiB) after munlockall");
  for (size_t i = 0; i < n; i++) free(b[i]);
  free(after);
  free(small);
  free(run);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--limit") == 0) {
    under_memlock_limit();
    return t_finish("test_mlock --limit");
  }
  bool grow = argc > 1 && strcmp(argv[1], "--grow") == 0;
  struct rlimit ml;
  getrlimit(RLIMIT_MEMLOCK, &ml);
  if (!locked_then_calloc()) {
    printf("  mlock: %s; needs CAP_IPC_LOCK or an RLIMIT_MEMLOCK over 1 MiB, not run\n",
           strerror(errno));
    return 77;
  }
  char *small = malloc(64), *run = malloc(200 * KiB), *huge = malloc(8 * MiB);
  if (!small || !run || !huge) DIE("malloc failed");
  memset(small, 1, 64);
  memset(run, 2, 200 * KiB);
  memset(huge, 3, 8 * MiB);
  char *own = mmap(NULL, OWN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (own == MAP_FAILED) DIE("mmap: %s", strerror(errno));
  size_t rss0 = status_kib("VmRSS:");

  if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0) {
    if ((errno == EPERM || errno == ENOMEM) && geteuid() != 0 && ml.rlim_cur != RLIM_INFINITY) {
      printf("  mlockall: %s; needs CAP_IPC_LOCK or an unlimited RLIMIT_MEMLOCK, not run\n",
             strerror(errno));
      return 77;
    }
    DIE("mlockall(MCL_CURRENT | MCL_FUTURE): %s", strerror(errno));
  }
  size_t rss1 = status_kib("VmRSS:");
  printf("  VmRSS %zu -> %zu KiB across mlockall (the program's own untouched mapping: %zu KiB)\n",
         rss0, rss1, OWN / KiB);
  CHECK(rss1 < rss0 + (OWN + 64 * MiB) / KiB,
        "mlockall took VmRSS from %zu to %zu KiB: rill's reservations were faulted in", rss0, rss1);
  CHECK(resident_pages(own, OWN) == OWN / (size_t)sysconf(_SC_PAGESIZE),
        "the program's own mapping is not resident after mlockall(MCL_CURRENT)");
  CHECK(locked_kib(small) > 0 && locked_kib(run) > 0 && locked_kib(huge) >= 8 * MiB / KiB,
        "blocks written before mlockall are not locked (smaps Locked: %zu, %zu, %zu KiB)",
        locked_kib(small), locked_kib(run), locked_kib(huge));

  /* Allocating after it works, and what is written is locked too. */
  enum { N = 20000 };
  static char *later[N];
  for (int i = 0; i < N; i++) {
    later[i] = malloc(1000);
    if (!later[i]) DIE("malloc after mlockall failed");
    memset(later[i], 4, 1000);
  }
  CHECK(locked_kib(later[N - 1]) > 0, "a block written after mlockall is not locked");
  char *fresh = mmap(NULL, OWN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (fresh == MAP_FAILED) DIE("mmap: %s", strerror(errno));
  CHECK(resident_pages(fresh, OWN) == OWN / (size_t)sysconf(_SC_PAGESIZE),
        "a mapping made after mlockall(MCL_FUTURE) is not resident");
  size_t rss2 = status_kib("VmRSS:");
  CHECK(rss2 < rss1 + (2 * OWN + 64 * MiB) / KiB, "VmRSS %zu -> %zu KiB after 20 MB of blocks",
        rss1, rss2);

  trim_locked();
  if (grow) grow_locked();
  CHECK(munlockall() == 0, "munlockall: %s", strerror(errno));
  CHECK(status_kib("VmLck:") == 0, "VmLck %zu KiB after munlockall", status_kib("VmLck:"));
  for (int i = 0; i < N; i++) free(later[i]);
  free(small);
  free(run);
  free(huge);
  munmap(own, OWN);
  munmap(fresh, OWN);
  return t_finish("test_mlock");
}
