/* pool.c - the global span pool (scalloc §3.3): empty spans in lock-free
 * bitmaps, one per span order and per stripe (stripe = the CPU the caller
 * runs on), reused lowest address first, and their delayed, batched purging.
 * The maps take no lock; one lock keeps purge passes apart and fork. */
#include "internal.h"

/* Each order and stripe has a bitmap over the arena's slots: bit i is set
 * while the span whose first slot is i lies in the pool. Pops take the
 * lowest set bit, so spans are reused in address order: a burst of spans
 * freed in random order comes back in ascending addresses, which is what
 * hardware prefetchers and page walks favour (the locality benchmark walks
 * such lists 1.5x faster than after LIFO reuse), and the top of the arena
 * stays idle, so purging finds it (first fit by address keeps a heap
 * compact: the survey LKmalloc §5 cites). A summary word per
 * 64 bitmap words marks the words that may hold bits, so a pop reads a few
 * words, not the whole map. Both levels change by atomic and/or only. */
typedef struct {
  _Alignas(64) _Atomic uint64_t *bits; /* one bit per slot: the map's first line */
  _Atomic uint64_t *sum;               /* one bit per word of `bits`: its first line */
  /* Spans in the map, give or take those in flight: an empty map costs a
   * get one load, not a scan, however many stripes it tries. */
  _Atomic int64_t n;
} map_t;
/* Spans of the pool (POOL_ORDERS, internal.h): classes up to 4 KiB, and
 * what is left of a heap's chunk, at min_order. */
/* Stripe-major: a process with few CPUs touches only the first rows (order-
 * major, each order's row of MAX_STRIPES lines was a page of its own). */
static map_t maps[MAX_STRIPES][POOL_ORDERS];

#define SEQ    memory_order_seq_cst
#define BIT(i) ((uint64_t)1 << ((i)&63))

/* The maps interleave by cache line (line_word, internal.h): the first line
 * (8 words, 512 slots, 8 MiB of 16 KiB slots) of every map, then every
 * map's second line, and so on; the summary words likewise, after them.
 * Each map had a stretch of its own (8 MiB for a 1 TiB arena), whose used
 * part was a resident page, a page-table page and two entries of the memory
 * map: a program that had used the pool on two CPUs had 18 such pages
 * resident and 58 anonymous mappings (22 now), which every fork copies
 * (docs/benchmarks.md, "What a fork costs"). */
static size_t map_stride;          /* words from one line of a map to its next */
static void *maps_mem;             /* all the maps, in one mapping */
static size_t maps_bytes, sums_at; /* the summary words' offset in it */
static size_t maps_done;           /* slots whose map words are usable (os_commit_grow) */

static inline _Atomic uint64_t *map_bits(const map_t *mp, size_t w) {
  return line_word(mp->bits, w, map_stride);
}
static inline _Atomic uint64_t *map_sum(const map_t *mp, size_t sw) {
  return line_word(mp->sum, sw, map_stride);
}
/* Bytes of the bits (and of the summary words) that slots below `slots` use. */
static inline size_t maps_bits_bytes(size_t slots) {
  return line_bytes((slots + 63) / 64, map_stride);
}
static inline size_t maps_sum_bytes(size_t slots) {
  return line_bytes(((slots + 63) / 64 + 63) / 64, map_stride);
}

/* Every map's words for slots up to `slots` usable: one call for the bits
 * and one for the summary words (a page of bits holds about three lines of
 * each of 22 maps, 24 MiB of arena; os_commit_grow makes no call within a
 * page it made usable before). */
static bool maps_commit(size_t slots) {
  char *m = maps_mem;
  if (!os_commit_grow(m, maps_bits_bytes(maps_done), maps_bits_bytes(slots)) ||
      !os_commit_grow(m + sums_at, maps_sum_bytes(maps_done), maps_sum_bytes(slots)))
    return false;
  maps_done = slots;
  return true;
}

/* arena_fit: every map's words past `slots` (of `old`) go back; no span is
 * pooled there, and map_words stops at the bound below them. */
static void maps_fit(size_t slots, size_t old) {
  char *m = maps_mem;
  os_give_back(m, maps_bits_bytes(slots), maps_bits_bytes(old));
  os_give_back(m + sums_at, maps_sum_bytes(slots), maps_sum_bytes(old));
  if (maps_done > slots) maps_done = slots;
}

/* Reserves the maps (untouched pages cost nothing), once the arena knows its
 * size; start-up calls it again if it had to release them for a smaller
 * arena (pool_release). */
bool pool_init(void) {
  if (rill_arena.min_order >= POOL_ORDERS) return false; /* pages over 128 KiB */
  size_t pg = rill_arena.page, n = (size_t)POOL_ORDERS * rill_arena.stripes;
  map_stride = n * BITMAP_LINE;
  sums_at = (maps_bits_bytes(rill_arena.max_slots) + pg - 1) & ~(pg - 1);
  size_t bytes = sums_at + ((maps_sum_bytes(rill_arena.max_slots) + pg - 1) & ~(pg - 1));
  char *mem = os_reserve(bytes);
  if (!mem) return false;
  maps_mem = mem;
  maps_bytes = bytes;
  /* stripe-major, as the lines go: a process with few CPUs uses the first */
  for (unsigned s = 0, m = 0; s < rill_arena.stripes; s++)
    for (unsigned o = 0; o < POOL_ORDERS; o++, m++) {
      maps[s][o].bits =
          (_Atomic uint64_t *)(void *)(mem + (size_t)m * BITMAP_LINE * sizeof(uint64_t));
      maps[s][o].sum =
          (_Atomic uint64_t *)(void *)(mem + sums_at + (size_t)m * BITMAP_LINE * sizeof(uint64_t));
    }
  maps_done = 0;
  if (arena_track(maps_commit, maps_fit)) return true;
  pool_release();
  return false;
}

/* Undoes pool_init at start-up, for a smaller arena. */
void pool_release(void) {
  os_unmap(maps_mem, maps_bytes);
  maps_mem = NULL;
}

/* Sets bits `m` of word w. The summary bit is set after the word, and the
 * clearer below rechecks the word after clearing it: with both sequentially
 * consistent, a word with bits never stays unmarked. */
static void map_put_bits(map_t *mp, size_t w, uint64_t m) {
  atomic_fetch_or_explicit(map_bits(mp, w), m, SEQ);
  if (!(atomic_load_explicit(map_sum(mp, w / 64), SEQ) & BIT(w)))
    atomic_fetch_or_explicit(map_sum(mp, w / 64), BIT(w), SEQ);
}

static void map_unmark(map_t *mp, size_t w) {
  atomic_fetch_and_explicit(map_sum(mp, w / 64), ~BIT(w), SEQ);
  if (atomic_load_explicit(map_bits(mp, w), SEQ))
    atomic_fetch_or_explicit(map_sum(mp, w / 64), BIT(w), SEQ);
}

/* Words that may hold bits: those of slots below the bound (pooled spans lie
 * below it, and with RILL_COMMIT the words above it are not mapped). */
static inline size_t map_words(void) {
  return (arena_bound_slots() + 63) / 64;
}

/* Summary word sw of every map, or'ed: the map words that may hold spans. */
static uint64_t maps_marks(size_t sw) {
  uint64_t m = 0;
  for (unsigned s = 0; s < rill_arena.stripes; s++)
    for (unsigned o = 0; o < POOL_ORDERS; o++)
      m |= atomic_load_explicit(map_sum(&maps[s][o], sw), RLX);
  return m;
}

/* Marks a span pooled; map_push also counts it in (a purge pass puts back
 * spans it took without counting them out). */
static void map_set(map_t *mp, span_t *sp) {
  size_t i = span_index(sp);
  map_put_bits(mp, i / 64, BIT(i));
}

static void map_push(map_t *mp, span_t *sp) {
  map_set(mp, sp);
  atomic_fetch_add_explicit(&mp->n, 1, RLX);
}

/* Clears bit b of word w; if it was set, the caller has taken that span
 * and it is counted out. Returns the word before. */
static uint64_t map_clear(map_t *mp, size_t w, uint64_t b) {
  uint64_t old = atomic_fetch_and_explicit(map_bits(mp, w), ~b, SEQ);
  if (old & b) {
    if (old == b) map_unmark(mp, w);
    atomic_fetch_sub_explicit(&mp->n, 1, RLX);
  }
  return old;
}

/* The pooled span with the lowest address, taken out of the map. */
static span_t *map_pop(map_t *mp) {
  if (atomic_load_explicit(&mp->n, RLX) <= 0) return NULL;
  size_t nw = map_words();
  for (size_t s = 0; s * 64 < nw; s++) {
    uint64_t sw = atomic_load_explicit(map_sum(mp, s), RLX);
    while (sw) {
      size_t w = s * 64 + (unsigned)__builtin_ctzll(sw);
      sw &= sw - 1;
      uint64_t x = atomic_load_explicit(map_bits(mp, w), RLX);
      while (x) {
        uint64_t b = x & -x, old = map_clear(mp, w, b);
        if (old & b) return span_of_index(w * 64 + (unsigned)__builtin_ctzll(b));
        x = old & ~b; /* another pop took it: try the next one */
      }
      map_unmark(mp, w);
    }
  }
  return NULL;
}

/* ---- pooled spans whose entries went back --------------------------------
 * Every 16 KiB slot has a 256-byte entry, a 64th of the arena, and a burst
 * of small objects leaves its spans pooled with their entries resident:
 * purged, the spans hold no pages, but 4 of the 5 MiB that `idle` kept
 * above its start after a 256 MiB burst were their entries. So once the
 * pool settles (and at rill_collect), a page of entries whose slots all lie
 * in pooled spans with no pages goes back too (entries_release), and reads
 * zero. A pooled span's head entry with no slots (nslots 0; every span has
 * one slot at least) stands for such a span: no pages, memory zero, as a
 * never-used span cut from a chunk is; taking it from the pool writes its
 * entry again (pooled_restore). */
static inline bool pooled_gone(const span_t *sp) {
  return span_nslots(sp) == 0;
}

/* A pooled span that holds pages: not purged (nor its entry gone), and not
 * never-used or zero (`fresh`). */
static inline bool pooled_pages(const span_t *sp) {
  return !pooled_gone(sp) && !sp->fresh && sp->stamp != UINT32_MAX;
}

/* A span just taken from the map of its order: its entry written again if
 * it went back. */
static span_t *pooled_restore(span_t *sp, unsigned order) {
  if (unlikely(pooled_gone(sp))) {
    /* free first: rill_stats_get may read the entry meanwhile (walk_spans) */
    atomic_store_explicit(&sp->xf, XF_MAKE(ST_FREE, 0, 0), RLX);
    arena_span(span_index(sp), order); /* what a never-used span's entry holds */
    __atomic_store_n(&sp->stamp, UINT32_MAX, __ATOMIC_RELAXED);
  }
  return sp;
}

/* ---- purging (scalloc §3.3 madvise, made lazy and batched) ------------- */
/* Empty spans keep their pages for RILL_PURGE_DELAY_MS, so a program that
 * frees and reallocates spans in a loop makes no system calls. Whichever
 * thread passes a due time first runs one pass over the pool; it madvises
 * the spans that have waited long enough, merging neighbours into one call. */
static _Atomic uint64_t purge_due;
static _Atomic uint64_t purged_bytes;
/* A pass holds pooled spans for a moment: a fork then would lose them in the
 * child, so passes and fork exclude each other (timed passes just skip). */
static _Atomic int purge_lock;

#define BATCH 128
typedef struct batch {
  span_t *sp[BATCH];
  unsigned n;
  size_t bytes;
  bool lazy;
} batch_t;

/* madvises start .. end, or on a timed pass with RILL_HUGEPAGES only the
 * whole huge pages inside it (timed purging never splits a huge page).
 * Returns the bytes given back, from *from on; 0 if none: nothing whole
 * inside, or the kernel refused (*refused), as it does for locked pages
 * (mlock, mlockall), which keep their contents. The caller must not try a
 * refused range again until it has been used: a pass that did went on
 * retrying it, and rill_collect under mlockall never returned. */
size_t pool_purge_range(uintptr_t start, uintptr_t end, bool lazy, uintptr_t *from, bool *refused) {
  uintptr_t ps = start, pe = end;
  if (lazy && arena_huge(start, end)) {
    ps = (start + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
    pe = end & ~(uintptr_t)(HUGE_PAGE - 1);
  }
  *from = ps;
  *refused = false;
  if (pe <= ps) return 0;
  if (lazy ? os_purge_lazy((void *)ps, pe - ps) : os_purge((void *)ps, pe - ps)) return pe - ps;
  *refused = true;
  return 0;
}

/* A pooled span whose pages a pass gave back (madvise), or tried to:
 * purged, nothing left (zero, unless MADV_FREE may have kept them); refused
 * (locked), its pages still there (fresh stays 0). Either way not tried
 * again until it has been used. Relaxed atomics: rill_stats_get reads them
 * from any thread. */
static void span_purged(span_t *sp, bool lazy, bool refused) {
  if (pooled_gone(sp)) return; /* no pages, and no entry to write */
  if (!refused && (!lazy || !rill_opt.purge_free))
    __atomic_store_n(&sp->fresh, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&sp->stamp, UINT32_MAX, __ATOMIC_RELAXED);
}

static void batch_flush(batch_t *b, map_t *home) {
  if (!b->n) return; /* spans come from one map, in address order */
  for (unsigned i = 0; i < b->n;) {
    uintptr_t start = span_start(b->sp[i]), end = start + span_bytes(b->sp[i]);
    unsigned j = i + 1;
    while (j < b->n && span_start(b->sp[j]) == end) end += span_bytes(b->sp[j++]);
    uintptr_t ps;
    bool refused;
    size_t n = pool_purge_range(start, end, b->lazy, &ps, &refused);
    b->bytes += n;
    uintptr_t pe = ps + n; /* a trimmed range gave back its whole huge pages */
    if (refused) ps = start, pe = end;
    for (unsigned k = i; k < j; k++) {
      span_t *sp = b->sp[k];
      if (span_start(sp) < ps || span_start(sp) + span_bytes(sp) > pe) continue; /* kept */
      span_purged(sp, b->lazy, refused);
    }
    i = j;
  }
  for (unsigned i = 0; i < b->n; i++) map_set(home, b->sp[i]);
  b->n = 0;
}

/* ---- giving the commit charge back (RILL_COMMIT) ------------------------ */
/* Under strict overcommit a purged span stays charged: madvise took its
 * pages, but the mapping is still writable, so the charge followed the
 * program's peak. After each purge pass, every stretch of pooled spans
 * that hold no pages and together fill at least DECOMMIT_MIN slots of one
 * map word is mapped anew without access (arena_decommit), its spans taken
 * out of every map while the pass looks, as the purge pass takes them.
 * Whoever takes one of them from the pool makes the whole stretch writable
 * again (pool_recommit): spans are reused lowest address first, so
 * stretches come back whole and the memory map keeps a mapping or two per
 * stretch, not one per span. Each stretch can split the arena's mapping
 * in two more, and a process may have vm.max_map_count mappings (65530 by
 * default): at most an eighth of that many stretches are out at once (8,191
 * by default, up to 8 GiB), and the runs' half as many, so that a quarter
 * of the limit at most goes to them. A commit that finds the limit reached
 * fails, and malloc with it. */
static uint32_t gone_stretches; /* under purge_lock, as every stretch is made and taken back */

typedef struct {
  span_t *sp;
  size_t first, n;
} piece_t;

/* A pooled span with no pages left, not decommitted yet. `stamp` is read
 * while its span may be taken and put back: relaxed atomics (pool_put). */
static inline bool gone_candidate(const span_t *sp) {
  return __atomic_load_n(&sp->stamp, __ATOMIC_RELAXED) == UINT32_MAX &&
         !atomic_load_explicit(&sp->gone_n, RLX);
}

/* Decommits pieces [i, j) (contiguous, sorted) as one stretch. */
static void decommit_stretch(piece_t *pc, unsigned i, unsigned j) {
  size_t a = pc[i].first, b = pc[j - 1].first + pc[j - 1].n;
  if (b - a < DECOMMIT_MIN || gone_stretches >= rill_opt.gone_max) return;
  if (!arena_decommit(a, b - a)) return;
  for (unsigned k = i; k < j; k++) {
    span_t *sp = pc[k].sp;
    __atomic_store_n(&sp->fresh, 1, __ATOMIC_RELAXED); /* zero when writable again */
    sp->gone_first = (uint32_t)a;
    /* published by the maps' sequentially consistent put-back below */
    atomic_store_explicit(&sp->gone_n, (uint32_t)(b - a), RLX);
  }
  gone_stretches++;
}

/* Map word w of every stripe and order: its spans out, the stretches among
 * them decommitted, then all back. */
static void decommit_word(size_t w) {
  static uint64_t x[MAX_STRIPES][POOL_ORDERS]; /* under purge_lock, off a program thread's stack */
  static piece_t pc[64];
  unsigned np = 0, st = rill_arena.stripes;
  size_t slots = 0; /* a first look, without taking: a word whose spans are out already, or
                     * still hold pages, costs every pass a few loads, not 2 RMWs per map */
  for (unsigned s = 0; s < st; s++)
    for (unsigned o = 0; o < POOL_ORDERS; o++)
      for (uint64_t m = atomic_load_explicit(map_bits(&maps[s][o], w), ACQ); m; m &= m - 1) {
        const span_t *sp = span_of_index(w * 64 + (unsigned)__builtin_ctzll(m));
        if (gone_candidate(sp)) slots += (size_t)1 << o;
      }
  if (slots < DECOMMIT_MIN) return;
  for (unsigned s = 0; s < st; s++)
    for (unsigned o = 0; o < POOL_ORDERS; o++) {
      x[s][o] = atomic_exchange_explicit(map_bits(&maps[s][o], w), 0, SEQ);
      for (uint64_t m = x[s][o]; m && np < 64; m &= m - 1) {
        size_t i = w * 64 + (unsigned)__builtin_ctzll(m);
        span_t *sp = span_of_index(i);
        if (!gone_candidate(sp)) continue; /* a stretch stops at it */
        unsigned k = np++;                 /* insertion by address */
        for (; k && pc[k - 1].first > i; k--) pc[k] = pc[k - 1];
        pc[k] = (piece_t){sp, i, (size_t)1 << o};
      }
    }
  for (unsigned i = 0; i < np;) {
    unsigned j = i + 1;
    while (j < np && pc[j].first == pc[j - 1].first + pc[j - 1].n) j++;
    decommit_stretch(pc, i, j);
    i = j;
  }
  for (unsigned s = 0; s < st; s++)
    for (unsigned o = 0; o < POOL_ORDERS; o++)
      if (x[s][o]) map_put_bits(&maps[s][o], w, x[s][o]);
}

/* The words that hold pooled spans, each looked at once. Caller holds
 * purge_lock. */
static void decommit_pass(void) {
  size_t nw = map_words();
  for (size_t sw = 0; sw * 64 < nw; sw++)
    for (uint64_t marks = maps_marks(sw); marks; marks &= marks - 1)
      decommit_word(sw * 64 + (unsigned)__builtin_ctzll(marks));
}

/* A span just taken from the pool whose stretch was decommitted: the whole
 * stretch writable again, under the lock that keeps passes out, so no pass
 * decommits a stretch while its spans are being marked back. False if the
 * kernel refused the commit. */
static bool pool_recommit(span_t *sp) {
  bool ok = true;
  spin_lock(&purge_lock);
  uint32_t n = atomic_load_explicit(&sp->gone_n, RLX);
  if (n) {
    size_t first = sp->gone_first;
    ok = arena_commit(first, n);
    for (size_t i = first; ok && i < first + n;) {
      span_t *p = span_of_index(i);
      atomic_store_explicit(&p->gone_n, 0, RLX);
      i += span_nslots(p);
    }
    if (ok) gone_stretches--;
  }
  spin_unlock(&purge_lock);
  return ok;
}

/* A span just taken from map mp, writable (RILL_COMMIT: its stretch made
 * so again); if the kernel refused, it goes back to mp and this is false. */
static bool pool_writable(map_t *mp, span_t *sp) {
  if (likely(!rill_opt.commit_demand) || !atomic_load_explicit(&sp->gone_n, RLX) ||
      pool_recommit(sp))
    return true;
  map_push(mp, sp);
  return false;
}

/* batch_flush merges neighbours in address order; the walk below goes down */
static void batch_flush_down(batch_t *b, map_t *mp) {
  for (unsigned i = 0, j = b->n; i + 1 < j; i++, j--) {
    span_t *t = b->sp[i];
    b->sp[i] = b->sp[j - 1];
    b->sp[j - 1] = t;
  }
  batch_flush(b, mp);
}

static inline uint64_t top_bit(uint64_t x) {
  return (uint64_t)1 << (63 - __builtin_clzll(x));
}

/* Purges pooled spans that entered the pool at or before `cutoff` ms, the
 * highest-addressed first (the pool hands out the lowest first, so those
 * wait longest), until `budget` slots have gone; *left counts those looked
 * at that still hold pages, too young to go. Returns the bytes purged. */
static size_t maps_purge(uint32_t cutoff, bool lazy, size_t budget, size_t *left) {
  batch_t b = {.n = 0, .bytes = 0, .lazy = lazy};
  size_t nw = map_words(), got = 0;
  *left = 0;
  for (unsigned o = 0; o < POOL_ORDERS && got < budget; o++)
    for (unsigned s = 0; s < rill_arena.stripes && got < budget; s++) {
      map_t *mp = &maps[s][o];
      for (size_t sw = (nw + 63) / 64; sw-- > 0 && got < budget;) {
        uint64_t marks = atomic_load_explicit(map_sum(mp, sw), RLX);
        for (; marks && got < budget; marks &= ~top_bit(marks)) {
          size_t w = sw * 64 + (unsigned)(63 - __builtin_clzll(marks));
          /* take the word's spans; those not due go back at once */
          uint64_t x = atomic_exchange_explicit(map_bits(mp, w), 0, SEQ), keep = 0;
          for (; x; x &= ~top_bit(x)) {
            span_t *sp = span_of_index(w * 64 + (unsigned)(63 - __builtin_clzll(x)));
            bool pages = pooled_pages(sp);
            if (got >= budget || !pages || (int32_t)(sp->stamp - cutoff) > 0) {
              if (pages) ++*left;
              keep |= top_bit(x);
            } else {
              got += (size_t)1 << o;
              b.sp[b.n++] = sp;
              if (b.n == BATCH) batch_flush_down(&b, mp);
            }
          }
          if (keep) map_put_bits(mp, w, keep);
        }
      }
      batch_flush_down(&b, mp);
    }
  return b.bytes;
}

/* ---- whole huge pages of pooled spans (RILL_HUGEPAGES) -------------------
 * A timed pass trims what it gives back to whole 2 MiB pages, and maps_purge
 * merges neighbours of one order and stripe only: a huge page whose pooled
 * spans are of several orders (a burst of small objects leaves 16-128 KiB
 * spans side by side) was never whole to any of them, and two threads that
 * freed 512 MiB of small objects still held 552 MiB twelve seconds later.
 * So a pass also looks at the 2 MiB regions themselves, across every map:
 * a region whose slots all lie in pooled spans that are due (or purged
 * already) goes back in one call. Regions are counted from the 2 MiB
 * boundaries, not from the arena's base, which is only slot aligned (from
 * the base, a region lies across two huge pages and splits both). A span
 * of up to 8 slots may straddle a region's edge: it covers the region's
 * part of it, and stays unpurged, since its pages outside stay. */
#define REGION     (HUGE_PAGE >> SLOT_SHIFT) /* slots */
#define REGION_MAX 64                        /* regions a pass on a program's thread gives back */

/* The map words of every stripe and order that may hold spans reaching
 * into region [rs, rs + REGION): from 8 slots before it (the longest
 * pooled span) to its end, at most four words. */
typedef struct {
  size_t w0;
  unsigned nw;
  uint64_t x[MAX_STRIPES][POOL_ORDERS][4];
} region_t;

/* Whether region rs is covered by the spans in rg.x, all due or purged, and
 * some of those inside it still hold pages. Coverage comes from the bits
 * alone, so a region in use in part costs no span entry's cache line; then
 * relaxed loads of stamp and fresh (on a look without taking, the spans may
 * be taken meanwhile: the take looks again). */
static bool region_due(const region_t *rg, size_t rs, uint32_t cutoff) {
  uint64_t cov[REGION / 64] = {0};
  for (unsigned s = 0; s < rill_arena.stripes; s++)
    for (unsigned o = 0; o < POOL_ORDERS; o++)
      for (unsigned k = 0; k < rg->nw; k++)
        for (uint64_t m = rg->x[s][o][k]; m; m &= m - 1) {
          size_t i = (rg->w0 + k) * 64 + (unsigned)__builtin_ctzll(m), e = i + ((size_t)1 << o);
          for (size_t j = i > rs ? i : rs; j < e && j < rs + REGION; j++)
            cov[(j - rs) / 64] |= BIT(j - rs);
        }
  for (unsigned k = 0; k < REGION / 64; k++)
    if (~cov[k]) return false;
  bool pages = false;
  for (unsigned s = 0; s < rill_arena.stripes; s++)
    for (unsigned o = 0; o < POOL_ORDERS; o++)
      for (unsigned k = 0; k < rg->nw; k++)
        for (uint64_t m = rg->x[s][o][k]; m; m &= m - 1) {
          size_t i = (rg->w0 + k) * 64 + (unsigned)__builtin_ctzll(m), e = i + ((size_t)1 << o);
          if (e <= rs || i >= rs + REGION) continue;
          const span_t *sp = span_of_index(i);
          if (pooled_gone(sp) || __atomic_load_n(&sp->fresh, __ATOMIC_RELAXED)) continue;
          uint32_t st = __atomic_load_n(&sp->stamp, __ATOMIC_RELAXED);
          if (st == UINT32_MAX || (int32_t)(st - cutoff) > 0) return false; /* refused, young */
          /* a straddler's pages alone would be purged again every pass */
          pages |= i >= rs && e <= rs + REGION;
        }
  return pages;
}

/* Region rs given back if its spans, taken out of the maps, still cover it.
 * Returns the bytes purged. */
static size_t region_purge(region_t *rg, size_t rs, uint32_t cutoff) {
  size_t bytes = 0;
  for (unsigned s = 0; s < rill_arena.stripes; s++)
    for (unsigned o = 0; o < POOL_ORDERS; o++)
      for (unsigned k = 0; k < rg->nw; k++)
        rg->x[s][o][k] = rg->x[s][o][k]
                             ? atomic_exchange_explicit(map_bits(&maps[s][o], rg->w0 + k), 0, SEQ)
                             : 0;
  if (region_due(rg, rs, cutoff)) {
    uintptr_t a = rill_arena.base + (rs << SLOT_SHIFT), from;
    bool refused;
    bytes = pool_purge_range(a, a + HUGE_PAGE, true, &from, &refused);
    for (unsigned s = 0; s < rill_arena.stripes; s++)
      for (unsigned o = 0; o < POOL_ORDERS; o++)
        for (unsigned k = 0; k < rg->nw; k++)
          for (uint64_t m = rg->x[s][o][k]; m; m &= m - 1) {
            size_t i = (rg->w0 + k) * 64 + (unsigned)__builtin_ctzll(m);
            if (i < rs || i + ((size_t)1 << o) > rs + REGION) continue; /* straddles, or outside */
            span_purged(span_of_index(i), true, refused);
          }
  }
  for (unsigned s = 0; s < rill_arena.stripes; s++)
    for (unsigned o = 0; o < POOL_ORDERS; o++)
      for (unsigned k = 0; k < rg->nw; k++)
        if (rg->x[s][o][k]) map_put_bits(&maps[s][o], rg->w0 + k, rg->x[s][o][k]);
  return bytes;
}

/* Every region of the pool's maps that is whole and due, until `until` ms
 * (0: REGION_MAX regions); *cut if it stopped there, maybe with more to go.
 * Caller holds purge_lock. */
static size_t regions_purge(uint32_t cutoff, uint64_t until, bool *cut) {
  *cut = false;
  if (!rill_opt.hugepages) return 0;
  uintptr_t base = rill_arena.base;
  size_t first = (((base + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1)) - base) >> SLOT_SHIFT;
  size_t nw = map_words(), bytes = 0, done = 0, usw = SIZE_MAX;
  uint64_t marks = 0; /* the maps' summary words at usw, or'ed */
  /* 8 KiB with 64 stripes: not on the stack of a program's thread, which
   * may be 16 KiB all told (purge_lock keeps passes apart) */
  static region_t rg;
  for (size_t rs = first; rs + REGION <= nw * 64; rs += REGION) {
    rg.w0 = (rs >= 8 ? rs - 8 : 0) / 64;
    rg.nw = (unsigned)((rs + REGION - 1) / 64 - rg.w0 + 1);
    bool any = false; /* a first look at the summaries: most of a big arena has no pooled span */
    for (size_t w = rg.w0; w < rg.w0 + rg.nw; w++) {
      if (w / 64 != usw) {
        usw = w / 64;
        marks = maps_marks(usw);
      }
      any |= (marks & BIT(w)) != 0;
    }
    uintptr_t a = base + (rs << SLOT_SHIFT);
    if (!any || !arena_huge(a, a + HUGE_PAGE)) continue;
    any = false;
    for (unsigned s = 0; s < rill_arena.stripes; s++)
      for (unsigned o = 0; o < POOL_ORDERS; o++)
        for (unsigned k = 0; k < rg.nw; k++)
          any |= (rg.x[s][o][k] = atomic_load_explicit(map_bits(&maps[s][o], rg.w0 + k), ACQ)) != 0;
    if (!any || !region_due(&rg, rs, cutoff)) continue;
    size_t n = region_purge(&rg, rs, cutoff);
    bytes += n;
    if (n && (until ? ++done % 16 == 0 && os_now_ms() >= until : ++done >= REGION_MAX)) {
      *cut = true;
      break;
    }
  }
  return bytes;
}

/* A pass: pooled spans and free runs freed at or before `cutoff` ms. */
static _Atomic bool pass_cut; /* the purger's last pass ran out of time (pool_purge_more) */
static size_t purge_pass(uint32_t cutoff, bool lazy, uint64_t until, size_t *left) {
  size_t bytes = maps_purge(cutoff, lazy, SIZE_MAX, left), runs_left;
  bool cut = false, runs_cut;
  if (lazy) bytes += regions_purge(cutoff, until, &cut);
  *left += cut; /* due regions wait: the purger must not settle yet */
  if (rill_opt.commit_demand) decommit_pass();
  bytes += runs_purge(cutoff, lazy, until, &runs_left, &runs_cut);
  if (until) atomic_store_explicit(&pass_cut, cut || runs_cut, RLX); /* the purger's only */
  *left += runs_left;
  atomic_fetch_add_explicit(&purged_bytes, bytes, RLX);
  return bytes;
}

/* One timed pass if one is due (every quarter delay) and no other pass runs.
 * Returns the spans left holding pages, or 1 when no pass ran. A pass on a
 * program's thread (pool_tick) gives back one batch of free runs per
 * shard, so no malloc waits for more than that; the purger's (background)
 * goes on for PASS_MS, and if that ran out the purger takes the next pass
 * a breath later (pool_purge_more), not a quarter delay: one batch a
 * quarter delay gave back 32 MiB/s of big buffers' runs, and 2 GiB freed
 * at once took a minute to leave RSS. The time limit keeps what waits for
 * purge_lock (fork, rill_collect, a recommit) waiting no longer than that:
 * those 2 GiB are 21,000 madvise calls, half a second. */
static size_t timed_pass(uint64_t now, uint64_t until) {
  size_t left = 1;
  if (!spin_trylock(&purge_lock)) return left; /* another pass runs: it decides */
  purge_pass((uint32_t)(now - rill_opt.purge_delay), true, until, &left);
  spin_unlock(&purge_lock);
  return left;
}
size_t pool_purge_timed(uint64_t now, bool background) {
  uint64_t due = atomic_load_explicit(&purge_due, RLX);
  if (now < due) return 1;
  uint32_t d = rill_opt.purge_delay, step = d / 4 > 10 ? d / 4 : 10;
  if (!atomic_compare_exchange_strong_explicit(&purge_due, &due, now + step, RLX, RLX)) return 1;
  return timed_pass(now, background ? now + PASS_MS : 0);
}

/* The purger: did its last pass run out of time with runs still due? */
bool pool_purge_cut(void) {
  return atomic_load_explicit(&pass_cut, RLX);
}

/* The purger, after a pass that ran out of time: the next one now. */
size_t pool_purge_more(void) {
  uint64_t now = os_now_ms();
  return timed_pass(now, now + PASS_MS);
}

/* The growth purge: before a thread takes never-used memory, free runs that
 * have sat unused an eighth of the delay give their pages back, not a whole delay
 * later. Memory a program freed and then did not want while it grew added
 * to its peak: a redis server whose lists were popped (8 KiB listpacks,
 * free runs) and whose sets then grew from fresh spans peaked at 1.3x
 * mimalloc's RSS, the popped lists still resident. Handing those runs to
 * the small classes instead saved the faults too, but cut runs that big
 * blocks took again later (Lua rebuilding a table's 8 MiB node array every
 * round: peak RSS 1.06x); purged, a run stays whole. A program that does
 * not grow keeps its free runs the whole delay. At most one look per
 * sixteenth of the delay (the runs' bins are walked under their locks).
 * An eighth of the delay, not a quarter: redis's popped lists went on
 * merging into their free runs for a while, which kept the runs young, and
 * the look that found them a quarter old came after the sets and hashes had
 * grown past them half the time (peak RSS 65 or 69-71 MiB from run to run;
 * 64.9 with an eighth, mimalloc 62). */
static _Atomic uint64_t stale_due;
void pool_purge_stale(void) {
  uint32_t d = rill_opt.purge_delay;
  uint64_t now = os_now_ms(), due = atomic_load_explicit(&stale_due, RLX);
  if (d < 16 || now < due) return; /* with a short delay the timed passes do as well */
  if (!atomic_compare_exchange_strong_explicit(&stale_due, &due, now + d / 16, RLX, RLX)) return;
  if (!spin_trylock(&purge_lock)) return; /* a pass is running */
  size_t bytes = runs_purge_stale((uint32_t)(now - d / 8));
  spin_unlock(&purge_lock);
  atomic_fetch_add_explicit(&purged_bytes, bytes, RLX);
}

/* The growth swap (pool_grew): each time the program faults memory in
 * (spans and runs never used, or given back before), as much free memory
 * that has sat unused a sixty-fourth of the delay gives its pages back:
 * pooled empty spans first, the highest-addressed (the pool hands out the
 * lowest first, so those would wait longest), then free runs, the biggest
 * first, the last one cut to what is owed (a run owes by its slots that
 * hold pages, not its length). A program that grows while
 * memory it freed sits resident where the growth cannot use it (spans of
 * another size, pieces no run fits in) then holds its footprint level
 * instead of adding the two. python3 (bench/real/objects.py) frees a round's
 * objects and the JSON text's pieces (runs of hundreds of KiB) and builds
 * the next round's objects, part of them in fresh spans, while 6 MiB of
 * pooled spans and 5 MiB of free runs waited for the delay: peak RSS 90.1
 * -> 85.4 MiB (mimalloc 81.9); Lua 95.6 -> 89.8 (mimalloc 89.1). The growth
 * purge (above) gives back old free runs whatever the growth; this gives
 * back younger memory, as much as the growth. Pages faulted in are summed
 * until they make SWAP_MIN slots: one look per MiB at most, and a page
 * given back per page faulted in at most. Memory the swap gave back counts
 * as growth when it is faulted in again, so a program that keeps reusing
 * such memory keeps giving back the next (that is most of the gain: counting
 * never-used memory alone, or only growth past the footprint's highest mark,
 * left python3 and Lua where they were). The age is what keeps that from
 * becoming a treadmill: with none, the sizes benchmark (two threads each
 * allocating and freeing 16 MiB a cycle) ran 1.4-3.6x the time, each cycle
 * faulting in what the last had just given back. */
#define SWAP_MIN 64 /* slots: 1 MiB */
#define SWAP_AGE 64 /* of the purge delay: what was freed since is left alone */
static _Atomic size_t swap_debt;
static _Atomic uint32_t grown; /* slots faulted in for small spans, ever (mod 2^32) */
uint32_t pool_grown(void) {
  return atomic_load_explicit(&grown, RLX);
}
uint32_t pool_swap_cutoff(void) {
  return (uint32_t)os_now_ms() - rill_opt.purge_delay / SWAP_AGE;
}
/* pool_grew for a small class's span: the count run_give weighs free runs
 * against. */
void pool_grew_small(size_t slots) {
  atomic_fetch_add_explicit(&grown, (uint32_t)slots, RLX);
  pool_grew(slots);
}
void pool_grew(size_t slots) {
  if (!slots) return;
  size_t d = atomic_fetch_add_explicit(&swap_debt, slots, RLX) + slots;
  if (d < SWAP_MIN) return;
  d = atomic_exchange_explicit(&swap_debt, 0, RLX);
  if (!d) return;
  if (!spin_trylock(&purge_lock)) { /* a pass is running: the debt waits for the next look */
    atomic_fetch_add_explicit(&swap_debt, d, RLX);
    return;
  }
  uint32_t cutoff = pool_swap_cutoff();
  size_t left, bytes = maps_purge(cutoff, true, d, &left), got = bytes >> SLOT_SHIFT;
  if (got < d) bytes += runs_purge_some(d - got, cutoff);
  spin_unlock(&purge_lock);
  atomic_fetch_add_explicit(&purged_bytes, bytes, RLX);
}

/* Changes with every timed pass: heaps sweep their lists on that beat. */
uint64_t pool_epoch(void) {
  return atomic_load_explicit(&purge_due, RLX);
}

/* ---- giving pooled spans' entries back (above, "entries went back") ----- */
/* A pooled span's head entry, read by a pass that holds the span: it holds
 * no pages (its entry gone already, or zero and not decommitted). */
static bool pooled_clean(const span_t *sp) {
  return pooled_gone(sp) || (__atomic_load_n(&sp->fresh, __ATOMIC_RELAXED) &&
                             __atomic_load_n(&sp->stamp, __ATOMIC_RELAXED) == UINT32_MAX &&
                             !atomic_load_explicit(&sp->gone_n, RLX));
}

/* Of map word w's slots, the pages of entries (`per` slots each) that may
 * go back, as a mask of their slots: every slot lies in one of the pooled
 * spans x (head bits by stripe and order, all heads within w), every head
 * in the page holds no pages, and one of them has its entry still. A span
 * reaching in from the word below is not seen, and its slots count as not
 * pooled. */
static uint64_t entry_pages(size_t w, const uint64_t (*x)[POOL_ORDERS], unsigned per) {
  uint64_t cov = 0, heads = 0, dirty = 0, gone = 0;
  for (unsigned s = 0; s < rill_arena.stripes; s++)
    for (unsigned o = 0; o < POOL_ORDERS; o++)
      for (uint64_t m = x[s][o]; m; m &= m - 1) {
        unsigned k = (unsigned)__builtin_ctzll(m), n = 1u << o;
        cov |= (n >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1) << k;
        heads |= BIT(k);
        const span_t *sp = span_of_index(w * 64 + k);
        if (!pooled_clean(sp))
          dirty |= BIT(k);
        else if (pooled_gone(sp))
          gone |= BIT(k);
      }
  uint64_t out = 0;
  for (unsigned p = 0; p < 64; p += per) {
    uint64_t pm = (per == 64 ? ~(uint64_t)0 : ((uint64_t)1 << per) - 1) << p;
    if ((cov & pm) == pm && !(dirty & pm) && (heads & ~gone & pm)) out |= pm;
  }
  return out;
}

/* Map word w: its pooled spans taken out of every map while the pages of
 * entries that only they cover go back, then put back. A first look
 * without taking: most words' entries went back already, or hold a span
 * with pages. */
static void entries_word(size_t w, unsigned per) {
  static uint64_t x[MAX_STRIPES][POOL_ORDERS]; /* under purge_lock, off a thread's stack */
  bool any = false;
  for (unsigned s = 0; s < rill_arena.stripes; s++)
    for (unsigned o = 0; o < POOL_ORDERS; o++)
      any |= (x[s][o] = atomic_load_explicit(map_bits(&maps[s][o], w), ACQ)) != 0;
  if (!any || !entry_pages(w, (const uint64_t(*)[POOL_ORDERS])x, per)) return;
  for (unsigned s = 0; s < rill_arena.stripes; s++)
    for (unsigned o = 0; o < POOL_ORDERS; o++)
      if (x[s][o]) x[s][o] = atomic_exchange_explicit(map_bits(&maps[s][o], w), 0, SEQ);
  /* what the take holds now: a span popped since the look leaves its slots
   * uncovered, and none of these can be popped or purged meanwhile */
  uint64_t pages = entry_pages(w, (const uint64_t(*)[POOL_ORDERS])x, per);
  while (pages) { /* each stretch of pages in one call */
    unsigned a = (unsigned)__builtin_ctzll(pages);
    uint64_t holes = ~(pages >> a);
    unsigned b = a + (holes ? (unsigned)__builtin_ctzll(holes) : 64 - a);
    arena_entries_release(w * 64 + a, w * 64 + b);
    pages = b < 64 ? pages & (~(uint64_t)0 << b) : 0;
  }
  for (unsigned s = 0; s < rill_arena.stripes; s++)
    for (unsigned o = 0; o < POOL_ORDERS; o++)
      if (x[s][o]) map_put_bits(&maps[s][o], w, x[s][o]);
}

/* Every word of the maps, under purge_lock. Not with RILL_COMMIT (a
 * decommitted stretch is marked in its spans' entries), nor where a page of
 * entries covers more slots than a map word (pages over 16 KiB). Free runs'
 * inner entries go in every mode (runs.c: decommitted runs are marked in
 * bitmaps, not entries). */
static void entries_release(void) {
  runs_entries_release(); /* and free runs' inner slots' */
  unsigned per = (unsigned)(rill_arena.page / sizeof(span_t));
  if (rill_opt.commit_demand || !per || per > 64 || 64 % per) return;
  size_t nw = map_words();
  for (size_t sw = 0; sw * 64 < nw; sw++)
    for (uint64_t marks = maps_marks(sw); marks; marks &= marks - 1)
      entries_word(sw * 64 + (unsigned)__builtin_ctzll(marks), per);
}

/* The purger, after each pass: a program whose pool never settles (spans
 * keep coming with pages) gives its long-purged spans' entries back too,
 * once every four delays (100 ms at least). Only the purger calls it. */
void pool_entries_tick(uint64_t now) {
  static uint64_t next;
  if (now < next) return;
  uint64_t every = 4 * (uint64_t)rill_opt.purge_delay;
  next = now + (every > 100 ? every : 100);
  if (!spin_trylock(&purge_lock)) return;
  entries_release();
  spin_unlock(&purge_lock);
}

/* ---- huge pages split once the program is idle (RILL_HUGEPAGES) ----------
 * Timed passes give back whole huge pages only, so a 2 MiB page that some
 * live span or run shares with pooled spans stays resident whole while
 * they wait: eight idle workers of a pool (bench_idle -t 8 -k) kept 21 huge
 * pages, 43 MiB, of which the live part was a few spans each. Once the
 * pool settles (the purger found nothing younger than the delay to wait
 * for) the program has been idle a delay, and that is the reason to split
 * them: what is due goes back page by page, as rill_collect's pass does.
 * The kernel may gather them into a huge page again (khugepaged) once the
 * program fills them. Caller holds purge_lock. */
static void settle_split(uint32_t cutoff) {
  size_t left, runs_left;
  bool cut;
  size_t bytes = maps_purge(cutoff, false, SIZE_MAX, &left);
  bytes += runs_purge(cutoff, false, 0, &runs_left, &cut);
  atomic_fetch_add_explicit(&purged_bytes, bytes, RLX);
}

/* ---- the background purger's view (purger.c) ---------------------------- */
/* `waiting` is 1 while some pooled span may still hold pages. pool_put
 * raises it; once a purger watches, the 0 -> 1 change wakes it: one futex
 * call per idle -> busy transition, not one per span. */
static _Atomic int watched;
static _Atomic uint32_t waiting;

/* Before the purger thread exists (`on`), so that its first look finds the
 * flag up: raised after, a purger already asleep on 0 missed it, and every
 * later pool_put found the flag up and woke no one. Off if it could not start. */
void pool_watch(bool on) {
  if (on) atomic_store_explicit(&waiting, 1, RLX); /* look once: spans may be pooled already */
  atomic_store_explicit(&watched, on, memory_order_seq_cst);
}

bool pool_waiting(void) {
  return atomic_load_explicit(&waiting, RLX) != 0;
}

void pool_pages_arrived(void) {
  bool w = atomic_load_explicit(&watched, RLX);
  /* pairs with pool_settle's fence: it sees this span, or we see 0 */
  if (w) atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&waiting, RLX)) return;
  if (atomic_exchange_explicit(&waiting, 1, memory_order_seq_cst) == 0 && w) os_wake(&waiting);
}

/* Blocks the purger until some pooled span holds pages. */
void pool_wait_pages(void) {
  while (!atomic_load_explicit(&waiting, ACQ)) os_wait(&waiting, 0);
}

/* After a pass that left nothing: lower the flag, then look once more, so a
 * span pooled meanwhile is not missed (it raises the flag again). */
void pool_settle(void) {
  atomic_store_explicit(&waiting, 0, memory_order_seq_cst);
  atomic_thread_fence(memory_order_seq_cst);
  size_t left;
  spin_lock(&purge_lock);
  uint64_t now = os_now_ms();
  uint32_t cutoff = (uint32_t)(now - rill_opt.purge_delay);
  purge_pass(cutoff, true, now + PASS_MS, &left);
  if (!left) { /* settled: nothing freed in the last delay holds pages */
    if (rill_opt.hugepages) settle_split(cutoff);
    entries_release(); /* and the pooled spans' entries go */
  }
  spin_unlock(&purge_lock);
  if (left) atomic_store_explicit(&waiting, 1, RLX);
}

void pool_tick(uint64_t now) {
  if (now >= atomic_load_explicit(&purge_due, RLX)) pool_purge_timed(now, false);
}

void pool_fork_prepare(void) {
  fork_hold(&purge_lock);
  runs_fork_prepare();
}

uint64_t pool_purged_bytes(void) {
  return atomic_load_explicit(&purged_bytes, RLX);
}

/* The stripe of the CPU the caller runs on (scalloc's span pool has one
 * stack per core, §3.3). With a stripe per heap instead (heap id mod CPUs),
 * two threads of a stripe that ran at once took and put spans on the same
 * bitmap words and counter: threadtest at 4 threads ran 4-9% slower (at 16,
 * 4-7%). Two threads on one CPU do not run at once. A thread
 * that moves finds the spans freed where it now runs, which are more likely
 * in that CPU's cache. */
static inline unsigned cpu_stripe(void) {
  return os_cpu(rill_arena.stripes);
}

/* A pooled span of 2^order slots: the caller's stripe first (locality,
 * scalloc Listing 1 line 31), then any stripe. */
static span_t *pool_pop(unsigned order, unsigned stripe) {
  span_t *sp = map_pop(&maps[stripe][order]);
  for (unsigned i = 1; !sp && i < rill_arena.stripes; i++)
    sp = map_pop(&maps[(stripe + i) % rill_arena.stripes][order]);
  return sp ? pooled_restore(sp, order) : NULL;
}

/* A never-used span for a heap, cut from the heap's own chunk of the arena.
 * Taken straight from the top of the arena, the 16 KiB spans of two threads
 * alternated in the address space, and knary at 2 threads, which builds and
 * walks each thread's own trees, ran 1.19x slower than with 64 KiB spans;
 * with 256 KiB chunks per heap, 1.09x (shorter runs: the difference is in
 * first touch; 100 repetitions ran as fast). What is left of a chunk too
 * small for the span asked for goes to the pool as never-used spans. */
static span_t *chunk_take(chunk_t *ck, unsigned order) {
  size_t n = (size_t)1 << order;
  if (ck->end - ck->next < n) {
    size_t piece = (size_t)1 << rill_arena.min_order;
    for (; ck->next < ck->end; ck->next += (uint32_t)piece)
      pool_put(arena_span(ck->next, rill_arena.min_order));
    /* RILL_COMMIT makes each chunk writable with an mprotect, which holds
     * the memory map against every thread's page faults: 1 MiB chunks
     * there (knary at 16 threads made 177 calls with 256 KiB ones) */
    size_t len = (size_t)1 << (rill_opt.commit_demand ? CHUNK_ORDER_DEMAND : CHUNK_ORDER);
    size_t first = arena_take(len);
    if (!first) return NULL;
    if (!arena_commit(first, len) || !arena_grown(first, len)) {
      /* strict overcommit or RLIMIT_MEMLOCK refused: back to the arena's top,
       * and without its commit charge (the next take commits it again) */
      if (rill_opt.commit_demand) (void)arena_decommit(first, len);
      arena_untake(first, len);
      return NULL;
    }
    ck->next = (uint32_t)first;
    ck->end = (uint32_t)(first + len);
  }
  span_t *sp = arena_span(ck->next, order);
  ck->next += (uint32_t)n;
  return sp;
}

/* A pooled span of 2^order slots (the caller's stripe first), or NULL. */
span_t *pool_take(unsigned order) {
  unsigned stripe = cpu_stripe();
  span_t *sp = pool_pop(order, stripe);
  if (!sp) return NULL;
  if (!pool_writable(&maps[stripe][order], sp)) return NULL; /* the caller fails with ENOMEM */
  pool_tick(os_now_ms());
  return sp;
}

/* A never-used span of 2^order slots, from the heap's chunk (every pool
 * order is below CHUNK_ORDER). NULL when the arena is spent. */
_Static_assert(POOL_ORDERS <= CHUNK_ORDER, "pool spans are cut from heap chunks");
span_t *pool_fresh(unsigned order, chunk_t *ck) {
  span_t *sp = chunk_take(ck, order);
  pool_tick(os_now_ms());
  return sp;
}

/* A small class's span of 2^order slots when the pool has none of the
 * order: a run that holds pages (run_give), else one made of pooled spans
 * of other orders that hold pages (pool_spill), else NULL and the caller
 * faults in never-used memory. Memory freed by large objects or by other
 * orders' spans otherwise served only its own kind until the growth swap
 * gave it back, while the program faulted in as much again (design.md,
 * "Freed memory serves the next kind of block"). The span is a run: it
 * goes back to the runs when it empties (pool_put), and merges there. */
span_t *pool_from_runs(unsigned order, uint32_t home) {
  /* Every call looks. A look that found nothing used to hold the next off
   * for a MiB of growth, for knary, whose looks among young free runs had
   * failed at every span (5% of its time); it now makes 980 looks a run
   * that find no warm run at once. Each call the wait turned away took a
   * never-used span, which the growth swap then gave back as much for
   * (bench_phases: 30% more faults). */
  size_t n = (size_t)1 << order;
  uint32_t cutoff = pool_swap_cutoff();
  span_t *sp = run_give(n, home, cutoff);
  if (!sp && pool_spill(n, home)) sp = run_give(n, home, cutoff);
  if (!sp) return NULL;
  sp->order = (uint8_t)order; /* the stash files it by its order */
  return sp;
}

#define SPILL_MIN 256 /* slots: 4 MiB */

/* Spans taken off the maps by slot, for pool_spill: the span starting at
 * slot i, if it is pooled and no one takes it first (a pop, a purge pass). */
static span_t *map_take_at(size_t i) {
  size_t w = i / 64;
  for (unsigned s = 0; s < rill_arena.stripes; s++)
    for (unsigned o = 0; o < POOL_ORDERS; o++) {
      map_t *mp = &maps[s][o];
      if (!(atomic_load_explicit(map_bits(mp, w), RLX) & BIT(i))) continue;
      if (!(map_clear(mp, w, BIT(i)) & BIT(i))) return NULL;
      span_t *sp = pooled_restore(span_of_index(i), o);
      return pool_writable(mp, sp) ? sp : NULL;
    }
  return NULL;
}

/* Which slots of word w pooled spans cover, in every map: a span's bit is
 * its first slot, so an order-o span covers that bit and the 2^o - 1 above
 * it, some of them in the next word (*carry, in and out). */
static uint64_t map_cover(size_t w, uint64_t *carry) {
  uint64_t c = *carry, next = 0;
  for (unsigned s = 0; s < rill_arena.stripes; s++)
    for (unsigned o = 0; o < POOL_ORDERS; o++) {
      uint64_t x = atomic_load_explicit(map_bits(&maps[s][o], w), RLX);
      if (!x) continue;
      c |= x;
      for (unsigned k = 1; k < 1u << o; k++) {
        c |= x << k;
        next |= x >> (64 - k);
      }
    }
  *carry = next;
  return c;
}

/* Whether the pooled span at slot i holds pages (and is not decommitted),
 * and its slots (*n). Read without taking it: a guess, which map_take_at
 * settles. */
static bool pooled_resident(size_t i, size_t *n) {
  const span_t *sp = span_of_index(i);
  uint32_t k = span_nslots(sp);
  *n = k ? k : 1;
  return k && __atomic_load_n(&sp->stamp, __ATOMIC_RELAXED) != UINT32_MAX &&
         !atomic_load_explicit(&sp->gone_n, RLX);
}

/* Slots first .. end - 1 of pooled spans, a stretch: its parts that hold
 * pages go to the runs, from the low end up to `most` slots, each if with
 * the free runs beside it it makes `want` slots (and is half of it at
 * least, so a scattered pool costs no lock per piece). Spans without pages stay:
 * they fault in like never-used memory, so the small classes keep them. */
static size_t spill_stretch(size_t first, size_t end, size_t want, size_t most, uint32_t home) {
  size_t got = 0, n;
  if (end - first < want / 2) return 0; /* before reading its spans' entries */
  for (size_t a = first, b; a < end && got < most; a = b) {
    while (a < end && !pooled_resident(a, &n)) a += n;
    for (b = a; b < end && pooled_resident(b, &n);) b += n;
    if (b > end) b = end;
    /* the free runs beside are each shorter than want (the runs were
     * searched first), so a stretch under half of it is not worth their lock */
    if (b == a || b - a < want / 2 || (b - a < want && b - a + run_free_beside(a, b, home) < want))
      continue;
    for (size_t i = a; i < b && got < most;) {
      span_t *sp = map_take_at(i);
      if (!sp) { /* taken meanwhile */
        i++;
        continue;
      }
      i += span_nslots(sp);
      got += span_nslots(sp);
      run_adopt(sp, home);
    }
  }
  return got;
}

/* A spill that found no stretch for `want` is not tried again for as much
 * for an eighth of the purge delay, unless SPILL_MIN slots more have been
 * pooled since or a spill has found its stretch meanwhile: a pool of
 * scattered spans stays so for a while, and each look reads every map, but
 * spans pooled by the thousand since may lie in stretches. Timed alone, one
 * miss left a program that frees a phase's blocks and builds the next in
 * another order's spans faulting the next phases in afresh for 125 ms
 * (bench_phases: 171,000 faults a run against 147,000, medians of 14;
 * test_runs --spill-miss, under the tests' ten-minute delay, 4,339 against
 * 265). The pooled count alone was not enough: the spills it let through
 * drew the pool back under it, and the block held again (1,707). */
static _Atomic size_t spill_miss_want;
static _Atomic uint64_t spill_miss_until;
static _Atomic size_t spill_miss_have;

/* Stretches in the words w .. end - 1 of the maps, lowest first, until
 * `want` slots are spilled (*got); *at is the slot of the first stretch
 * spilled from. A span that begins below w is not seen there. */
static void spill_scan(size_t w, size_t end, size_t want, uint32_t home, size_t *got, size_t *at) {
  size_t first = 0;
  bool in = false; /* inside a stretch that began at `first` */
  uint64_t carry = 0;
  for (; w < end && *got < want; w++) {
    if (!in && !carry && w % 64 == 0 && w + 64 <= end) { /* 64 words no map marks */
      if (!maps_marks(w / 64)) {
        w += 63;
        continue;
      }
    }
    uint64_t c = map_cover(w, &carry), base = w * 64;
    for (unsigned pos = 0; pos < 64 && *got < want;) {
      uint64_t rest = (in ? ~c : c) >> pos; /* looking for the stretch's end, or a start */
      if (!rest) break;
      pos += (unsigned)__builtin_ctzll(rest);
      if (!in) {
        first = base + pos;
      } else {
        size_t n = spill_stretch(first, base + pos, want, want - *got, home);
        if (n && !*got) *at = first;
        *got += n;
      }
      in = !in;
    }
  }
  if (in && *got < want) {
    size_t n = spill_stretch(first, end * 64, want, want - *got, home);
    if (n && !*got) *at = first;
    *got += n;
  }
}

/* Where the last spill found its stretch: the next looks there first, so a
 * program whose pool holds scattered spans below a long stretch (sqlite3's
 * page cache growing in a pool its frees left in pieces) does not weigh
 * every piece at every run it cuts; the words below it are looked at last. */
static _Atomic size_t spill_hint;

/* Before runs cut never-used slots for a large object or a big class's
 * span: stretches of neighbouring pooled spans long enough to serve it
 * (with the free runs beside them) become free runs (run_adopt), lowest
 * address first, up to the slots wanted, so the runs can serve it from
 * memory already resident. Small classes' spans freed by the thousand
 * otherwise served only small classes until purged: sqlite3 freed 72 MiB of
 * them between two phases and faulted in as much again for its page cache's
 * 5 KiB blocks (peak RSS 250 MiB against glibc's 173). Only such stretches,
 * and no more of them than wanted: a span made a run is the runs' for good.
 * The spill before took twice the want in spans, the biggest order first, so
 * from a stretch of 16 and 32 KiB spans it took the 32 KiB ones and left
 * the others: python3, for a 5 MiB buffer of its JSON encoder, made 10 MiB
 * of spans runs of 32-128 KiB that nothing used, got the buffer from
 * never-used memory, and faulted in the 10 MiB again for its next round's
 * objects (peak RSS 96 MiB; 92 with this, mimalloc 84). Returns the slots
 * handed over. */
size_t pool_spill(size_t want, uint32_t home) {
  size_t have = 0;
  /* only a surplus: at least SPILL_MIN slots pooled, and four times the want
   * (a program's pool of a few spans is its small classes' next spans) */
  for (unsigned s = 0; s < rill_arena.stripes; s++)
    for (unsigned o = 0; o < POOL_ORDERS; o++) {
      int64_t n = atomic_load_explicit(&maps[s][o].n, RLX);
      have += n > 0 ? (size_t)n << o : 0;
    }
  if (have < SPILL_MIN || have < 4 * want) return 0;
  uint64_t now = os_now_ms();
  if (want >= atomic_load_explicit(&spill_miss_want, RLX) &&
      now < atomic_load_explicit(&spill_miss_until, RLX) &&
      have < atomic_load_explicit(&spill_miss_have, RLX) + SPILL_MIN)
    return 0;
  size_t got = 0, nw = map_words(), at = 0;
  size_t h = atomic_load_explicit(&spill_hint, RLX) / 64;
  if (h >= nw) h = 0;
  spill_scan(h, nw, want, home, &got, &at);
  if (got < want && h) spill_scan(0, h, want, home, &got, &at);
  if (got) {
    atomic_store_explicit(&spill_hint, at, RLX);
    atomic_store_explicit(&spill_miss_until, 0, RLX); /* the pool has stretches again */
  } else {
    atomic_store_explicit(&spill_miss_want, want, RLX);
    atomic_store_explicit(&spill_miss_have, have, RLX);
    atomic_store_explicit(&spill_miss_until, now + rill_opt.purge_delay / 8, RLX);
  }
  return got;
}

/* The arena is spent (under an address-space limit, or past 1 TiB): pooled
 * spans become free runs whether or not they hold pages, lowest address
 * first, up to twice the slots wanted. pool_spill leaves purged spans to the
 * small classes, since faulting them in costs the same as never-used memory;
 * with none of that left, a program that freed 676 MiB of 1,000-byte blocks
 * under a 768 MiB limit and waited out the purge delay got 12 MiB of 64 KiB
 * blocks. A decommitted stretch (RILL_COMMIT) is made writable first, as
 * pool_take does. Returns the slots handed over. */
size_t pool_spill_spent(size_t want, uint32_t home) {
  size_t got = 0;
  unsigned stripe = cpu_stripe();
  for (int o = POOL_ORDERS - 1; o >= 0 && got < 2 * want; o--) {
    span_t *sp;
    while (got < 2 * want && (sp = pool_pop((unsigned)o, stripe)) != NULL) {
      if (!pool_writable(&maps[stripe][o], sp)) return got;
      got += span_nslots(sp);
      run_adopt(sp, home);
    }
  }
  return got;
}

void pool_put(span_t *sp) {
  dbg_empty(sp, "span pooled with a block out");
  dbg_event(sp, EV_POOL);
  SPAN_SET(sp, bsize, 0); /* frees into a pooled span are now invalid */
  if (sp->run) {          /* a big class's span goes back to the runs it came from */
    atomic_store_explicit(&sp->attached, NULL, RLX);
    atomic_store_explicit(&sp->where, AT_NONE, RLX);
    run_put(sp);
    return;
  }
  uint64_t now = os_now_ms();
  bool pages = !sp->fresh; /* read before the push: sp is anyone's after it */
  __atomic_store_n(&sp->stamp, pages ? (uint32_t)now : UINT32_MAX, __ATOMIC_RELAXED);
  atomic_store_explicit(&sp->attached, NULL, RLX);
  atomic_store_explicit(&sp->where, AT_NONE, RLX);
  atomic_store_explicit(&sp->xf, XF_MAKE(ST_FREE, 0, 0), RLX);
  map_push(&maps[cpu_stripe()][sp->order], sp);
  if (pages) pool_pages_arrived();
  pool_tick(now);
}

/* The arena is spent and nothing fit: waits for a purge pass in flight, if
 * any, and says so. A pass takes the runs and pooled spans it purges out of
 * reach until their madvise returns, so a program that freed most of its
 * limit, its runs merged into one, got ENOMEM for a small block while a
 * purger at a 1 ms delay gave back 2.4 GiB (a hunt run of test_aslimit); the
 * caller looks again. A pass holds purge_lock throughout. */
bool pool_purge_wait(void) {
  if (spin_trylock(&purge_lock)) {
    spin_unlock(&purge_lock);
    return false;
  }
  spin_lock(&purge_lock);
  spin_unlock(&purge_lock);
  return true;
}

/* rill_collect and malloc_trim: every pooled span, now, with MADV_DONTNEED
 * so the pages leave RSS at once. Spans popped meanwhile are not seen. */
size_t pool_purge(void) {
  size_t left;
  spin_lock(&purge_lock);
  size_t n = purge_pass((uint32_t)os_now_ms() + 1, false, 0, &left); /* not lazy: all batches */
  entries_release();
  spin_unlock(&purge_lock);
  return n;
}
