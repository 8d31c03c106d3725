/* test_memory.c - proves rill gives memory back: after 500 MiB of small objects from 4
 * threads are freed and malloc_trim(0) / rill_collect(true) runs, RSS returns near its
 * start; huge blocks are unmapped, and leave RSS, the moment they are freed; spans a
 * shrunken live set no longer needs drain and leave; the tables keep the memory map whole. */
#include "rill_test.h"

#include <pthread.h>
#include <sys/mman.h>

#define NTHREADS 4

static size_t total_bytes = 500 * MiB;
static size_t slack = 64 * MiB;

/* Objects form a singly linked list through their first word, so the test itself needs
 * no bookkeeping memory that would blur the RSS figures. */
struct node {
  struct node *next;
  size_t size;
};

struct worker {
  int id;
  bool free_own; /* free the objects in this thread, or leave them for the main thread */
  struct node *head;
  size_t bytes, count;
};

static void *worker(void *arg) {
  struct worker *w = arg;
  uint64_t rs = (uint64_t)w->id * 1000003 + 17;
  size_t target = total_bytes / NTHREADS;
  w->head = NULL;
  w->bytes = w->count = 0;
  while (w->bytes < target) {
    size_t n = 16 + (size_t)(rng_next(&rs) % 1009); /* small: 16 .. 1024 bytes */
    struct node *o = keep(T_malloc(n));
    if (!o) DIE("malloc(%zu) failed after %zu bytes", n, w->bytes);
    memset(o, (int)(n & 0xff), n); /* touch every byte */
    o->next = w->head;
    o->size = n;
    w->head = o;
    w->bytes += n;
    w->count++;
  }
  if (w->free_own) {
    for (struct node *o = w->head; o;) {
      struct node *next = o->next;
      T_free(o);
      o = next;
    }
    w->head = NULL;
  }
  return NULL;
}

static void free_list(struct node *o) {
  while (o) {
    struct node *next = o->next;
    const unsigned char *b = (const unsigned char *)o;
    if (o->size > sizeof *o && b[o->size - 1] != (unsigned char)(o->size & 0xff))
      DIE("object %p of %zu bytes lost its contents", (void *)o, o->size);
    T_free(o);
    o = next;
  }
}

static void phase(const char *name, bool free_own, int purge) {
  size_t start = rss_bytes();
  struct worker w[NTHREADS];
  pthread_t th[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) {
    w[i] = (struct worker){.id = i, .free_own = free_own};
    if (pthread_create(&th[i], NULL, worker, &w[i])) DIE("pthread_create");
  }
  for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
  size_t peak = rss_bytes();
  if (!free_own)
    for (int i = 0; i < NTHREADS; i++) free_list(w[i].head);
  size_t freed = rss_bytes();
  if (purge == 0)
    T_trim();
  else
    (void)rill_collect(true);
  size_t end = rss_bytes();
  printf("  %-38s RSS start %4zu MiB, peak %4zu MiB, after free %4zu MiB, after %s %4zu MiB\n",
         name, start / MiB, peak / MiB, freed / MiB, purge == 0 ? T_API "trim" : "rill_collect",
         end / MiB);
  CHECK(peak >= total_bytes / 2, "%s: RSS only %zu MiB while holding %zu MiB (measurement broken?)",
        name, peak / MiB, total_bytes / MiB);
  /* A debug build's shadow records stay resident for good. The pooled spans' entries (256
   * bytes per 16 KiB slot, 7.8 MiB of the 500) go back too where a page of them covers a map
   * word's slots or fewer (pool.c, entries_release): 10-11 MiB stayed after each phase, 3
   * now. Not with RILL_COMMIT=demand, nor with pages over 16 KiB. */
  const char *commit = getenv("RILL_COMMIT");
  bool entries_go = sysconf(_SC_PAGESIZE) <= 16384 && !(commit && !strcmp(commit, "demand"));
  size_t allow = (entries_go ? 4 * MiB : slack) + debug_shadow_bytes(peak);
  CHECK(end <= start + allow,
        "%s: RSS is %zu MiB after freeing everything and purging, started at %zu MiB (allowed "
        "+%zu MiB)",
        name, end / MiB, start / MiB, allow / MiB);
  /* and the statistics count the spans whose entries went back as free, with no pages */
  struct rill_stats st;
  rill_stats_get(&st);
  printf("  %-38s spans hot %" PRIu64 ", reusable %" PRIu64 ", floating %" PRIu64 ", free %" PRIu64
         ", committed %" PRIu64 " KiB\n",
         "", st.spans_hot, st.spans_reusable, st.spans_floating, st.spans_free,
         st.bytes_committed / 1024);
  CHECK(st.spans_hot + st.spans_reusable + st.spans_floating <= 256 &&
            st.bytes_committed <= 16 * MiB,
        "%s: after purging, %" PRIu64 " spans in use and %" PRIu64 " KiB committed", name,
        st.spans_hot + st.spans_reusable + st.spans_floating, st.bytes_committed / 1024);
}

static void huge_block(void) {
  const size_t n = 256 * MiB;
  size_t before = rss_bytes();
  unsigned char *p = keep(T_malloc(n));
  if (!p) DIE("malloc(256 MiB) failed");
  memset(p, 0x5C, n);
  size_t touched = rss_bytes();
  if (p[n - 1] != 0x5C || p[n / 2] != 0x5C) FAIL("huge block lost its contents");
  T_free(p);
  size_t after = rss_bytes();
  printf("  %-38s RSS before %4zu MiB, touched %4zu MiB, after free %4zu MiB\n",
         "huge block 256 MiB", before / MiB, touched / MiB, after / MiB);
  CHECK(touched >= before + n - 16 * MiB, "touched 256 MiB block: RSS %zu -> %zu MiB", before / MiB,
        touched / MiB);
  CHECK(after <= before + 16 * MiB,
        "freed 256 MiB block still resident: RSS %zu MiB after free, %zu MiB before malloc",
        after / MiB, before / MiB);
}

/* True when addr lies inside one of this process's mappings (/proc/self/maps). */
static bool mapped(const void *addr) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) DIE("cannot open /proc/self/maps");
  char line[512];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)addr >= lo && (uintptr_t)addr < hi)
      found = true;
  }
  fclose(f);
  return found;
}

/* Blocks over 32 MiB are mappings of their own: gone from the address space after free,
 * and counted in huge_bytes while alive. */
static void huge_unmapped(void) {
  const size_t sizes[] = {32 * MiB + 1, 40 * MiB, 100 * MiB + 12345};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k];
    struct rill_stats before, during, after;
    rill_stats_get(&before);
    unsigned char *p = keep(T_malloc(n));
    if (!p) DIE("malloc(%zu) failed", n);
    p[0] = 1;
    p[n - 1] = 2;
    rill_stats_get(&during);
    CHECK(mapped(p) && mapped(p + n - 1), "huge block %p (%zu bytes) is not mapped", (void *)p, n);
    CHECK(during.huge_bytes >= before.huge_bytes + n,
          "huge_bytes %" PRIu64 " -> %" PRIu64 " with a live %zu-byte block", before.huge_bytes,
          during.huge_bytes, n);
    T_free(p);
    rill_stats_get(&after);
    CHECK(!mapped(p) && !mapped(p + n - 1),
          "freed huge block %p (%zu bytes) is still mapped: not unmapped on free", (void *)p, n);
    CHECK(after.huge_bytes == before.huge_bytes,
          "huge_bytes %" PRIu64 " after free, %" PRIu64 " before malloc(%zu)", after.huge_bytes,
          before.huge_bytes, n);
  }
  printf("  %-38s ok\n", "huge blocks unmapped on free");
}

/* The span pool hands back its lowest-addressed span first: blocks that
 * each own a span, freed in a shuffled order, come back at ascending
 * addresses (a LIFO pool would return them in the reverse of the shuffle). */
static void pool_address_order(void) {
  enum { N = 32 };
  const size_t n = 300 * 1024; /* over the largest class: one span each */
  unsigned char *p[N];
  for (int i = 0; i < N; i++) {
    p[i] = keep(T_malloc(n));
    if (!p[i]) DIE("malloc(300 KiB) failed");
    p[i][0] = 1;
  }
  unsigned seed = 777;
  for (int i = N - 1; i > 0; i--) { /* shuffle, then free in that order */
    seed = seed * 1103515245u + 12345u;
    int j = (int)((seed >> 16) % (unsigned)(i + 1));
    unsigned char *t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
  for (int i = 0; i < N; i++) T_free(p[i]);
  int inversions = 0;
  for (int i = 0; i < N; i++) {
    p[i] = keep(T_malloc(n));
    if (!p[i]) DIE("malloc(300 KiB) failed");
    if (i && p[i] < p[i - 1]) inversions++;
  }
  for (int i = 0; i < N; i++) T_free(p[i]);
  printf("  %-38s %d of %d steps went down\n", "pooled spans reused by address", inversions, N - 1);
  CHECK(inversions == 0,
        "%d of %d blocks reallocated after a shuffled free came back below the previous one: "
        "the pool does not reuse spans lowest address first",
        inversions, N - 1);
}

/* Resident pages in [p, p + n), by mincore. */
static size_t resident_pages(const void *p, size_t n) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = (uintptr_t)p & ~(uintptr_t)(pg - 1), hi = (uintptr_t)p + n;
  size_t count = (hi - lo + pg - 1) / pg, res = 0;
  unsigned char vec[256];
  if (count > sizeof vec) DIE("resident_pages: %zu pages is too many", count);
  if (mincore((void *)lo, hi - lo, vec) != 0) DIE("mincore(%p) failed", (void *)lo);
  for (size_t i = 0; i < count; i++) res += vec[i] & 1;
  return res;
}

static void *first_blocks_worker(void *arg) {
  size_t *bad = arg;
  const size_t sizes[] = {2048, 4096, 8192, 16384};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k];
    unsigned char *p = keep(T_malloc(n));
    if (!p) DIE("malloc(%zu) failed", n);
    /* the blocks after it in its span: a carve of 16 would have written each */
    size_t after = resident_pages(p + n, 15 * n);
    if (after > 1) {
      fprintf(stderr, "  a thread's first malloc(%zu) made %zu pages after its block resident\n", n,
              after);
      bad[k] = after;
    }
    T_free(p);
  }
  return NULL;
}

/* A thread's first block of a big class touches little beyond itself: the
 * first carve of its first span of a class cuts one page's worth, not 16
 * blocks (16 pages for 4 KiB), so a program whose only big blocks are a few
 * buffers does not hold 64 KiB per class. The pool is purged first, so the
 * pages are not resident from earlier use. */
static void first_blocks_touch_little(void) {
  rill_collect(true);
  size_t bad[4] = {0};
  pthread_t t;
  if (pthread_create(&t, NULL, first_blocks_worker, bad)) DIE("pthread_create failed");
  pthread_join(t, NULL);
  size_t worst = 0;
  for (int k = 0; k < 4; k++) worst = bad[k] > worst ? bad[k] : worst;
  printf("  %-38s %zu\n", "pages touched past a first big block", worst);
  CHECK(worst == 0, "a thread's first malloc of 2-16 KiB made %zu more pages resident", worst);
}

/* Spans of big classes are runs that split and merge: the memory of freed
 * 96 KiB blocks serves 192 KiB blocks next. As spans of a power-of-two pool
 * each order served only itself, and the second set of blocks faulted in as
 * much fresh memory again while the first set's spans sat resident in the
 * pool (until the purge delay). Every byte is written, so RSS shows it. */
static void big_classes_share(void) {
  enum { N = 64 };
  void *p[N];
  const size_t small = 96 * 1024 - 100, big = 192 * 1024 - 100;
  for (int i = 0; i < N; i++) {
    p[i] = keep(T_malloc(small));
    if (!p[i]) DIE("malloc(96 KiB) failed");
    memset(p[i], 1, small);
  }
  size_t a = rss_bytes();
  for (int i = 0; i < N; i++) T_free(p[i]);
  for (int i = 0; i < N / 2; i++) {
    p[i] = keep(T_malloc(big));
    if (!p[i]) DIE("malloc(192 KiB) failed");
    memset(p[i], 2, big);
  }
  size_t b = rss_bytes();
  for (int i = 0; i < N / 2; i++) T_free(p[i]);
  printf("  %-38s RSS %zu -> %zu KiB\n", "96 KiB blocks' memory serves 192", a / 1024, b / 1024);
  CHECK(b <= a + MiB,
        "RSS rose from %zu to %zu KiB when 6 MiB of freed 96 KiB blocks were replaced by 6 MiB of "
        "192 KiB ones: big classes do not share memory",
        a / 1024, b / 1024);
}

/* Spans in use (any state but pooled). */
static uint64_t spans_in_use(void) {
  struct rill_stats s;
  rill_stats_get(&s);
  return s.spans_hot + s.spans_floating + s.spans_reusable;
}

/* A live set that shrinks must let go of the spans it no longer needs, even
 * when its blocks die in random order, so no span ever empties by itself: a
 * server after a burst. 32768 live 64-byte blocks (128 spans' worth) are
 * replaced at random, then 7/8 of them die, and the 4096 left (16 spans'
 * worth) go on being replaced at random. If every partly free span kept its
 * turn at allocation, each would stay part full for good (the first-passing
 * order did: about 60 spans after 256 K replacements); reuse by lowest
 * address starves the rest, which drain and go to the pool. */
static void *drain_worker(void *arg) {
  enum { BIG = 32768, SMALL = 4096, SZ = 64 };
  uint64_t *out = arg, base = spans_in_use(), x = 0x9E3779B97F4A7C15ull;
  void **p = T_malloc(BIG * sizeof *p);
  if (!p) DIE("malloc(%zu) failed", BIG * sizeof *p);
#define NEXT() (x ^= x << 13, x ^= x >> 7, x ^= x << 17)
  for (int i = 0; i < BIG; i++) p[i] = T_malloc(SZ);
  for (int k = 0; k < 4 * BIG; k++) {
    size_t i = NEXT() % BIG;
    T_free(p[i]);
    p[i] = T_malloc(SZ);
  }
  for (int i = BIG - 1; i > 0; i--) { /* shuffle: the survivors are spread over all spans */
    size_t j = NEXT() % (size_t)(i + 1);
    void *t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
  for (int i = SMALL; i < BIG; i++) T_free(p[i]);
  out[0] = spans_in_use() - base;
  for (int k = 0; k < 64 * SMALL; k++) {
    size_t i = NEXT() % SMALL;
    T_free(p[i]);
    p[i] = T_malloc(SZ);
    if (!p[i]) DIE("malloc(%d) failed", SZ);
  }
#undef NEXT
  out[1] = spans_in_use() - base;
  for (int i = 0; i < SMALL; i++) T_free(p[i]);
  T_free(p);
  return NULL;
}

static void listed_spans_drain(void) {
  uint64_t got[2];
  pthread_t th;
  if (pthread_create(&th, NULL, drain_worker, got)) DIE("pthread_create");
  pthread_join(th, NULL);
  uint64_t need = 4096 * 64 / T_SPAN_BYTES(64);
  printf("  %-38s %" PRIu64 " spans after the shrink, %" PRIu64 " later (%" PRIu64 " needed)\n",
         "spans drain when live blocks shrink", got[0], got[1], need);
  CHECK(got[1] <= 2 * need,
        "%" PRIu64 " spans still in use for 4096 live 64-byte blocks (%" PRIu64
        " spans' worth) after 256 K random replacements: partly free spans do not drain",
        got[1], need);
}

/* Anonymous mappings of the process: lines of /proc/self/maps without a
 * path (the tables, the arena, the C library's own). */
static int anon_mappings(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) DIE("cannot open /proc/self/maps");
  char line[512];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    const char *t = line;
    for (int field = 0; field < 5 && t; field++) /* address perms offset dev inode */
      if ((t = strchr(t, ' ')) != NULL)
        while (*t == ' ') t++;
    if (!t || *t == '\n' || !*t) n++;
  }
  fclose(f);
  return n;
}

/* rill's tables indexed by slot must not cut the memory map into pieces:
 * each mapping is an entry that every fork copies and every exit tears
 * down, and vm.max_map_count caps them. The pool's 22 bitmaps (11 orders on
 * each of two CPUs' stripes) and the runs' five each had a stretch of their
 * own, whose used part made two entries: the library before left 42
 * anonymous mappings here on two CPUs (22 now; glibc's malloc 4). Spans
 * of every pool order are taken and given back on every CPU the test may
 * run on (each CPU is a stripe), and large runs too; then the anonymous
 * mappings are counted. Single-threaded: no thread stack, no purger. */
static void mappings_few(void) {
  cpu_set_t all;
  if (sched_getaffinity(0, sizeof all, &all)) DIE("sched_getaffinity");
  static void *v[2048];
  for (int c = 0, cpus = 0; c < CPU_SETSIZE && cpus < 64; c++) {
    if (!CPU_ISSET(c, &all)) continue;
    cpus++;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(c, &one);
    if (sched_setaffinity(0, sizeof one, &one)) continue;
    for (size_t sz = 16; sz <= 4096; sz += sz / 4) { /* every pool order's classes */
      for (int i = 0; i < 2048; i++) {
        v[i] = T_malloc(sz);
        if (!v[i]) DIE("malloc(%zu) failed", sz);
        memset(v[i], 1, 8);
      }
      for (int i = 0; i < 2048; i++) T_free(v[i]);
    }
    for (int i = 0; i < 64; i++) { /* runs: big classes and large objects */
      v[i] = T_malloc(20000 + (size_t)i * 20000);
      if (!v[i]) DIE("malloc failed");
      memset(v[i], 1, 8);
    }
    for (int i = 0; i < 64; i++) T_free(v[i]);
  }
  sched_setaffinity(0, sizeof all, &all);
  T_trim();
  int n = anon_mappings();
  printf("  %-38s %d\n", "anonymous mappings after pool use", n);
  CHECK(n <= 32,
        "%d anonymous mappings after spans of every order came and went on every CPU: "
        "rill's tables cut the memory map into pieces (at most 32 expected)",
        n);
}

int main(int argc, char **argv) {
  bool share = false, mappings = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--mib") && i + 1 < argc)
      total_bytes = (size_t)strtoul(argv[++i], NULL, 0) * MiB;
    else if (!strcmp(argv[i], "--share"))
      share = true;
    else if (!strcmp(argv[i], "--mappings"))
      mappings = true;
    else
      DIE("usage: test_memory [--mib N] [--share] [--mappings]");
  }
  setvbuf(stdout, NULL, _IONBF, 0);
  /* big_classes_share and pool_address_order each need an arena whose
   * free runs are their own (either one's leftovers serve the other's
   * requests first), so the first runs in a process of its own; and
   * pool_address_order runs before any other thread has freed a run:
   * address order holds within a shard of runs (runs.c), and a thread
   * takes another shard's free runs when its own has none */
  if (share) {
    big_classes_share();
    return t_finish("test_memory --share");
  }
  if (mappings) { /* a process of its own: no other test's threads or stacks */
    mappings_few();
    return t_finish("test_memory --mappings");
  }
  pool_address_order();
  first_blocks_touch_little();
  listed_spans_drain();
  huge_unmapped();
  huge_block();
  phase("owners free, then trim", true, 0);
  phase("main thread frees, then rill_collect", false, 1);
  phase("owners free, then rill_collect", true, 1);
  phase("main thread frees, then trim", false, 0);
  huge_block();
  return t_finish("test_memory");
}
