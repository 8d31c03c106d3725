/* test_runs.c - proves large objects' runs (src/runs.c): a free run is split
 * from its low end, freed neighbours merge back into one run, realloc grows
 * and shrinks a run in place, sizes that wander reuse resident memory
 * instead of faulting in new pages, buffers that must move to grow past
 * 1 MiB leave the arena for mappings of their own, rill_collect gives free runs' pages
 * back, and threads that allocate, resize and free runs never overlap two
 * live blocks; a free run merged from a resident piece and a purged one is
 * counted and zeroed by calloc for the resident piece only; with --shards,
 * that a run freed into one thread's shard serves another thread's request
 * before fresh memory does, that a block realloc moves to grow stays
 * among its own thread's runs, and that a block realloc grows past 64 KiB
 * becomes a run that grows in place; with --tails, that blocks of a class over 4 KiB
 * fill their spans, so memory that blocks of one class wrote holds no
 * unused resident tail when another class takes it; with --reuse, that
 * buffers replaced at random are cut where their class's emptied runs
 * were, so the pages they write stay few; with --aging (a short
 * delay), that a free run which takes in a freshly freed neighbour again and
 * again still gives back the pages that have been free a whole delay; with
 * --spill, that runs take pooled spans that hold pages before fresh memory;
 * with --scattered, that they take only stretches of them that can serve
 * the request, and leave the others to the small classes; with --swap, that
 * a program growing where memory it just freed cannot serve it gives as much
 * of that memory back;
 * with --give, that memory freed by blocks of one size serves blocks of
 * another, spans of any order cut from free runs and from pooled spans of
 * other orders, before never-used memory; with --opens, that a young free
 * run kept whole for the block that left it keeps only itself, not the old
 * free run it merged with; with --spill-miss, that a spill that found no
 * stretch does not keep a later phase's pooled spans from another order;
 * with --short-runs, that free runs too short for a span do not keep a
 * long one from serving it; with --sparse-move, that a buffer written here
 * and there that moves to a mapping of its own copies only what it wrote;
 * with --stale, that a program taking never-used memory first gives back
 * the free runs unused an eighth of the delay, not those freed just now; with --slices, that a
 * free run of 512 MiB stays within reach while the purger thread gives it back.
 * Otherwise run with a long
 * RILL_PURGE_DELAY_MS (ctest sets it), so no timed purge empties a free run
 * in the middle of a check. */
#include "rill_test.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>

#include "syscall_hook.h"

static char *xmalloc(size_t n) {
  char *p = T_malloc(n);
  if (!p) DIE("malloc(%zu) failed", n);
  return p;
}

static void touch(char *p, size_t n, char v) {
  for (size_t off = 0; off < n; off += 4096) p[off] = v;
  p[n - 1] = v;
}

/* Runs first: the block is the last thing cut from the arena, so realloc
 * grows it into never-used slots, never moving it. */
static void grow_at_top(void) {
  char *p = xmalloc(1 * MiB), *q = p;
  p[0] = 7;
  int moved = 0;
  for (size_t n = 2 * MiB; n <= 16 * MiB; n += 1 * MiB) {
    q = T_realloc(q, n);
    if (!q) DIE("realloc(%zu) failed", n);
    moved += q != p;
    q[n - 1] = 7;
  }
  CHECK(moved == 0 && q[0] == 7, "a block at the top of the arena moved %d times growing to 16 MiB",
        moved);
  T_free(q);
  printf("  %-38s ok\n", "realloc grows at the top in place");
}

/* Runs next, in a process with no other large block: the expected
 * addresses follow from address-ordered first fit and merging alone. */
static void split_merge_resize(void) {
  char *big = xmalloc(8 * MiB);
  T_free(big);
  char *a = xmalloc(3 * MiB), *b = xmalloc(3 * MiB);
  CHECK(a == big && b == big + 3 * MiB,
        "two 3 MiB blocks after a freed 8 MiB one at %p: got %p and %p, want %p and %p (split "
        "from the low end)",
        (void *)big, (void *)a, (void *)b, (void *)big, (void *)(big + 3 * MiB));
  T_free(a);
  T_free(b);
  char *c = xmalloc(8 * MiB);
  CHECK(c == big, "8 MiB after freeing the two halves: got %p, want %p (the runs did not merge)",
        (void *)c, (void *)big);
  T_free(c);

  char *r = xmalloc(1 * MiB);
  memset(r, 0x5a, 1 * MiB);
  char *g = T_realloc(r, 6 * MiB);
  CHECK(g == r, "realloc 1 -> 6 MiB with free space after it moved the block (%p -> %p)", (void *)r,
        (void *)g);
  if (!g) DIE("realloc to 6 MiB failed");
  bool same = true;
  for (size_t i = 0; i < 1 * MiB; i += 509) same = same && g[i] == 0x5a;
  CHECK(same, "realloc 1 -> 6 MiB lost the block's contents");
  CHECK(T_usable(g) >= 6 * MiB, "usable size %zu after realloc to 6 MiB", T_usable(g));
  touch(g, 6 * MiB, 1);
  char *s = T_realloc(g, 512 * KiB);
  CHECK(s == g, "realloc 6 MiB -> 512 KiB moved the block (%p -> %p)", (void *)g, (void *)s);
  char *t = xmalloc(2 * MiB);
  CHECK(t == g + 512 * KiB,
        "2 MiB after shrinking the block at %p to 512 KiB: got %p, want %p (the tail was not "
        "given back)",
        (void *)g, (void *)t, (void *)(g + 512 * KiB));
  /* no room after it now: growing must move, and keep the contents */
  char *m = T_realloc(s, 1 * MiB);
  if (!m) DIE("realloc to 1 MiB failed");
  CHECK(m != s && m[0] == 1 && m[512 * KiB - 1] == 0x5a,
        "realloc 512 KiB -> 1 MiB with a live block after it: %p -> %p, contents %d %d", (void *)s,
        (void *)m, m[0], m[512 * KiB - 1]);
  T_free(m);
  T_free(t);
  printf("  %-38s ok\n", "split, merge, resize in place");
}

/* Four buffers grown in turn must move (all but one at the arena's top); past
 * 1 MiB each that moves leaves the arena for
 * a mapping of its own (rill_stats counts it as huge), so that later moves
 * are mremap's, and every move keeps the contents. */
static void growing_buffers_remap(void) {
  struct rill_stats s0, s1;
  rill_stats_get(&s0);
  enum { B = 4 };
  char *buf[B];
  size_t len = 64 * KiB;
  for (int b = 0; b < B; b++) {
    buf[b] = xmalloc(len);
    memset(buf[b], 'a' + b, len);
  }
  bool same = true;
  for (size_t n = 2 * len; n <= 8 * MiB; n += 64 * KiB) {
    for (int b = 0; b < B; b++) {
      char *q = T_realloc(buf[b], n);
      if (!q) DIE("realloc(%zu) failed", n);
      for (size_t i = 0; i < len; i += 4093) same = same && q[i] == 'a' + b;
      same = same && q[len - 1] == 'a' + b;
      memset(q + len, 'a' + b, n - len);
      buf[b] = q;
    }
    len = n;
  }
  rill_stats_get(&s1);
  CHECK(same, "four buffers grown in turn to 8 MiB lost contents on a move");
  /* the last one may sit at the arena's top and grow in place */
  CHECK(s1.huge_bytes >= s0.huge_bytes + (B - 1) * 8 * MiB,
        "four 8 MiB buffers grown by realloc: %" PRIu64 " huge bytes, want at least %zu more than "
        "%" PRIu64 " (they did not leave the arena)",
        s1.huge_bytes, (size_t)(B - 1) * 8 * MiB, s0.huge_bytes);
  for (int b = 0; b < B; b++) {
    CHECK(T_usable(buf[b]) >= 8 * MiB, "usable size %zu of a buffer grown to 8 MiB",
          T_usable(buf[b]));
    /* shrinking back keeps the prefix */
    char *q = T_realloc(buf[b], 300 * KiB);
    if (!q) DIE("realloc to 300 KiB failed");
    CHECK(q[0] == 'a' + b && q[300 * KiB - 1] == 'a' + b, "shrinking a remapped buffer lost data");
    T_free(q);
  }
  printf("  %-38s ok\n", "growing buffers leave the arena");
}

static long minor_faults(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

/* Two 8 MiB blocks leave 16 MiB of resident free runs; any four blocks of
 * 1-4 MiB fit in them once they merge, so rounds of such blocks, touched in
 * every page, fault in (almost) nothing. With power-of-two spans, 1-2 MiB
 * and 2-4 MiB blocks each wanted their own spans and faulted fresh pages. */
static void wandering_sizes(void) {
  enum { LIVE = 4, ROUNDS = 100 };
  char *p[LIVE];
  p[0] = xmalloc(8 * MiB);
  p[1] = xmalloc(8 * MiB);
  touch(p[0], 8 * MiB, 1);
  touch(p[1], 8 * MiB, 1);
  T_free(p[0]);
  T_free(p[1]);
  unsigned seed = 99;
  long before = minor_faults();
  for (int r = 0; r < ROUNDS; r++) {
    for (int i = 0; i < LIVE; i++) {
      seed = seed * 1103515245u + 12345u;
      size_t n = 1 * MiB + (size_t)((seed >> 8) % (3 * MiB));
      p[i] = xmalloc(n);
      touch(p[i], n, (char)r);
    }
    for (int i = 0; i < LIVE; i++) T_free(p[i]);
  }
  long faults = minor_faults() - before;
  printf("  %-38s %ld minor faults in %d rounds\n", "wandering sizes reuse free runs", faults,
         ROUNDS);
  /* one round touches up to 4096 pages: a run not reused would show */
  CHECK(faults < 256,
        "%ld minor faults for blocks of 1-4 MiB that fit in 16 MiB of free, resident runs", faults);
}

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, res = 0;
  if (!f) DIE("cannot open /proc/self/statm");
  if (fscanf(f, "%ld %ld", &pages, &res) != 2) DIE("cannot read /proc/self/statm");
  fclose(f);
  return res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Freed runs keep their pages for the purge delay; rill_collect (and
 * malloc_trim) gives them back at once. */
static void collect_returns_runs(void) {
  enum { N = 24 };
  char *p[N];
  T_trim(); /* free runs of the earlier checks would serve these blocks resident */
  long start = rss_kib();
  for (int i = 0; i < N; i++) {
    size_t n = 300 * KiB + (size_t)i * 97 * KiB; /* 300 KiB .. 2.5 MiB */
    p[i] = xmalloc(n);
    touch(p[i], n, 3);
  }
  long peak = rss_kib();
  for (int i = 0; i < N; i += 2) T_free(p[i]); /* every other one: runs that cannot merge */
  for (int i = 1; i < N; i += 2) T_free(p[i]); /* then the rest: they merge */
  long freed = rss_kib();
  T_trim();
  long after = rss_kib();
  printf("  %-38s RSS start %ld, peak %ld, after free %ld, after trim %ld KiB\n",
         "trim gives free runs back", start, peak, freed, after);
  CHECK(peak - start > 20 * 1024, "touching 34 MiB of large blocks raised RSS by %ld KiB only",
        peak - start);
  CHECK(after < start + 2 * 1024, "RSS %ld KiB after trim, %ld KiB before the blocks", after,
        start);
}

static size_t resident_bytes(const void *p, size_t n) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE), np = (n + pg - 1) / pg, r = 0;
  unsigned char *vec = malloc(np);
  if (!vec || mincore((void *)((uintptr_t)p & ~(pg - 1)), n, vec) != 0) DIE("mincore failed");
  for (size_t i = 0; i < np; i++) r += vec[i] & 1;
  free(vec);
  return r * pg;
}

/* A free run merged from a resident piece and a purged one knows which is
 * which: rill_stats counts only the resident piece as committed, and a
 * calloc of the whole run writes only that piece. With one flag per run,
 * the merged run counted 24 MiB committed and calloc wrote all of it. */
static void merged_runs_know_their_pages(void) {
  enum { BIG = 24, SMALL = 2 }; /* MiB; a run, not a huge block */
  char *p = xmalloc(BIG * MiB);
  char *q = T_realloc(p, SMALL * MiB); /* the tail goes back as a free run */
  CHECK(q == p, "realloc %d -> %d MiB moved the block", BIG, SMALL);
  T_trim(); /* purges the tail */
  touch(q, SMALL * MiB, 5);
  struct rill_stats s0, s1;
  rill_stats_get(&s0);
  T_free(q); /* merges with the purged tail */
  rill_stats_get(&s1);
  long grew = ((long)s1.bytes_committed - (long)s0.bytes_committed) / (long)KiB;
  char *c = T_calloc(1, BIG * MiB);
  if (!c) DIE("calloc(%d MiB) failed", BIG);
  size_t res = resident_bytes(c, BIG * MiB);
  long nonzero = 0;
  for (size_t i = 0; i < BIG * MiB; i += sizeof(long)) nonzero += *(long *)(c + i) != 0;
  printf("  %-38s committed %+ld KiB on the merge; calloc at %s: %zu KiB resident\n",
         "merged runs know their pages", grew, c == p ? "the same run" : "another place",
         res / KiB);
  CHECK(grew < 1024,
        "freeing %d MiB next to %d MiB of purged run raised committed bytes by %ld KiB", SMALL,
        BIG - SMALL, grew);
  CHECK(c == p, "calloc(%d MiB) did not take the merged free run at %p (got %p)", BIG, (void *)p,
        (void *)c);
  CHECK(res <= (SMALL + 1) * MiB,
        "calloc over %d MiB resident and %d MiB purged made %zu KiB resident", SMALL, BIG - SMALL,
        res / KiB);
  CHECK(nonzero == 0, "calloc(%d MiB) returned %ld non-zero words", BIG, nonzero);
  T_free(c);
}

/* Threads allocate, resize and free runs; each live block carries its
 * owner's tag in every page, so two live blocks sharing memory show up. */
enum { THREADS = 4, SLOTS = 8 };
static int ops_per_thread = 3000;

static void *churn(void *arg) {
  unsigned id = (unsigned)(uintptr_t)arg, seed = id * 7919u + 1;
  char *blk[SLOTS] = {0};
  size_t len[SLOTS] = {0};
  char tag[SLOTS];
  long bad = 0;
  for (int op = 0; op < ops_per_thread; op++) {
    seed = seed * 1103515245u + 12345u;
    unsigned k = (seed >> 16) % SLOTS;
    if (blk[k]) { /* check, then free or resize */
      for (size_t off = 0; off < len[k]; off += 4096) bad += blk[k][off] != tag[k];
      bad += blk[k][len[k] - 1] != tag[k];
      if ((seed >> 8) & 1) {
        T_free(blk[k]);
        blk[k] = NULL;
        continue;
      }
      size_t n = 257 * KiB + (size_t)((seed >> 4) % (5 * MiB));
      char *q = T_realloc(blk[k], n);
      if (!q) DIE("realloc(%zu) failed", n);
      size_t keep_n = n < len[k] ? n : len[k];
      for (size_t off = 0; off < keep_n; off += 4096) bad += q[off] != tag[k];
      blk[k] = q;
      len[k] = n;
    } else {
      len[k] = 257 * KiB + (size_t)((seed >> 4) % (5 * MiB));
      blk[k] = xmalloc(len[k]);
    }
    tag[k] = (char)(id * SLOTS + k + op);
    touch(blk[k], len[k], tag[k]);
  }
  for (int k = 0; k < SLOTS; k++) T_free(blk[k]);
  return (void *)bad;
}

static void threads_never_share(void) {
  pthread_t th[THREADS];
  for (unsigned i = 0; i < THREADS; i++)
    if (pthread_create(&th[i], NULL, churn, (void *)(uintptr_t)i)) DIE("pthread_create");
  long bad = 0;
  for (unsigned i = 0; i < THREADS; i++) {
    void *r;
    pthread_join(th[i], &r);
    bad += (long)(intptr_t)r;
  }
  printf("  %-38s %d threads x %d operations, %ld pages overwritten\n",
         "threads resize and free runs", THREADS, ops_per_thread, bad);
  CHECK(bad == 0, "%ld pages of live large blocks held another block's tag", bad);
}

/* --shards, in a process of its own (no free run of main's shard may fit
 * first): free runs live in the shard of the heap that cut them, and a
 * thread whose shard has no fit must take another shard's before fresh
 * slots, or memory freed by one thread would never serve the others. */
static void *alloc_free_8m(void *arg) {
  char *p = xmalloc(8 * MiB);
  touch(p, 8 * MiB, 1);
  *(char **)arg = p;
  T_free(p);
  return NULL;
}

static char *other_thread_8m(void) {
  char *p = NULL;
  pthread_t t;
  if (pthread_create(&t, NULL, alloc_free_8m, &p)) DIE("pthread_create");
  pthread_join(t, NULL);
  return p;
}

static void shards_share_free_runs(void) {
  char *p = other_thread_8m();
  char *q = xmalloc(8 * MiB);
  CHECK(q == p,
        "8 MiB after another thread freed 8 MiB at %p: got %p (fresh memory, not the "
        "other shard's free run)",
        (void *)p, (void *)q);
  touch(q, 8 * MiB, 2);
  T_free(q); /* back to the shard that cut it */
  char *r = other_thread_8m();
  CHECK(r == p, "a thread's 8 MiB after the main thread freed it at %p: got %p", (void *)p,
        (void *)r);
  printf("  %-38s ok\n", "shards share their free runs");
}

/* Grows *b by realloc in 64 KiB steps from `from` to `to` bytes, writing the
 * last byte of each step; returns how many steps moved it. */
static int grow_by_steps(char **b, size_t from, size_t to) {
  int moved = 0;
  for (size_t n = from; n <= to; n += 64 * KiB) {
    char *q = T_realloc(*b, n);
    if (!q) DIE("realloc(%zu) failed", n);
    moved += q != *b;
    *b = q;
    q[n - 1] = 6;
  }
  return moved;
}

/* --shards, after the above: a block that realloc must move to make it
 * large goes among its own thread's runs, never into another thread's free
 * run. There it went back to that thread's shard when freed, so the thread's
 * next buffer was cut among the other thread's runs again and moved at step
 * after step (bench_realloc at two threads: one run in four took 4-40x the
 * time and 2-8x the peak RSS). From its new home it grows in place, and the
 * other thread's free run is still whole for that thread. */
static void moved_blocks_stay_home(void) {
  char *p = other_thread_8m(); /* a free run of 8 MiB in the other thread's shard */
  char *g = xmalloc(2 * KiB);  /* a pool span's block: no run is cut for it */
  g[0] = 5;
  g = T_realloc(g, 320 * KiB);
  if (!g) DIE("realloc to 320 KiB failed");
  CHECK(g[0] == 5, "realloc lost the block's first byte");
  CHECK((uintptr_t)g - (uintptr_t)p >= 8 * MiB,
        "a block realloc moved to 320 KiB went into another thread's free run (%p, 8 MiB): "
        "got %p",
        (void *)p, (void *)g);
  int moved = grow_by_steps(&g, 384 * KiB, 4 * MiB);
  CHECK(moved == 0, "a buffer growing from 384 KiB to 4 MiB in 64 KiB steps moved %d times", moved);
  CHECK(g[0] == 5, "growing lost the block's first byte");
  char *r = other_thread_8m();
  CHECK(r == p,
        "the other thread's 8 MiB after this one grew a buffer: got %p, not its free run at %p",
        (void *)r, (void *)p);
  T_free(g);
  printf("  %-38s ok\n", "moved blocks stay among their own runs");
}

/* --shards, after the above (this thread's shard holds the 4 MiB free run
 * the buffer above left): a block realloc grows to 64 KiB or more becomes a
 * run of pages, though malloc would give the size a class, so it grows on
 * in place, and shrinks in place to 100 KiB again. Through the classes, a buffer grown in 64 KiB
 * steps moved into the 128, 192 and 256 KiB classes in turn before it became a run. */
static void growing_blocks_become_runs(void) {
  char *p = xmalloc(64 * KiB);
  p[0] = 8;
  char *q = T_realloc(p, 100 * KiB);
  if (!q) DIE("realloc to 100 KiB failed");
  size_t got = T_usable(q);
  CHECK(got == 100 * KiB,
        "a 64 KiB block grown to 100 KiB has %zu usable bytes: a size class's block, not a "
        "run of pages",
        got);
  int moved = (q != p) + grow_by_steps(&q, 128 * KiB, 1 * MiB);
  CHECK(moved == 1, "a buffer grown from 64 KiB to 1 MiB in 64 KiB steps moved %d times", moved);
  CHECK(q[0] == 8, "growing lost the block's first byte");
  char *r = T_realloc(q, 100 * KiB); /* and back: the run shrinks in place */
  CHECK(r == q && T_usable(r) == 100 * KiB,
        "a 1 MiB run shrunk to 100 KiB went to %p (from %p) with %zu usable bytes", (void *)r,
        (void *)q, T_usable(r));
  CHECK(r[0] == 8, "shrinking lost the block's first byte");
  T_free(r);
  printf("  %-38s ok\n", "growing blocks become runs");
}

/* Blocks of a run class whose runs have bytes to spare start a colour into each run, a
 * multiple of 256 B that varies from run to run (span.c, run_colour): 18 KiB blocks, seven to
 * a run of 128 KiB, sat at page offsets 0 and 2048 in every run before, so a copy from one
 * into a block a header into a page-aligned buffer ran 20-30x slower on an AMD Zen 3.
 * Blocks aligned to a page in that class's sizes still come out aligned, from a class or a
 * run that has no colour. */
static void run_colours(void) {
  enum { N = 140 };
  void *b[N];
  bool seen[4096 / 256] = {false};
  unsigned offsets = 0;
  for (int i = 0; i < N; i++) {
    b[i] = T_malloc(18000);
    CHECK(b[i] != NULL, "malloc(18000) #%d failed", i);
    if (!b[i]) continue;
    CHECK((uintptr_t)b[i] % 256 == 0, "an 18 KiB-class block at %p is not 256-byte aligned", b[i]);
    memset(b[i], i, 18000);
    unsigned k = (unsigned)((uintptr_t)b[i] % 4096 / 256);
    offsets += !seen[k];
    seen[k] = true;
  }
  printf("  18 KiB-class blocks at %u page offsets among %d (2 without colours)\n", offsets, N);
  CHECK(offsets > 4, "%d blocks of the 18 KiB class at %u page offsets: runs not coloured", N,
        offsets);
  for (int i = 0; i < N; i++) {
    if (!b[i]) continue;
    const unsigned char *c = b[i];
    CHECK(c[0] == (unsigned char)i && c[17999] == (unsigned char)i, "block %d lost its bytes", i);
    T_free(b[i]);
  }
  for (size_t n = 16400; n <= 41000; n += 4100) {
    void *p = NULL;
    int rc = T_posix_memalign(&p, 4096, n);
    CHECK(rc == 0 && p && (uintptr_t)p % 4096 == 0, "posix_memalign(4096, %zu) gave %p (rc %d)", n,
          p, rc);
    if (p) memset(p, 1, n);
    T_free(p);
  }
}

/* --reuse, in a process of its own: 16-64 KiB buffers replaced at random,
 * up to 400 at once (randalloc's walk: each step allocates or frees one),
 * each written at its first and last byte only, as a buffer partly filled
 * is, with no purge during the run. The pages they reach, resident
 * afterwards, against the most bytes they held at once: when an emptied big
 * class's run merged at once with its free neighbours and was cut afresh,
 * the next runs of its length started elsewhere, and the written pages
 * spread over all of it (1.01x); filed whole, a run is reused where it was
 * (runs.c, file_whole; 0.65x). */
static void buffers_reuse(void) {
  enum { NBUF = 400, OPS = 300000, MIN = 16 * 1024, MAX = 64 * 1024 };
  static char *blk[NBUF];
  static size_t len[NBUF];
  size_t live = 0, bytes = 0, peak = 0;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  uint64_t seed = 0x9e3779b97f4a7c15u;
  for (int op = 0; op < OPS; op++) {
    uint64_t r = rng_next(&seed);
    if (live == 0 || (live < NBUF && (r & 1))) {
      size_t n = MIN + (size_t)((r >> 32) % (MAX - MIN + 1));
      char *p = xmalloc(n);
      p[0] = p[n - 1] = (char)op; /* a header and a tail: a buffer partly filled */
      blk[live] = p, len[live++] = n;
      bytes += n;
      if (bytes > peak) peak = bytes;
      if ((uintptr_t)p < lo) lo = (uintptr_t)p;
      if ((uintptr_t)p + n > hi) hi = (uintptr_t)p + n;
    } else {
      size_t i = (size_t)((r >> 32) % live);
      T_free(blk[i]);
      bytes -= len[i];
      blk[i] = blk[--live], len[i] = len[live];
    }
  }
  size_t res = resident_bytes((void *)lo, hi - lo);
  printf("  %-38s %zu KiB resident, %zu KiB live at most (%.2fx)\n", "buffers replaced at random",
         res / KiB, peak / KiB, (double)res / (double)peak);
  CHECK(res < peak / 10 * 8,
        "%zu KiB resident where 16-64 KiB buffers replaced at random, each written at its ends, "
        "held %zu KiB at most: their runs moved, and the writes spread over all their memory",
        res / KiB, peak / KiB);
  while (live) T_free(blk[--live]);
}

/* --tails, in a process of its own: 8 MiB of 16 KiB blocks written and
 * freed, then 8 MiB of 24 KiB blocks written. As 64 KiB spans of the pool,
 * the 24 KiB class held two blocks a span, and the last 16 KiB, written by
 * the 16 KiB blocks before, stayed resident under nothing: resident memory
 * 1.33x the live bytes. As runs that the blocks fill, it is the live bytes. */
static void class_tails(void) {
  enum { N16 = 8 * 1024 / 16, N24 = 8 * 1024 / 24 };
  char *a[N16 > N24 ? N16 : N24];
  for (int i = 0; i < N16; i++) touch(a[i] = xmalloc(16 * KiB), 16 * KiB, 3);
  for (int i = 0; i < N16; i++) T_free(a[i]);
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < N24; i++) {
    touch(a[i] = xmalloc(24 * KiB), 24 * KiB, 4);
    if ((uintptr_t)a[i] < lo) lo = (uintptr_t)a[i];
    if ((uintptr_t)a[i] + 24 * KiB > hi) hi = (uintptr_t)a[i] + 24 * KiB;
  }
  size_t live = (size_t)N24 * 24 * KiB, res = resident_bytes((void *)lo, hi - lo);
  printf("  %-38s %zu KiB resident around %zu KiB of 24 KiB blocks (%.2fx)\n", "class tails",
         res / KiB, live / KiB, (double)res / (double)live);
  CHECK(res < live + live / 10,
        "%zu KiB resident where %zu KiB of 24 KiB blocks live, after 16 KiB blocks used the "
        "memory: the spans' tails stayed resident under no block",
        res / KiB, live / KiB);
  for (int i = 0; i < N24; i++) T_free(a[i]);
}

/* --aging, with RILL_PURGE_DELAY_MS=100: a 4 MiB block is freed, and the
 * 512 KiB block beside it is freed and allocated again every millisecond for
 * fifteen delays. Each free merges into the 4 MiB free run and makes its
 * stamp new, and each malloc cuts the block from the run's low end again.
 * With one stamp per run, the run was never due and its old 3.5 MiB stayed
 * resident; slots free a whole delay must go back on the timed passes the
 * loop's own mallocs and frees run. */
static void old_parts_go_back(void) {
  enum { BIG = 4 * 1024, SMALL = 512, STEP = 4096 }; /* KiB */
  char *a = xmalloc(BIG * KiB), *b = xmalloc(SMALL * KiB), *guard = xmalloc(SMALL * KiB);
  touch(a, BIG * KiB, 1);
  touch(b, SMALL * KiB, 2);
  touch(guard, SMALL * KiB, 3);
  char *lo = a, *hi = b + SMALL * KiB;
  struct rill_stats s0, s1;
  rill_stats_get(&s0);
  T_free(a);
  long bad = 0, cycles = 0, inside = 0;
  struct timespec t0, t, ms = {0, 1000000};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {
    for (size_t off = 0; off < SMALL * KiB; off += STEP) bad += b[off] != 2;
    T_free(b);
    b = xmalloc(SMALL * KiB);
    touch(b, SMALL * KiB, 2);
    inside += b >= lo && b < hi;
    cycles++;
    nanosleep(&ms, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 1500);
  rill_stats_get(&s1);
  size_t res = resident_bytes(lo, (size_t)(hi - lo));
  size_t live = b >= lo && b < hi ? SMALL * KiB : 0;
  for (size_t off = 0; off < SMALL * KiB; off += STEP) bad += guard[off] != 3 || b[off] != 2;
  printf("  %-38s %ld cycles; %zu KiB resident around the %zu KiB live, %llu KiB purged\n",
         "old parts of a churned free run", cycles, (res - live) / KiB, live / KiB,
         (unsigned long long)(s1.bytes_purged - s0.bytes_purged) / KiB);
  CHECK(inside == cycles, "%ld of %ld blocks were not cut from the freed 4 MiB run",
        cycles - inside, cycles);
  CHECK(res - live <= 256 * KiB,
        "%zu KiB of a free run stayed resident after 1.5 s of 100 ms delays: its old part was "
        "never purged while a neighbour churned",
        (res - live) / KiB);
  CHECK(bad == 0, "%ld pages of live blocks lost their contents", bad);
  T_free(b);
  T_free(guard);
}

/* --lazy, with RILL_PURGE=free and no purge delay: a 24 MiB block is freed
 * and lazily advised (MADV_FREE keeps its slots dirty: they may still hold
 * data), then the 512 KiB block beside it is freed and allocated again
 * every millisecond, each free merging into the big free run. A pass must advise only what came
 * back since: before, each one advised the whole run again, 24 MiB per
 * pass (under a 3 GiB limit, a minute in madvise). A calloc of the big
 * run afterwards must still read zero. */
static void lazy_runs_advised_once(void) {
  enum { BIG = 24 * 1024, SMALL = 512, CYCLES = 100 }; /* KiB */
  /* with RILL_HUGEPAGES=1 (a second ctest entry), past the arena's first 32 MiB, where a
   * lazy pass keeps the huge pages at a range's ends: it gave the rest again at every pass */
  char *pad = xmalloc(32 * MiB - 64 * KiB);
  char *a = xmalloc(BIG * KiB + 80 * KiB), *b = xmalloc(SMALL * KiB), *guard = xmalloc(SMALL * KiB);
  touch(a, BIG * KiB, 1);
  touch(b, SMALL * KiB, 2);
  touch(guard, SMALL * KiB, 3);
  T_free(a);
  struct timespec ms = {0, 1000000};
  for (int k = 0; k < 5; k++) { /* a timed pass advises it, lazily */
    nanosleep(&ms, NULL);
    T_free(xmalloc(SMALL * KiB));
  }
  struct rill_stats s0, s1;
  rill_stats_get(&s0);
  for (int c = 0; c < CYCLES; c++) {
    T_free(b);
    b = xmalloc(SMALL * KiB);
    touch(b, SMALL * KiB, 2);
    nanosleep(&ms, NULL); /* a timed pass comes at most once a millisecond */
  }
  rill_stats_get(&s1);
  size_t purged = s1.bytes_purged - s0.bytes_purged;
  printf("  %-38s %zu KiB advised in %d cycles of a %d KiB block\n", "lazily advised free run",
         purged / KiB, CYCLES, SMALL);
  CHECK(purged <= (size_t)(CYCLES + 8) * SMALL * KiB,
        "%zu MiB advised in %d cycles of a %d KiB block beside a lazily advised %d MiB free run: "
        "its old slots were advised again",
        purged >> 20, CYCLES, SMALL, BIG / 1024);
  char *z = (char *)T_calloc(1, BIG * KiB);
  CHECK(z != NULL, "calloc of %d MiB failed", BIG / 1024);
  size_t nonzero = 0;
  for (size_t off = 0; z && off < BIG * KiB; off += 64) nonzero += z[off] != 0;
  CHECK(nonzero == 0, "calloc of a lazily advised run: %zu lines not zero", nonzero);
  T_free(z);
  T_free(b);
  T_free(guard);
  T_free(pad);
}

/* --spill, in a process of its own, with a long purge delay: 48 MiB of 1 KiB
 * blocks (a small class: pool spans) written and freed, then 40 MiB of 5 KiB
 * blocks (a class in runs) written. The runs must take the pooled spans,
 * which hold pages, before never-used memory (pool_spill): without that, the
 * 5 KiB blocks faulted in 40 MiB afresh while 48 MiB sat resident in the
 * pool until purged. */
static void pooled_spans_serve_runs(void) {
  enum { N1 = 48 * 1024, N5 = 40 * 1024 / 5 };
  char **a = (char **)xmalloc(N1 * sizeof *a);
  for (int i = 0; i < N1; i++) touch(a[i] = xmalloc(1024), 1024, 1);
  for (int i = 0; i < N1; i++) T_free(a[i]);
  long f0 = minor_faults();
  for (int i = 0; i < N5; i++) touch(a[i] = xmalloc(5 * KiB), 5 * KiB, 2);
  long faults = minor_faults() - f0, fresh = (long)N5 * 5 * KiB / 4096;
  printf("  %-38s %ld minor faults for 40 MiB of 5 KiB blocks (%ld if all fresh)\n",
         "pooled spans serve runs", faults, fresh);
  CHECK(faults < fresh / 4,
        "%ld minor faults for 40 MiB of 5 KiB blocks after 48 MiB of 1 KiB blocks were freed: "
        "the pooled spans' pages were not reused",
        faults);
  for (int i = 0; i < N5; i++) T_free(a[i]);
  T_free(a);
}

/* --scattered, in a process of its own, with a long purge delay: pooled
 * spans go to the runs only as stretches that can serve the request. 64 MiB
 * of 1 KiB blocks written, then those of every other 128 KiB of address
 * space freed, so the pool holds 32 MiB in pieces of 128 KiB at most with
 * live blocks between them; then a 6 MiB block, which no piece can serve,
 * and 30 MiB of 1 KiB blocks, which the pooled pieces can: they must come
 * from the pool. The library before made 6 MiB of the pieces runs for the
 * 6 MiB block (which took fresh memory anyway), and the 1 KiB blocks then
 * took 2,650 minor faults against 70 (python3's objects beside its JSON
 * encoder's buffer). */
static void scattered_spans_stay_pooled(void) {
  enum { N1 = 64 * 1024, N2 = 30 * 1024 };
  char **a = (char **)xmalloc(N1 * sizeof *a);
  char **b = (char **)xmalloc(N2 * sizeof *b);
  for (int i = 0; i < N1; i++) touch(a[i] = xmalloc(1024), 1024, 1);
  size_t freed = 0;
  for (int i = 0; i < N1; i++)
    if (((uintptr_t)a[i] >> 17) % 2 == 0) {
      T_free(a[i]);
      a[i] = NULL;
      freed += 1024;
    }
  char *big = xmalloc(6 * MiB);
  touch(big, 6 * MiB, 3);
  long f0 = minor_faults();
  for (int i = 0; i < N2; i++) touch(b[i] = xmalloc(1024), 1024, 2);
  long faults = minor_faults() - f0, fresh = (long)N2 * 1024 / 4096;
  printf("  %-38s %ld minor faults for 30 MiB of 1 KiB blocks after %zu MiB freed in pieces "
         "(%ld if all fresh)\n",
         "scattered pooled spans stay pooled", faults, freed >> 20, fresh);
  CHECK(freed >= 20 * MiB, "only %zu MiB freed: the blocks did not fill the address space in order",
        freed >> 20);
  CHECK(faults < fresh / 8,
        "%ld minor faults for 30 MiB of 1 KiB blocks while %zu MiB of their spans were pooled: "
        "a 6 MiB block took the pooled pieces, which could not serve it",
        faults, freed >> 20);
  for (int i = 0; i < N2; i++) T_free(b[i]);
  for (int i = 0; i < N1; i++) T_free(a[i]);
  T_free(big);
  T_free(a);
  T_free(b);
}

/* --swap, in a process of its own, with RILL_PURGE_DELAY_MS=6400: a program
 * that grows while memory it freed a sixty-fourth of the delay ago (100 ms)
 * sits resident where the growth cannot use it gives as much of that memory
 * back as it grows (pool_grew). A 16 MiB block written and freed, then,
 * 150 ms later, 16 MiB of 64 B blocks, whose spans are not cut from free
 * runs; then those blocks freed (their spans pooled) and, 150 ms later, 16
 * MiB of 1 KiB blocks, whose spans are of another size. Each time RSS must
 * grow by under 6 MiB of the 16 that came in (the heap's stash keeps 2 MiB
 * of emptied spans resident, as it should); the library before kept what
 * was freed resident for an eighth of the delay (800 ms) while the program
 * grew, and grew by all of it. */
static void growth_gives_back(void) {
  enum { N = 16 * 1024 * 1024 / 64, M = 16 * 1024 };
  char **a = (char **)xmalloc(N * sizeof *a), **c = (char **)xmalloc(M * sizeof *c);
  memset(a, 0, N * sizeof *a); /* their pages are not what is counted */
  memset(c, 0, M * sizeof *c);
  char *big = xmalloc(16 * MiB);
  touch(big, 16 * MiB, 1);
  T_free(big);
  struct timespec aged = {0, 150000000};
  nanosleep(&aged, NULL);
  long r0 = rss_kib();
  for (int i = 0; i < N; i++) touch(a[i] = xmalloc(64), 64, 1);
  long r1 = rss_kib();
  for (int i = 0; i < N; i++) T_free(a[i]);
  nanosleep(&aged, NULL);
  long r2 = rss_kib();
  for (int i = 0; i < M; i++) touch(c[i] = xmalloc(1024), 1024, 2);
  long r3 = rss_kib();
  printf("  %-38s RSS +%ld KiB for 16 MiB of 64 B blocks after a 16 MiB block was freed, "
         "+%ld KiB for 16 MiB of 1 KiB blocks after those were freed\n",
         "growth gives back what was freed", r1 - r0, r3 - r2);
  CHECK(r1 - r0 < 6 * 1024,
        "RSS %ld -> %ld KiB for 16 MiB of 64 B blocks 150 ms after a 16 MiB block was freed: "
        "its free run stayed resident while the program grew",
        r0, r1);
  CHECK(r3 - r2 < 6 * 1024,
        "RSS %ld -> %ld KiB for 16 MiB of 1 KiB blocks 150 ms after 16 MiB of 64 B blocks were "
        "freed: their pooled spans stayed resident while the program grew",
        r2, r3);
  for (int i = 0; i < M; i++) T_free(c[i]);
  T_free(a);
  T_free(c);
}

/* Writes n blocks of sz bytes into v, frees those of `old` first (n_old
 * blocks), and returns the minor faults that writing them took. */
static long refill(char **v, size_t n, size_t sz, size_t n_old, char c) {
  for (size_t i = 0; i < n_old; i++) T_free(v[i]);
  long f0 = minor_faults();
  for (size_t i = 0; i < n; i++) touch(v[i] = xmalloc(sz), sz, c);
  return minor_faults() - f0;
}

/* --give, in a process of its own, with a long purge delay: memory freed by
 * one kind of block serves the next kind, from resident pages, whatever the
 * spans (pool_from_runs, run_for). Each time 32 MiB of blocks are written,
 * freed, and 32 MiB of another size written; the second must fault in under
 * a quarter of its pages (8,192 if all were fresh):
 *   - one block of 32 MiB less a slot (a run), then 64 B blocks: a large
 *     block's young free run is kept whole until the program has faulted in
 *     a quarter of it, so under half here;
 *   - 20 KB blocks (a class in runs), then 100 B blocks (16 KiB pool spans),
 *     cut from the free runs the first left;
 *   - 48 B blocks (32 KiB spans), then 3,000 B blocks (128 KiB spans), from
 *     the first's pooled spans made runs.
 * The library before faulted every page of the second size in afresh, while
 * the first's sat resident until the growth swap gave them back. */
static void freed_memory_serves_other_sizes(void) {
  enum { N = 32 * 1024 * 1024 / 48 };
  char **v = (char **)xmalloc(N * sizeof *v);
  memset(v, 0, N * sizeof *v); /* its pages are not what is counted */
  long all = 32 * MiB / 4096;
  /* A debug build faults in its shadow records with the blocks. */
  long shadow = (long)(debug_shadow_bytes(32 * MiB) / 4096);
  size_t n20 = 32 * MiB / 20000, n100 = 32 * MiB / 100, n48 = 32 * MiB / 48;
  size_t n3k = 32 * MiB / 3000, n64 = 32 * MiB / 64;
  char *big = xmalloc(32 * MiB - 16 * KiB);
  touch(big, 32 * MiB - 16 * KiB, 5);
  T_free(big);
  long f3 = refill(v, n64, 64, 0, 6);
  refill(v, n20, 20000, n64, 1);
  long f1 = refill(v, n100, 100, n20, 2);
  refill(v, n48, 48, n100, 3);
  long f2 = refill(v, n3k, 3000, n48, 4);
  printf("  %-38s %ld / %ld / %ld minor faults for 32 MiB of 64 B blocks after one large "
         "block, 100 B after 20 KB, 3,000 B after 48 B (%ld if fresh)\n",
         "freed memory serves other sizes", f3, f1, f2, all);
  CHECK(f1 < all / 4 + shadow,
        "%ld minor faults for 32 MiB of 100 B blocks after 32 MiB of 20 KB blocks were freed: "
        "the free runs did not serve the small class",
        f1);
  CHECK(f2 < all / 4 + shadow,
        "%ld minor faults for 32 MiB of 3,000 B blocks after 32 MiB of 48 B blocks were freed: "
        "the pooled spans did not serve the other order",
        f2);
  CHECK(f3 < all / 2 + shadow,
        "%ld minor faults for 32 MiB of 64 B blocks after a 32 MiB block was freed: its run "
        "did not serve them once a quarter of it had been faulted in",
        f3);
  for (size_t i = 0; i < n3k; i++) T_free(v[i]);
  T_free(v);
}

/* --opens, in a process of its own, with a long purge delay: a young free
 * run keeps only itself whole, not the old free run it merges with. A 32 MiB
 * block is freed and 16 MiB of 64 B blocks opens its run (the first 8 MiB
 * come from never-used memory, the rest from the run). Then a 512 KiB block
 * that borders the run is freed and merges with what is left of it, and 16
 * MiB of 100 B blocks follow. The merged run may serve them once a quarter
 * of the young block (128 KiB) has been faulted in elsewhere, so they fault
 * in under a quarter of their pages. The library before kept the merged run
 * whole until a quarter of all of it (6 MiB) had been faulted in. */
static void young_run_keeps_only_itself(void) {
  size_t n64 = 16 * MiB / 64, n100 = 16 * MiB / 100, big_n = 32 * MiB - 16 * KiB;
  char **v = (char **)xmalloc((n64 + n100) * sizeof *v);
  memset(v, 0, (n64 + n100) * sizeof *v);
  char *big = xmalloc(big_n), *nb = xmalloc(512 * KiB);
  touch(big, big_n, 1);
  touch(nb, 512 * KiB, 2);
  /* the 512 KiB block is cut right after the big one's run (the wilderness,
   * low end first): the case this checks needs the two to border */
  CHECK(nb > big && (size_t)(nb - big) < 32 * MiB + 64 * KiB,
        "a 512 KiB block at %p after a 32 MiB block at %p: not its neighbour", (void *)nb,
        (void *)big);
  T_free(big);
  for (size_t i = 0; i < n64; i++) touch(v[i] = xmalloc(64), 64, 3);
  T_free(nb);
  long f = refill(v + n64, n100, 100, 0, 4), all = 16 * MiB / 4096;
  printf("  %-38s %ld minor faults for 16 MiB of 100 B blocks (%ld if fresh)\n",
         "young run keeps only itself", f, all);
  CHECK(f < all / 4,
        "%ld minor faults for 16 MiB of 100 B blocks after a 512 KiB block was freed beside an "
        "open free run of 24 MiB: the young block kept the whole merged run from them",
        f);
  for (size_t i = 0; i < n64 + n100; i++) T_free(v[i]);
  T_free(v);
}

/* --spill-miss, in a process of its own, with a long purge delay: a spill
 * that found no stretch of pooled spans with pages (here the pool holds only
 * spans rill_collect emptied) does not keep the pooled spans of a later
 * phase from serving another order. 24 MiB of 48 B blocks (32 KiB spans)
 * are freed after the miss, and 16 MiB of 3,000 B blocks (128 KiB spans)
 * must fault in under a quarter of their pages (a spill leaves the pool's
 * last 4 MiB to the small classes). The library before blocked every spill
 * of as much for an eighth of the delay (75 s here) after the miss, and
 * faulted them all in afresh. */
static void spill_after_miss(void) {
  size_t n64 = 8 * MiB / 64, n1k = 1 * MiB / 1000, n48 = 24 * MiB / 48, n3k = 16 * MiB / 3000;
  char **v = (char **)xmalloc(n48 * sizeof *v), **w = (char **)xmalloc(n1k * sizeof *w);
  memset(v, 0, n48 * sizeof *v);
  memset(w, 0, n1k * sizeof *w);
  for (size_t i = 0; i < n64; i++) touch(v[i] = xmalloc(64), 64, 1);
  for (size_t i = 0; i < n64; i++) T_free(v[i]);
  T_trim(); /* the pool's spans hold no pages: the next spill finds no stretch */
  for (size_t i = 0; i < n1k; i++) touch(w[i] = xmalloc(1000), 1000, 2); /* its look misses */
  for (size_t i = 0; i < n48; i++) touch(v[i] = xmalloc(48), 48, 3);
  long f = refill(v, n3k, 3000, n48, 4), all = 16 * MiB / 4096;
  printf("  %-38s %ld minor faults for 16 MiB of 3,000 B blocks after 48 B ones (%ld if "
         "fresh)\n",
         "spill after a miss", f, all);
  CHECK(f < all / 4,
        "%ld minor faults for 16 MiB of 3,000 B blocks after 24 MiB of 48 B blocks were freed: "
        "a spill that found nothing before kept their pooled spans from serving",
        f);
  for (size_t i = 0; i < n3k; i++) T_free(v[i]);
  for (size_t i = 0; i < n1k; i++) T_free(w[i]);
  T_free(v);
  T_free(w);
}

/* --short-runs, in a process of its own, with a long purge delay: free runs
 * too short for a span do not keep a longer one filed after them from
 * serving it. An 8 MiB block's free run serves 16 KiB spans of 100 B blocks
 * (once 2 MiB more have been faulted in: give_open), and every other one
 * of those spans is emptied, which files up to 256 free runs of one slot
 * with their pages. A 2 MiB block freed after them is open to small spans
 * once 512 KiB more have been faulted in, which the first MiB of 3,000 B
 * blocks (128 KiB spans) does. The second MiB must then come from its
 * resident pages. The library before kept one list of free runs with
 * pages, looked at the 32 filed first, all too short, and faulted the MiB
 * in afresh (256 faults). */
static void short_runs_step_aside(void) {
  size_t n100 = 16 * MiB / 100, n3k = 1 * MiB / 3000;
  char **v = (char **)xmalloc(n100 * sizeof *v), **w = (char **)xmalloc(2 * n3k * sizeof *w);
  memset(v, 0, n100 * sizeof *v);
  memset(w, 0, 2 * n3k * sizeof *w);
  char *big = xmalloc(8 * MiB);
  touch(big, 8 * MiB, 1);
  T_free(big);
  for (size_t i = 0; i < n100; i++) touch(v[i] = xmalloc(100), 100, 2);
  size_t freed = 0;
  for (size_t i = 0; i < n100; i++) { /* the spans at even 16 KiB of the block's run */
    uintptr_t off = (uintptr_t)v[i] - (uintptr_t)big;
    if (off < 8 * MiB && off / (16 * KiB) % 2 == 0) {
      T_free(v[i]);
      v[i] = NULL;
      freed++;
    }
  }
  char *b2 = xmalloc(2 * MiB), *after = xmalloc(512 * KiB); /* b2's run borders no wilderness */
  touch(b2, 2 * MiB, 3);
  T_free(b2);
  for (size_t i = 0; i < n3k; i++) touch(w[i] = xmalloc(3000), 3000, 4);
  long f0 = minor_faults();
  for (size_t i = n3k; i < 2 * n3k; i++) touch(w[i] = xmalloc(3000), 3000, 4);
  long f = minor_faults() - f0;
  printf("  %-38s %ld minor faults for the second MiB of 3,000 B blocks after %zu blocks of "
         "100 B and a 2 MiB block were freed (256 if fresh)\n",
         "short runs step aside", f, freed);
  CHECK(freed > n100 / 8, "only %zu of %zu blocks of 100 B were cut from the 8 MiB block's run",
        freed, n100);
  CHECK(f < 64,
        "%ld minor faults for 1 MiB of 3,000 B blocks after a 2 MiB block was freed: the free "
        "runs of one slot filed before it kept it from serving",
        f);
  for (size_t i = 0; i < n100; i++) T_free(v[i]);
  for (size_t i = 0; i < 2 * n3k; i++) T_free(w[i]);
  T_free(after);
  T_free(v);
  T_free(w);
}

/* --sparse-move, in a process of its own: a buffer that grew in place at the
 * arena's top while the program wrote one byte per 64 KiB step, then had to
 * move to a mapping of its own, leaves the pages it never wrote out of the
 * mapping. Grown to 16 MiB this way, with a block placed after it, it moves
 * at 17 MiB: RSS may grow by the pages written (a MiB at most), where a full
 * copy made all 16 MiB resident (the library before, 56aa273: +16,432 KiB). */
static void sparse_buffer_moves_sparse(void) {
  size_t step = 64 * KiB, n = 512 * KiB; /* a run from the start: it grows in place */
  char *p = xmalloc(n), *first = p;
  p[0] = 1;
  for (size_t at = step - 1; at < n; at += step) p[at] = 2;
  for (n += step; n <= 16 * MiB; n += step) {
    p = T_realloc(p, n);
    if (!p) DIE("realloc(%zu) failed", n);
    p[n - 1] = 2;
  }
  n -= step;
  CHECK(p == first, "a buffer at the arena's top moved while it grew to 16 MiB (%p -> %p)",
        (void *)first, (void *)p);
  char *after = xmalloc(1 * MiB); /* the next thing cut: it borders the buffer */
  after[0] = 3;
  long r0 = rss_kib();
  char *q = T_realloc(p, n + 1 * MiB);
  if (!q) DIE("realloc(%zu) failed", n + 1 * MiB);
  long r1 = rss_kib();
  bool same = q[0] == 1;
  for (size_t at = step - 1; at < n; at += step) same = same && q[at] == 2;
  for (size_t at = step; at < n; at += step) same = same && q[at] == 0 && q[at - 2] == 0;
  printf("  %-38s RSS +%ld KiB for a 16 MiB buffer written every 64 KiB that moved\n",
         "a sparse buffer moves sparse", r1 - r0);
  CHECK(q != p, "the 16 MiB buffer grew in place past the block after it");
  CHECK(same, "a 16 MiB buffer that moved lost what was written, or holds what was not");
  CHECK(r1 - r0 < 4 * 1024,
        "RSS %ld -> %ld KiB when a 16 MiB buffer written once per 64 KiB moved to a mapping: "
        "the pages it never wrote were copied",
        r0, r1);
  T_free(q);
  T_free(after);
}

/* Whether every page of p .. p + n holds v where touch wrote it. */
static bool pages_hold(const char *p, size_t n, char v) {
  bool ok = p[n - 1] == v;
  for (size_t off = 0; off < n; off += 4096) ok = ok && p[off] == v;
  return ok;
}

/* --stale, in a process of its own, with RILL_PURGE_DELAY_MS=4000: a program
 * that takes never-used memory gives back the free runs that have sat unused
 * an eighth of the delay (500 ms here) first (pool_purge_stale), and keeps
 * those freed just now. A 24 MiB block written and freed, then 2 MiB of 64 B
 * blocks, when the purge's look (once per sixteenth) is due: the block, allocated
 * again, must find its pages still there (few faults). Freed again and left
 * 1.5 s, well inside the delay, then 16 MiB of 64 B blocks: RSS must fall
 * (the 24 MiB went back as the 16 came in); without the growth purge it rose
 * by 16 MiB. (24 MiB: a run; from LARGE_MAX up a block is mapped on its
 * own.) */
static void stale_runs_go_back(void) {
  enum { N = 2 * 1024 * 1024 / 64, M = 16 * 1024 * 1024 / 64 };
  char **a = (char **)xmalloc((N + M) * sizeof *a);
  memset(a, 0, (N + M) * sizeof *a); /* its pages are not what is counted */
  struct timespec due = {0, 600000000}, nap = {1, 500000000};
  char *big = xmalloc(24 * MiB);
  touch(big, 24 * MiB, 1);
  CHECK(pages_hold(big, 24 * MiB, 1), "a 24 MiB block lost what was written to it");
  nanosleep(&due, NULL); /* the growth purge looks once per sixteenth of the delay: due now */
  T_free(big);
  for (int i = 0; i < N; i++) touch(a[i] = xmalloc(64), 64, 1);
  long f0 = minor_faults();
  char *again = xmalloc(24 * MiB);
  touch(again, 24 * MiB, 2);
  long faults = minor_faults() - f0;
  CHECK(pages_hold(again, 24 * MiB, 2), "a 24 MiB block lost what was written to it");
  CHECK(faults < (long)(24 * MiB / 4096 / 4),
        "a 24 MiB block freed just before 2 MiB of 64 B blocks came in faulted %ld pages when "
        "allocated again: its free run was purged young",
        faults);
  T_free(again);
  long rss0 = rss_kib(); /* before the nap: reading it may take a span */
  nanosleep(&nap, NULL);
  for (int i = N; i < N + M; i++) touch(a[i] = xmalloc(64), 64, 3);
  long rss1 = rss_kib();
  printf("  %-38s RSS %ld -> %ld KiB for 16 MiB of 64 B blocks, 1.5 s after 24 MiB was freed\n",
         "stale free runs go back first", rss0, rss1);
  CHECK(rss1 < rss0,
        "RSS %ld -> %ld KiB for 16 MiB of 64 B blocks after a 24 MiB block had sat free 1.5 s "
        "(an eighth of the delay is 500 ms): the free run was not purged as the program grew",
        rss0, rss1);
  for (int i = 0; i < N + M; i++) T_free(a[i]);
  T_free(a);
}

/* --slices, with a purger thread at a short delay: 32 blocks of 16 MiB, written and freed,
 * merge into one free run of 512 MiB, which the timed passes give back while this thread
 * allocates blocks of 16-31 MiB and frees them for 1.5 s. A pass takes what it purges out of
 * the bins until its madvise returns, so it must give such a run back a slice (64 MiB) at a
 * time: before, one madvise gave back the whole run, and the blocks allocated meanwhile came
 * from fresh memory (or, under a spent address-space limit, waited for the pass). Sees each
 * madvise through syscall_hook.h. */
static _Atomic size_t advised_max, advised_sum;
static void see_advice(long n, const long *a, long r) {
  if (n != SYS_madvise || r != 0 || (a[2] != MADV_DONTNEED && a[2] != MADV_FREE)) return;
  size_t len = (size_t)a[1];
  atomic_fetch_add(&advised_sum, len);
  for (size_t m = atomic_load(&advised_max); len > m;)
    if (atomic_compare_exchange_weak(&advised_max, &m, len)) break;
}
static void slices_stay_in_reach(void) {
  enum { N = 32 };
  char *b[N];
  for (int i = 0; i < N; i++) touch(b[i] = xmalloc(16 * MiB), 16 * MiB, 4);
  syscall_seen = see_advice;
  for (int i = 0; i < N; i++) T_free(b[i]);
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  long tries = 0;
  do { /* some larger than any free run this loop's own blocks leave */
    char *p = xmalloc((16 + (size_t)tries % 16) * MiB);
    p[0] = 5;
    T_free(p);
    tries++;
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 1500);
  syscall_seen = NULL;
  size_t most = atomic_load(&advised_max), sum = atomic_load(&advised_sum);
  if (!SYSCALL_HOOK) {
    printf("  %-38s madvise calls not seen on this architecture\n", "a free run purged in slices");
    return;
  }
  printf("  %-38s %zu MiB advised in 1.5 s of churn, %zu MiB at most in one madvise\n",
         "a free run purged in slices", sum >> 20, most >> 20);
  CHECK(sum >= 256 * MiB, "%zu MiB advised in 1.5 s of 100 ms delays: no pass took the run",
        sum >> 20);
  CHECK(most <= 64 * MiB,
        "%zu MiB given back in one madvise: a pass held that much of a free run out of reach",
        most >> 20);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--slices")) {
    slices_stay_in_reach();
    return t_finish("test_runs --slices");
  }
  if (argc > 1 && !strcmp(argv[1], "--spill")) {
    pooled_spans_serve_runs();
    return t_finish("test_runs --spill");
  }
  if (argc > 1 && !strcmp(argv[1], "--scattered")) {
    scattered_spans_stay_pooled();
    return t_finish("test_runs --scattered");
  }
  if (argc > 1 && !strcmp(argv[1], "--swap")) {
    growth_gives_back();
    return t_finish("test_runs --swap");
  }
  if (argc > 1 && !strcmp(argv[1], "--stale")) {
    stale_runs_go_back();
    return t_finish("test_runs --stale");
  }
  if (argc > 1 && !strcmp(argv[1], "--aging")) {
    old_parts_go_back();
    return t_finish("test_runs --aging");
  }
  if (argc > 1 && !strcmp(argv[1], "--lazy")) {
    lazy_runs_advised_once();
    return t_finish("test_runs --lazy");
  }
  if (argc > 1 && !strcmp(argv[1], "--shards")) {
    shards_share_free_runs();
    moved_blocks_stay_home();
    growing_blocks_become_runs();
    return t_finish("test_runs --shards");
  }
  if (argc > 1 && !strcmp(argv[1], "--give")) {
    freed_memory_serves_other_sizes();
    return t_finish("test_runs --give");
  }
  if (argc > 1 && !strcmp(argv[1], "--opens")) {
    young_run_keeps_only_itself();
    return t_finish("test_runs --opens");
  }
  if (argc > 1 && !strcmp(argv[1], "--spill-miss")) {
    spill_after_miss();
    return t_finish("test_runs --spill-miss");
  }
  if (argc > 1 && !strcmp(argv[1], "--sparse-move")) {
    sparse_buffer_moves_sparse();
    return t_finish("test_runs --sparse-move");
  }
  if (argc > 1 && !strcmp(argv[1], "--short-runs")) {
    short_runs_step_aside();
    return t_finish("test_runs --short-runs");
  }
  if (argc > 1 && !strcmp(argv[1], "--colours")) {
    run_colours();
    return t_finish("test_runs --colours");
  }
  if (argc > 1 && !strcmp(argv[1], "--reuse")) {
    buffers_reuse();
    return t_finish("test_runs --reuse");
  }
  if (argc > 1 && !strcmp(argv[1], "--tails")) {
    class_tails();
    return t_finish("test_runs --tails");
  }
  if (argc > 1 && !strcmp(argv[1], "--quick")) ops_per_thread = 500;
  grow_at_top();
  split_merge_resize();
  wandering_sizes();
  growing_buffers_remap();
  collect_returns_runs();
  threads_never_share();
  collect_returns_runs();
  merged_runs_know_their_pages();
  return t_finish("test_runs");
}
