/* span.c - spans and size classes: formatting a span for a class, cutting
 * never-used blocks, taking back remote frees, validating block addresses,
 * and the lock-free remote-free protocol with its state changes
 * (scalloc §3.4 and §5, Streamflow §3.1.1). */
#include "internal.h"

/* (n + 7) / 8 -> class, for n <= 1024 (generated from size_class's closed form) */
const uint8_t rill_small_cls[DIRECT_N] = {
    0,  0,  1,  2,  2,  3,  3,  4,  4,  5,  5,  6,  6,  7,  7,  8,  8,  9,  9,  9,  9,  10,
    10, 10, 10, 11, 11, 11, 11, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13, 14, 14, 14,
    14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15, 16, 16, 16, 16, 16, 16, 16, 16, 17,
    17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 18, 18, 18, 18, 18, 18, 18,
    18, 18, 18, 18, 18, 18, 18, 18, 18, 19, 19, 19, 19, 19, 19, 19, 19, 19, 19, 19, 19, 19,
    19, 19, 19, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20};

/* Eighths of a doubling -> class, for 1 KiB < n <= 256 KiB: index (k - 10) *
 * 8 + e, where 2^k < n <= 2^(k+1) and e is the eighth of the doubling n falls
 * in (size_class). From 1 to 32 KiB e = 0 is the 9/8 class, then 5/4, 6/4
 * (e = 2-3), 7/4, 8/4; above, two eighths to each quarter. */
const uint8_t rill_mid_cls[64] = {21, 22, 23, 23, 24, 24, 25, 25, 26, 27, 28, 28, 29, 29, 30, 30,
                                  31, 32, 33, 33, 34, 34, 35, 35, 36, 37, 38, 38, 39, 39, 40, 40,
                                  41, 42, 43, 43, 44, 44, 45, 45, 46, 46, 47, 47, 48, 48, 49, 49,
                                  50, 50, 51, 51, 52, 52, 53, 53, 54, 54, 55, 55, 56, 56, 57, 57};

/* Order of the span that serves a class. Up to 1 KiB: the smallest span
 * holding 64 blocks, so a thread's partly used span per class costs 16 KiB
 * (classes up to 256 B), not 64 (xmalloc at 16 threads: peak RSS 37 -> 27
 * MiB); with fewer blocks, spans change so often that larson lost half its
 * throughput at 16 per span, a fifth at 32. Bigger classes: at least 64 KiB,
 * and the smallest power of two holding two blocks. Fewer blocks per big
 * span strand fewer free-but-resident pages behind one live block (mstress
 * peak RSS 214 -> 155 MiB against eight blocks a span); two rather than one
 * keep a span change from every allocation (sizes 16-64 KiB: 1.6x slower
 * with one). Never less than a page (rill_arena.min_order). */
static uint8_t cls_order[NCLASSES];
/* For classes of RUN_ORDER and up, whose spans are runs (heap_next_span):
 * slots for the blocks a 2^order span holds, and no more. The rest of the
 * power of two was never carved, but as runs split and merge, whatever a
 * tail had held before stayed resident: a 96 KiB class left 64 KiB of its
 * 256 KiB span, a 192 KiB class 128 KiB of 512. */
static uint32_t cls_slots[NCLASSES];
/* Classes over RUN_EXACT_MIN below RUN_ORDER take runs too, of the 4-8
 * slots that hold a whole number of blocks (a 24 KiB class 6 slots, four
 * blocks; a 14 KiB class 7 slots, eight blocks). As 64 KiB pool spans they
 * served many classes over their life, and whatever one class wrote past
 * the last block of the next stayed resident under it (two 24 KiB blocks
 * leave 16 KiB, four 14 KiB blocks 8 KiB): the sizes benchmark's peak RSS at
 * 16-64 KiB grew 19.4 -> 23.4 MiB over 100 cycles of the same live bytes. */
#ifndef RUN_EXACT_MIN
#define RUN_EXACT_MIN 4096u
#endif
static bool cls_run[NCLASSES];

/* Bytes between a span's first byte and its first block, per class: 128 for
 * classes of 256 B to 1 KiB whose size is a multiple of 256, else 0. Their
 * blocks would otherwise all start on 256-byte boundaries, and a program
 * that reads the first bytes of many such blocks (a header, a first field)
 * runs slower when another working set competes for the cache: replaying
 * the sizes benchmark's recorded addresses over plain memory with
 * bench/pattern.c, the 128-256 B pattern read 2-3x slower than the same
 * pattern moved by 64 or 128 B, and by 256 B it was slow again
 * (docs/benchmarks.md, "Block addresses on 256-byte boundaries"). The
 * colour keeps 128-byte alignment (aligned requests: heap.c, class_for) and
 * costs a block of 64 where the span has no slack (256, 512, 1 KiB); 768 B
 * has 256 B of slack. Slab allocators colour slabs against the same kind of
 * conflict; here one colour per class does. */
static uint16_t cls_color[NCLASSES];
#define COLOR_BYTES 128u

/* Run classes (over 4 KiB) whose runs have bytes to spare past their last
 * block: each span starts its blocks a colour in from the run's start, a
 * multiple of COLOUR_STEP that varies from run to run (run_colour). */
static bool cls_runcol[NCLASSES];

/* The slots, 4 to 8 and whole pages, whose bytes a block of sz divides, or
 * failing that leave the smallest share past the last block; the fewest on a
 * tie. 4,608 and 9,216 B take 4 slots (a 1 KiB tail, 1.6%); 18 KiB takes 8,
 * seven blocks (in 4 slots three blocks left 16% unused). On 64 KiB pages
 * only 4 and 8 are whole pages. */
static size_t exact_slots(size_t sz) {
  size_t unit = (size_t)1 << rill_arena.min_order, best = 0, best_tail = 0;
  for (size_t k = 4; k <= 8; k++) {
    if (k % unit) continue;
    size_t tail = (k * SLOT_SIZE) % sz;
    if (!best || tail * best < best_tail * k) best = k, best_tail = tail;
  }
  return best ? best : run_slots(4 * SLOT_SIZE); /* pages of more than 8 slots */
}

/* Classes up to 64 B take spans of at least this many bytes. A thread that
 * allocates a batch and frees it cycles through every span the batch fills
 * plus the hot one, each span's blocks all in turn, so with 16 KiB spans
 * (341 blocks of 48 B) a batch of 700-1300 such blocks ran 1.16-1.25x
 * mimalloc's time, where its 64 KiB pages reuse the blocks just freed.
 * 32 KiB for the classes up to 64 B took recycle 0.94-0.91x the time and
 * shbench 0.97-0.98x; up to 128 B gained no more and cost 4-7% peak RSS in
 * xmalloc, larson and the soak (docs/benchmarks.md, "32 KiB spans for the
 * classes up to 64 B"). */
#define SMALL_SPAN_MIN ((size_t)32 * 1024)

/* Spans of the classes over 1 KiB up to BIG_BLOCKS_MAX hold at least
 * BIG_BLOCKS_MIN blocks: 128 KiB pool spans for 2-4 KiB (POOL_ORDERS), and
 * for 4-8 KiB the 4-8 slots their blocks fill exactly, taken two to four
 * times over. Blocks that big are buffers that programs replace at random (a
 * server's requests, a cache's entries), and a span of 8-28 of them came back
 * to its owner's list with a block or two free: a span change, with its
 * locks and CASes, every two or three mallocs (randalloc at 1-8 KiB: 3.2x
 * tcmalloc's time; larson at 10-8000 B: 0.51x its rate). With 32 blocks
 * randalloc takes 1.6x tcmalloc's time and larson runs at 1.2x its rate, for
 * 3-4% more peak RSS in randalloc and 8-20% in larson
 * (docs/benchmarks.md, "Big blocks replaced at random"). The 2-4 KiB spans
 * stay in the pool: as runs, they were cut from free runs and split the ones
 * large blocks wanted whole (test_runs). */
#define BIG_BLOCKS_MIN 32u
#define BIG_BLOCKS_MAX ((size_t)8192)

static size_t exact_big(size_t sz) {
  size_t k = exact_slots(sz), m = 1;
  while (sz <= BIG_BLOCKS_MAX && k * m * SLOT_SIZE / sz < BIG_BLOCKS_MIN) m++;
  return k * m;
}

void span_module_init(void) {
  for (unsigned c = 0; c < NCLASSES; c++) {
    size_t sz = class_size(c), min = sz <= 1024 ? 64 * sz : (size_t)64 * 1024;
    if (sz > 1024 && sz <= RUN_EXACT_MIN && BIG_BLOCKS_MIN * sz > min) min = BIG_BLOCKS_MIN * sz;
    if (sz <= 64 && min < SMALL_SPAN_MIN) min = SMALL_SPAN_MIN;
    unsigned o = rill_arena.min_order;
    while ((SLOT_SIZE << o) < min || (SLOT_SIZE << o) < 2 * sz) o++;
    cls_order[c] = (uint8_t)o;
    size_t blocks = (SLOT_SIZE << o) / sz;
    cls_run[c] = sz > RUN_EXACT_MIN || o >= POOL_ORDERS;
    cls_color[c] =
        (uint16_t)(c < CLS_TWIN0 && !cls_run[c] && sz >= 256 && sz <= 1024 && sz % 256 == 0
                       ? COLOR_BYTES
                       : 0);
    cls_slots[c] = (uint32_t)(!cls_run[c]      ? (size_t)1 << o
                              : o >= RUN_ORDER ? run_slots(blocks * sz)
                                               : exact_big(sz));
    cls_runcol[c] = cls_run[c] && ((size_t)cls_slots[c] * SLOT_SIZE) % sz >= COLOUR_STEP;
  }
}

unsigned class_order(unsigned cls) {
  return cls_order[cls];
}

bool class_is_run(unsigned cls) {
  return cls_run[cls];
}

bool class_run_coloured(unsigned cls) {
  return cls_runcol[cls];
}

/* A colour for the run at `start`, a multiple of COLOUR_STEP up to `room`
 * and under a page: from the run's place in the arena, so runs side by side
 * differ. A run class's blocks otherwise start at the same page offsets in
 * every run, and a copy from one of them into a block elsewhere that sits a
 * header in (a string's 24 bytes) can have (dst - src) mod 4 KiB at 8-24 in
 * every run alike: an AMD Zen 3 runs glibc 2.36's `rep movsb` copies 20-30x
 * slower at such distances (docs/benchmarks.md, "Run classes at varying page
 * offsets"). Only classes whose runs have bytes to spare take one: a build
 * that gave the others a slot more for it (and coloured large objects) took
 * the sizes sweep at 16 KiB-1 MiB 1.2-1.3x the time and 12% more peak. */
static size_t run_colour(uintptr_t start, size_t room) {
  size_t max = rill_arena.page - COLOUR_STEP;
  if (room > max) room = max;
  uint64_t x = (uint64_t)(start >> SLOT_SHIFT) * 0x9E3779B97F4A7C15ull;
  return (size_t)((x >> 40) % (room / COLOUR_STEP + 1)) * COLOUR_STEP;
}

size_t class_slots(unsigned cls) {
  return cls_slots[cls];
}

size_t class_color(unsigned cls) {
  return cls_color[cls];
}

static uint32_t carve_first(const span_t *sp, bool warm);

/* Formats an empty span for class cls, owned by h. `warm`: h has had a span
 * of the class before (carve_first). */
void span_init_class(span_t *sp, unsigned cls, heap_t *h, bool warm) {
  size_t bs = class_size(cls);
  sp->free = sp->spare = NULL;
  SPAN_SET(sp, cls, (uint8_t)cls);
  SPAN_SET(sp, bsize, (uint32_t)bs);
  sp->magic = block_magic(bs);
  size_t col = cls_runcol[cls] ? run_colour(span_start(sp), span_bytes(sp) % bs) : cls_color[cls];
  sp->start = span_start(sp) + col;
  sp->cap = (uint32_t)((span_bytes(sp) - col) / bs);
  sp->carve_step = (uint16_t)carve_first(sp, warm);
  sp->prev = sp->next = NULL;
  SPAN_SET(sp, fresh, 0);
  used_set(sp, 0);
  atomic_store_explicit(&sp->check, 0, RLX);
  __atomic_store_n(&sp->carved, 0, __ATOMIC_RELAXED); /* heap_lend reads it */
  __atomic_store_n(&sp->limit, 0, __ATOMIC_RELAXED);
  span_set_heap(sp, h);
  atomic_store_explicit(&sp->attached, h, RLX);
  atomic_store_explicit(&sp->xf, XF_MAKE(ST_ATTACHED, 0, 0), REL);
  dbg_empty(sp, "span formatted with a block out");
  dbg_event(sp, EV_INIT);
}

/* Whether a stashed span's free list runs through neighbouring blocks, as
 * frees in address order (either way) leave it: its first links are read.
 * Frees in random order leave a list that hands out blocks scattered over
 * the span; such a span is carved afresh instead (heap_next_span). */
bool span_list_ordered(const span_t *sp) {
  uintptr_t bs = class_size(sp->cls);
  const block_t *b = sp->free;
  for (unsigned i = 0; b && b->next && i < 8; i++, b = b->next) {
    uintptr_t x = (uintptr_t)b, y = (uintptr_t)b->next;
    if ((x > y ? x - y : y - x) != bs) return false;
  }
  return true;
}

/* Asks for the line of every carved block of a span taken back from its
 * owner's list long after it was listed (heap_next_span). Its free blocks'
 * links were written then, and each malloc that pops one would wait for
 * that line in turn; asked for at once, the misses overlap. A read, not a
 * write: the blocks still out may be in use on other cores. */
void span_prefetch(const span_t *sp) {
  size_t step = sp->bsize < 64 ? 64 : sp->bsize;
  const char *a = (const char *)sp->start, *end = a + (size_t)sp->carved * sp->bsize;
  for (; a < end; a += step) __builtin_prefetch(a, 0, 3);
}

/* A stashed span back for its own class, its local lists whole: the blocks
 * stay where the frees linked them, nothing is carved again. */
void span_rewarm(span_t *sp, heap_t *h) {
  SPAN_SET(sp, bsize, (uint32_t)class_size(sp->cls));
  sp->prev = sp->next = NULL;
  used_set(sp, 0);
  atomic_store_explicit(&sp->check, 0, RLX);
  span_set_heap(sp, h);
  atomic_store_explicit(&sp->attached, h, RLX);
  atomic_store_explicit(&sp->xf, XF_MAKE(ST_ATTACHED, 0, 0), REL);
  dbg_event(sp, EV_INIT);
}

/* A large object owns its whole span; the span floats from birth, so any
 * thread's free returns it straight to the pool. */
void span_init_large(span_t *sp, size_t lobj, size_t size, heap_t *h) {
  sp->free = sp->spare = NULL;
  SPAN_SET(sp, cls, CLS_LARGE);
  sp->start = span_start(sp); /* no colour: lobj counts from the first byte */
  SPAN_SET(sp, bsize, (uint32_t)(span_bytes(sp) > UINT32_MAX ? UINT32_MAX : span_bytes(sp)));
  sp->magic = 0; /* never used: a large object is validated by its offset */
  sp->cap = 1;
  sp->lobj = (uint32_t)lobj;
  SPAN_SET(sp, lsize, size);
  SPAN_SET(sp, fresh, 0);
  used_set(sp, 1);
  atomic_store_explicit(&sp->fused, 1, RLX);
  __atomic_store_n(&sp->carved, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&sp->limit, 0, __ATOMIC_RELAXED); /* no block to free: see lobj */
  span_set_heap(sp, h);
  atomic_store_explicit(&sp->attached, NULL, RLX);
  atomic_store_explicit(&sp->where, AT_NONE, RLX);
  atomic_store_explicit(&sp->xf, XF_MAKE(ST_FLOATING, 0, 0), REL);
}

static inline block_t *block_at(const span_t *sp, uint32_t idx) {
  return (block_t *)(sp->start + (size_t)idx * sp->bsize);
}

/* Blocks cut per carve, at least: a page of 1-4 KiB blocks held one to four,
 * so most such mallocs took the whole slow path (sizes 1-4 KiB ran 1.6x
 * faster with 16). CARVE_BYTES bounds the pages one carve touches. */
#define CARVE_MIN   16u
#define CARVE_BYTES ((size_t)64 * 1024)

/* Blocks one carve cuts at most: a page's worth, or CARVE_MIN of the bigger
 * classes within CARVE_BYTES. */
static uint32_t carve_full(const span_t *sp) {
  uint32_t n = (uint32_t)(rill_arena.page / sp->bsize);
  if (n < CARVE_MIN) {
    size_t b = CARVE_BYTES / sp->bsize;
    n = b < CARVE_MIN ? (uint32_t)b : CARVE_MIN;
    if (n < 1) n = 1;
  }
  return n;
}

/* The first carve of a thread's first span of a class cuts one page's worth
 * (one block of a page or more), and each carve after it twice the last, up
 * to carve_full: linking 16 blocks of 4 KiB writes 16 pages, so a program
 * whose only 4 and 8 KiB mallocs were its stdio buffers held 128 KiB of
 * pages for them (the suite's small programs held 25-460 KiB more). A
 * thread that has had a span of the class (`warm`, heap_t.warm) carves its
 * next spans in full steps at once, so streams of such blocks keep their
 * short slow path. */
static uint32_t carve_first(const span_t *sp, bool warm) {
  if (warm) return carve_full(sp);
  uint32_t n = (uint32_t)(rill_arena.page / sp->bsize);
  return n ? n : 1;
}

/* Cuts never-used blocks in address order, so consecutive allocations in a
 * fresh span are adjacent (Streamflow's `unallocated`); the rest of the
 * span stays untouched. */
static bool span_carve(span_t *sp) {
  uint32_t c = sp->carved;
  if (c >= sp->cap) return false;
  uint32_t n = sp->carve_step, full = carve_full(sp);
  if (n < full) sp->carve_step = (uint16_t)(2 * n < full ? 2 * n : full);
  if (n > sp->cap - c) n = sp->cap - c;
  char *first = (char *)block_at(sp, c);
  char *p = first;
  for (uint32_t i = 1; i < n; i++, p += sp->bsize)
    ((block_t *)p)->next = (block_t *)(p + sp->bsize);
  ((block_t *)p)->next = sp->free;
  sp->free = (block_t *)first;
  __atomic_store_n(&sp->carved, c + n, __ATOMIC_RELAXED); /* the debug report reads it */
  __atomic_store_n(&sp->limit, (uint64_t)(c + n) * (sp->magic * sp->bsize), __ATOMIC_RELEASE);
  return true;
}

/* Makes a remote list the owner's. It goes on whichever local list is
 * empty: linking it behind a non-empty one walked it, a miss per block, since
 * other threads wrote them (8-15% of larson-small's samples at 8 threads,
 * at thread exit). Callers make sure one is empty (list_room). */
static inline bool list_room(const span_t *sp) {
  return !sp->free || !sp->spare;
}
static void span_take_list(span_t *sp, uint64_t x) {
  uint32_t n = XF_COUNT(x), head = XF_HEAD(x);
  if (!head) return;
  block_t *first = block_of_key(sp, head - 1);
  if (!sp->free)
    sp->free = first;
  else
    sp->spare = first;
  used_set(sp, used_get(sp) - n);
}

/* One CAS from state *x to ATTACHED, the remote list left pending; then,
 * the span being ours, it becomes local (span_collect), or stays pending
 * when both local lists are in use. The local lists are read only after the
 * CAS: until it succeeds a free may claim the span and pool it, and another
 * heap may format it: an orphan unlinked from the orphanage's list has no
 * owner whose lock the claim would wait on (a TSan report in CI, churn
 * mode). False if the CAS failed (*x then holds the current word). */
bool span_attach(span_t *sp, uint64_t *x) {
  race_window();
  if (!atomic_compare_exchange_weak_explicit(&sp->xf, x, XF_WITH(ST_ATTACHED, *x), ACQ, RLX))
    return false;
  span_collect(sp);
  return true;
}

/* Collects remote frees of an attached span with one exchange; a plain load
 * first keeps the common "nothing there" case free of atomics. With both
 * local lists in use they wait (counted in `used` and the remote count). */
uint32_t span_collect(span_t *sp) {
  race_window();
  if (atomic_load_explicit(&sp->xf, RLX) == XF_MAKE(ST_ATTACHED, 0, 0) || !list_room(sp)) return 0;
  uint64_t x = atomic_exchange_explicit(&sp->xf, XF_MAKE(ST_ATTACHED, 0, 0), ACQ);
  span_take_list(sp, x);
  return XF_COUNT(x);
}

/* Refills the local free list of the hot span: never-used space first,
 * then remote frees (the order the core issue asks for), already taken
 * (spare) or still on the span. */
bool span_refill(span_t *sp) {
  if (span_carve(sp)) return true;
  if (sp->spare) {
    sp->free = sp->spare;
    sp->spare = NULL;
    return true;
  }
  return span_collect(sp) > 0;
}

/* Free blocks needed before a floating span is worth reusing (scalloc's
 * reusability threshold; Hoard's emptiness fraction f = 1/4, §3.1). */
uint32_t span_reuse_mark(const span_t *sp) {
  uint32_t m = sp->cap / 4;
  return m ? m : 1;
}

/* Is p the start of a block this span handed out (or its large object)? */
bool span_block_ok(const span_t *sp, uintptr_t p) {
  if (sp->cls == CLS_LARGE)
    return sp->bsize && p >= span_start(sp) && p - span_start(sp) == sp->lobj;
  return span_block_key(sp, p) != UINT32_MAX;
}

/* Span owning an address, or NULL above the arena's covered bound (huge
 * blocks, foreign memory: the caller asks the huge registry). Below it an
 * address no span covers gets meta[0], a span with no blocks, so the
 * caller's block check rejects it: the same test as free's fast path. */
span_t *span_lookup(const void *p) {
  uintptr_t off = (uintptr_t)p - rill_arena.base;
  return arena_beyond(off) ? NULL : span_at(off);
}

/* A free into a span this thread's heap does not have attached: one CAS
 * pushes the block (Streamflow §3.1.1 remote deallocation). When the span is
 * floating, the same CAS may also change its state (scalloc Listing 3,
 * lines 112-122): the last free of all takes the span back to the pool at
 * once (eager return); crossing the reuse mark queues it for its owner.
 * A LISTED span's used count lives with its owner, so the freer reads it
 * after its push: `used` of a listed span only falls and the count only
 * rises, so a stale read can miss an empty span but never claim a live one.
 * The push is sequentially consistent so that an owner free racing with it
 * sees the push or is seen by it (heap_span_emptied is the owner's side).
 * A batch of remote frees (heap.c, RILL_REMOTE_BATCH) pushes the k blocks
 * it holds for one span as a chain, b linked through to `last`, with the
 * one CAS: Streamflow's remote frees batched back to the owner (§3.1.1). */
static inline __attribute__((always_inline)) void free_remote(span_t *sp, block_t *b, block_t *last,
                                                              uint32_t k, uint32_t key) {
  uint64_t old = atomic_load_explicit(&sp->xf, RLX), nw;
  unsigned st, nst;
  uint32_t cap = 0, mark = 0;
  for (;;) {
    st = XF_STATE(old);
    /* double frees: into an empty span, or of the block last pushed (the
     * remote path's counterpart of free_fast's list-head test) */
    if (unlikely(st == ST_FREE || XF_HEAD(old) == key + 1)) rill_invalid("free", b);
    /* read while b is out (the span cannot be emptied and formatted again),
     * and only for the states that weigh them: `cap` sits on the owner's
     * line, which the owner of an attached span writes at every malloc, so
     * a free into another thread's hot span reads one line of the span
     * entry besides the remote word, and leaves the owner's line alone */
    if (st != ST_ATTACHED) {
      cap = sp->cap;
      mark = span_reuse_mark(sp);
    }
    uint32_t n = XF_COUNT(old) + k;
    last->next = XF_HEAD(old) ? block_of_key(sp, XF_HEAD(old) - 1) : NULL;
    nst = st;
    if (st == ST_FLOATING) {
      uint32_t used = atomic_load_explicit(&sp->fused, RLX);
      if (n >= used)
        nst = ST_FREE;
      else if (cap - used + n >= mark)
        nst = ST_QUEUED;
    }
    /* a listed or floating span keeps its tag; a state change drops it */
    nw = XF_MAKE(nst, n, key + 1) | (nst == st ? old & XF_TAG_MASK : 0);
    if (atomic_compare_exchange_weak_explicit(&sp->xf, &old, nw, memory_order_seq_cst, RLX)) break;
  }
  race_window(); /* the block is back: the owner may empty and pool the span */
  if (nst == ST_LISTED) {
    /* the owner's frees now compare against the remote count. The owner may
     * have taken the span back and armed it since the push (hot_arm, also
     * 1): hot_emptied checks `used` for that */
    uint32_t one = 1;
    if (atomic_load_explicit(&sp->check, RLX) == one)
      atomic_compare_exchange_strong_explicit(&sp->check, &one, CHECK_ALL, RLX, RLX);
    uint32_t used = __atomic_load_n(&sp->used, __ATOMIC_SEQ_CST);
    if (XF_COUNT(nw) == used &&
        atomic_compare_exchange_strong_explicit(&sp->xf, &nw, XF_MAKE(ST_FREE, 0, 0), ACQ, RLX))
      heap_claimed(sp, false);
    else if (cap - used + XF_COUNT(nw) == mark)
      heap_lend_hint(sp); /* a quarter free now: an idle owner would lend it */
  } else if (nst != st) {
    dbg_event(sp, EV_REMOTE);
    if (nst == ST_FREE)
      pool_put(sp);
    else
      heap_queue(sp);
  }
}

/* One block, the usual remote free: its own copy, so the chain's count and
 * tail cost it nothing (6 instructions a remote free in consume,
 * callgrind). */
void span_free_remote(span_t *sp, block_t *b, uint32_t key) {
  free_remote(sp, b, b, 1, key);
}
void span_free_remote_n(span_t *sp, block_t *b, block_t *last, uint32_t k, uint32_t key) {
  free_remote(sp, b, last, k, key);
}
