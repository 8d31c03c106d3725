/* runs.c - the spans of large objects (Streamflow §3.1.2: a large object
 * gets page blocks of its own): runs of any number of slots, cut from free
 * runs (those that hold pages first, then address-ordered first fit in size
 * bins), split on allocation, merged with free neighbours on release and
 * resized in place by realloc; small classes' spans too, when the pool has
 * none (run_give). Free runs keep their pages for the pool's purge delay
 * (scalloc §3.3). */
#include <string.h>

#include "internal.h"

/* Why not power-of-two spans, as for small classes: an order served only
 * itself (and the order below), so a program whose large sizes wander
 * across a power of two faulted in fresh spans while resident ones of the
 * other order sat idle, and a 2.1 MiB object held a 4 MiB span (the sizes
 * benchmark at 1-4 MiB: 1.26x mimalloc's time, 1.53x glibc's peak RSS).
 * Runs are the classic answer (Knuth's boundary tags; address-ordered first
 * fit with immediate coalescing fragments least in Johnstone and Wilson's
 * measurements): a freed run merges with free neighbours, so memory comes
 * back in one piece and serves any size next time.
 *
 * The free runs are split into shards, each with its own lock and bins, and
 * a thread gets its runs from its heap's shard (heap id mod RUN_SHARDS):
 * with one lock, two threads cycling big blocks (the sizes benchmark at
 * 16-64 KiB, where classes of 40 KiB and up take their spans from runs)
 * spent 38% of their time in run_get and run_put, most of it spinning, and
 * ran 1.4x tcmalloc's time. A run belongs to the shard whose heap first cut
 * its slots from the arena, for good: it goes back there when freed, and
 * merges only with free runs of that shard. A thread whose shard has no fit
 * takes from another shard's bins before it takes fresh slots, so free
 * memory is reused across threads as before (except for the blocks realloc
 * moves to grow: run_get's `own`). A thread's runs all share a
 * shard, so a one-threaded program sees exactly the single-lock allocator.
 * Runs live in the arena among pool spans (their slots come straight from
 * arena_take); a neighbour is merged only when its entry names our shard.
 * Invariants:
 *   - every slot of a live run maps to the run's first slot (heads), so an
 *     interior or stale address fails the free's offset check;
 *   - a free run's first and last slots map to its first slot, and only its
 *     first slot's entry has `run_free` set;
 *   - a slot's shard never changes, and only its shard's lock holder writes
 *     its head or (as a run's first slot) its entry. */

/* The head table is read here for slots next to a run, which other threads
 * may be formatting as small spans at that moment (arena_span): relaxed
 * atomic loads and stores, plain moves on x86. */
static inline size_t head_get(size_t slot) {
  span_t *sp = __atomic_load_n(&rill_arena.heads[slot], __ATOMIC_RELAXED);
  return sp ? span_index(sp) : 0;
}
static inline void head_set(size_t slot, size_t first) {
  __atomic_store_n(&rill_arena.heads[slot], span_of_index(first), __ATOMIC_RELAXED);
}

#define BINS 64
/* Only the runs of classes up to 64 KiB are kept whole: 4-8 slots, and
 * 10-16 for the classes of 4.5-8 KiB, whose spans hold 32 blocks. Those of
 * the classes above, of many more lengths, were stranded in the
 * object-size sweep at 64-256 KiB (+13% peak at 4 threads). Merged at once,
 * the 4.5-8 KiB classes' runs were cut again from longer free runs and left
 * pieces of 1-3 slots, which no class's span fits, beside the whole runs
 * of the 9-16 KiB classes: in the sweep at 4-16 KiB, 57 such pieces and
 * 1.8 MiB resident at the peak (docs/benchmarks.md, "Whole runs for the
 * classes of 4.5-8 KiB"). */
#define WHOLE_SLOTS_MAX 16
#define WHOLE_BLOCK_MAX ((size_t)64 * 1024)
#define WARMS           8 /* warm lists: runs of 1, 2-3, 4-7, .. 64-127, and 128 slots or more */
typedef struct shard {
  _Atomic int lock;
  uint8_t id;                /* the runs' `shard` mark: index + 1 (0: not a run) */
  _Atomic uint64_t nonempty; /* bit b: bins[b] has a run (other shards read it unlocked) */
  size_t wild, wild_end;     /* never-used slots of the shard's last chunk (wild_take) */
  size_t wild_ready;         /* RILL_COMMIT: the wilderness is writable below this slot */
  span_t *bins[BINS];        /* free runs by size, each list in address order */
  span_t *warm[WARMS];       /* the free runs that hold pages by length, last filed first */
  span_t *warm_tail[WARMS];
  _Atomic uint32_t warm_any;       /* bit k: warm[k] has a run (read unlocked, as a guess) */
  span_t *wh[WHOLE_SLOTS_MAX + 1]; /* whole runs by length (all hold pages), last filed first */
  span_t *wh_tail[WHOLE_SLOTS_MAX + 1];
  _Atomic uint32_t wh_any; /* bit n: wh[n] has a run (read unlocked, as a guess) */
} __attribute__((aligned(64))) shard_t;
static shard_t shards[RUN_SHARDS];

static inline uint8_t shard_mark(const span_t *sp) {
  return __atomic_load_n(&sp->shard, __ATOMIC_RELAXED);
}
static inline shard_t *shard_of(const span_t *sp) {
  return &shards[shard_mark(sp) - 1];
}

/* 1..16 slots exactly, then four bins per power of two; the last bin takes
 * everything from 2^15 slots (512 MiB) up, all larger than any request. */
static unsigned bin_of(size_t n) {
  if (n <= 16) return (unsigned)n - 1;
  unsigned k = 63 - (unsigned)__builtin_clzl(n);
  unsigned b = 16 + (k - 4) * 4 + (unsigned)((n >> (k - 2)) & 3);
  return b < BINS ? b : BINS - 1;
}

/* Which slots may hold data, a bit per slot (runs' slots only): set when a
 * run comes back from its object or span, cleared when a purge gives its
 * pages back. A free run merged from a resident piece and a purged one
 * thus knows which slots are which: rill_stats counts only the resident
 * ones as committed, a purge pass madvises only them, and calloc zeroes
 * only them. With one flag per run, merging a 1 MiB resident run into a
 * purged 500 MiB one made the whole run count as committed, and a calloc
 * of it wrote all 500 MiB. Changed under the lock, read by rill_stats_get
 * without it: atomic words. */
static _Atomic uint64_t *dirty;
/* RILL_COMMIT: which slots of free runs were decommitted (shard_purge), a
 * bit per slot like `dirty`, cleared when a run cut from them is made
 * writable again (run_recommit). */
static _Atomic uint64_t *gone;
/* Slots freed lately, in two generations a purge delay long each (set under
 * the slot's shard lock when its run is freed; a generation is emptied under
 * every shard's lock, see young_turn). A free run's one stamp is that of
 * its youngest part, so a run that took in a fresh neighbour every second
 * kept its old parts resident for good (a 4 MiB free run beside a 512 KiB
 * block freed and allocated every millisecond: all 4 MiB resident, nothing
 * purged; test_runs --aging). A slot dirty and in neither generation has
 * been free a whole delay, whatever its run's stamp says (scalloc §3.3:
 * empty memory goes back after a delay). */
static _Atomic uint64_t *young[2];
/* Dirty slots that a pass has advised since they came back, set by
 * shard_purge and cleared by freed_mark: with RILL_PURGE=free, by a lazy
 * pass (MADV_FREE); or advised in vain, since the kernel refuses locked
 * pages (mlock, mlockall). Such a slot may still hold data, so it stays
 * dirty for calloc, but a pass need not advise it again. Without them,
 * every span freed into a merged free run of GiBs gave the run pages
 * again, and the next pass advised all its GiBs once more (a minute in
 * madvise under a 3 GiB limit after a fill of 64 KiB blocks; test_runs
 * --lazy); and under mlockall, rill_collect retried its first batch of
 * runs forever (test_mlock). */
static _Atomic uint64_t *lazied;
static unsigned young_cur;    /* the generation frees mark; under every shard lock */
static uint32_t young_turned; /* ms of the last turn; under the pool's purge lock */

/* The bitmaps above, in one reservation, interleaved by cache line (as the
 * pool's maps are; line_word): each bitmap's stretch of its own made two
 * entries of the memory map and a page-table page per bitmap in every
 * process, and a page resident once its first word was written. */
enum { MAPS = 5 };
static inline _Atomic uint64_t *bword(_Atomic uint64_t *map, size_t w) {
  return line_word(map, w, MAPS * BITMAP_LINE);
}
/* Bytes of the five bitmaps that slots below `slots` use. */
static inline size_t bits_bytes(size_t slots) {
  return line_bytes((slots + 63) / 64, MAPS * BITMAP_LINE);
}
static size_t dirty_done; /* slots whose bits are usable (os_commit_grow) */
static bool dirty_commit(size_t slots) {
  if (!os_commit_grow((void *)dirty, bits_bytes(dirty_done), bits_bytes(slots))) return false;
  dirty_done = slots;
  return true;
}

/* arena_fit: the bitmaps' words past `slots` (of `old`) go back. */
static void dirty_fit(size_t slots, size_t old) {
  os_give_back((void *)dirty, bits_bytes(slots), bits_bytes(old));
  if (dirty_done > slots) dirty_done = slots;
}

bool runs_init(void) {
  for (unsigned k = 0; k < RUN_SHARDS; k++) shards[k].id = (uint8_t)(k + 1);
  size_t bytes = bits_bytes(rill_arena.max_slots);
  dirty = os_reserve(bytes);
  dirty_done = 0;
  if (dirty) {
    gone = dirty + BITMAP_LINE;
    young[0] = dirty + 2 * BITMAP_LINE;
    young[1] = dirty + 3 * BITMAP_LINE;
    lazied = dirty + 4 * BITMAP_LINE;
  }
  if (dirty && arena_track(dirty_commit, dirty_fit)) return true;
  if (dirty) os_unmap((void *)dirty, bytes);
  return false;
}

static void bits_mark(_Atomic uint64_t *map, size_t i, size_t n, bool on) {
  while (n) {
    size_t b = i % 64, k = 64 - b < n ? 64 - b : n;
    uint64_t m = (k == 64 ? ~(uint64_t)0 : ((uint64_t)1 << k) - 1) << b;
    if (on)
      atomic_fetch_or_explicit(bword(map, i / 64), m, RLX);
    else
      atomic_fetch_and_explicit(bword(map, i / 64), ~m, RLX);
    i += k;
    n -= k;
  }
}

/* What a scan of `map` leaves out: slots young (a bit counts only where
 * neither generation has it) or lazily advised already. */
enum { AGED = 1, UNADVISED = 2 };

/* The first slot from i on, below end, whose bit is `on`; end if none. */
static size_t scan(_Atomic uint64_t *map, size_t i, size_t end, bool on, unsigned only) {
  while (i < end) {
    size_t w = i / 64;
    uint64_t x = atomic_load_explicit(bword(map, w), RLX);
    if (only & AGED)
      x &= ~(atomic_load_explicit(bword(young[0], w), RLX) |
             atomic_load_explicit(bword(young[1], w), RLX));
    if (only & UNADVISED) x &= ~atomic_load_explicit(bword(lazied, w), RLX);
    x = (on ? x : ~x) & (~(uint64_t)0 << (i % 64));
    if (x) {
      size_t j = (i & ~(size_t)63) + (unsigned)__builtin_ctzll(x);
      return j < end ? j : end;
    }
    i = (i & ~(size_t)63) + 64;
  }
  return end;
}

static size_t bits_scan(_Atomic uint64_t *map, size_t i, size_t end, bool on) {
  return scan(map, i, end, on, 0);
}

static void dirty_mark(size_t i, size_t n, bool on) {
  bits_mark(dirty, i, n, on);
}
static size_t dirty_scan(size_t i, size_t end, bool on) {
  return bits_scan(dirty, i, end, on);
}

/* Slots i .. i + n - 1 came back from an object or a span: they may hold
 * data, and they are young. Under their shard's lock. */
static void freed_mark(size_t i, size_t n) {
  dirty_mark(i, n, true);
  bits_mark(young[young_cur], i, n, true);
  bits_mark(lazied, i, n, false);
}

/* The next range of slots that may hold data, [*s, *e), from *s on and
 * below end, less those `only` leaves out; false if there is none. */
static bool dirty_range(size_t *s, size_t *e, size_t end, unsigned only) {
  *s = scan(dirty, *s, end, true, only);
  if (*s >= end) return false;
  *e = scan(dirty, *s, end, false, only);
  return true;
}
static bool dirty_next(size_t *s, size_t *e, size_t end) {
  return dirty_range(s, e, end, 0);
}

/* With RILL_HUGEPAGES, the next range of run [i, end) to give back: a
 * dirty_range widened over the run's clean slots beside it (never used, or
 * purged) to the 2 MiB boundaries, and so joined to the next range that
 * shares a huge page with it. A clean slot holds no page of its own, but
 * in a huge page it shares the pages of its dirty neighbours: a shard
 * filled its wilderness to a few slots from the end, and the huge page
 * those few shared with the last buffers' runs stayed, one every 32 MiB
 * (a timed pass keeps what is not a whole huge page). */
static bool purge_range(size_t *s, size_t *e, size_t i, size_t end, unsigned only) {
  if (!dirty_range(s, e, end, only)) return false;
  if (!rill_opt.hugepages) return true;
  size_t hs = HUGE_PAGE >> SLOT_SHIFT, on = arena_huge_first() % hs;
  /* the boundary at or below *s, or i: below the arena's first boundary
   * (slots under `on`, as under an address-space limit) there is none, and
   * subtracting wrapped (a hunt run's crash at RILL_PURGE_DELAY_MS=0) */
  size_t back = (*s + hs - on) % hs, lo = back <= *s - i ? *s - back : i;
  if (dirty_scan(lo, *s, true) == *s) *s = lo;
  for (;;) {
    size_t hi = *e + (on + hs - *e % hs) % hs; /* at or above *e */
    if (hi > end) hi = end;
    size_t d = dirty_scan(*e, hi, true), ns = d, ne;
    if (d == hi) { /* clean up to the boundary */
      *e = hi;
      return true;
    }
    /* a dirty slot before it: the next range joins, unless that slot is
     * one `only` leaves out (young, advised) */
    if (!dirty_range(&ns, &ne, end, only) || ns != d) return true;
    *e = ne;
  }
}

/* Slots i .. end - 1 that hold no pages (never used, or purged). */
static size_t clean_slots(size_t i, size_t end) {
  size_t n = end - i;
  for (size_t s = i, e; dirty_next(&s, &e, end); s = e) n -= e - s;
  return n;
}

/* Bytes of run sp's slots that may hold data (rill_stats_get). */
size_t run_dirty_bytes(const span_t *sp) {
  size_t i = span_index(sp), end = i + span_nslots(sp);
  return (end - i - clean_slots(i, end)) << SLOT_SHIFT;
}

/* Slots of live run sp that its program will fault in: the growth swap's
 * measure (pool_grew). */
size_t run_clean_slots(const span_t *sp) {
  size_t i = span_index(sp);
  return clean_slots(i, i + span_nslots(sp));
}

/* Zeroes what may be non-zero of bytes p .. p + n of a live run: the slots
 * that were resident when it was handed out (calloc). */
void run_zero(span_t *sp, char *p, size_t n) {
  size_t i = span_index(sp), end = i + span_nslots(sp);
  uintptr_t base = span_start(sp), lo = (uintptr_t)p, hi = lo + n;
  for (size_t s = i, e; dirty_next(&s, &e, end); s = e) {
    uintptr_t a = base + ((s - i) << SLOT_SHIFT), b = base + ((e - i) << SLOT_SHIFT);
    if (a < lo) a = lo;
    if (b > hi) b = hi;
    if (a < b) memset((void *)a, 0, b - a);
  }
}

/* `stamp` is read without a lock by pool_spill's guess at a pooled span
 * (pooled_resident), which may find the span made a run meanwhile: relaxed
 * atomic stores (plain moves). */
static inline void stamp_set(span_t *sp, uint32_t v) {
  __atomic_store_n(&sp->stamp, v, __ATOMIC_RELAXED);
}

/* A free run has pages to give back: some slot resident, due at stamp. */
static inline bool has_pages(const span_t *sp) {
  return sp->stamp != UINT32_MAX;
}

/* Written only under the shard's lock: a relaxed store, no atomic RMW. */
static inline void nonempty_set(shard_t *sh, uint64_t m) {
  atomic_store_explicit(&sh->nonempty, m, RLX);
}

/* The warm lists: the free runs filed with pages, so that a request finds
 * resident memory without walking the bins' purged runs (a phase program's
 * bins held 24 purged runs for each one with pages). One list per power of
 * two of length: on one list, a request looked at its first LOOK runs only,
 * and with the growth swap out of reach (a long purge delay) the phase
 * program's list held 1,500 runs, a third of them too short for a span,
 * while its next phase faulted in fresh spans (blowup 6.1). A run's length
 * changes only off the lists (unlink_run .. insert_run), so its list is
 * known from it. `warm_any` is read without the lock (run_give's guess), so
 * it is stored atomically. */
static inline unsigned warm_of(size_t n) {
  unsigned k = 63u - (unsigned)__builtin_clzll(n);
  return k < WARMS ? k : WARMS - 1;
}
/* A free run onto or off list k of a shard's lists on the warm links, last
 * filed first: the warm lists (`warm` 1, by warm_of) or the whole runs'
 * (`warm` 2, by exact length: file_whole). Bit k of `any` says list k has a
 * run. On the warm lists, where one list holds runs of 4-7 slots, a request
 * for 6 passed over whole runs of 4, 5 and 7 that it may not split, up to
 * LOOK of them, and the object-size sweep at 16-64 KiB spent 12% of its
 * time there (1.08-1.18x the time without whole runs). */
static void link_push(span_t **head, span_t **tail, _Atomic uint32_t *any, unsigned k, span_t *sp,
                      uint8_t tag) {
  sp->warm_prev = NULL;
  sp->warm_next = head[k];
  *(head[k] ? &head[k]->warm_prev : &tail[k]) = sp;
  head[k] = sp;
  atomic_store_explicit(any, atomic_load_explicit(any, RLX) | 1u << k, RLX);
  sp->warm = tag;
}
static void link_unlink(span_t **head, span_t **tail, _Atomic uint32_t *any, unsigned k,
                        span_t *sp) {
  if (sp->warm_prev)
    sp->warm_prev->warm_next = sp->warm_next;
  else
    head[k] = sp->warm_next;
  *(sp->warm_next ? &sp->warm_next->warm_prev : &tail[k]) = sp->warm_prev;
  if (!head[k]) atomic_store_explicit(any, atomic_load_explicit(any, RLX) & ~(1u << k), RLX);
  sp->warm = 0;
}
static void warm_unlink(shard_t *sh, span_t *sp) {
  if (sp->warm == 1)
    link_unlink(sh->warm, sh->warm_tail, &sh->warm_any, warm_of(sp->nslots), sp);
  else if (sp->warm == 2) /* a whole run holds pages until a purge pass merges it */
    link_unlink(sh->wh, sh->wh_tail, &sh->wh_any, (unsigned)sp->nslots, sp);
}
static void warm_push(shard_t *sh, span_t *sp) {
  link_push(sh->warm, sh->warm_tail, &sh->warm_any, warm_of(sp->nslots), sp, 1);
}
/* Whether sh may have a warm run of n slots or more (a guess, unlocked). */
static inline bool warm_may(shard_t *sh, size_t n) {
  return atomic_load_explicit(&sh->warm_any, RLX) >> warm_of(n) != 0 ||
         (n <= WHOLE_SLOTS_MAX && atomic_load_explicit(&sh->wh_any, RLX) >> n != 0);
}

static void unlink_run(shard_t *sh, span_t *sp) {
  warm_unlink(sh, sp);
  unsigned b = bin_of(sp->nslots);
  if (sp->prev)
    sp->prev->next = sp->next;
  else
    sh->bins[b] = sp->next;
  if (sp->next) sp->next->prev = sp->prev;
  if (!sh->bins[b])
    nonempty_set(sh, atomic_load_explicit(&sh->nonempty, RLX) & ~((uint64_t)1 << b));
  sp->run_free = 0;
}

/* A bin's list is kept in address order as far as its first LOOK runs: a
 * program that leaves thousands of free runs of one size between live ones
 * must not make every free and malloc under the lock walk them all. */
#define LOOK 32

static void insert_run(shard_t *sh, span_t *sp) {
  unsigned b = bin_of(sp->nslots);
  span_t **at = &sh->bins[b], *prev = NULL;
  for (unsigned k = 0; *at && *at < sp && k < LOOK; k++) prev = *at, at = &(*at)->next;
  sp->next = *at;
  sp->prev = prev;
  if (*at) (*at)->prev = sp;
  *at = sp;
  nonempty_set(sh, atomic_load_explicit(&sh->nonempty, RLX) | (uint64_t)1 << b);
  sp->run_free = 1;
  if (has_pages(sp)) warm_push(sh, sp);
}

/* Marks sp (slots i .. i + n - 1) a free run and files it; the caller has
 * merged it with its neighbours. */
static void file_run(shard_t *sh, span_t *sp, size_t n) {
  size_t i = span_index(sp);
  span_set_nslots(sp, n);
  SPAN_SET(sp, bsize, 0); /* frees into it are invalid now */
  sp->inner_gone = 0;     /* merged or cut: inner slots may have entries again */
  head_set(i, i);
  head_set(i + n - 1, i);
  insert_run(sh, sp);
}

/* Folds b's memory state into a's: purge when the younger of two resident
 * parts is due (the dirty bits say which slots those are), open to small
 * spans when the later of the two would be (give_open). */
static void merge_state(span_t *a, const span_t *b) {
  if ((int32_t)(b->warm_opens - a->warm_opens) > 0) a->warm_opens = b->warm_opens;
  if (has_pages(a) && has_pages(b))
    stamp_set(a, (int32_t)(b->stamp - a->stamp) > 0 ? b->stamp : a->stamp);
  else if (has_pages(b))
    stamp_set(a, b->stamp);
  else if (!has_pages(a))
    stamp_set(a, UINT32_MAX);
}

/* Files a run of shard sh that no longer holds an object, merged with free
 * runs on either side (Knuth's boundary-tag coalescing). A neighbour is
 * looked at only when its entry carries sh's mark: the slots of other
 * shards and of pool spans change under other locks, and their heads may
 * name anything; ours hold still while we hold sh's lock. */
static span_t *release(shard_t *sh, span_t *sp) {
  SPAN_SET(sp, bsize, 0);
  size_t i = span_index(sp), n = sp->nslots, j = i + n;
  if (j < arena_bound_slots() && head_get(j) == j) {
    span_t *r = span_of_index(j);
    if (shard_mark(r) == sh->id && r->run_free) {
      unlink_run(sh, r);
      merge_state(sp, r);
      n += r->nslots;
    }
  }
  size_t k = head_get(i - 1); /* slot 0 is never a run, so i > 0 */
  span_t *l = span_of_index(k);
  if (shard_mark(l) == sh->id && l->run_free && k + l->nslots == i) {
    unlink_run(sh, l);
    merge_state(l, sp);
    sp->run_free = 0;
    sp = l;
    n += l->nslots;
  }
  file_run(sh, sp, n);
  return sp;
}

/* A big class's span, emptied, is filed whole: not merged with its free
 * neighbours, so the next span of that length is cut where it was, and its
 * blocks start where that one's did. Merged at once, it became part of a
 * longer free run whose low end the next span of any class was cut from:
 * a program replacing 16-64 KiB buffers at random then touched 2.2x the
 * cache lines and pages that tcmalloc's reused buffers do, and took 2x its
 * time (docs/benchmarks.md, "A block-cache hit, shorter"; bench_pattern
 * spread). Whole runs merge when a request finds no fit (coalesce), so a
 * program that moves on to larger blocks still reuses their memory
 * (test_memory --share). dlmalloc's fastbins defer coalescing the same way. */
static void file_whole(shard_t *sh, span_t *sp) {
  SPAN_SET(sp, bsize, 0);
  file_run(sh, sp, sp->nslots);
  warm_unlink(sh, sp); /* run_put stamped it: it holds pages */
  link_push(sh->wh, sh->wh_tail, &sh->wh_any, (unsigned)sp->nslots, sp, 2);
  sp->run_free = RUN_WHOLE;
}

/* May free run sp serve n slots? A whole run serves its own length only:
 * split for another, it left pieces no class's span fits, which nothing
 * merged until a neighbour came back (the sizes benchmark's peak, +12-20%). */
static inline bool fits(const span_t *sp, size_t n) {
  return sp->nslots == n || (sp->nslots > n && sp->run_free != RUN_WHOLE);
}

/* Under sh's lock: is a free run of sh next to run sp? */
static bool free_beside(shard_t *sh, const span_t *sp) {
  size_t i = span_index(sp), j = i + sp->nslots, k = head_get(i - 1);
  const span_t *l = span_of_index(k);
  if (shard_mark(l) == sh->id && l->run_free && k + l->nslots == i) return true;
  if (j >= arena_bound_slots() || head_get(j) != j) return false;
  const span_t *r = span_of_index(j);
  return shard_mark(r) == sh->id && r->run_free;
}

/* Under sh's lock: whole runs merged with their free neighbours until one of
 * them makes n slots or more, split to n as fit's are; NULL if none did.
 * Each merges with the whole stretch of free runs around it, whole ones
 * beside whole ones too: merged with its two neighbours only, 16 KiB
 * blocks' runs of 4 slots, freed side by side, became runs of 8-12 for 24
 * KiB blocks (6 slots) and left pieces of 2 between them, and resident
 * memory reached 1.17-1.25x those blocks (test_runs --tails; 1.02x now).
 * Taken here, not looked for again: a fit looks at LOOK runs a bin, and the
 * whole runs it passes over may fill those. Collected a batch at a time
 * first: each merge relinks the bins. A run merged into an earlier one of
 * the batch is no longer whole (unlink_run), and is skipped. */
#define COALESCE_BATCH 64
/* Whole runs looked at in all, so that the lock is held a bounded time: with
 * thousands of whole runs between live ones, a request for a large block
 * that none of them could make walked them all at every miss. */
#define COALESCE_LOOKS 512
static span_t *split_take(shard_t *sh, span_t *sp, size_t n);
/* The merging itself: the merged run once one makes n slots (still filed),
 * else NULL; with `cutoff`, only whole runs freed at or before it. */
static span_t *merge_wholes(shard_t *sh, size_t n, const uint32_t *cutoff) {
  for (unsigned looks = 0; looks < COALESCE_LOOKS;) {
    span_t *got[COALESCE_BATCH];
    unsigned m = 0;
    for (unsigned b = 1; b <= WHOLE_SLOTS_MAX && m < COALESCE_BATCH; b++)
      for (span_t *sp = sh->wh[b]; sp && m < COALESCE_BATCH && looks < COALESCE_LOOKS;
           sp = sp->warm_next, looks++)
        if ((!cutoff || (int32_t)(sp->stamp - *cutoff) <= 0) && free_beside(sh, sp)) got[m++] = sp;
    if (!m) break; /* none has free space beside it */
    /* the highest first: fit_warm takes the lowest of a length, so those
     * are the likelier to be left over */
    for (unsigned a = 1; a < m; a++)
      for (unsigned c = a; c > 0 && got[c - 1] < got[c]; c--) {
        span_t *t = got[c];
        got[c] = got[c - 1];
        got[c - 1] = t;
      }
    for (unsigned k = 0; k < m; k++)
      if (got[k]->run_free == RUN_WHOLE) {
        unlink_run(sh, got[k]);
        span_t *sp = release(sh, got[k]);
        while (free_beside(sh, sp)) { /* whole runs beside whole runs */
          unlink_run(sh, sp);
          sp = release(sh, sp);
        }
        if (sp->nslots >= n) return sp;
      }
  }
  return NULL;
}
static span_t *coalesce(shard_t *sh, size_t n) {
  span_t *sp = merge_wholes(sh, n, NULL);
  return sp ? split_take(sh, sp, n) : NULL;
}

/* Makes slot i's entry the head of a free run of the shard marked `mark`,
 * with what is known of its pages; the caller files it. */
static span_t *free_head(uint8_t mark, size_t i, uint32_t stamp) {
  span_t *t = span_of_index(i);
  t->start = rill_arena.base + (i << SLOT_SHIFT);
  SPAN_SET(t, fresh, 0); /* free runs: the dirty bits */
  stamp_set(t, stamp);
  SPAN_SET(t, cls, CLS_LARGE);
  t->order = 0;
  __atomic_store_n(&t->shard, mark, __ATOMIC_RELAXED);
  __atomic_store_n(&t->run, 1, __ATOMIC_RELAXED); /* rill_stats_get reads it */
  atomic_store_explicit(&t->xf, XF_MAKE(ST_FREE, 0, 0), RLX);
  t->warm = 0; /* filed by the caller */
  return t;
}

/* The stamp of slots i .. i + n - 1, a piece of a free run stamped `stamp`:
 * the run's, or none if the piece holds no pages. A run that held pages and
 * gave its dirty slots to a small span kept its stamp in the rest, which sat
 * on the warm lists with nothing for anyone until the next purge pass:
 * where the phase program's look for a span missed, its lists held 23-41
 * such runs, against 34-63 that could have served, and the look went to
 * fresh memory with LOOK runs looked at. */
static uint32_t piece_stamp(size_t i, size_t n, uint32_t stamp) {
  return stamp == UINT32_MAX || dirty_scan(i, i + n, true) == i + n ? UINT32_MAX : stamp;
}

/* The free run starting `at` slots into sp's run (a split's rest). */
static span_t *cut(const span_t *sp, size_t at, uint32_t stamp) {
  span_t *t = free_head(shard_mark(sp), span_index(sp) + at, stamp);
  t->warm_opens = sp->warm_opens;
  return t;
}

/* Slots for `bytes`: whole pages on kernels with pages over 16 KiB. */
size_t run_slots(size_t bytes) {
  size_t unit = (size_t)1 << rill_arena.min_order;
  size_t n = (bytes + SLOT_SIZE - 1) >> SLOT_SHIFT;
  return (n + unit - 1) & ~(unit - 1);
}

/* Makes slots i .. i + n - 1 one run of shard sh holding an object. */
static span_t *claim(const shard_t *sh, size_t i, size_t n) {
  for (size_t s = i; s < i + n; s++) head_set(s, i);
  span_t *sp = span_of_index(i);
  sp->start = rill_arena.base + (i << SLOT_SHIFT);
  span_set_nslots(sp, n);
  sp->order = 0; /* not a power-of-two span: span_bytes reads nslots */
  __atomic_store_n(&sp->shard, sh->id, __ATOMIC_RELAXED);
  __atomic_store_n(&sp->run, 1, __ATOMIC_RELAXED);
  return sp;
}

/* RILL_COMMIT: slots i .. i + n - 1, about to hold a run, writable again
 * where shard_purge decommitted them (zero, so not dirty). False if the
 * kernel refused. */
static bool run_recommit(size_t i, size_t n) {
  if (!rill_opt.commit_demand || bits_scan(gone, i, i + n, true) == i + n) return true;
  if (!arena_commit(i, n)) return false;
  bits_mark(gone, i, n, false);
  return true;
}

/* Under sh's lock: free run sp (NULL: none) out of the bins, its first n
 * slots claimed and the rest filed free again; NULL if sp is NULL or its
 * slots could not be made writable. */
static span_t *split_take(shard_t *sh, span_t *sp, size_t n) {
  if (!sp || !run_recommit(span_index(sp), n)) return NULL;
  unlink_run(sh, sp);
  size_t i = span_index(sp), m = sp->nslots;
  if (m > n) /* the rest stays free */
    file_run(sh, cut(sp, n, piece_stamp(i + n, m - n, sp->stamp)), m - n);
  claim(sh, i, n);
  SPAN_SET(sp, fresh, dirty_scan(i, i + n, true) == i + n);
  return sp;
}

/* Under sh's lock: the lowest-addressed free run of at least n slots in the
 * smallest of sh's bins from b on that has one, split to n; NULL if none. */
static span_t *fit(shard_t *sh, size_t n, unsigned b) {
  span_t *sp = sh->bins[b];
  for (unsigned k = 0; sp && !fits(sp, n); k++) sp = k < LOOK ? sp->next : NULL;
  uint64_t up =
      b + 1 < BINS ? atomic_load_explicit(&sh->nonempty, RLX) & (~(uint64_t)0 << (b + 1)) : 0;
  for (; !sp && up; up &= up - 1) { /* larger bins: any run but a whole one */
    sp = sh->bins[__builtin_ctzll(up)];
    for (unsigned k = 0; sp && !fits(sp, n); k++) sp = k < LOOK ? sp->next : NULL;
  }
  return split_take(sh, sp, n);
}

/* Under sh's lock: a whole run of exactly n slots, else the smallest free run of
 * at least n among the warm lists' (those that hold pages), the shortest list
 * that may hold one first, last filed first, LOOK runs looked at in all;
 * split to n; NULL if none. */
static span_t *fit_warm(shard_t *sh, size_t n) {
  /* A whole run of n, the lowest-addressed among the bin's first LOOK (it
   * is in address order that far): a program that frees all its buffers
   * and asks for a new mix of lengths then uses up the low ones, and leaves
   * those of the lengths it now wants fewer of side by side at the top,
   * where coalesce can merge them; last filed first, they were left
   * scattered between live runs (the sweep at 16-64 KiB, one thread:
   * 22.7 -> 21.9 MiB peak; main 21.3). */
  if (n <= WHOLE_SLOTS_MAX && sh->wh[n]) {
    span_t *sp = sh->bins[bin_of(n)];
    for (unsigned k = 0; sp && k < LOOK && sp->run_free != RUN_WHOLE; k++) sp = sp->next;
    return split_take(sh, sp && sp->run_free == RUN_WHOLE ? sp : sh->wh[n], n);
  }
  span_t *best = NULL;
  unsigned looks = 0;
  for (unsigned k = warm_of(n); !best && k < WARMS && looks < LOOK; k++)
    for (span_t *sp = sh->warm[k]; sp && looks < LOOK; sp = sp->warm_next, looks++)
      if (fits(sp, n) && (!best || sp->nslots < best->nslots)) best = sp;
  return split_take(sh, best, n);
}

/* Fresh slots come to a shard in chunks of this many (32 MiB), kept apart
 * as its wilderness and cut from the low end only when no free run fits
 * (dlmalloc's top chunk). Taking exactly what each request asked for, two
 * threads' runs interleaved in the arena, and as runs of two shards never
 * merge, each thread's freed runs stayed cut to its old sizes (the sizes
 * benchmark at 1-4 MiB and two threads: 1.35x the time and 1.25x the peak
 * RSS of one shared lock). Filed as a free run instead, a chunk's untouched
 * rest served requests that resident free runs in higher bins would have
 * (64-256 KiB at one thread: peak RSS 23 -> 35 MiB). */
#define CHUNK 2048

/* A chunk under an address-space limit: at most a 64th of the limit (the
 * tables' max_slots), as a power of two, 2 MiB at least. Each shard's
 * wilderness is arena the arena grows into (arena_grow) and the program's
 * thread stacks and mappings then cannot have: eight shards' 32 MiB took a
 * third of a 768 MiB limit. Without a limit, max_slots is the 1 TiB arena. */
static size_t wild_chunk(void) {
  size_t c = CHUNK;
  while (c > 128 && c > rill_arena.max_slots / 64) c >>= 1;
  return c;
}

/* RILL_COMMIT: the wilderness writable up to slot `end`, 2 MiB ahead at
 * least, so a 32 MiB chunk is charged as it is cut (a program whose threads
 * each had a few 8 KiB blocks was charged 32 MiB per shard), in a dozen
 * system calls at most. */
#define WILD_COMMIT_STEP 128
static bool wild_commit(shard_t *sh, size_t end) {
  if (!rill_opt.commit_demand || end <= sh->wild_ready) return true;
  size_t from = sh->wild_ready > sh->wild ? sh->wild_ready : sh->wild;
  size_t to = from + WILD_COMMIT_STEP > end ? from + WILD_COMMIT_STEP : end;
  if (to > sh->wild_end) to = sh->wild_end;
  if (!arena_commit(from, to - from)) return false;
  sh->wild_ready = to;
  return true;
}

/* Under sh's lock: n never-used slots from the low end of sh's wilderness,
 * which holds them; 0 if they cannot be made writable. */
static size_t wild_cut(shard_t *sh, size_t n) {
  if (!wild_commit(sh, sh->wild + n) || !arena_grown(sh->wild, n)) return 0;
  size_t i = sh->wild;
  sh->wild += n;
  arena_hole(sh->id - 1u, sh->wild, sh->wild_end);
  return i;
}

/* Under sh's lock: n never-used slots from sh's wilderness, refilled from
 * the arena's top; 0 if the arena is spent. */
static size_t wild_take(shard_t *sh, size_t n) {
  if (sh->wild_end - sh->wild < n) {
    size_t c = wild_chunk(), m = (n + c - 1) & ~(c - 1), i = 0;
    if (rill_opt.hugepages) i = arena_take_aligned(m); /* c: a multiple of 2 MiB */
    if (!i) i = arena_take(m);
    if (!i && m > n) i = arena_take(m = n); /* the arena's last slots */
    if (!i) return 0;
    if (i != sh->wild_end) { /* not contiguous: the old rest becomes a free run */
      if (sh->wild_end > sh->wild && wild_commit(sh, sh->wild_end))
        file_run(sh, free_head(sh->id, sh->wild, UINT32_MAX), sh->wild_end - sh->wild);
      sh->wild = sh->wild_ready = i;
    }
    sh->wild_end = i + m;
    arena_hole(sh->id - 1u, sh->wild, sh->wild_end);
  }
  return wild_cut(sh, n);
}

/* Under sh's lock: grows the wilderness's first run (it ends at sh->wild)
 * by k slots, from the wilderness and, where that ends at the arena's top,
 * from the arena. */
static bool wild_grow(shard_t *sh, size_t k) {
  size_t have = sh->wild_end - sh->wild;
  if (have < k) {
    if (!arena_extend(sh->wild_end, k - have)) return false;
    sh->wild_end += k - have;
    arena_hole(sh->id - 1u, sh->wild, sh->wild_end);
  }
  if (!wild_commit(sh, sh->wild + k) || !arena_grown(sh->wild, k)) return false;
  sh->wild += k;
  arena_hole(sh->id - 1u, sh->wild, sh->wild_end);
  return true;
}

/* With RILL_HUGEPAGES, under sh's lock: free run sp, which ends where sh's
 * wilderness begins and holds pages in the huge page they share, takes the
 * wilderness's slots up to the next 2 MiB boundary, so that its purge
 * (purge_range) gives that huge page back: the last buffers a shard cut
 * and freed kept one, never whole to the purge. */
static void wild_join(shard_t *sh, span_t *sp) {
  size_t hs = HUGE_PAGE >> SLOT_SHIFT, on = arena_huge_first() % hs;
  size_t i = span_index(sp), j = sh->wild, k = (on + hs - j % hs) % hs;
  if (!k || j != i + sp->nslots || sh->wild_end - j < k) return;
  size_t lo = j + k - hs > i ? j + k - hs : i;
  uintptr_t a = rill_arena.base + (j << SLOT_SHIFT);
  if (dirty_scan(lo, j, true) == j || !arena_huge(a, a + 1) || !wild_grow(sh, k)) return;
  for (size_t s = j; s < j + k; s++) head_set(s, i);
  span_set_nslots(sp, sp->nslots + k);
}

/* Has shard sh whole runs, which merged may fit what its bins do not
 * (coalesce)? Read without its lock, as may_fit's guess is. */
static bool may_whole(const shard_t *sh) {
  return atomic_load_explicit(&sh->wh_any, RLX) != 0;
}

/* May shard sh have a free run of n slots or more (bin b, or above)? Read
 * without its lock: a wrong guess costs a lock, or fresh slots. */
static bool may_fit(const shard_t *sh, unsigned b) {
  return atomic_load_explicit(&sh->nonempty, RLX) >> b != 0;
}

/* A run of exactly n slots for a large object or a big class's span, for a
 * thread of heap `home`: a free run of home's shard (the lowest-addressed
 * fit in the smallest bin that has one, split), else of another shard, else
 * never-used slots from the wilderness. Its `fresh` tells the caller
 * whether it reads as zero (else run_zero clears what may not).
 * With `own`, never another shard's: for a block realloc moves because it
 * could not grow in place. Placed in another thread's free run, it went back
 * to that shard when freed, so the thread's next buffer was cut there again,
 * between the other thread's runs, and moved at step after step (realloc at
 * two threads: in one run of four, 4-40x the time and 2-8x the peak RSS). */
static span_t *run_take(size_t n, uint32_t home, bool own, bool wild, bool warm) {
  unsigned b = bin_of(n);
  shard_t *sh = &shards[home % RUN_SHARDS];
  spin_lock(&sh->lock);
  span_t *sp = warm ? fit_warm(sh, n) : fit(sh, n, b);
  if (!sp && wild && may_whole(sh)) sp = coalesce(sh, n);
  bool others = false;
  for (unsigned k = 1; !sp && !own && !others && k < RUN_SHARDS; k++)
    others = may_fit(&shards[(home + k) % RUN_SHARDS], b) ||
             (wild && may_whole(&shards[(home + k) % RUN_SHARDS]));
  if (!sp && others) { /* reuse another thread's free memory before fresh */
    spin_unlock(&sh->lock);
    for (unsigned k = 1; !sp && k < RUN_SHARDS; k++) {
      shard_t *o = &shards[(home + k) % RUN_SHARDS];
      if (!(wild && may_whole(o)) && (!may_fit(o, b) || (warm && !warm_may(o, n)))) continue;
      spin_lock(&o->lock);
      sp = warm ? fit_warm(o, n) : fit(o, n, b);
      if (!sp && wild && may_whole(o)) sp = coalesce(o, n);
      spin_unlock(&o->lock);
    }
    spin_lock(&sh->lock);
  }
  if (!sp && wild) { /* under the lock too: our neighbours' releases read these heads */
    size_t i = wild_take(sh, n);
    if (i) {
      sp = claim(sh, i, n);
      SPAN_SET(sp, fresh, 1);
    }
  }
  spin_unlock(&sh->lock);
  if (sp) pool_tick(os_now_ms());
  return sp;
}

span_t *run_get(size_t n, uint32_t home, bool own) {
  return run_take(n, home, own, true, false);
}

/* A free run that holds pages only (the warm lists). */
span_t *run_get_warm(size_t n, uint32_t home, bool own) {
  return run_take(n, home, own, false, true);
}

/* A free run only, never the wilderness (run_get otherwise). */
span_t *run_get_free(size_t n, uint32_t home, bool own) {
  return run_take(n, home, own, false, false);
}

/* Under sh's lock: every whole run merged with its free neighbours, then a
 * fit for n; NULL if none. For when the arena is used up: a whole run
 * serves its own length only (fits), so a program that freed its 64 KiB
 * blocks under an address-space limit found no memory for 1000-byte ones
 * (test_aslimit). */
static span_t *unwhole(shard_t *sh, size_t n) {
  for (size_t k = 1; k <= WHOLE_SLOTS_MAX; k++)
    while (sh->wh[k]) {
      span_t *sp = sh->wh[k];
      unlink_run(sh, sp);
      release(sh, sp);
    }
  return fit(sh, n, bin_of(n));
}

/* The arena is used up (under an address-space limit): a free run of any
 * shard, whole runs merged (unwhole), else n slots of any shard's
 * wilderness. Each shard holds up to a chunk (32 MiB) of never-used slots
 * that only its own threads' large runs are cut from, so with the arena
 * spent small classes failed with ENOMEM while up to RUN_SHARDS chunks sat
 * unused. */
span_t *run_get_last(size_t n, uint32_t home) {
  span_t *sp = run_take(n, home, false, false, false);
  for (unsigned k = 0; !sp && k < RUN_SHARDS; k++) {
    shard_t *sh = &shards[(home + k) % RUN_SHARDS];
    if (!may_whole(sh)) continue;
    spin_lock(&sh->lock);
    sp = unwhole(sh, n);
    spin_unlock(&sh->lock);
  }
  for (unsigned k = 0; !sp && k < RUN_SHARDS; k++) {
    shard_t *sh = &shards[(home + k) % RUN_SHARDS];
    spin_lock(&sh->lock);
    size_t i = sh->wild_end - sh->wild >= n ? wild_cut(sh, n) : 0;
    if (i) {
      sp = claim(sh, i, n);
      SPAN_SET(sp, fresh, 1);
    }
    spin_unlock(&sh->lock);
  }
  return sp;
}

/* A pooled span that holds pages, taken from the pool by pool_spill,
 * becomes a free run of home's shard and merges with its free neighbours
 * there; its slots are runs' slots from now on (a slot's shard is set once,
 * as when the wilderness first cuts it). */
void run_adopt(span_t *sp, uint32_t home) {
  shard_t *sh = &shards[home % RUN_SHARDS];
  size_t i = span_index(sp), n = span_nslots(sp);
  bool pages = has_pages(sp); /* a purged or never-used span has none: not dirty */
  uint64_t now = os_now_ms();
  spin_lock(&sh->lock);
  claim(sh, i, n);
  SPAN_SET(sp, cls, CLS_LARGE);
  SPAN_SET(sp, fresh, 0); /* free runs: the dirty bits */
  stamp_set(sp, pages ? (uint32_t)now : UINT32_MAX);
  sp->warm_opens = pool_grown(); /* open at once */
  atomic_store_explicit(&sp->xf, XF_MAKE(ST_FREE, 0, 0), RLX);
  if (pages) freed_mark(i, n);
  release(sh, sp);
  spin_unlock(&sh->lock);
}

/* For pool_spill: the slots of home's free runs that end at slot `first`
 * or begin at `end`, which pooled spans first .. end - 1 made runs would
 * merge with (release). */
size_t run_free_beside(size_t first, size_t end, uint32_t home) {
  shard_t *sh = &shards[home % RUN_SHARDS];
  size_t n = 0;
  spin_lock(&sh->lock);
  size_t k = head_get(first - 1); /* slot 0 is never pooled, so first > 0 */
  span_t *l = span_of_index(k);
  if (shard_mark(l) == sh->id && l->run_free && k + l->nslots == first) n += l->nslots;
  if (end < arena_bound_slots() && head_get(end) == end) {
    span_t *r = span_of_index(end);
    if (shard_mark(r) == sh->id && r->run_free) n += r->nslots;
  }
  spin_unlock(&sh->lock);
  return n;
}

/* Takes back the run of a freed large object, or of a big class's span
 * (pool_put hands those on), into the shard it was cut for. */
void run_put(span_t *sp) {
  uint64_t now = os_now_ms();
  shard_t *sh = shard_of(sp);
  stamp_set(sp, (uint32_t)now);
  sp->warm_opens = pool_grown() + (uint32_t)(sp->nslots / 4); /* give_open */
  atomic_store_explicit(&sp->xf, XF_MAKE(ST_FREE, 0, 0), RLX);
  spin_lock(&sh->lock);
  freed_mark(span_index(sp), sp->nslots); /* its object or blocks wrote it */
  if (sp->cls != CLS_LARGE && class_is_run(sp->cls) && sp->nslots <= WHOLE_SLOTS_MAX &&
      class_size(sp->cls) <= WHOLE_BLOCK_MAX)
    file_whole(sh, sp);
  else
    release(sh, sp);
  spin_unlock(&sh->lock);
  pool_pages_arrived();
  pool_tick(now);
}

/* realloc in place: a live run shrinks to n slots (the tail goes back as a
 * free run) or grows into a free run of its shard that follows it, or into
 * the wilderness when it ends where that begins (a buffer that keeps
 * growing).
 * False when it cannot grow; the run is then unchanged. */
bool run_resize(span_t *sp, size_t n) {
  size_t i = span_index(sp), m = sp->nslots;
  if (n == m) return true;
  bool ok = true, pages = false;
  size_t grew = 0; /* never-used slots taken */
  shard_t *sh = shard_of(sp);
  spin_lock(&sh->lock);
  if (n < m) {
    span_t *t = cut(sp, n, (uint32_t)os_now_ms());
    span_set_nslots(t, m - n);
    freed_mark(i + n, m - n);
    release(sh, t);
    pages = true;
  } else {
    size_t j = i + m;
    span_t *r = j < arena_bound_slots() && head_get(j) == j ? span_of_index(j) : NULL;
    if (r && shard_mark(r) == sh->id && r->run_free && m + r->nslots >= n &&
        run_recommit(j, i + n - j)) {
      unlink_run(sh, r);
      grew = clean_slots(j, i + n);
      size_t rest = m + r->nslots - n;
      if (rest) file_run(sh, cut(sp, n, piece_stamp(i + n, rest, r->stamp)), rest);
      for (size_t s = j; s < i + n; s++) head_set(s, i);
    } else if (j == sh->wild && wild_grow(sh, n - m)) { /* a buffer that keeps growing */
      for (size_t s = j; s < i + n; s++) head_set(s, i);
      grew = n - m;
    } else {
      ok = false;
    }
  }
  if (ok) {
    span_set_nslots(sp, n);
    size_t bytes = (size_t)n << SLOT_SHIFT;
    SPAN_SET(sp, bsize, (uint32_t)(bytes > UINT32_MAX ? UINT32_MAX : bytes));
  }
  spin_unlock(&sh->lock);
  if (pages) pool_pages_arrived();
  if (grew) pool_grew(grew);
  return ok;
}

/* RILL_COMMIT: a purged free run of DECOMMIT_MIN slots or more gives
 * its commit charge back too (the pool does the same for small spans: pool.c,
 * "giving the commit charge back"); run_recommit takes it again for the
 * slots cut from it. Each decommitted stretch can split the arena's mapping
 * in two more: runs_purge counts them at the start of each pass and stops
 * at half the pool's bound (rill_opt.gone_max). */
static uint32_t run_holes; /* under the pool's purge lock: runs_purge runs within its pass */

static void run_decommit(const span_t *sp) {
  size_t i = span_index(sp), n = sp->nslots;
  if (n < DECOMMIT_MIN || bits_scan(gone, i, i + n, false) == i + n) return;
  if (run_holes >= rill_opt.gone_max / 2 || !arena_decommit(i, n)) return;
  run_holes++;
  bits_mark(dirty, i, n, false); /* zero once writable again, even after MADV_FREE */
  bits_mark(gone, i, n, true);
}

/* Stretches of decommitted slots now, below the bound. */
static uint32_t holes_count(void) {
  size_t end = arena_bound_slots(), n = 0;
  for (size_t s = bits_scan(gone, 0, end, true); s < end; s = bits_scan(gone, s, end, true)) {
    n++;
    s = bits_scan(gone, s, end, false);
  }
  return (uint32_t)n;
}

/* Every shard's lock, taken or let go in one sweep. */
static void runs_lock_all(bool lock) {
  for (unsigned k = 0; k < RUN_SHARDS; k++)
    lock ? spin_lock(&shards[k].lock) : spin_unlock(&shards[k].lock);
}

/* A new generation of young slots, once a purge delay has passed since the
 * last: the older one is emptied and takes the frees from now on, so a slot
 * stays young a delay at least and two at most. Under the purge lock. */
static void young_turn(uint32_t now) {
  if (now - young_turned < rill_opt.purge_delay) return;
  young_turned = now;
  runs_lock_all(true); /* every shard's lock: no free marks a generation meanwhile */
  young_cur ^= 1;
  for (size_t w = 0, n = (arena_bound_slots() + 63) / 64; w < n; w++)
    if (atomic_load_explicit(bword(young[young_cur], w), RLX))
      atomic_store_explicit(bword(young[young_cur], w), 0, RLX);
  runs_lock_all(false);
}

/* A purge pass takes a free run out of the bins for its madvise, so a run
 * of GiBs was out of reach for as long as one call took to give it all
 * back (a tenth of a second and more): another thread's large block took
 * fresh memory meanwhile, or under a spent address-space limit waited for
 * the pass (pool_purge_wait). On a timed pass, a run longer than this is
 * purged a slice at a time, the rest left in the bins. */
#define SLICE ((size_t)4096) /* slots: 64 MiB */

/* Under sh's lock: of free run sp, just unlinked, keeps len slots from
 * the huge page of slot s (the first to purge) on, and files the rest, on
 * either side, back in the bins. Returns the slice, out of the bins. */
static span_t *slice(shard_t *sh, span_t *sp, size_t s, size_t len) {
  size_t i = span_index(sp), end = i + sp->nslots, hs = HUGE_PAGE >> SLOT_SHIFT;
  size_t a = len < hs ? s : s / hs * hs > i ? s / hs * hs : i; /* short: from s itself */
  size_t b = end - a > len ? a + len : end;
  if (b < end) file_run(sh, cut(sp, b - i, piece_stamp(b, end - b, sp->stamp)), end - b);
  if (a > i) {
    span_t *p = cut(sp, a - i, sp->stamp);
    stamp_set(sp, piece_stamp(i, a - i, sp->stamp));
    file_run(sh, sp, a - i);
    sp = p;
  }
  span_set_nslots(sp, b - a);
  SPAN_SET(sp, bsize, 0);
  sp->run_free = 0; /* out of the bins, as unlink_run leaves a run */
  head_set(a, a);
  head_set(b - 1, a);
  return sp;
}

/* Whether a small class may have slots of free run sp now (run_give). A
 * run freed since `cutoff` (the growth swap's age) is kept for the large
 * blocks and big classes' spans that left it until the program has faulted
 * in, for small classes' spans, a quarter of the freed run's length since
 * (pool_grew_small; run_put sets warm_opens): a thread that freed an 8 MiB
 * buffer and took one small span before the next buffer had the buffer's
 * run cut, and faulted all 8 MiB in elsewhere (test_runs --shards); a
 * buffer grown by realloc round after round started each round a span
 * further on, and moved to a mapping of its own at the top (bench_realloc
 * -b 1: 92x the time). A program that goes on growing in small blocks while
 * such a run sits resident should use it instead, as a renter buys once the
 * rent paid is a fair part of the price. Runs made of pooled spans
 * (run_adopt) and runs older than the swap's age are open at once. A merged
 * run opens when its last piece would: the young piece keeps itself whole,
 * not the old run it joined (merge_state). Counted by the merged length, a
 * 512 KiB block freed beside 24 MiB of open run closed all of it until 6
 * MiB more had been faulted in (test_runs --opens). */
static bool give_open(const span_t *sp, uint32_t cutoff) {
  return (int32_t)(sp->stamp - cutoff) <= 0 || (int32_t)(pool_grown() - sp->warm_opens) >= 0;
}

/* Under sh's lock: a run of n slots that hold pages for a small class's
 * span, cut from a run on the warm lists that is open to it (give_open)
 * and has n such slots in a row (give_room: their first slot, else 0; slot
 * 0 is never a run's): the shortest list that may hold one first
 * (within it the first found, the least lately filed first; on the last,
 * the shortest of those looked at), so that big free runs stay whole for
 * the large blocks that want them. LOOK runs are looked at in all; NULL if
 * none of those has. */
static size_t give_room(const span_t *sp, size_t n, uint32_t cutoff) {
  if (!give_open(sp, cutoff)) return 0;
  size_t s = span_index(sp), end = s + sp->nslots, e;
  while (dirty_range(&s, &e, end, UNADVISED) && e - s < n) s = e;
  return s < end && e - s >= n ? s : 0;
}
static span_t *give_warm(shard_t *sh, size_t n, uint32_t cutoff) {
  unsigned looks = 0;
  span_t *best = NULL;
  size_t at = 0, s;
  for (unsigned k = warm_of(n); !best && k < WARMS && looks < LOOK; k++)
    for (span_t *sp = sh->warm_tail[k]; sp && looks < LOOK; sp = sp->warm_prev, looks++) {
      if ((best && sp->nslots >= best->nslots) || !(s = give_room(sp, n, cutoff))) continue;
      best = sp, at = s;
      if (k < WARMS - 1) break; /* within twice the shortest */
    }
  /* then the whole runs (file_whole), which the warm lists leave out */
  for (size_t k = n; !best && k <= WHOLE_SLOTS_MAX; k++)
    for (span_t *sp = sh->wh_tail[k]; sp && !best && looks < 2 * LOOK; sp = sp->warm_prev, looks++)
      if ((at = give_room(sp, n, cutoff))) best = sp;
  if (!best) return NULL;
  unlink_run(sh, best);
  span_t *sp = slice(sh, best, at, n);
  claim(sh, at, n);
  SPAN_SET(sp, fresh, 0);
  return sp;
}

/* For a small class's span (pool_from_runs): a run of n slots that hold
 * pages, home's shard first, `cutoff` the growth swap's age; NULL if no
 * shard has one open to it. */
span_t *run_give(size_t n, uint32_t home, uint32_t cutoff) {
  span_t *sp = NULL;
  for (unsigned k = 0; !sp && k < RUN_SHARDS; k++) {
    shard_t *sh = &shards[(home + k) % RUN_SHARDS];
    if (!warm_may(sh, n)) continue;
    spin_lock(&sh->lock);
    sp = give_warm(sh, n, cutoff);
    spin_unlock(&sh->lock);
  }
  if (sp) pool_tick(os_now_ms());
  return sp;
}

/* Delayed purging of one shard's free runs: those freed at or before
 * `cutoff` ms give their pages back, and those freed later give back the
 * slots that were free a whole delay before their young neighbours came
 * (`aged`, young_turn). They leave the bins while the lock is dropped for
 * madvise, and come back merged with whatever was freed beside them
 * meanwhile; a long run leaves a slice at a time (SLICE). A timed pass
 * takes one batch of BATCH runs, or batches until `until` (ms; the
 * purger's), and then sets *cut if its last batch was full. */
static size_t shard_purge(shard_t *sh, uint32_t cutoff, bool lazy, uint64_t until, size_t *left,
                          size_t *budget, bool *cut) {
  enum { BATCH = 64 };
  span_t *due[BATCH];
  bool aged[BATCH];
  size_t bytes = 0;
  /* Timed passes only, and not with huge pages, where a pass keeps a
   * range's partial huge pages, which the next slice would find first
   * again. A slice's rest that takes in a block freed meanwhile is young,
   * so its old slots are found by their age (AGED), and what frees bring
   * back is left for a later pass: slices move on. rill_collect's pass has
   * no ages to go by (it takes what was freed before it began, whole): one
   * that sliced went on cutting the same slice while a thread freed a block
   * into it, or left a rest that had taken one in. */
  bool slicing = lazy && !rill_opt.hugepages;
  for (;;) {
    unsigned nd = 0;
    size_t waiting = 0, before = bytes;
    bool sliced = false; /* then this batch ends: one slice out at a time */
    size_t took = 0;     /* slots taken, against *budget */
    spin_lock(&sh->lock);
    /* With huge pages a timed pass gives back whole 2 MiB pages only, and a
     * whole run (file_whole) is at most 64 KiB: a pass gave back none, and
     * merged a batch of them as it put them back (release), so two threads
     * that freed 512 MiB of 16-64 KiB buffers and exited kept them for 4 s,
     * not the delay. Due ones merge first, as they would once purged. */
    if (lazy && rill_opt.hugepages && may_whole(sh)) (void)merge_wholes(sh, SIZE_MAX, &cutoff);
    /* with a budget (the growth swap) the biggest runs first */
    for (uint64_t m = atomic_load_explicit(&sh->nonempty, RLX), b; m && nd < BATCH && !sliced;
         m &= ~((uint64_t)1 << b)) {
      b = budget ? 63u - (unsigned)__builtin_clzll(m) : (unsigned)__builtin_ctzll(m);
      for (span_t *sp = sh->bins[b], *nx; sp && nd < BATCH && !sliced; sp = nx) {
        if (budget && took >= *budget) break;
        nx = sp->next;
        if (!has_pages(sp)) continue;
        size_t i = span_index(sp), end = i + sp->nslots, s = i, e;
        bool young_part = (int32_t)(sp->stamp - cutoff) > 0;
        if (young_part) waiting++;
        bool work = dirty_range(&s, &e, end, young_part ? AGED | UNADVISED : UNADVISED);
        if (young_part && !work) continue;
        unlink_run(sh, sp);
        if (rill_opt.hugepages && end == sh->wild) wild_join(sh, sp);
        size_t len = slicing ? SLICE : SIZE_MAX;
        if (budget && slicing && *budget - took < len) len = *budget - took; /* no more */
        if (work && end - s > len) sp = slice(sh, sp, s, len), sliced = true;
        if (budget) { /* what it gives back, not its length: runs merged from
                       * purged and resident pieces are mostly clean */
          size_t j = span_index(sp), jend = j + sp->nslots;
          for (size_t a = j, z;
               dirty_range(&a, &z, jend, young_part ? AGED | UNADVISED : UNADVISED); a = z)
            took += z - a;
        } else {
          took += sp->nslots;
        }
        aged[nd] = young_part;
        due[nd++] = sp;
      }
    }
    spin_unlock(&sh->lock);
    if (budget) *budget -= took < *budget ? took : *budget;
    /* only the slots that may hold data and were not advised yet: a run
     * merged from a resident piece and a purged one madvises the first
     * alone */
    bool zero = !lazy || !rill_opt.purge_free; /* MADV_FREE may leave data */
    for (unsigned k = 0; k < nd; k++) {
      span_t *sp = due[k];
      size_t i = span_index(sp), end = i + sp->nslots;
      unsigned only = aged[k] ? AGED | UNADVISED : UNADVISED;
      bool all = true;
      for (size_t s = i, e; purge_range(&s, &e, i, end, only); s = e) {
        uintptr_t a = span_start(sp) + ((s - i) << SLOT_SHIFT), from;
        bool refused;
        size_t got = pool_purge_range(a, a + ((e - s) << SLOT_SHIFT), lazy, &from, &refused);
        if (refused) { /* locked: contents kept; not again until used */
          bits_mark(lazied, s, e - s, true);
          continue;
        }
        size_t gs = s + ((from - a) >> SLOT_SHIFT), gn = got >> SLOT_SHIFT;
        bytes += got;
        all = all && gn == e - s;
        /* what went, even when the huge pages at its ends were kept: with
         * neither mark a pass gave the same GiBs every time (MADV_FREE
         * leaves them mapped, and a 3 GiB run took minutes a pass) */
        if (zero)
          dirty_mark(gs, gn, false);
        else /* MADV_FREE: maybe kept, but advised */
          bits_mark(lazied, gs, gn, true);
        if (gn < e - s && aged[k]) /* kept: not again for a delay */
          bits_mark(young[young_cur], s, e - s, true);
      }
      /* young slots stay */
      if (aged[k]) all = all && scan(dirty, i, end, true, UNADVISED) == end;
      if (all) stamp_set(sp, UINT32_MAX);
      if (all) arena_entries_release(i + 1, end); /* its inner slots' entries too */
      if (all && rill_opt.commit_demand) run_decommit(sp);
    }
    spin_lock(&sh->lock);
    for (unsigned k = 0; k < nd; k++) release(sh, due[k]);
    spin_unlock(&sh->lock);
    /* a timed pass takes its batches while each gives pages back (a run
     * whose huge pages it kept would be found due again) and its time
     * lasts, or goes on through a sliced run (each slice leaves its slots
     * clean or advised, so the next starts further on); rill_collect's
     * pass goes on until none is left */
    bool more = !lazy || (until && bytes > before && os_now_ms() < until);
    if (!sliced && (nd < BATCH || !more || (budget && !*budget))) {
      *left = waiting + (nd == BATCH);
      if (cut && lazy && until && nd == BATCH && bytes > before) *cut = true;
      return bytes;
    }
  }
}

/* The entries of long-purged free runs' inner slots. A purge that gives
 * back a whole run gives back its inner entries too (shard_purge), but it
 * then merges the run with its free neighbours, whose head entries become
 * inner ones and stay: after two threads freed 256 MiB of 16-64 KiB
 * buffers (spans of 2-8 slots, purged one by one and merged), 95-114 of
 * 1,282 pages of entries stayed resident for good (test_entries). Called
 * where the pool gives back its pooled spans' entries (the pool settles,
 * every four delays, rill_collect): under each shard's lock, which every
 * cut of a run holds, a run with no pages gives back the whole pages of
 * entries among its inner slots, once per filing. Runs of a page's worth
 * of slots or fewer hold no such page. At most ENTRY_LOOKS runs a shard a
 * call, from the shortest bin up, so that a heap of thousands of free runs
 * does not hold the lock long: runs past them keep their inner entries, as
 * all did before. */
#define ENTRY_LOOKS 4096
void runs_entries_release(void) {
  size_t per = rill_arena.page / sizeof(span_t);
  if (!per) return;
  unsigned b0 = bin_of(per + 1);
  for (unsigned k = 0; k < RUN_SHARDS; k++) {
    shard_t *sh = &shards[k];
    if (!(atomic_load_explicit(&sh->nonempty, RLX) >> b0)) continue;
    unsigned looks = 0;
    spin_lock(&sh->lock);
    for (unsigned b = b0; b < BINS && looks < ENTRY_LOOKS; b++)
      for (span_t *sp = sh->bins[b]; sp && looks < ENTRY_LOOKS; sp = sp->next, looks++)
        if (!sp->inner_gone && !has_pages(sp) && sp->nslots > per) {
          size_t i = span_index(sp);
          arena_entries_release(i + 1, i + sp->nslots);
          sp->inner_gone = 1;
        }
    spin_unlock(&sh->lock);
  }
}

/* One pass over every shard (called by the pool's pass, under its lock). */
size_t runs_purge(uint32_t cutoff, bool lazy, uint64_t until, size_t *left, bool *cut) {
  size_t bytes = 0;
  *left = 0;
  *cut = false;
  if (rill_opt.commit_demand) run_holes = holes_count();
  /* with no delay every run with pages is due, and no slot needs its age */
  if (lazy && rill_opt.purge_delay) young_turn(cutoff + rill_opt.purge_delay);
  for (unsigned k = 0; k < RUN_SHARDS; k++) {
    size_t l;
    bytes += shard_purge(&shards[k], cutoff, lazy, until, &l, NULL, cut);
    *left += l;
  }
  return bytes;
}

/* The growth purge's part (pool_purge_stale): free runs whole since
 * `cutoff` give their pages back now, a batch per shard. */
size_t runs_purge_stale(uint32_t cutoff) {
  size_t bytes = 0, left;
  for (unsigned k = 0; k < RUN_SHARDS; k++)
    if (atomic_load_explicit(&shards[k].nonempty, RLX))
      bytes += shard_purge(&shards[k], cutoff, true, 0, &left, NULL, NULL);
  return bytes;
}

/* The growth swap's part (pool_grew): free runs that hold pages, freed by
 * `cutoff`, the biggest first (small ones come and go), until `slots` slots
 * are taken; the last is cut to fit (with RILL_HUGEPAGES, which never
 * slices, whole runs). A run's young part gives back only its aged slots,
 * as in a timed pass. */
size_t runs_purge_some(size_t slots, uint32_t cutoff) {
  size_t bytes = 0, left;
  for (unsigned k = 0; k < RUN_SHARDS && slots; k++)
    if (atomic_load_explicit(&shards[k].nonempty, RLX))
      bytes += shard_purge(&shards[k], cutoff, true, 0, &left, &slots, NULL);
  return bytes;
}

void runs_fork_prepare(void) {
  for (unsigned k = 0; k < RUN_SHARDS; k++) fork_hold(&shards[k].lock);
}
