/* test_aslimit.c - proves rill works under an address-space limit (ulimit -v): its arena
 * starts at half the limit and grows past it as small blocks need, most of the limit fills
 * with blocks before ENOMEM, blocks of a page or more past an arena that cannot grow get
 * mappings of their own, threads still start, and a limit too small for any arena makes
 * malloc fail with ENOMEM and one message. Each case re-runs this program under
 * setrlimit(RLIMIT_AS), and one under RLIMIT_DATA. */
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "rill_test.h"

#ifndef RILL_UNDER_UBSAN
#define RILL_UNDER_UBSAN 0
#endif

static void *worker(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  void *held[64] = {0};
  for (int i = 0; i < 20000; i++) {
    seed = seed * 1103515245u + 12345u;
    unsigned k = (seed >> 8) % 64;
    T_free(held[k]);
    size_t n = 16 + (seed >> 16) % 2000;
    held[k] = T_malloc(n);
    if (!held[k]) {
      FAIL("a thread's malloc(%zu) failed", n);
      return NULL;
    }
    memset(held[k], (int)k, n);
  }
  for (unsigned k = 0; k < 64; k++) T_free(held[k]);
  return NULL;
}

/* The end of the arena holding p: the end of the run of adjacent mappings from the one that
 * holds it (advice splits the arena into several), read from /proc/self/maps. */
static uintptr_t arena_end(const void *p) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return 0;
  char line[512];
  uintptr_t end = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx", &lo, &hi) != 2) continue;
    if ((lo <= (uintptr_t)p && (uintptr_t)p < hi) || (end && lo == end)) end = hi;
  }
  fclose(f);
  return end;
}

/* Under the limit: the arena starts at half of it and grows past that for small blocks; with
 * a mapping right above it, so that it cannot grow, large blocks and blocks of a page or more
 * get mappings of their own. Every block keeps its bytes. */
static int child_fits(size_t limit) {
  struct rill_stats st;
  void *first = T_malloc(64); /* rill starts up under the limit */
  rill_stats_get(&st);
  size_t arena = (size_t)st.bytes_reserved;
  /* half the limit in whole 32 MiB spans, not the power of two below it (a 3 GiB limit took
   * 1 GiB, a 768 MiB one 256) */
  CHECK(arena >= 64 * MiB && arena <= limit / 2 && arena + 32 * MiB > limit / 2,
        "arena of %zu MiB at start under a %zu MiB limit: not half of it", arena >> 20,
        limit >> 20);
  /* a sixteenth of the limit past the arena's first half: it must grow (before, these failed) */
  size_t nsmall = (limit / 2 + limit / 16) / 1024, nlarge = limit / MiB;
  unsigned char **small = T_malloc(nsmall * sizeof *small);
  unsigned char **large = T_calloc(nlarge, sizeof *large);
  CHECK(small && large, "index arrays");
  if (!small || !large) return 1;
  for (size_t i = 0; i < nsmall; i++) {
    small[i] = T_malloc(1024);
    CHECK(small[i] != NULL, "small block %zu of %zu (arena %zu MiB at start)", i, nsmall,
          arena >> 20);
    if (!small[i]) return 1;
    memset(small[i], (int)(i & 0xff), 1024);
  }
  rill_stats_get(&st);
  size_t grown = (size_t)st.bytes_reserved;
  CHECK(grown > arena, "the arena did not grow past %zu MiB", arena >> 20);
  /* by 32 MiB at a time, not a share of its size, and with the runs' wilderness (one
   * shard's here, for the index array) at most a 64th of the limit: what it reserves past
   * what the blocks and the index array need is address space the program's thread stacks
   * cannot have. A quarter at a time and 32 MiB wildernesses left 179 MiB unused under 3 GiB;
   * a step is 32 MiB, and heap chunks and the wilderness's rest take a few MiB more (under
   * RILL_COMMIT=demand, 1 MiB chunks: 39 MiB under 384 MiB) */
  size_t need = nsmall * 1024 + nsmall * sizeof *small;
  CHECK(grown < need + 36 * MiB + limit / 64, "the arena grew to %zu MiB for %zu MiB of blocks",
        grown >> 20, need >> 20);
  /* threads */
  pthread_t t[8];
  for (uintptr_t i = 0; i < 8; i++)
    if (pthread_create(&t[i], NULL, worker, (void *)(i + 1)) != 0) DIE("thread %zu", (size_t)i);
  for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
  /* a page right above the arena: it cannot grow any more */
  uintptr_t end = arena_end(small[nsmall - 1]);
  long pg = sysconf(_SC_PAGESIZE);
  void *stop = end ? mmap((void *)end, (size_t)pg, PROT_NONE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0)
                   : MAP_FAILED;
  CHECK(stop == (void *)end, "a page at the arena's end %#lx: %p", (unsigned long)end, stop);
  size_t used = 0, outside = 0;
  for (; used < nlarge && outside < 16 * MiB; used++) {
    large[used] = T_malloc(MiB);
    CHECK(large[used] != NULL, "large block %zu (arena %zu MiB, %zu MiB outside it)", used,
          grown >> 20, outside >> 20);
    if (!large[used]) return 1;
    memset(large[used], (int)(used & 0xff), MiB);
    rill_stats_get(&st);
    outside = (size_t)st.huge_bytes;
  }
  CHECK(outside >= 16 * MiB, "large blocks past the %zu MiB arena: %zu MiB mapped outside it",
        grown >> 20, outside >> 20);
  /* blocks of a page up to 256 KiB, which have classes, take mappings of their own too (they
   * failed with ENOMEM before): 320 blocks of 64 KiB and 320 of 8 KiB, 24 MiB in pages; the
   * worker threads' pooled spans, made runs (pool_spill_spent), may serve a few MiB of them */
  enum { NMID = 640 };
  unsigned char *mid[NMID];
  for (size_t i = 0; i < NMID; i++) {
    size_t n = i % 2 ? 64 * 1024 : 8 * 1024 + 8;
    mid[i] = T_malloc(n);
    CHECK(mid[i] != NULL, "block %zu of %zu B past the %zu MiB arena", i, n, grown >> 20);
    if (!mid[i]) return 1;
    memset(mid[i], (int)(i & 0xff), n);
  }
  rill_stats_get(&st);
  CHECK(st.huge_bytes >= outside + 12 * MiB,
        "blocks of 8-64 KiB past the arena: %zu MiB mapped outside it, %zu before",
        (size_t)(st.huge_bytes >> 20), outside >> 20);
  for (size_t i = 0; i < NMID; i++) {
    CHECK(mid[i][0] == (i & 0xff) && T_usable(mid[i]) >= (i % 2 ? 65536u : 8200u),
          "block %zu past the arena", i);
    T_free(mid[i]);
  }
  /* the arena is full: calloc, aligned and grown blocks take mappings of their own too */
  unsigned char *z = T_calloc(1, 2 * MiB);
  CHECK(z && first_nonzero(z, 2 * MiB) == SIZE_MAX, "calloc(2 MiB) past the arena: not zero");
  void *al = T_aligned_alloc(MiB, MiB);
  CHECK(al && ((uintptr_t)al & (MiB - 1)) == 0, "aligned_alloc(1 MiB, 1 MiB) past the arena: %p",
        al);
  unsigned char *g = T_realloc(large[1], 3 * MiB);
  CHECK(g && g[0] == 1 && g[MiB - 1] == 1, "realloc of a block past the arena lost its bytes");
  if (g) large[1] = g;
  T_free(z);
  T_free(al);
  for (size_t i = 0; i < nsmall; i++) {
    CHECK(small[i][0] == (i & 0xff) && small[i][1023] == (i & 0xff), "small block %zu", i);
    T_free(small[i]);
  }
  for (size_t i = 0; i < used; i++) {
    CHECK(large[i][0] == (i & 0xff) && large[i][MiB - 1] == (i & 0xff), "large block %zu", i);
    T_free(large[i]);
  }
  T_free(small);
  T_free(large);
  T_free(first);
  if (stop != MAP_FAILED) munmap(stop, (size_t)pg);
  printf("limit %zu MiB: arena %zu MiB at start, %zu MiB grown; %zu small and %zu large blocks "
         "(%zu MiB outside it)\n",
         limit >> 20, arena >> 20, grown >> 20, nsmall, used, outside >> 20);
  return atomic_load(&t_failures) != 0;
}

/* Bytes of address space the process has mapped. */
static size_t vm_size(void) { /* with open and read, which allocate nothing */
  static char buf[4096];
  int fd = open("/proc/self/status", O_RDONLY);
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
  if (fd >= 0) close(fd);
  buf[n > 0 ? n : 0] = 0;
  const char *v = strstr(buf, "VmSize:");
  return v ? strtoull(v + 7, NULL, 10) * 1024 : 0;
}

/* Under the limit: small blocks until malloc fails, which must be ENOMEM and not before
 * most of the limit is in blocks (the arena stopped at half of it before); then all of them
 * back, and malloc works again. */
static size_t fill_until_null(void **b, size_t cap, size_t sz) {
  size_t n = 0;
  errno = 0;
  while (n < cap && (b[n] = T_malloc(sz)) != NULL) memset(b[n++], 1, sz);
  CHECK(n < cap && errno == ENOMEM, "%zu blocks of %zu B: errno %d", n, sz, errno);
  return n;
}

/* An array of cap block pointers, mapped outside the allocator under test; NULL (a failed
 * check) if the limit has no room for it. */
static void **index_array(size_t cap) {
  void **b =
      mmap(NULL, cap * sizeof *b, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(b != MAP_FAILED, "index array of %zu pointers", cap);
  return b == MAP_FAILED ? NULL : b;
}

static int child_most(size_t limit) {
  size_t cap = limit / 500;
  void **b = index_array(cap);
  if (!b) return 1;
  /* small blocks; then a small class whose spans are of another size, which the pooled spans
   * the first blocks left must serve once the arena cannot grow (they gave none: 0 MiB of
   * 500-byte blocks); then 64 KiB ones (runs), then small ones again: the free runs the big
   * blocks left must serve the small classes (they failed at once) */
  const size_t sizes[4] = {1000, 500, 65536, 1000};
  size_t got[4];
  for (int k = 0; k < 4; k++) {
    size_t n = fill_until_null(b, cap, sizes[k]);
    got[k] = n * sizes[k];
    CHECK(got[k] >= limit / 10 * (k == 0 ? 7 : 6),
          "%zu MiB in blocks of %zu B under a %zu MiB limit", got[k] >> 20, sizes[k], limit >> 20);
    /* the arena grew up to the limit: a refused 32 MiB step is halved down to the need
     * (it left 11 MiB of 768 unmapped) */
    size_t vm = vm_size();
    if (k == 0)
      CHECK(vm + 4 * MiB > limit, "%zu MiB of a %zu MiB limit mapped when malloc failed", vm >> 20,
            limit >> 20);
    for (size_t i = 0; i < n; i++) T_free(b[i]);
  }
  void *again = T_malloc(1000);
  CHECK(again != NULL, "malloc after freeing everything");
  T_free(again);
  /* blocks too big for a run (over 32 MiB) map memory of their own; with the arena holding
   * most of the limit that fails, and they must be cut from its free memory instead (they
   * failed: no 100 MiB block after the rounds under 768 MiB, where glibc's freed heap gives
   * seven). calloc's is zero where the small blocks were; realloc keeps the bytes. */
  size_t nhuge = 0, want = limit / 100 * 40;
  unsigned char *h[64];
  for (; nhuge < 64 && nhuge * 100 * MiB < want; nhuge++) {
    h[nhuge] = nhuge == 0 ? T_calloc(1, 100 * MiB) : T_malloc(100 * MiB);
    if (!h[nhuge]) break;
    if (nhuge == 0)
      CHECK(first_nonzero(h[0], 100 * MiB) == SIZE_MAX, "calloc(100 MiB) is not zero");
    memset(h[nhuge], (int)nhuge + 1, 100 * MiB);
  }
  CHECK(nhuge * 100 * MiB >= want, "%zu blocks of 100 MiB after the rounds under %zu MiB", nhuge,
        limit >> 20);
  if (nhuge > 1) {
    unsigned char *r = T_realloc(h[1], 60 * MiB);
    CHECK(r && r[0] == 2 && r[60 * MiB - 1] == 2 && T_usable(r) >= 60 * MiB,
          "realloc of a 100 MiB block to 60 MiB");
    if (r) h[1] = r;
  }
  for (size_t i = 0; i < nhuge; i++) {
    CHECK(h[i][0] == i + 1 && h[i][50 * MiB] == i + 1, "100 MiB block %zu lost its bytes", i);
    T_free(h[i]);
  }
  /* and a buffer grown by a quarter at a time: past 32 MiB it is a mapping of its own, which
   * mremap then could not grow under the limit (it stopped at 11 MiB under 768 MiB; glibc's
   * reaches 646); it must move into the arena's free memory and grow in place there */
  unsigned char *buf = NULL;
  size_t len = 0;
  for (size_t next = MiB;; next += next / 4) {
    unsigned char *q = T_realloc(buf, next);
    if (!q) break;
    CHECK(len == 0 || (q[0] == 7 && q[len - 1] == 7), "a buffer grown to %zu B lost its bytes",
          next);
    memset(q + len, 7, next - len);
    buf = q;
    len = next;
  }
  CHECK(len >= limit / 4, "a buffer grown by quarters stopped at %zu MiB under %zu MiB", len >> 20,
        limit >> 20);
  T_free(buf);
  printf("limit %zu MiB until ENOMEM: %zu MiB in blocks of 1,000 B, %zu MiB of 500 B, %zu MiB of "
         "64 KiB, %zu MiB of 1,000 B again, then %zu blocks of 100 MiB, a buffer grown to %zu "
         "MiB\n",
         limit >> 20, got[0] >> 20, got[1] >> 20, got[2] >> 20, got[3] >> 20, nhuge, len >> 20);
  return atomic_load(&t_failures) != 0;
}

/* Under the limit: eight threads each hold a 300 KB block at once, so that up to eight of
 * the runs' shards each take a 32 MiB chunk of the arena for its never-used slots (the
 * wilderness), then free them; small blocks must fill most of the limit all the same. The
 * wildernesses served only their own shards' large runs, so small blocks failed with 248 MiB
 * of them unused (432 MiB of 768 filled). */
enum { HOLDERS = 8 };
static pthread_barrier_t holders_met;
static void *holder(void *arg) {
  unsigned char *volatile p = T_malloc(300000);
  CHECK(p != NULL, "thread %zu: malloc(300000)", (size_t)arg);
  if (p) memset(p, 1, 300000);
  pthread_barrier_wait(&holders_met);
  T_free(p);
  return NULL;
}

static int child_shards(size_t limit) {
  pthread_t t[HOLDERS];
  pthread_barrier_init(&holders_met, NULL, HOLDERS + 1);
  for (size_t i = 0; i < HOLDERS; i++)
    if (pthread_create(&t[i], NULL, holder, (void *)i) != 0) DIE("thread %zu", i);
  pthread_barrier_wait(&holders_met);
  for (size_t i = 0; i < HOLDERS; i++) pthread_join(t[i], NULL);
  size_t cap = limit / 1000;
  void **b = index_array(cap);
  if (!b) return 1;
  size_t n = fill_until_null(b, cap, 1000);
  CHECK(n * 1000 >= limit / 10 * 7,
        "%zu MiB in blocks of 1,000 B under a %zu MiB limit, after "
        "%d threads' 300 KB blocks",
        n * 1000 >> 20, limit >> 20, HOLDERS);
  for (size_t i = 0; i < n; i++) T_free(b[i]);
  printf("limit %zu MiB, after %d threads' 300 KB blocks: %zu MiB in blocks of 1,000 B until "
         "ENOMEM\n",
         limit >> 20, HOLDERS, n * 1000 >> 20);
  return atomic_load(&t_failures) != 0;
}

/* Under the limit: eight threads, half of them with blocks up to 70 KB, allocate until their
 * first NULL, so that they race to grow the arena, to cut spans from free runs and to map
 * blocks of their own as it runs out; every block keeps its bytes, and a second round
 * reuses what the first freed. They start together, once all eight exist: a thread started
 * late found the limit spent by the others and had no room for its stack (the hunt). */
enum { RACERS = 8 };
static size_t race_got[RACERS];
static pthread_barrier_t racers_made;
static void *racer(void *arg) {
  size_t id = (size_t)arg, cap = 1 << 19, n = 0;
  pthread_barrier_wait(&racers_made);
  unsigned char **b =
      mmap(NULL, cap * sizeof *b, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (b == MAP_FAILED) return NULL;
  unsigned seed = (unsigned)id + 1;
  while (n < cap) {
    seed = seed * 1103515245u + 12345u;
    size_t sz = 16 + (seed >> 8) % (id % 2 ? 600 : 70000);
    unsigned char *p = T_malloc(sz);
    if (!p) break;
    memset(p, (int)((n + id) & 0xff), sz < 256 ? sz : 256);
    b[n++] = p;
  }
  for (size_t i = 0; i < n; i++) {
    CHECK(b[i][0] == ((i + id) & 0xff), "thread %zu, block %zu of %zu: overwritten", id, i, n);
    T_free(b[i]);
  }
  race_got[id] = n;
  munmap(b, cap * sizeof *b);
  return NULL;
}

static int child_race(size_t limit) {
  pthread_barrier_init(&racers_made, NULL, RACERS);
  /* 1 MiB stacks, so that glibc's stack cache keeps all eight for the second round: 8 MiB
   * ones it partly unmaps, and threads still filling took that room (the arena grows in
   * steps down to a span under a limit), so a second round's thread found none */
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, MiB);
  for (int round = 0; round < 2; round++) {
    pthread_t t[RACERS];
    size_t all = 0;
    for (size_t i = 0; i < RACERS; i++)
      if (pthread_create(&t[i], &attr, racer, (void *)i) != 0) DIE("thread %zu", i);
    for (size_t i = 0; i < RACERS; i++) {
      pthread_join(t[i], NULL);
      all += race_got[i];
    }
    CHECK(all > 10000, "round %d: %zu blocks in all", round, all);
    printf("limit %zu MiB, %d threads until their first NULL, round %d: %zu blocks\n", limit >> 20,
           RACERS, round, all);
  }
  return atomic_load(&t_failures) != 0;
}

/* No limit at start; then the program sets one itself (Python's resource.setrlimit, a test
 * harness): rill gives back what it reserved and does not use (limits.c, arena_fit), so the
 * limit governs the program's mappings and its blocks alike. Before, the 1 TiB arena stayed
 * reserved: no thread could start and no mapping be made, while small blocks went past it. */
static int child_later(size_t limit) {
  void *first = T_malloc(64);
  size_t before = vm_size();
  struct rlimit rl = {limit, limit};
  CHECK(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit: %s", strerror(errno));
  size_t after = vm_size();
  /* the arena's top, its entries, the pool's and runs' maps past the limit and the thread-heap
   * records past a sixteenth of it go (before the maps and records went: 213 MiB of 1 GiB) */
  /* the program, its libraries and a sanitizer's runtime take the rest: 2 MiB here, 44 under
   * UBSan (whose runtime starts rill before main) */
  CHECK(after < limit / 8 + 64 * MiB,
        "address space %zu MiB after setting a %zu MiB limit (%zu before)", after >> 20,
        limit >> 20, before >> 20);
  pthread_t t[40];
  for (uintptr_t i = 0; i < 40; i++) { /* threads, with heaps of their own, after the cut */
    int rc = pthread_create(&t[i], NULL, worker, (void *)(i + 100));
    CHECK(rc == 0, "pthread_create %zu under the new limit: %s", (size_t)i, strerror(rc));
    if (rc != 0) return 1;
  }
  for (int i = 0; i < 40; i++) pthread_join(t[i], NULL);
  void *m = mmap(NULL, 64 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(m != MAP_FAILED, "mmap of 64 MiB under the new limit: %s", strerror(errno));
  if (m != MAP_FAILED) munmap(m, 64 * MiB);
  unsigned char *big = T_malloc(100 * MiB);
  CHECK(big != NULL, "malloc(100 MiB) under the new limit");
  T_free(big);
  size_t cap = limit / 1000;
  void **b = index_array(cap);
  if (!b) return 1;
  size_t n = fill_until_null(b, cap, 1000);
  CHECK(n * 1000 >= limit / 2, "%zu MiB in blocks of 1,000 B under a %zu MiB limit set late",
        n * 1000 >> 20, limit >> 20);
  for (size_t i = 0; i < n; i++) T_free(b[i]);
  T_free(first);
  printf("a %zu MiB limit set at run time: address space %zu -> %zu MiB, then %zu MiB in blocks "
         "of 1,000 B until ENOMEM\n",
         limit >> 20, before >> 20, after >> 20, n * 1000 >> 20);
  return atomic_load(&t_failures) != 0;
}

static void *idle(void *arg) {
  return arg;
}

/* A small limit: 1,000-byte blocks fill half of it at least before ENOMEM (glibc: 13.6 of
 * 16 MiB, rill 12.4), and malloc works again once they are freed. `late`: the program sets
 * the limit itself, after rill has started, and 10 MB of blocks later a thread still starts
 * (a 40 MiB limit left the arena 32 MiB whatever it held, and no room for the thread's
 * stack); then the blocks fill a quarter of it. */
static int child_small(size_t limit, bool late) {
  if (late) {
    T_free(T_malloc(64));
    struct rlimit rl = {limit, limit};
    CHECK(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit: %s", strerror(errno));
  }
  size_t cap = limit / 1000;
  void **b = index_array(cap);
  if (!b) return 1;
  size_t n = 0;
  if (late) {
    for (; n < 10000; n++) {
      b[n] = T_malloc(1000);
      CHECK(b[n] != NULL, "block %zu of 10,000 under a %zu MiB limit set late", n, limit >> 20);
      if (!b[n]) return 1;
      memset(b[n], 1, 1000);
    }
    pthread_t t;
    int rc = pthread_create(&t, NULL, idle, NULL);
    CHECK(rc == 0, "a thread after 10 MB of blocks, under a %zu MiB limit set late: %s",
          limit >> 20, strerror(rc));
    if (rc == 0) pthread_join(t, NULL);
  }
  n += fill_until_null(b + n, cap - n, 1000);
  CHECK(n * 1000 >= limit / (late ? 4 : 2), "%zu KiB in blocks of 1,000 B under a %zu MiB limit",
        n * 1000 / KiB, limit >> 20);
  for (size_t i = 0; i < n; i++) T_free(b[i]);
  void *p = T_malloc(100000);
  CHECK(p != NULL, "malloc(100000) after the blocks were freed");
  T_free(p);
  printf("limit %zu MiB%s: %zu KiB in blocks of 1,000 B until ENOMEM\n", limit >> 20,
         late ? " set at run time" : "", n * 1000 / KiB);
  return atomic_load(&t_failures) != 0;
}

/* A limit no arena fits, 2 MiB above what the program has mapped before its first malloc
 * (rill needs 4 MiB of arena and its tables): malloc fails cleanly, every time. */
static int child_tiny(void) {
  struct rlimit rl;
  rl.rlim_cur = rl.rlim_max = vm_size() + 2 * MiB;
  if (setrlimit(RLIMIT_AS, &rl) != 0) return 2;
  for (int i = 0; i < 100; i++) {
    errno = 0;
    void *p = T_malloc(16);
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
    if (resource >= 0 && setrlimit(resource, &rl) != 0) _exit(90);
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
  if (argc == 3 && strcmp(argv[1], "small") == 0)
    return child_small(strtoull(argv[2], NULL, 10), false);
  if (argc == 3 && strcmp(argv[1], "small-later") == 0)
    return child_small(strtoull(argv[2], NULL, 10), true);
  if (argc == 3 && strcmp(argv[1], "most") == 0) return child_most(strtoull(argv[2], NULL, 10));
  if (argc == 3 && strcmp(argv[1], "race") == 0) return child_race(strtoull(argv[2], NULL, 10));
  if (argc == 3 && strcmp(argv[1], "shards") == 0) return child_shards(strtoull(argv[2], NULL, 10));
  if (argc == 3 && strcmp(argv[1], "later") == 0) return child_later(strtoull(argv[2], NULL, 10));
  static char err[8192];
  const size_t limits[] = {384 * MiB, 768 * MiB, 3072 * MiB};
  for (size_t i = 0; i < sizeof limits / sizeof *limits; i++) {
    int rc = run_limited("/proc/self/exe", "fits", RLIMIT_AS, limits[i], err, sizeof err);
    CHECK(rc == 0, "under a %zu MiB limit: exit %d; stderr:\n%s", limits[i] >> 20, rc, err);
  }
  const size_t most[] = {768 * MiB, 3072 * MiB};
  for (size_t i = 0; i < 2; i++) {
    int rc = run_limited("/proc/self/exe", "most", RLIMIT_AS, most[i], err, sizeof err);
    CHECK(rc == 0, "filling a %zu MiB limit: exit %d; stderr:\n%s", most[i] >> 20, rc, err);
  }
  int rcs = run_limited("/proc/self/exe", "shards", RLIMIT_AS, 768 * MiB, err, sizeof err);
  CHECK(rcs == 0,
        "small blocks after large ones in eight threads, under a 768 MiB limit: exit "
        "%d; stderr:\n%s",
        rcs, err);
  /* the same with the purge at once, by a purger thread: the small blocks' spans, pooled and
   * purged, must still make runs for the 64 KiB blocks once the arena is spent (they gave 5
   * MiB: purged spans stayed with the small classes; a program that waits out the default
   * delay is the same), and a block must not fail while a pass has the free runs out to
   * purge them (a timing: 1 in 3 runs under 3 GiB got one 100 MiB block) */
  setenv("RILL_PURGE_DELAY_MS", "1", 1);
  setenv("RILL_PURGE_THREAD", "1", 1);
  int rcp = run_limited("/proc/self/exe", "most", RLIMIT_AS, 768 * MiB, err, sizeof err);
  unsetenv("RILL_PURGE_DELAY_MS");
  unsetenv("RILL_PURGE_THREAD");
  CHECK(rcp == 0, "filling a 768 MiB limit, purging at once: exit %d; stderr:\n%s", rcp, err);
  /* and with huge pages: a purge widened to the 2 MiB boundary below a run that starts under
   * the arena's first boundary wrapped around and crashed (purge_range) */
  setenv("RILL_PURGE_DELAY_MS", "0", 1);
  setenv("RILL_HUGEPAGES", "1", 1);
  int rch = run_limited("/proc/self/exe", "most", RLIMIT_AS, 768 * MiB, err, sizeof err);
  unsetenv("RILL_PURGE_DELAY_MS");
  unsetenv("RILL_HUGEPAGES");
  CHECK(rch == 0, "filling a 768 MiB limit with huge pages, purging at once: exit %d; stderr:\n%s",
        rch, err);
  int rcr = run_limited("/proc/self/exe", "race", RLIMIT_AS, 768 * MiB, err, sizeof err);
  CHECK(rcr == 0, "threads filling a 768 MiB limit: exit %d; stderr:\n%s", rcr, err);
  /* no limit at start, then one the program sets itself */
  int rcl = run_limited("/proc/self/exe", "later", -1, 1024 * MiB, err, sizeof err);
  CHECK(rcl == 0, "a 1 GiB limit set at run time: exit %d; stderr:\n%s", rcl, err);
  /* ulimit -d counts private writable mappings too (Linux 4.7 and later) */
  int rcd = run_limited("/proc/self/exe", "fits", RLIMIT_DATA, 768 * MiB, err, sizeof err);
  CHECK(rcd == 0, "under a 768 MiB data limit: exit %d; stderr:\n%s", rcd, err);
#if RILL_UNDER_UBSAN
  /* the sanitizer's runtime maps some 44 MiB of its own and starts rill before main, so a
   * sandbox-sized limit leaves the program nothing, and one set in main comes too late: the
   * gcc build runs these */
  printf("small limits (16, 32, 40 MiB set at run time, 2 MiB above the program): not run "
         "under UBSan\n");
  if (atomic_load(&t_failures)) return 1;
  printf("ok: the arena starts at half the limit and grows past it, most of the limit fills "
         "with small blocks, blocks past an arena that cannot grow mapped, threads ran\n");
  return 0;
#endif
  /* small limits: a sandbox's 16 or 32 MiB (rill needed 64 MiB of arena at least, and
   * every malloc failed under a 64 MiB limit, where glibc fills 61 MiB) */
  const size_t small[] = {16 * MiB, 32 * MiB};
  for (size_t i = 0; i < 2; i++) {
    int rc = run_limited("/proc/self/exe", "small", RLIMIT_AS, small[i], err, sizeof err);
    CHECK(rc == 0, "under a %zu MiB limit: exit %d; stderr:\n%s", small[i] >> 20, rc, err);
  }
  int rcsl = run_limited("/proc/self/exe", "small-later", -1, 40 * MiB, err, sizeof err);
  CHECK(rcsl == 0, "a 40 MiB limit set at run time: exit %d; stderr:\n%s", rcsl, err);
  int rc = run_limited("/proc/self/exe", "tiny", -1, 0, err, sizeof err);
  size_t said = 0;
  for (const char *s = err; (s = strstr(s, "cannot reserve")) != NULL; s++) said++;
  CHECK(rc == 0,
        "under a limit 2 MiB above the program's mappings malloc must fail with ENOMEM: "
        "exit %d\n%s",
        rc, err);
  CHECK(said == 1,
        "under a limit 2 MiB above the program's mappings rill must say so once, said "
        "it %zu times:\n%s",
        said, err);
  if (atomic_load(&t_failures)) return 1;
  printf("ok: the arena starts at half the limit and grows past it, most of the limit fills "
         "with small blocks, blocks past an arena that cannot grow mapped, threads ran; 16 and "
         "32 MiB limits work, 40 MiB set at run time too, and one 2 MiB above the program "
         "fails with ENOMEM and one message\n");
  return 0;
}
