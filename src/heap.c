/* heap.c - thread heaps (Streamflow §3.1.1 "Local heaps", scalloc's LABs):
 * per-class hot spans and reusable lists, the allocation slow path, spans
 * handed back by other threads' frees, and thread exit with orphaning. Only
 * the owner touches a heap, except its lists, which sit behind a lock. */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define MAX_HEAPS 65536u
static uint32_t max_heaps; /* MAX_HEAPS, or fewer under an address-space limit */

span_t rill_empty_span;
#define SHARED_N 8 /* shared heaps (below) */
/* The lists of the heaps no thread owns: the two sentinels, the shared
 * heaps, the orphanage and the young threads' heap (below); thread heaps'
 * are in heap_lists. */
static heap_lists_t fixed_lists[2 + SHARED_N + 2];
/* The sentinels' hot spans are the empty span from the start, since the
 * fast paths read them before start-up; the other fixed heaps' are set at
 * start-up (heap_module_init): 185 pointers each, and a relocation for the
 * loader to apply to each, 40 KiB of them read at every program's start. */
#define FIXED_HEAP(k) .ls = &fixed_lists[k]
#define SENTINEL_HEAP(k)                                                                           \
  .hot = {[0 ... NCLASSES - 1] = &rill_empty_span},                                                \
  .direct = {[0 ... DIRECT_N - 1] = &rill_empty_span}, FIXED_HEAP(k)
heap_t rill_empty_heap = {SENTINEL_HEAP(0)};
heap_t rill_done_heap = {SENTINEL_HEAP(1)};
__thread heap_t *rill_tls = &rill_empty_heap;

/* Locked heaps that no thread owns, never torn down: threads whose clean-up
 * already ran (other TLS destructors still calling malloc) allocate from the
 * first, and young threads (below, "young blocks") from the one picked in
 * turn at their start, so that a crowd of them does not queue on one lock. */
static heap_t shared[SHARED_N] = {{FIXED_HEAP(2)}, {FIXED_HEAP(3)}, {FIXED_HEAP(4)},
                                  {FIXED_HEAP(5)}, {FIXED_HEAP(6)}, {FIXED_HEAP(7)},
                                  {FIXED_HEAP(8)}, {FIXED_HEAP(9)}};
_Static_assert(SHARED_N == 8, "one initializer per shared heap");
static _Atomic int shared_lock[SHARED_N];
/* Set under shared_lock[k] before shared heap k first allocates, never
 * cleared. A shared heap never used owns no span, so nothing else reaches
 * its lists, and the sweeps, adoptions and fork's prepare leave its lock
 * alone: the locks sit a record (about a page) apart, which fork made the parent
 * and the child copy on write (docs/benchmarks.md, "Where a fork's time
 * goes"). Fork's prepare holds every shared_lock[k] before it reads these,
 * so none turns true while it holds the heaps. */
static _Atomic bool shared_used[SHARED_N];
static inline void shared_enter(unsigned k) {
  spin_lock(&shared_lock[k]);
  if (!atomic_load_explicit(&shared_used[k], RLX))
    atomic_store_explicit(&shared_used[k], true, RLX);
}
static inline bool shared_in_use(unsigned k) {
  return atomic_load_explicit(&shared_used[k], RLX);
}
static heap_t orphanage; /* below, "spans handed back by other threads" */
/* The heap of every young thread (below, "young blocks"): all its hot spans
 * are the empty span, so each malloc takes the slow path, and it owns no
 * span, so each free is a remote one. Set up at start-up like the shared
 * heaps: the fast paths meet it only in threads started since. */
static heap_t young_heap = {FIXED_HEAP(2 + SHARED_N + 1)};
#define backing      shared[0]
#define backing_lock shared_lock[0]
static inline bool heap_is_shared(const heap_t *h) {
  return h >= shared && h < shared + SHARED_N;
}
/* A thread's heap that owns no span: not set up yet, its thread cleaned up,
 * or young. Such a heap takes over nothing, and has nothing to collect,
 * grow in place or give up. */
static inline bool owns_nothing(const heap_t *h) {
  return h == &rill_empty_heap || h == &rill_done_heap || h == &young_heap;
}

static heap_t *heaps;            /* max_heaps slots, reserved at start-up */
static heap_lists_t *heap_lists; /* their lists, beside them (heap_lists_t) */

/* A heap's lists: a fixed heap's own, or those of its slot in heaps[]. A
 * thread heap's record names them from its reset on (heap_reset); a scan
 * that meets a record not yet reset finds NULL there and the same lists by
 * the record's index. Naming them saves the division by the record's size
 * (1,728 bytes) at every list operation, a few dozen per span change. */
static inline heap_lists_t *lists(const heap_t *h) {
  heap_lists_t *ls = __atomic_load_n(&h->ls, __ATOMIC_RELAXED);
  return likely(ls != NULL) ? ls : &heap_lists[h - heaps];
}
static _Atomic uint32_t heaps_top;
static _Atomic uint32_t heaps_live;  /* records a thread owns now */
static void live_moved(void);        /* the block cache's bound follows heaps_live */
static _Atomic uint32_t young_live;  /* threads young now (young_heap) */
static _Atomic uint64_t young_frees; /* remote frees of young threads that have grown up or left */
static _Atomic uint64_t heaps_free;  /* tagged stack of recycled ids: id+1 | tag */
/* Heaps whose records are usable (os_commit_grow: in core dumps, and with
 * RILL_COMMIT writable), a step at a time as new ids are handed out: 16
 * records when that commits them (charged under strict overcommit), else
 * 256, where the step only moves the core-dump edge, so that a crowd of
 * threads starting at once rarely meets the lock and the system call. */
static _Atomic uint32_t heaps_usable;
static _Atomic int heaps_commit_lock;
/* Held from a fresh record's id to the end of its reset, and by fork_prepare
 * before it counts the heaps whose locks it holds. A record handed out
 * after the count had its locks taken by its thread across the fork: the
 * child, which has no such thread, inherited them held, and its own next
 * fork waited on them for good (test_fork --nested; two forks in three). */
static _Atomic int heaps_new_lock;
#define HEAPS_STEP        16u
#define HEAPS_STEP_MAPPED 256u

heap_t *heap_at(uint32_t id) {
  return &heaps[id];
}
uint32_t heap_young_live(void) {
  return atomic_load_explicit(&young_live, RLX);
}
uint64_t heap_young_frees(void) {
  return atomic_load_explicit(&young_frees, RLX);
}
/* Heaps a scan may look at: ids handed out, within the writable records. */
uint32_t heap_count(void) {
  uint32_t top = atomic_load_explicit(&heaps_top, ACQ);
  uint32_t usable = atomic_load_explicit(&heaps_usable, ACQ);
  return top < usable ? top : usable;
}

/* Makes the record of heap `id` usable. */
static bool heaps_commit(uint32_t id) {
  if (id < atomic_load_explicit(&heaps_usable, ACQ)) return true;
  spin_lock(&heaps_commit_lock);
  uint32_t u = atomic_load_explicit(&heaps_usable, RLX);
  bool ok = true;
  /* past a table heap_fit cut after the caller read max_heaps: no record */
  if (id >= max_heaps) ok = false;
  if (ok && id >= u) {
    uint32_t step = rill_opt.commit_demand ? HEAPS_STEP : HEAPS_STEP_MAPPED;
    uint32_t to = (id + step) & ~(step - 1);
    if (to > max_heaps) to = max_heaps;
    ok = os_commit_grow(heaps, u * sizeof(heap_t), to * sizeof(heap_t)) &&
         os_commit_grow(heap_lists, u * sizeof(heap_lists_t), to * sizeof(heap_lists_t));
    if (ok) atomic_store_explicit(&heaps_usable, to, REL);
  }
  spin_unlock(&heaps_commit_lock);
  return ok;
}

/* The largest count of heap records, 64 at least, whose table fits `budget`
 * bytes; MAX_HEAPS without a limit. */
static uint32_t heaps_within(size_t budget) {
  uint32_t n = MAX_HEAPS;
  while (n > 64 && (sizeof(heap_t) + sizeof(heap_lists_t)) * n > budget) n /= 2;
  return n;
}

/* The program lowered its address-space limit (limits.c): the records past
 * the count that start-up would have reserved under it (HEAPS_SHARE) go back, unless in
 * use; threads past the last share a locked heap, as under a limit from the
 * start. heaps_commit refuses a record past the cut to a thread that read
 * max_heaps before it. */
void heap_fit(size_t limit) {
  if (!heaps) return;
  spin_lock(&heaps_commit_lock);
  uint32_t fit = heaps_within(limit / HEAPS_SHARE),
           usable = atomic_load_explicit(&heaps_usable, RLX);
  if (fit < usable) fit = usable;
  if (fit < max_heaps) {
    os_give_back(heaps, fit * sizeof(heap_t), max_heaps * sizeof(heap_t));
    os_give_back(heap_lists, fit * sizeof(heap_lists_t), max_heaps * sizeof(heap_lists_t));
    __atomic_store_n(&max_heaps, fit, __ATOMIC_RELAXED);
  }
  spin_unlock(&heaps_commit_lock);
}

/* direct-map words of each small class: those (n + 7) / 8 of the sizes in
 * (size of cls - 1, size of cls]; set up once, since a span change writes them */
static uint8_t direct_lo[NDIRECT_CLS], direct_hi[NDIRECT_CLS];

/* The hot span of a class, mirrored into the direct map for small sizes.
 * Relaxed atomic stores and loads (plain movs): the purger swaps the hot
 * spans of an idle owner (heap_lend) while the fast paths read them. */
static void hot_set(heap_t *h, unsigned cls, span_t *sp) {
  __atomic_store_n(&h->hot[cls], sp, __ATOMIC_RELAXED);
  if (cls < NDIRECT_CLS)
    for (unsigned w = direct_lo[cls]; w <= direct_hi[cls]; w++)
      __atomic_store_n(&h->direct[w], sp, __ATOMIC_RELAXED);
}
static span_t *hot_get(heap_t *h, unsigned cls) {
  return __atomic_load_n(&h->hot[cls], __ATOMIC_RELAXED);
}

/* ---- young blocks: a crowd's first blocks, from the shared heaps ----------
 * A span of its own costs a thread a page per class it touches (the span's
 * first page), however few blocks it holds: 2,000 threads holding 64 blocks
 * of 16-512 B each cost 87.9 KiB a thread against glibc's 30.6 (`crowd`; a
 * server with a thread per connection, LKmalloc §4). So once YOUNG_THREADS
 * threads are live, a new thread starts young: its first blocks of each
 * class up to 1 KiB come from a shared heap, under that heap's lock, until
 * they would fill 8 KiB of the class (two 4 KiB pages) or reach
 * YOUNG_THREAD_BYTES in all; then the class gets a span of its own. A
 * young block is rounded up to a class that is a multiple of a cache line,
 * so no two threads' young blocks share a line (Hoard §5.3, active false
 * sharing); its free is a remote free into the shared heap's span. The
 * price is a slow path and a lock per young malloc: with a page per class
 * as the only bound, some 300 for a thread of larson's 10-1000 B, and 4
 * threads bleeding into new ones every 2,000 replacements lost a quarter of
 * their throughput; hence the bounds, and eight shared heaps, taken in turn
 * as threads start, rather than one (docs/design.md, "Young blocks"). 4 KiB per class let
 * a thread of 64 blocks of 16-512 B pass it in a class or two (40.6 KiB a
 * thread); 8 KiB, 34.6. A young thread takes no heap record of its own
 * until it needs a span (heap_grow_up): its state is in its TLS, and the
 * record's 1,664 bytes then, written at a thread's start since the fast
 * paths read its hot spans unchecked, cost 1.6 KiB a thread of the 33.8. */
#define YOUNG_LINE  64u
#define YOUNG_BYTES 8192u /* young_max (128 at most) fits the uint8_t counters */
#ifndef YOUNG_THREADS
#define YOUNG_THREADS 32u /* test builds may lower it (test/run.sh's TSan run) */
#endif
#define YOUNG_THREAD_BYTES (32u << 10)
static uint8_t young_cls[NDIRECT_CLS], young_max[NDIRECT_CLS];
typedef struct young {
  uint8_t n[NDIRECT_CLS]; /* blocks of each class taken from the shared heap */
  uint8_t k;              /* which shared heap */
  uint32_t left;          /* bytes of such blocks it may still take */
  uint64_t frees;         /* remote frees while young (young_heap has no counter to spare) */
} young_t;
static __thread young_t young_tls __attribute__((tls_model("initial-exec")));
static _Atomic uint64_t young_beat; /* pool_epoch() at the last young malloc (shared_adopt) */

static void young_init(void) {
  for (unsigned c = 0; c < NDIRECT_CLS; c++) {
    unsigned y = c;
    while (class_size(y) % YOUNG_LINE) y++; /* 64 B and 1 KiB are classes: it stops */
    young_cls[c] = (uint8_t)y;
    young_max[c] = (uint8_t)(YOUNG_BYTES / class_size(y));
  }
}

/* A block of class cls (or the line-multiple class above it) from a shared
 * heap, while this thread is young in the class. */
static inline bool young_wants(unsigned cls) {
  return RILL_VARIANT == 0 && cls < NDIRECT_CLS && young_tls.left &&
         young_tls.n[cls] < young_max[cls];
}
static NOINLINE void *young_alloc(unsigned cls) {
  young_tls.n[cls]++;
  size_t n = class_size(young_cls[cls]);
  young_tls.left = young_tls.left > n ? young_tls.left - (uint32_t)n : 0;
  uint64_t e = pool_epoch();
  if (atomic_load_explicit(&young_beat, RLX) != e) atomic_store_explicit(&young_beat, e, RLX);
  unsigned k = young_tls.k;
  shared_enter(k);
  void *p = heap_alloc_class(&shared[k], young_cls[cls]);
  spin_unlock(&shared_lock[k]);
  return p;
}

uint32_t rill_cache_bsize[NCACHE]; /* the block cache's class sizes: a load, not branches */

bool heap_module_init(size_t budget) {
  for (unsigned c = 0; c < NDIRECT_CLS; c++) {
    direct_lo[c] = (uint8_t)(c ? class_size(c - 1) / 8 + 1 : 0);
    direct_hi[c] = (uint8_t)(class_size(c) / 8);
  }
  for (unsigned i = 0; i < NCACHE; i++) rill_cache_bsize[i] = (uint32_t)class_size(CACHE_CLS0 + i);
  young_init();
  for (unsigned k = 0; k <= SHARED_N + 1; k++) {
    heap_t *h = k < SHARED_N ? &shared[k] : k == SHARED_N ? &orphanage : &young_heap;
    for (unsigned c = 0; c < NCLASSES; c++) hot_set(h, c, &rill_empty_span);
  }
  /* 152 MiB of address space: under a tight ulimit -v, fewer heaps within
   * the budget (threads past the last share a locked one), 64 (170 KiB) at
   * least; fewer still if the kernel refuses */
  for (max_heaps = heaps_within(budget); max_heaps >= 64; max_heaps /= 2) {
    size_t rec = sizeof(heap_t) * max_heaps, ls = sizeof(heap_lists_t) * max_heaps;
    if (!(heaps = os_reserve(rec))) continue;
    if ((heap_lists = os_reserve(ls)) != NULL) break;
    os_unmap(heaps, rec);
    heaps = NULL;
  }
  atomic_store_explicit(&heaps_usable, 0, RLX);
  for (unsigned k = 0; k < SHARED_N; k++) atomic_store_explicit(&shared[k].live, 1, RLX);
  return heaps != NULL;
}

/* List heads are written with relaxed atomic stores: the orphanage's heads
 * are peeked at without its lock. */
static void list_head_set(heap_t *h, unsigned cls, span_t *sp) {
  __atomic_store_n(&lists(h)->list[cls], sp, __ATOMIC_RELAXED);
}

static void heap_reset(heap_t *h, uint32_t id) {
  dbg_heap_own(h);
  for (unsigned c = 0; c < NCLASSES; c++) hot_set(h, c, &rill_empty_span);
  h->id = id;
  __atomic_store_n(&h->ls, &heap_lists[id], __ATOMIC_RELAXED);
  h->warm = h->let_go = 0;
  atomic_fetch_add_explicit(&heaps_live, 1, RLX);
  live_moved();
  atomic_store_explicit(&h->tid, (int32_t)gettid(), RLX); /* heap_new runs in the owner */
  owner_mark(h); /* before the record is live: the lender reads it */
  atomic_store_explicit(&h->gen, atomic_load_explicit(&h->gen, RLX) + 1, RLX);
  spin_lock(&h->lock); /* a late remote free may still be listing a span here */
  heap_lists_t *ls = lists(h);
  for (unsigned c = 0; c < NCLASSES; c++) { /* written only if set: see heap_lists_t */
    if (ls->list[c]) list_head_set(h, c, NULL);
    if (ls->tail[c]) ls->tail[c] = NULL;
  }
  __atomic_store_n(&h->closed, false, __ATOMIC_RELAXED);
  atomic_store_explicit(&h->lent, false, RLX);
  spin_unlock(&h->lock);
  atomic_store_explicit(&h->live, 1, REL);
}

static heap_t *heap_new(void) {
  uint64_t old = atomic_load_explicit(&heaps_free, ACQ), nw;
  while ((uint32_t)old) {
    heap_t *h = &heaps[(uint32_t)old - 1];
    nw = ((old >> 32) + 1) << 32 | atomic_load_explicit(&h->next_free, RLX);
    if (atomic_compare_exchange_weak_explicit(&heaps_free, &old, nw, ACQ, ACQ)) {
      heap_reset(h, (uint32_t)old - 1);
      return h;
    }
  }
  spin_lock(&heaps_new_lock);
  uint32_t id = atomic_fetch_add_explicit(&heaps_top, 1, RLX);
  heap_t *h = NULL;
  if (id < __atomic_load_n(&max_heaps, __ATOMIC_RELAXED) && heaps_commit(id)) {
    h = &heaps[id];
    heap_reset(h, id);
  }
  spin_unlock(&heaps_new_lock);
  return h;
}

static void heap_recycle(heap_t *h) {
#if RILL_DEBUG
  if (!atomic_load_explicit(&h->live, RLX)) dbg_heap_fail("heap recycled twice", 0);
  atomic_store_explicit(&h->owner_tid, 0, RLX);
#endif
  atomic_store_explicit(&h->live, 0, RLX);
  atomic_fetch_sub_explicit(&heaps_live, 1, RLX);
  live_moved();
  uint64_t old = atomic_load_explicit(&heaps_free, RLX), nw;
  do {
    atomic_store_explicit(&h->next_free, (uint32_t)old, RLX);
    nw = ((old >> 32) + 1) << 32 | (h->id + 1);
  } while (!atomic_compare_exchange_weak_explicit(&heaps_free, &old, nw, REL, RLX));
}

/* ---- the owner's reusable lists ---------------------------------------- */
/* A listed span taken back after this many span changes (any thread, any
 * class) on the CPU that listed it hands out blocks whose lines have likely
 * left that core's caches since the frees wrote their links: span_prefetch
 * asks for them all at once. The server soak at eight workers on two cores
 * takes a third of its listed spans back that late, and its malloc p99 was
 * those misses, one per pop (153-158 -> 93-102 ns); shbench takes 2% so late
 * and larson 0.01%. Every pop, or from 16 changes, cost shbench 3%: its
 * spans are still cached, and a 16 KiB span of small blocks is 256
 * prefetches. Counted per CPU, not per heap: at 16 workers on two cores a
 * worker's own changes missed the others' evicting its lines between its
 * turns (p99 155-159 ns counted per heap, 111-140 per CPU). Threads of one
 * CPU do not run at once, so a plain increment loses little.
 * Only spans of blocks up to PREFETCH_BSIZE_MAX: a program that replaces
 * random blocks of 1-8 KiB changes span every few mallocs, so 64 changes
 * are no time at all, and every change asked for a whole span, one page per
 * block (1.2x the time when those spans held 16-56 blocks and changed every
 * two or three mallocs; docs/benchmarks.md, "Big blocks replaced at
 * random"). A block that big is written over many lines by its program,
 * which dwarfs the one line its link costs malloc. */
#define COLD_CHANGES       64
#define PREFETCH_BSIZE_MAX 1024
static struct { _Alignas(64) _Atomic uint32_t n; } cpu_changes[MAX_STRIPES];

/* The lists belong to the owner, but a remote free that empties a LISTED span
 * must unlink it to return it at once, so they sit behind the heap's lock.
 * Only slow paths take it; the owner's fast free never touches the lists. */
static void list_link(heap_t *h, span_t *sp) {
  sp->prev = NULL;
  sp->next = lists(h)->list[sp->cls];
  if (sp->next)
    sp->next->prev = sp;
  else
    lists(h)->tail[sp->cls] = sp;
  list_head_set(h, sp->cls, sp);
  atomic_store_explicit(&sp->where, AT_LISTED, RLX);
  unsigned c = os_cpu(MAX_STRIPES);
  sp->listed_cpu = (uint8_t)c;
  sp->listed_at = atomic_load_explicit(&cpu_changes[c].n, RLX);
}

static void list_cut(heap_t *h, span_t *sp) {
  if (sp->prev)
    sp->prev->next = sp->next;
  else
    list_head_set(h, sp->cls, sp->next);
  if (sp->next)
    sp->next->prev = sp->prev;
  else
    lists(h)->tail[sp->cls] = sp->prev;
  sp->prev = sp->next = NULL;
}

/* The orphanage (below): a heap no thread owns, whose spans any thread may
 * take. A span's `heap` is the orphanage exactly while the span is on the
 * orphanage's list: set when it is linked and cleared when it is unlinked,
 * both under the orphanage's lock, so a thread holding that lock can trust
 * the one word. (Checking `heap` and `where` together could not be trusted:
 * a thread that had just taken the span wrote both after unlocking, and a
 * waiter read the old `heap` and the new `where`, unlinked the span from
 * the orphanage's list while it sat on another heap's, and two heaps then
 * allocated from it: larson with short-lived threads, 1 run in 10.) */
static void list_unlink(heap_t *h, span_t *sp) {
  list_cut(h, sp);
  atomic_store_explicit(&sp->check, 0, RLX);
  atomic_store_explicit(&sp->where, AT_NONE, RLX);
  /* release: a free that claims the orphan now pools it without the lock
   * (heap_claimed), and the next heap to format it must see these writes */
  if (h == &orphanage) atomic_store_explicit(&sp->heap, NULL, REL);
}

/* ---- the stash: spans this heap emptied, for its next span changes ------ */
/* A span that the owner's own frees emptied goes to its heap's stash, most
 * recent first, rather than straight to the pool: the thread's next span of
 * that order is this one, its lines still in this core's caches, and taking
 * it costs no pool atomics, clock read or CPU lookup. Threads that fill and
 * empty spans in cycles (threadtest, the object-size sweep) ran 4-14% faster
 * at one to four threads, and with the rewarm below 9-22% (docs/benchmarks.md,
 * "The stash"). It is bounded
 * (STASH_SLOTS: the oldest span of the order goes to the pool when a new one
 * would pass the budget) and lives one purge beat at most: at each beat of
 * the timed passes the first heap to notice, or the purger thread, hands
 * every heap's stash to the pool (heap_stashes_flush), as do thread exit and
 * rill_collect. So another thread waits a beat (a quarter of the purge
 * delay) at most for those spans, and their pages go back on the usual
 * delay after that. Spans that remote frees empty go to the pool at once:
 * they are cold here and may be what other threads need (Hoard §4's bound
 * on blowup), and the pool's lowest-address-first order keeps the arena
 * compact. */
#ifndef STASH_SLOTS
#define STASH_SLOTS 128u /* 2 MiB of 16 KiB slots: about one core's L2 cache */
#endif

static void stash_head_set(heap_t *h, unsigned o, span_t *sp) {
  __atomic_store_n(&h->stash[o], sp, __ATOMIC_RELAXED); /* peeked at without the lock */
}

/* Cuts the oldest stashed span of 2^o slots out of h's stash (caller holds
 * h->lock), or NULL. */
static span_t *stash_cut_oldest(heap_t *h, unsigned o) {
  span_t *sp = h->stash_tail[o];
  if (!sp) return NULL;
  h->stash_tail[o] = sp->prev;
  if (sp->prev)
    sp->prev->next = NULL;
  else
    stash_head_set(h, o, NULL);
  sp->prev = sp->next = NULL;
  atomic_store_explicit(&h->stash_slots, atomic_load_explicit(&h->stash_slots, RLX) - (1u << o),
                        RLX);
  return sp;
}

/* Pushes an empty, claimed span (caller holds h->lock); returns the span that
 * leaves to keep the budget, if any, for the caller to pool after unlocking. */
static span_t *stash_push_locked(heap_t *h, span_t *sp) {
  unsigned o = sp->order;
  dbg_empty(sp, "span stashed with a block out");
  dbg_event(sp, EV_POOL);
  SPAN_SET(sp, bsize, 0); /* frees into it are invalid, as into a pooled span */
  atomic_store_explicit(&sp->attached, NULL, RLX);
  atomic_store_explicit(&sp->where, AT_NONE, RLX);
  sp->prev = NULL;
  sp->next = h->stash[o];
  if (sp->next)
    sp->next->prev = sp;
  else
    h->stash_tail[o] = sp;
  stash_head_set(h, o, sp);
  uint32_t n = atomic_load_explicit(&h->stash_slots, RLX) + (1u << o);
  atomic_store_explicit(&h->stash_slots, n, RLX);
  atomic_store_explicit(&h->stash_ops, atomic_load_explicit(&h->stash_ops, RLX) + 1, RLX);
  return n > STASH_SLOTS ? stash_cut_oldest(h, o) : NULL; /* the oldest of the order goes */
}

/* The most recently stashed span of 2^o slots, or NULL. */
static span_t *stash_pop(heap_t *h, unsigned o) {
  if (!__atomic_load_n(&h->stash[o], __ATOMIC_RELAXED)) return NULL;
  spin_lock(&h->lock);
  span_t *sp = h->stash[o];
  if (sp) {
    stash_head_set(h, o, sp->next);
    if (sp->next)
      sp->next->prev = NULL;
    else
      h->stash_tail[o] = NULL;
    sp->next = NULL;
    atomic_store_explicit(&h->stash_slots, atomic_load_explicit(&h->stash_slots, RLX) - (1u << o),
                          RLX);
    atomic_store_explicit(&h->stash_ops, atomic_load_explicit(&h->stash_ops, RLX) + 1, RLX);
  }
  spin_unlock(&h->lock);
  return sp;
}

/* Before a thread takes never-used memory: the oldest stashed span of 2^o
 * slots of another heap whose thread has stood still. A stash holds up to
 * 2 MiB for a beat of the purge passes, so in knary at 16 threads on two
 * cores (each worker building and freeing however many subtrees it got to
 * this time) the preempted threads' stashes held 28 MiB while the running
 * ones faulted in fresh spans: peak RSS 60.8 MiB against 32.1 at one thread.
 * Memory one thread holds free must be reusable by the others (Hoard §4's
 * bound on blowup). But a busy thread's stash is its next spans: taking
 * from it makes that thread steal back, and the spans and their blocks
 * cross cores every cycle (threadtest at two threads 1.08x the time). So a
 * heap is taken from only when its owner has neither pushed nor popped
 * since the last look (stash_ops against steal_seen); the first look only
 * notes the count. It looks at STEAL_LOOK heaps at most, so a program of
 * many threads pays a bounded number of loads per fresh span. */
#define STEAL_LOOK 64u
static span_t *stash_steal(const heap_t *h, unsigned o) {
  uint32_t top = heap_count();
  if (top > max_heaps) top = max_heaps;
  for (uint32_t k = 1; k < top && k <= STEAL_LOOK; k++) {
    heap_t *v = &heaps[(h->id + k) % top];
    if (v == h || !__atomic_load_n(&v->stash[o], __ATOMIC_RELAXED)) continue;
    uint32_t ops = atomic_load_explicit(&v->stash_ops, RLX);
    if (atomic_load_explicit(&v->steal_seen, RLX) != ops) { /* busy since the last look */
      atomic_store_explicit(&v->steal_seen, ops, RLX);
      continue;
    }
    spin_lock(&v->lock);
    span_t *sp = stash_cut_oldest(v, o);
    spin_unlock(&v->lock);
    if (sp) return sp;
  }
  return NULL;
}

/* Detaches h's whole stash as one list (caller holds h->lock). */
static span_t *stash_take_locked(heap_t *h) {
  span_t *all = NULL;
  for (unsigned o = 0; o < STASH_ORDERS; o++) {
    span_t *t = h->stash_tail[o];
    if (!t) continue;
    t->next = all;
    all = h->stash[o];
    stash_head_set(h, o, NULL);
    h->stash_tail[o] = NULL;
  }
  atomic_store_explicit(&h->stash_slots, 0, RLX);
  return all;
}

static size_t pool_all(span_t *sp) {
  size_t n = 0;
  for (span_t *next; sp; sp = next, n++) {
    next = sp->next;
    sp->next = sp->prev = NULL;
    pool_put(sp);
  }
  return n;
}

static void stash_flush(heap_t *h) {
  if (!atomic_load_explicit(&h->stash_slots, RLX)) return;
  spin_lock(&h->lock);
  span_t *all = stash_take_locked(h);
  spin_unlock(&h->lock);
  pool_all(all);
}

/* Every heap's stash to the pool: on each beat of the timed passes, and by
 * the purger before its pass. */
void heap_stashes_flush(void) {
  uint32_t top = heap_count();
  if (top > max_heaps) top = max_heaps;
  for (uint32_t i = 0; i < top; i++) stash_flush(&heaps[i]);
}

/* Whether some heap's stash holds spans (their pages): the purger must not
 * sleep on them. */
bool heap_stashed(void) {
  uint32_t top = heap_count();
  if (top > max_heaps) top = max_heaps;
  for (uint32_t i = 0; i < top; i++)
    if (atomic_load_explicit(&heaps[i].stash_slots, RLX)) return true;
  return false;
}

/* A span the stash may keep: a pool span, or a run cut to a pool order for
 * a small class (pool_from_runs, spent_take), which pool_put hands back to
 * the runs when it leaves the stash; not a big class's run. */
static inline bool stashable(const span_t *sp) {
  return !sp->run || span_nslots(sp) == 1u << sp->order;
}

/* Empty LISTED span, claimed (state FREE) by whoever saw its last block come
 * back: off the list, unless the owner already took it off, and to the
 * owner's stash when the owner's own free emptied it, else to the pool.
 * Once FREE the span is never listed again, and `heap` can only change to
 * NULL (list_unlink), under the lock taken here. */
void heap_claimed(span_t *sp, bool whole) {
  race_window();
  heap_t *owner = atomic_load_explicit(&sp->heap, ACQ); /* list_unlink */
  span_t *out = sp;
  if (owner) { /* NULL: taken off the orphanage's list already */
    spin_lock(&owner->lock);
    if (atomic_load_explicit(&sp->where, RLX) == AT_LISTED) list_unlink(owner, sp);
    dbg_event(sp, EV_CLAIM);
    if (owner == rill_tls && sp->order < STASH_ORDERS && stashable(sp)) {
      sp->whole = whole; /* every carved block on its local lists */
      out = stash_push_locked(owner, sp);
    }
    spin_unlock(&owner->lock);
  }
  if (out)
    pool_put(out);
  else
    pool_pages_arrived(); /* a purger asleep must wake to flush the stash */
}

/* Claims a LISTED span whose blocks are all back (its owner's `used` equals
 * the remote count). `used` was read after `x`, so it holds for x's listing
 * only: a failed CAS retries while the tag is x's (new_tag). */
static bool listed_claim(span_t *sp, uint64_t x, uint32_t used) {
  race_window();
  uint64_t tag = x & XF_TAG_MASK;
  while (XF_STATE(x) == ST_LISTED && XF_COUNT(x) == used && (x & XF_TAG_MASK) == tag) {
    if (atomic_compare_exchange_weak_explicit(&sp->xf, &x, XF_MAKE(ST_FREE, 0, 0), ACQ, RLX)) {
      heap_claimed(sp, used == 0);
      return true;
    }
  }
  return false;
}

/* A new tag for the xf word of a span its holder lets go, listed or
 * floating: it differs from the span's last 511. A claimant holds the word it
 * read and the `used` it read after it (listed_claim, span_free_remote):
 * within one listing `used` only falls and the count only rises, so the pair
 * can miss an empty span but never claim a live one. Across listings it
 * could: an exiting thread put an orphan with all its blocks back and was
 * delayed before its claim; another thread adopted the span, allocated from
 * it and left it to the orphanage again, two blocks out; the delayed claim's
 * CAS failed, and its retry, with the word read again but the old `used`,
 * pooled the span (stress churn, RILL_DEBUG with race windows, 1 run in 20).
 * The tag also fails a first CAS that would meet the same count and head
 * again, and a floating span's remote free, which weighs the `fused` it read
 * after the word, the same way. The holder has the span alone, and the xf
 * word's release and acquire order one holder's write before the next one's
 * read. */
static uint64_t new_tag(span_t *sp) {
  _Atomic uint16_t *t = &rill_arena.tags[span_index(sp)]; /* 2^16 tags: a multiple of 512 */
  uint16_t n = (uint16_t)(atomic_load_explicit(t, RLX) + 1);
  atomic_store_explicit(t, n, RLX);
  return (uint64_t)n << 52 & XF_TAG_MASK;
}

/* Attached span -> LISTED on this heap's reusable list (scalloc: reusable).
 * It may be empty already, when remote frees outran the owner. An attached
 * span's word has no tag, so one OR sets state and tag. */
static void list_push(heap_t *h, span_t *sp) {
  spin_lock(&h->lock);
  list_link(h, sp);
  atomic_store_explicit(&sp->check, 1, RLX);
  uint64_t tag = XF_MAKE(ST_LISTED, 0, 0) | new_tag(sp);
  uint64_t x = atomic_fetch_or_explicit(&sp->xf, tag, ACQREL) | tag;
  if (XF_COUNT(x)) atomic_store_explicit(&sp->check, CHECK_ALL, RLX);
  dbg_event(sp, EV_LIST_PUSH);
  spin_unlock(&h->lock);
  listed_claim(sp, x, used_get(sp));
}

/* LISTED -> ATTACHED for a span just unlinked under the lock: its remote
 * list becomes local. False when a free claimed it first (it pools it). */
static bool listed_detach(span_t *sp) {
  race_window();
  uint64_t x = atomic_load_explicit(&sp->xf, RLX);
  while (XF_STATE(x) == ST_LISTED)
    if (span_attach(sp, &x)) return true;
  return false;
}

/* ---- spans handed back by other threads --------------------------------- */
/* Partly free spans of exited threads (Streamflow §3.1.1 "Thread
 * termination") are listed on a heap no thread owns: the claim that returns
 * an owned listed span at its last free returns an orphan the same way, and
 * any heap adopts from it. */
static heap_t orphanage = {FIXED_HEAP(2 + SHARED_N)}; /* declared above, by the shared heaps */

/* Lists a span that is not attached anywhere (floating, queued, or released
 * by its exiting owner) on heap `to`, whose lock the caller holds. Its `used`
 * is the one its last owner froze. */
static _Atomic bool shared_listed; /* shared_adopt */
static uint64_t list_hand_locked(heap_t *to, span_t *sp) {
  list_link(to, sp);
  if (heap_is_shared(to) && !atomic_load_explicit(&shared_listed, RLX))
    atomic_store_explicit(&shared_listed, true, RLX);
  atomic_store_explicit(&sp->check, CHECK_ALL, RLX);
  span_set_heap(sp, to);
  atomic_store_explicit(&sp->attached, to == &orphanage ? NULL : to, REL);
  uint64_t x = atomic_load_explicit(&sp->xf, RLX), tag = new_tag(sp);
  while (!atomic_compare_exchange_weak_explicit(&sp->xf, &x, XF_WITH(ST_LISTED, x) | tag,
                                                memory_order_seq_cst, RLX)) {
  }
  dbg_event(sp, to == &orphanage ? EV_ORPHAN : EV_HAND);
  return XF_WITH(ST_LISTED, x) | tag;
}

/* `lender`: the idle owner whose span this is (heap_lend, heap_queue), or
 * NULL for a finished thread's. Under the orphanage's lock, where heap_take
 * reads it; may_take reads it without the lock first. */
static void orphan_put(span_t *sp, heap_t *lender) {
  spin_lock(&orphanage.lock);
  if (lender)
    __atomic_store_n(&sp->lender_gen, atomic_load_explicit(&lender->gen, RLX), __ATOMIC_RELAXED);
  __atomic_store_n(&sp->lender, lender, __ATOMIC_RELAXED);
  uint64_t x = list_hand_locked(&orphanage, sp);
  spin_unlock(&orphanage.lock);
  listed_claim(sp, x, __atomic_load_n(&sp->used, __ATOMIC_SEQ_CST));
}

/* Set with a heap's own hint when a remote free lists a span on its live
 * owner's list, or brings a listed one to a quarter free: an idle owner may
 * hold spans to lend (purger_kick, heap_lend_idle). */
_Atomic uint32_t lend_hint;

static void lend_hint_on(heap_t *h) {
  if (!atomic_load_explicit(&h->lend_hint, RLX)) atomic_store_explicit(&h->lend_hint, 1, RLX);
  if (!atomic_load_explicit(&lend_hint, RLX)) atomic_store_explicit(&lend_hint, 1, RLX);
}

void heap_lend_hint(span_t *sp) {
  heap_t *owner = atomic_load_explicit(&sp->heap, RLX);
  if (owner && owner != &orphanage) lend_hint_on(owner);
}

/* A remote free moved a floating span past the reuse mark (scalloc:
 * floating -> reusable): the freer links it into its owner's reusable list
 * itself, under the owner's list lock, so it is reusable at once and is
 * claimed like any listed span when its last block comes back (Hoard's
 * emptiness threshold keeps the footprint bounded, §3.1). A closed heap
 * (owner gone) refuses, and the span goes to the orphanage; so does a heap
 * whose idle owner lent its spans (heap_lend_idle). */
void heap_queue(span_t *sp) {
  heap_t *owner = atomic_load_explicit(&sp->heap, RLX);
  if (owner) {
    spin_lock(&owner->lock);
    if (!owner->closed && !atomic_load_explicit(&owner->lent, RLX)) {
      uint64_t x = list_hand_locked(owner, sp);
      spin_unlock(&owner->lock);
      lend_hint_on(owner);
      listed_claim(sp, x, __atomic_load_n(&sp->used, __ATOMIC_SEQ_CST));
      return;
    }
    bool gone = owner->closed;
    spin_unlock(&owner->lock);
    orphan_put(sp, gone ? NULL : owner);
    return;
  }
  orphan_put(sp, NULL);
}

/* ---- allocation slow path ---------------------------------------------- */
/* Detaches a full hot span (scalloc: hot -> floating). The CAS succeeds only
 * if no remote free arrived, so a span is never floated with free blocks
 * nobody would notice (Streamflow's orphaning CAS, §3.1.1). */
static bool heap_retire(heap_t *h, span_t *sp) {
  atomic_store_explicit(&sp->fused, used_get(sp), RLX);
  atomic_store_explicit(&sp->attached, NULL, RLX);
  atomic_store_explicit(&sp->where, AT_NONE, RLX);
  uint64_t expect = XF_MAKE(ST_ATTACHED, 0, 0);
  if (atomic_compare_exchange_strong_explicit(&sp->xf, &expect,
                                              XF_MAKE(ST_FLOATING, 0, 0) | new_tag(sp), REL, RLX)) {
    hot_set(h, sp->cls, &rill_empty_span);
    dbg_event(sp, EV_RETIRE);
    return true;
  }
  atomic_store_explicit(&sp->attached, h, RLX);
  atomic_store_explicit(&sp->where, AT_HOT, RLX);
  span_collect(sp);
  return false;
}

/* Free blocks of a span on this heap's list (never cut, local and remote).
 * Remote frees count only once `check` says some are pending (a freer sets
 * it just after its push), so a span weighed by list_pop costs one cache
 * line, the owner's, not three: shbench's span changes walk several. */
static uint32_t listed_room(const span_t *sp) {
  uint32_t room = sp->cap - used_get(sp);
  if (atomic_load_explicit(&sp->check, RLX) == CHECK_ALL)
    room += XF_COUNT(atomic_load_explicit(&sp->xf, RLX));
  return room;
}

/* Next hot span for a class: this heap's reusable spans (some handed back by
 * other threads' frees), orphans of exited threads, then an empty span from
 * the pool (scalloc Listing 3, get_span).
 * A span goes back on its owner's list at the owner's first free into it
 * (heap_free_slow), to keep the owner's frees on the fast path. Taken back
 * with a block or two, it serves as many mallocs and goes full again: a span
 * change per few mallocs. So a listed span is taken only with enough free
 * blocks (an emptiness threshold as in Hoard, §3.1), in two tiers:
 *  - of the first POP_SCAN spans, the lowest-addressed with an eighth of its
 *    blocks free;
 *  - failing that, the lowest-addressed with a sixteenth;
 *  - the others looked at are moved to the back (below), and the caller
 *    takes a span from the pool if none passed.
 * With a sixteenth alone, the soak's listed spans came back with 7% of their
 * blocks free on average, and 1.5% of its mallocs changed spans: that was its
 * malloc p99 (90-120 ns against 40 for mimalloc at one thread). Preferring an
 * eighth cut span changes by half to two thirds (0.6%; p99 40-50 ns) for
 * +0.5% RSS; an eighth alone cut them by two thirds but cost +3.5% RSS at
 * four threads, a quarter by 98% for +8%.
 * Lowest address first: a fixed order starves the spans at the far end, so
 * their blocks die and they go to the pool empty. Taking the first that
 * passed kept every listed span in turn, each part full, and the spans a
 * burst of live blocks had pulled in never came back: the 30-minute soak's
 * RSS rose in steps with the count of listed spans (363 -> 427, drift +9.3%;
 * in 300-second runs side by side, +13.2% against +0.9% this way). The pool
 * reuses by address for the same reason (first fit by address, see pool.c).
 * Every span looked at and not taken goes to the back, so the look walks
 * the whole list in turn, eight spans per span change. It used to keep the
 * spans that passed in front, and a worker of RocksDB's cache_bench (four
 * workers evicting each other's entries from a 64 MiB LRU cache, hundreds of
 * listed spans each) then looked at the same few spans at every change:
 * the spans further down filled with free blocks no one looked at (one
 * worker's list came to hold half its bytes free), while the other workers
 * faulted in fresh spans, and the peak grew with the run's length (3
 * million operations per worker, median of 5: 110 MiB, 99 now; tcmalloc
 * 83). Looking 64 deep instead did as well for memory (94.5) but cost the
 * run a fifth of its throughput. Lowest address still wins within each
 * look, so the spans at high addresses are rarely taken and drain
 * (test_memory's drain case: 10 spans in use where 8 would do, as before).
 * `any` takes the first span, however full. */
#define POP_SCAN 8
/* Moves the first spans of a list, from its head to `last`, to its back in
 * their order: four links, where moving them one by one rewrote the links
 * of every span looked at and of its neighbours (h's lock held). */
static void list_rotate(heap_t *h, unsigned cls, span_t *last) {
  heap_lists_t *ls = lists(h);
  span_t *head = ls->list[cls], *tail = ls->tail[cls], *rest = last->next;
  if (!rest) return; /* all of the list: the order is already the same */
  rest->prev = NULL;
  list_head_set(h, cls, rest);
  tail->next = head;
  head->prev = tail;
  last->next = NULL;
  ls->tail[cls] = last;
}

static span_t *list_pop(heap_t *h, unsigned cls, bool any) {
  spin_lock(&h->lock);
  span_t *best;
  do {
    best = NULL;
    unsigned best_tier = 0; /* 2: an eighth free, 1: a sixteenth */
    span_t *sp = lists(h)->list[cls], *last = NULL;
    for (unsigned seen = 0; sp && seen < POP_SCAN; seen++) {
      if (any) {
        best = sp;
        break;
      }
      uint32_t room = listed_room(sp);
      unsigned tier = room >= sp->cap / 8 && room ? 2 : room >= sp->cap / 16 && room ? 1 : 0;
      if (tier > best_tier || (tier && tier == best_tier && sp < best)) {
        best = sp;
        best_tier = tier;
      }
      last = sp;
      sp = sp->next;
    }
    /* every span looked at and not taken goes to the back */
    if (last == best && last) last = best->prev;
    if (best) list_unlink(h, best);
    if (last) list_rotate(h, cls, last);
  } while (best && !listed_detach(best));
  if (best) dbg_event(best, EV_LIST_POP);
  spin_unlock(&h->lock);
  return best;
}

/* Adopts a span listed on `from` (the orphanage, or a shared heap): it
 * becomes this heap's, its remote list local. */
static span_t *adopt_from(heap_t *h, heap_t *from, unsigned cls, bool any) {
  span_t *sp;
  if (!__atomic_load_n(&lists(from)->list[cls], __ATOMIC_RELAXED)) return NULL;
  while ((sp = list_pop(from, cls, any)) != NULL) {
    span_set_heap(sp, h);
    if (used_get(sp) == 0) {
      pool_put(sp);
      continue;
    }
    atomic_store_explicit(&sp->attached, h, RLX);
    dbg_event(sp, EV_ADOPT);
    return sp;
  }
  return NULL;
}

/* Partly free spans of the shared heaps, listed once young threads' blocks
 * in them came back (heap_queue): any thread adopts them as it adopts
 * orphans, once the crowd has gone. Left to young threads alone, they
 * waited for the next crowd, and a server whose crowd of connections had
 * gone kept their free room resident (1,000 young threads each keeping 8 of
 * 64 blocks, then one thread allocating 40,000: RSS grew 9.4 MiB, 3.6 with
 * this). Only classes that are multiples of a line, so the adopter's blocks
 * share no line with the young blocks still live there; and only when no
 * young malloc ran since the last timed pass (young_beat): adopting while
 * young threads still came and went raised larson-bleed's peak RSS at 64
 * threads by 6-15% (docs/design.md, "Young blocks"). `shared_listed` keeps
 * the look to one load in a program that never had a crowd. */
static span_t *shared_adopt(heap_t *h, unsigned cls) {
  if (!atomic_load_explicit(&shared_listed, RLX) || heap_is_shared(h) || cls >= NDIRECT_CLS ||
      young_cls[cls] != cls || atomic_load_explicit(&young_beat, RLX) == pool_epoch())
    return NULL;
  for (unsigned i = 0; i < SHARED_N; i++) {
    unsigned k = (h->id + i) % SHARED_N;
    span_t *sp = shared_in_use(k) ? adopt_from(h, &shared[k], cls, false) : NULL;
    if (sp) return sp;
  }
  return NULL;
}

/* The last resort, once the arena is spent (under an address-space limit,
 * or past 1 TiB), for a run of n slots or a small class's span of order o
 * (o < 0 for a run): any shard's free run or wilderness (small classes
 * take free runs here whatever their pages or age: pool_from_runs takes
 * only those that hold pages and are open to them), the pool's spans of
 * order o,
 * then pooled spans with or without pages made into runs until they make n
 * or the pool is empty, then what purge passes in flight had out (twice at
 * most: a purger at a short delay is always in one). A small span cut from
 * the runs goes back to them when it empties (pool_put). */
static span_t *spent_take(heap_t *h, size_t n, int o) {
  for (int waits = 0;;) {
    span_t *sp = run_get_last(n, h->id);
    if (!sp && o >= 0) sp = pool_take((unsigned)o);
    if (sp) return sp;
    if (!pool_spill_spent(n, h->id) && (waits++ == 2 || !pool_purge_wait())) return NULL;
  }
}

/* A run of n slots: a free run that holds pages, else one made of pooled
 * spans that hold pages (pool_spill), else any free run, else never-used
 * slots (run_get tries the free runs again before it cuts the wilderness),
 * else the last resort. Resident memory of either kind comes before a free
 * run the purge emptied: four threads that changed block size every phase
 * (bench_phases) took runs the growth swap had given back, faulting them in
 * again, while the last phase's spans sat resident in the pool. */
static void cache_growing(heap_t *h);
static span_t *run_for(heap_t *h, size_t n, bool own) {
  span_t *sp = run_get_warm(n, h->id, own);
  if (!sp && pool_spill(n, h->id)) sp = run_get_warm(n, h->id, own);
  if (!sp) sp = run_get_free(n, h->id, own);
  if (!sp) {
    pool_purge_stale(); /* the wilderness next, maybe: growing */
    sp = run_get(n, h->id, own);
  }
  if (sp) {
    size_t clean = run_clean_slots(sp);
    pool_grew(clean); /* the growth swap (pool.c) */
    if (clean) cache_growing(h);
  }
  return sp || own ? sp : spent_take(h, n, -1);
}

static size_t heap_sweep(heap_t *h);
static void cache_trim(heap_t *h);
static void batch_push(heap_t *h, bool owner);
static _Atomic uint64_t stash_beat; /* the pool epoch whose stash flush has run */

static span_t *heap_next_span(heap_t *h, unsigned cls) {
  if (!heap_is_shared(h)) dbg_heap_mine(h);
  /* once per timed purge pass, pool what lost the eager-return race, so it
   * is purged on the same delay as the rest (heap_sweep) */
  if (unlikely(atomic_load_explicit(&h->lent, RLX))) atomic_store_explicit(&h->lent, false, RLX);
  uint64_t e = pool_epoch();
  if (unlikely(e != atomic_load_explicit(&h->swept, RLX))) {
    atomic_store_explicit(&h->swept, e, RLX);
    h->let_go = 0;
    cache_trim(h);
    batch_push(h, true);
    heap_sweep(h);
    uint64_t b = atomic_load_explicit(&stash_beat, RLX);
    if (b != e && atomic_compare_exchange_strong_explicit(&stash_beat, &b, e, RLX, RLX))
      heap_stashes_flush(); /* the first heap to see the beat: idle threads' stashes too */
  }
  _Atomic uint32_t *changes = &cpu_changes[os_cpu(MAX_STRIPES)].n;
  atomic_store_explicit(changes, atomic_load_explicit(changes, RLX) + 1, RLX);
  span_t *sp = list_pop(h, cls, false);
  if (sp) {
    uint32_t now = atomic_load_explicit(&cpu_changes[sp->listed_cpu].n, RLX);
    if (now - sp->listed_at >= COLD_CHANGES && sp->bsize <= PREFETCH_BSIZE_MAX) span_prefetch(sp);
    return sp;
  }
  sp = adopt_from(h, &orphanage, cls, true);
  if (sp) return sp;
  sp = shared_adopt(h, cls);
  if (sp) return sp;
  /* Spans of 128 KiB and up come from the runs that hold large objects,
   * which split and merge: as pool spans, each order served only itself,
   * so a program whose mix of big sizes moved took fresh spans of one order
   * while resident ones of the others sat idle until purged (the sizes
   * benchmark at 64-256 KiB and two threads: peak RSS 1.41x glibc's, growing
   * with every cycle). Such spans hold two or three blocks of 40 KiB or
   * more, so the runs' lock is taken per few big mallocs at most. A run
   * is cut to the blocks it holds (class_slots). Classes over 4 KiB take
   * runs too, of the slots their blocks fill exactly (span.c): a shard's
   * lock per 2-16 blocks of 5-32 KiB, each block written by its program. */
  unsigned o = class_order(cls);
  if (!class_is_run(cls)) {
    sp = stash_pop(h, o);
    /* pool_take and pool_fresh read the clock for the timed passes; a
     * thread that lives on its stash must keep them beating too (a pass is
     * due every quarter delay, so one look per 32 spans is plenty) */
    if (sp && (++h->stash_pops & 31) == 0) pool_tick(os_now_ms());
    /* the pool, then other heaps' stashes, before fresh memory */
    bool stashed = sp != NULL;
    if (!sp && !(sp = pool_take(o))) {
      sp = stash_steal(h, o);
      stashed = sp != NULL;
      if (!sp) {
        pool_purge_stale(); /* growing */
        sp = pool_from_runs(o, h->id);
        if (!sp) sp = pool_fresh(o, &h->chunk);
        if (!sp) sp = spent_take(h, (size_t)1 << o, (int)o);
      }
    }
    /* never-used or given-back memory, from the pool or the chunk: idle
     * owners' spans may do for the next span changes, and as much free
     * memory as it faults in goes back (the growth swap, pool.c) */
    if (sp && sp->fresh) {
      cache_growing(h);
      purger_kick();
      pool_grew_small((size_t)1 << o);
    }
    /* back for its own class with its lists whole: the frees linked every
     * block already, so nothing is formatted or carved again (threadtest
     * 0.88-0.94x the time). A span from the pool may carry a stale `whole`
     * from an earlier stay in a stash: it is formatted afresh. */
    if (stashed && sp->cls == cls && sp->whole && span_list_ordered(sp)) {
      span_rewarm(sp, h);
      return sp;
    }
  } else {
    sp = run_for(h, class_slots(cls), false);
  }
  if (sp) {
    uint64_t bit = (uint64_t)1 << cls;
    span_init_class(sp, cls, h, h->warm & bit);
    h->warm |= bit;
    return sp;
  }
  return list_pop(h, cls, true); /* out of memory: any span with a free block */
}

/* ---- the block cache: big blocks kept for the thread's next mallocs ------
 * The spans of classes over 8 KiB hold 2-16 blocks (span.c, exact runs), so
 * a program that replaces such buffers at random changes span at nearly
 * every call: its free finds a full span floating (heap_take: a CAS and a
 * list lock), its next malloc an empty hot span (hot_lock, list_pop). Each
 * locked instruction waits for the program's stores into the buffer it has
 * just filled: 16-64 KiB buffers took 2.3x mimalloc's time and 3.6x
 * tcmalloc's (docs/benchmarks.md, "Big buffers replaced at random"). So the
 * owner's free of such a block into its own floating span pushes it on a
 * stack per class in its heap, and a malloc that finds its hot span empty
 * pops from there first: plain loads and stores, as in Streamflow's
 * thread-local free lists (§3.1.1) or a tcmalloc thread cache. A cached
 * block stays counted as out in its span, which cannot empty meanwhile, so
 * the stacks are bounded: CACHE_N blocks a class, cache_budget() in all; each
 * beat a stack gives back the blocks it kept unused through the last one
 * (cache_trim); the purger drains an idle owner's stacks (heap_lend),
 * rill_collect the caller's, and a thread drains its own at exit. */
#define CACHE_N         64
#define CACHE_BYTES     ((uint32_t)4 << 20)  /* a thread's, while 8 threads or fewer live */
#define CACHE_BYTES_ALL ((uint32_t)32 << 20) /* all threads': more share it */

/* A thread's bound: 4 MiB, a tcmalloc thread cache's most, while up to 8
 * threads live; beyond, 32 MiB (tcmalloc's default for all its thread
 * caches) shared evenly, so that a thousand threads do not keep 4 MiB each.
 * Shared by a power of two at least their number, 4 workers and the main
 * thread had 2 MiB each, and 16 workers 512 KiB: 16-64 KiB buffers replaced
 * at random took 1.18-1.25x the time they take now (docs/benchmarks.md,
 * "The block cache's budget"). */
static _Atomic uint32_t cache_cap = CACHE_BYTES;
static inline uint32_t cache_budget(void) {
  return atomic_load_explicit(&cache_cap, RLX);
}
/* Worked out whenever heaps_live moves, so that a kept block's free divides
 * by nothing. Two threads that start or exit at once may leave the bound of
 * the count just before; the next start or exit sets it right. */
static void live_moved(void) {
  uint32_t live = atomic_load_explicit(&heaps_live, RLX);
  STORE_NEW(&cache_cap,
            live <= CACHE_BYTES_ALL / CACHE_BYTES ? CACHE_BYTES : CACHE_BYTES_ALL / live);
}
/* The owner's free of b into its own floating span sp: kept if there is
 * room. It is free's first test past the fast path, inline, so a kept block
 * costs no call and no saved registers (heap_free_slow). b is checked here,
 * as free_fast checks it: the block test rejects an interior or uncut
 * address, and the head test catches the common double free. */
static inline bool cache_put(heap_t *h, span_t *sp, block_t *b, const char *fn) {
  unsigned i = sp->cls - CACHE_CLS0;
  if (i >= NCACHE || atomic_load_explicit(&sp->heap, RLX) != h ||
      XF_STATE(atomic_load_explicit(&sp->xf, RLX)) != ST_FLOATING)
    return false;
  /* cache_off first: while it is set the purger owns the stacks and counts */
  if (atomic_load_explicit(&h->cache_off, ACQ)) return false;
  uint32_t bytes = atomic_load_explicit(&h->cache_bytes, RLX) + sp->bsize;
  if (h->cache_n[i] >= CACHE_N || bytes > cache_budget()) return false;
  if (unlikely(block_test(sp, (uintptr_t)b - sp->start) >= sp->limit || b == h->cache[i]))
    rill_invalid(fn, b);
  b->next = h->cache[i];
  h->cache[i] = b;
  __atomic_store_n(&h->cache_n[i], (uint8_t)(h->cache_n[i] + 1), __ATOMIC_RELAXED);
  atomic_store_explicit(&h->cache_bytes, bytes, RLX);
  owner_release(h); /* TSan builds only (heap_lend drains an idle owner's stacks) */
  return true;
}

/* Blocks of class cls in every heap's cache or batch of remote frees, for
 * rill_stats: counted out by their spans, but free. A snapshot, like the
 * rest of the statistics. */
uint32_t heap_kept(unsigned cls) {
  unsigned i = cls - CACHE_CLS0;
  uint32_t n = 0, top = heap_count();
  if (top > max_heaps) top = max_heaps;
  for (uint32_t k = 0; k < top; k++) {
    if (i < NCACHE) n += __atomic_load_n(&heaps[k].cache_n[i], __ATOMIC_RELAXED);
    n += __atomic_load_n(&heaps[k].batch_cls[cls], __ATOMIC_RELAXED);
  }
  return n;
}

/* Arms a hot span (hot_emptied) once it has blocks on more than a page, so
 * a class whose blocks fit in one page does not pay slow paths to give back
 * that page; not twice for a class on one beat (let_go). */
static void hot_arm(heap_t *h, span_t *sp) {
  if (!(h->let_go & ((uint64_t)1 << sp->cls)) && (size_t)sp->carved * sp->bsize > rill_arena.page)
    atomic_store_explicit(&sp->check, 1, RLX);
}

/* The hot span changes under hot_lock, so the purger, which takes the hot
 * spans of an owner asleep in a wait and puts them back if the owner ran
 * meanwhile (heap_lend), never meets a change half made. The owner reads
 * hot[] again under the lock: the purger may have taken or put back the
 * span since. The pop itself needs no lock (the purger takes a span only
 * while its owner sleeps). */
void *heap_alloc_class(heap_t *h, unsigned cls) {
  span_t *sp = hot_get(h, cls);
  /* a thread grown up keeps taking young blocks in its young classes */
  if (sp == &rill_empty_span && young_wants(cls) && !heap_is_shared(h)) {
    void *p = young_alloc(cls);
    if (p) return p;
  }
  block_t *b = sp->free;
  if (!b && cls - CACHE_CLS0 < NCACHE && (b = heap_cache_take(h, cls - CACHE_CLS0)) != NULL)
    return b;
  if (!b) {
    spin_lock(&h->hot_lock);
    for (;;) {
      sp = hot_get(h, cls);
      if ((b = sp->free) != NULL) break;
      if (sp != &rill_empty_span) {
        if (span_refill(sp)) {
          hot_arm(h, sp);
          continue;
        }
        if (!heap_retire(h, sp)) continue;
      }
      sp = heap_next_span(h, cls);
      if (!sp) {
        spin_unlock(&h->hot_lock);
        return NULL;
      }
      hot_set(h, cls, sp);
      atomic_store_explicit(&sp->where, AT_HOT, RLX);
      hot_arm(h, sp);
    }
    spin_unlock(&h->hot_lock);
  }
  race_nap();
  sp->free = b->next;
  used_inc(sp);
  dbg_alloc(sp, b);
  owner_release(h); /* TSan builds only (heap_lend) */
  return b;
}

/* Any request on a set-up heap. Aligned requests pick the first class whose
 * size and colour (class_color) are multiples of the alignment: blocks sit
 * at multiples of their size from the colour past a slot-aligned (16 KiB)
 * span start, so they come out aligned. The colour of 256, 512 and 1,024 B
 * (128) is not a multiple of 256-1,024, so those alignments take the
 * classes' uncoloured twins: a block of 256 B aligned to 256 took the 1,280
 * B class, which 100,000 of them made 126 MiB (jemalloc 28). The run classes
 * whose spans take a colour of their own (class_run_coloured) keep only
 * COLOUR_STEP's alignment; larger alignments pass them by. */
static unsigned class_for(size_t n, size_t align) {
  size_t m = n > align ? n : align;
  if (m > CLASS_MAX || align > SLOT_SIZE) return CLS_LARGE;
  unsigned c = size_class(m);
  /* every class size and colour is a multiple of 16 (test_classes): malloc's
   * slow path, once per span change, divides by nothing */
  if (align <= 16) return c;
  for (;; c++) {
    if (c >= NPLAIN) return CLS_LARGE;
    size_t sz = class_size(c);
    if (sz % align || (align > COLOUR_STEP && class_run_coloured(c))) continue;
    if (class_color(c) % align == 0) return c;
    if (!(sz & (sz - 1))) return CLS_TWIN0 + (unsigned)__builtin_ctzll(sz >> 8); /* 256 << k */
  }
}
static void *heap_alloc_any(heap_t *h, size_t n, size_t align, bool *zeroed) {
  unsigned c = class_for(n, align);
  if (c == CLS_LARGE) return large_alloc(h, n, align, zeroed);
  *zeroed = false;
  void *p = heap_alloc_class(h, c);
  /* The arena is full (a small one, under ulimit -v): a block of a page or
   * more takes a mapping of its own, as large blocks do (large_place), where
   * it failed before; smaller ones would waste most of a page each. */
  if (unlikely(!p) && n >= rill_arena.page) {
    *zeroed = true;
    return huge_alloc(n, align);
  }
  return p;
}

/* A thread's first call: global start-up if needed, then a heap record, or
 * in a crowd the young threads' heap (above, "young blocks"). */
heap_t *heap_get_slow(void) {
  if (!atomic_load_explicit(&rill_ready, ACQ) && !rill_init()) return NULL;
  heap_t *h = &young_heap;
  /* Young blocks only in a crowd of threads (above, "young blocks"). The
   * thread counts itself among the record holders before it looks, and
   * until heap_new has counted its record, so threads that start together
   * see each other: read first and counted later, 117 to 681 of 2,000
   * threads starting at once on a loaded machine took records, where
   * YOUNG_THREADS (32) should. */
  uint32_t live =
      atomic_fetch_add_explicit(&heaps_live, 1, RLX) + atomic_load_explicit(&young_live, RLX);
  if (RILL_VARIANT == 0 && live >= YOUNG_THREADS) {
    atomic_fetch_sub_explicit(&heaps_live, 1, RLX);
    uint32_t y = atomic_fetch_add_explicit(&young_live, 1, RLX);
    young_tls = (young_t){.k = (uint8_t)(y % SHARED_N), .left = YOUNG_THREAD_BYTES};
  } else {
    h = heap_new();
    atomic_fetch_sub_explicit(&heaps_live, 1, RLX); /* heap_new counted the record */
    live_moved();
    if (!h) return NULL;
  }
  rill_tls = h;
  rill_thread_register(h);
  purger_thread_seen();
  return h;
}

/* A young thread's remote frees so far, to the count the statistics read. */
static void young_frees_fold(void) {
  if (young_tls.frees) atomic_fetch_add_explicit(&young_frees, young_tls.frees, RLX);
  young_tls.frees = 0;
}

/* A young thread's first request the shared heaps do not serve: from now on
 * it has a heap record of its own, and young blocks only in the classes
 * where it still may (heap_alloc_class). */
static heap_t *heap_grow_up(void) {
  heap_t *h = heap_new();
  if (!h) return &rill_done_heap; /* no record free: the backing heap, and again next time */
  atomic_fetch_sub_explicit(&young_live, 1, RLX);
  young_frees_fold();
  rill_tls = h; /* before the key's value changes: that may allocate */
  rill_thread_register(h);
  return h;
}

/* A request from a young thread: a young block, or a grown-up heap's. */
static void *young_request(size_t n, size_t align, bool *zeroed, heap_t **grown) {
  unsigned c = class_for(n, align);
  if (c != CLS_LARGE && young_wants(c)) {
    void *p = young_alloc(c);
    if (p) {
      *zeroed = false;
      return p;
    }
  }
  *grown = heap_grow_up();
  return NULL;
}

void *heap_alloc_slow(heap_t *h, size_t n, size_t align, bool *zeroed) {
  void *p;
  if (h == &rill_empty_heap) {
    h = heap_get_slow();
    if (!h) h = &rill_done_heap;
  }
  purger_poll(); /* after heap_get_slow: a second thread's first malloc may start it */
  if (h == &young_heap && (p = young_request(n, align, zeroed, &h)) != NULL) return p;
  if (h == &rill_done_heap) {
    if (!atomic_load_explicit(&rill_ready, ACQ) && !rill_init()) return NULL;
    shared_enter(0);
    p = heap_alloc_any(&backing, n, align, zeroed);
    spin_unlock(&backing_lock);
  } else {
    dbg_heap_mine(h);
    p = heap_alloc_any(h, n, align, zeroed);
  }
  return p;
}

/* Heaps for the locked comparison variants; they live for the whole run. */
heap_t *heap_new_variant(void) {
  return heap_new();
}

/* ---- frees that miss the fast path ------------------------------------- */
/* The owner's free emptied its armed hot span (hot_arm). It goes to the
 * stash like a listed span its owner emptied (scalloc's eager return, §3.4,
 * for the hot span too), from there to the pool within
 * a beat and back to the OS after the delay: a thread that frees all it
 * allocated and then waits (a pool worker between requests) kept one span
 * per class it had used, about 430 KiB each for 20 such workers. The next
 * malloc of the class takes it back from the stash warm, its lists whole.
 * A class lets go at most once per beat (let_go), and a span taken back is
 * not armed again meanwhile, so a loop that allocates and frees one block
 * pays two slow paths per beat, not per call. */
static void hot_emptied(heap_t *h, span_t *sp) {
  /* Blocks still out: `check` is not the 1 hot_arm set but CHECK_ALL, left
   * by a remote free that pushed while the span was listed and upgraded
   * `check` after the owner had taken the span back and armed it (the step
   * after span_free_remote's push). Claiming here pooled a span with a block
   * out: a later malloc handed that block out again. Arm the span again; a
   * free in flight can do this at most once each. */
  if (used_get(sp) != 0) {
    atomic_store_explicit(&sp->check, 1, RLX);
    return;
  }
  /* under hot_lock, a change of the hot span: the purger (heap_lend) may
   * have it in hand, taken while this thread woke; it puts it back, armed */
  spin_lock(&h->hot_lock);
  uint64_t x = XF_MAKE(ST_ATTACHED, 0, 0);
  if (hot_get(h, sp->cls) != sp) {
    spin_unlock(&h->hot_lock);
    return;
  }
  atomic_store_explicit(&sp->check, 0, RLX);
  if (!atomic_compare_exchange_strong_explicit(&sp->xf, &x, XF_MAKE(ST_FREE, 0, 0), ACQ, RLX)) {
    spin_unlock(&h->hot_lock);
    return; /* a remote push raced in (a double free): keep it */
  }
  h->let_go |= (uint64_t)1 << sp->cls;
  hot_set(h, sp->cls, &rill_empty_span);
  spin_unlock(&h->hot_lock);
  heap_claimed(sp, true); /* every block it cut is on its local lists */
}

/* The owner's free left a LISTED span with at most one block out besides
 * those on its remote list. When all are back the span goes to the pool at
 * once (scalloc's eager return). Or it emptied an armed hot span (above).
 * With one block out, a remote free of it may be racing with this free: the
 * fence pairs with that free's sequentially consistent push, so one of the
 * two sees the other (a store-buffering pattern; the fence is paid once per
 * span, not per free). */
void heap_span_emptied(heap_t *h, span_t *sp) {
  if (atomic_load_explicit(&sp->where, RLX) == AT_HOT) {
    hot_emptied(h, sp);
    return;
  }
#ifdef RILL_TEST_MISS_EAGER
  /* test builds only (test_eager --missed): every owner free that empties a
   * listed span loses the race above, as if a remote free had raced it */
  return;
#endif
  uint32_t used = used_get(sp);
  uint64_t x = atomic_load_explicit(&sp->xf, RLX);
  if (XF_COUNT(x) != used) {
    atomic_thread_fence(memory_order_seq_cst);
    x = atomic_load_explicit(&sp->xf, RLX);
  }
  listed_claim(sp, x, used);
}

static void large_free(span_t *sp, void *p, const char *fn) {
  uint64_t old = atomic_load_explicit(&sp->xf, RLX);
  do {
    if (XF_STATE(old) != ST_FLOATING) rill_invalid(fn, p);
  } while (!atomic_compare_exchange_weak_explicit(&sp->xf, &old, XF_MAKE(ST_FREE, 0, 0), ACQ, RLX));
  run_put(sp); /* its pages go back after the purge delay */
}

/* Has the thread that owned heap record h as of `gen` exited? The record is
 * closed, or has passed to a later thread since (its gen moved on). */
static bool heap_gone(heap_t *h, uint32_t gen) {
  return __atomic_load_n(&h->closed, __ATOMIC_RELAXED) || gen != atomic_load_explicit(&h->gen, RLX);
}
static bool owner_gone(const span_t *sp, heap_t *owner) {
  return heap_gone(owner, atomic_load_explicit(&sp->heap_gen, RLX));
}

/* May h's free take this orphan? Not if it is a live idle owner's loan and
 * h is not that owner: in RocksDB's cache_bench the workers that evicted
 * most collected the main thread's lent spans by freeing into them (one held
 * 550, 12 MiB free) whatever their own need; left on the orphanage, they go
 * to a thread that needs a span (adopt_from). The lender's own frees take
 * them back: redis's one thread is lent while it waits in epoll_wait, and
 * with its frees refused too its peak rose by 4 MiB. may_take asks first
 * without a lock, heap_take again under the orphanage's. */
static bool loan_ours(const span_t *sp, const heap_t *h) {
  heap_t *l = __atomic_load_n(&sp->lender, __ATOMIC_RELAXED);
  return !l || l == h || heap_gone(l, __atomic_load_n(&sp->lender_gen, __ATOMIC_RELAXED));
}

/* Takes a span that no live thread allocates from for heap h, at the free of
 * one of its blocks: h's own floating span, a floating span whose owner has
 * exited, or an orphan. It becomes one of h's listed spans, so h's further
 * frees into it are plain stores (Streamflow moves a page block to the head
 * of its list on an owner free). Taking the dead owner's spans matters to a
 * thread that inherits a dead thread's blocks (larson's bleeding, a server
 * handing a connection's buffers to a new worker): each of its frees was a
 * CAS on the remote word; now the first free into each span is. A live
 * owner's floating span is left alone: it would give the freer blocks next
 * to objects the owner still uses (Hoard §2.1, passive false sharing).
 * False if the span was not taken (another thread changed it first). */
static NOINLINE bool heap_take(heap_t *h, span_t *sp, block_t *b) {
  dbg_heap_mine(h);
  uint64_t old = atomic_load_explicit(&sp->xf, RLX);
  heap_t *owner = atomic_load_explicit(&sp->heap, RLX);
  if (owner == &orphanage) {
    if (XF_STATE(old) != ST_LISTED) return false;
    spin_lock(&orphanage.lock);
    bool mine = atomic_load_explicit(&sp->heap, RLX) == &orphanage && /* still on its list */
                loan_ours(sp, h);
    if (mine) {
      list_unlink(&orphanage, sp);
      mine = listed_detach(sp); /* false: a free claimed it, and pools it */
    }
    spin_unlock(&orphanage.lock);
    if (!mine) return false;
  } else {
    if (owner != h && owner && !owner_gone(sp, owner)) return false;
    /* Another thread may be taking it too: the local lists are read only by
     * the winner of this CAS, which leaves the remote list on the span and
     * then collects it as its owner. The owner was looked at for this
     * floating only (its tag, new_tag): floated again, the span may be a
     * live owner's. */
    uint64_t tag = old & XF_TAG_MASK;
    do
      if (XF_STATE(old) != ST_FLOATING || (old & XF_TAG_MASK) != tag) return false;
    while (
        !atomic_compare_exchange_weak_explicit(&sp->xf, &old, XF_WITH(ST_ATTACHED, old), ACQ, RLX));
    span_collect(sp);
  }
  span_set_heap(sp, h);
  dbg_event(sp, EV_TAKE);
  b->next = sp->free;
  sp->free = b;
  used_dec(sp, used_get(sp) - 1);
  atomic_store_explicit(&sp->attached, h, RLX);
  list_push(h, sp);
  return true;
}

/* Could heap_take take the span? A cheap look first, so that the usual
 * remote free (into another live thread's hot, listed or floating span)
 * stays a short path: heap_take, out of line, checks again under its CAS or
 * lock. An exited or young thread owns nothing (owns_nothing). */
static inline bool may_take(const heap_t *h, span_t *sp) {
  unsigned st = XF_STATE(atomic_load_explicit(&sp->xf, RLX));
  heap_t *owner = atomic_load_explicit(&sp->heap, RLX);
  if (owns_nothing(h)) return false; /* rill_empty_heap: its heap_get_slow failed */
  /* a loan refused here costs no global lock: each free into another
   * thread's loan would take the orphanage's lock only to be refused */
  if (st == ST_LISTED) return owner == &orphanage && loan_ours(sp, h);
  return st == ST_FLOATING && owner != &orphanage &&
         (owner == h || !owner || owner_gone(sp, owner));
}

/* ---- remote frees in batches -------------------------------------------- */
/* A remote free of a small block is the free that misses: it writes its link
 * into a block another core wrote last, and swaps the span's remote word,
 * which the owner swaps too when it collects. One by one, with 2.5% of the
 * blocks freed by another worker, that put the soak's free p99 at 2-3x
 * jemalloc's (docs/benchmarks.md, "Remote frees in batches"). So a thread
 * keeps such frees as pointers, BATCH_N of them, and pushes them together:
 * the blocks' lines and their spans' remote words are prefetched for all of
 * them first, so their misses overlap, and the free that fills the batch
 * pays for all (snmalloc batches its remote frees by destination too). Each
 * block still goes back to its owner's span by the CAS of span_free_remote
 * (Streamflow §3.1.1), and none is reused by the thread that freed it (Hoard
 * §2.1). But a kept block stays counted out in its span, so a span its last
 * remote free empties goes back when the batch is pushed, not at once
 * (scalloc's eager return): hence an option, RILL_REMOTE_BATCH=1, off by
 * default. To tell whether a free would empty its span the freer would have
 * to read the remote word, and that read is the miss (its free p99 stayed
 * where it was). The delay is bounded: BATCH_N blocks of BATCH_BSIZE bytes
 * at most, pushed when the batch fills, at the thread's first span change of
 * a beat, at rill_collect and at exit; the purger pushes an idle thread's
 * (heap_lend), under cache_off as for the block cache. */
static void batch_push(heap_t *h, bool owner) {
  uint32_t n = atomic_load_explicit(&h->batch_n, RLX);
  if (!n || (owner && atomic_load_explicit(&h->cache_off, ACQ))) return;
  for (uint32_t i = 0; i < n; i++) {
    __builtin_prefetch(h->batch[i], 1);
    __builtin_prefetch(&span_at((uintptr_t)h->batch[i] - rill_arena.base)->xf, 1);
  }
  uint64_t pushed = 0;
  for (uint32_t i = 0; i < n; i++) {
    block_t *b = h->batch[i];
    span_t *sp = span_at((uintptr_t)b - rill_arena.base);
    /* its class's count goes (the blocks of one span, chained below, share it) */
    if (h->batch_cls[sp->cls]) __atomic_store_n(&h->batch_cls[sp->cls], 0, __ATOMIC_RELAXED);
    if (owner && attached_to(sp, h)) {
      /* taken over since (below, or by a free after the block was kept):
       * the owner's free, as in free_fast, with its eager return, but for a
       * hot span, which stays: letting it go takes hot_lock, which the
       * caller may hold (heap_next_span) */
      uint32_t u = owner_push(sp, b, sp->free);
      if (owner_emptied(sp, u) && atomic_load_explicit(&sp->where, RLX) != AT_HOT)
        heap_span_emptied(h, sp);
      continue;
    }
    /* an orphan, or its owner has exited: the freer takes the span over
     * (may_take), as the block's free would have without the batch */
    if (owner && may_take(h, sp) && heap_take(h, sp, b)) continue;
    /* the blocks kept next for the same span go with it, in one CAS (a
     * producer's consumer frees whole runs of one span) */
    block_t *last = b;
    uint32_t k = 1;
    for (; i + 1 < n && span_at((uintptr_t)h->batch[i + 1] - rill_arena.base) == sp; i++, k++)
      last = last->next = h->batch[i + 1];
    span_free_remote_n(sp, b, last, k, span_block_key(sp, (uintptr_t)b));
    pushed += k;
  }
  atomic_store_explicit(&h->batch_n, 0, RLX);
  atomic_store_explicit(&h->remote_frees, atomic_load_explicit(&h->remote_frees, RLX) + pushed,
                        RLX);
}

/* Keeps b, a block of another thread's span, for the next batch_push. It
 * reads nothing the owner writes: neither the span's remote word nor the
 * owner's record (whether it has exited is batch_push's question). An
 * orphan's block takes the usual path (may_take). Not a
 * shared heap's (the comparison variants, the young): they have no owner to
 * push at exit. The last block kept is compared with b, as free_fast
 * compares the list head, for the common double free. */
static NOINLINE bool batch_put(heap_t *h, span_t *sp, block_t *b, const char *fn) {
  if (sp->bsize > BATCH_BSIZE || owns_nothing(h) || heap_is_shared(h)) return false;
  heap_t *owner = atomic_load_explicit(&sp->heap, RLX);
  if (owner == h || !owner || owner == &orphanage || atomic_load_explicit(&h->cache_off, ACQ))
    return false;
  uint32_t n = atomic_load_explicit(&h->batch_n, RLX);
  if (unlikely(n && h->batch[n - 1] == b)) rill_invalid(fn, b);
  h->batch[n] = b;
  __atomic_store_n(&h->batch_cls[sp->cls], (uint8_t)(h->batch_cls[sp->cls] + 1), __ATOMIC_RELAXED);
  atomic_store_explicit(&h->batch_n, n + 1, RLX);
  if (n + 1 == BATCH_N) batch_push(h, true);
  owner_release(h); /* TSan builds only (heap_lend pushes an idle owner's batch) */
  return true;
}

/* A free whose span is not attached to this thread's heap: the block cache
 * keeps it if it can (cache_put); else the span is taken over when nobody
 * allocates from it (heap_take); otherwise the block goes on the span's
 * remote list. The cache's test comes first and alone, with the rest out of
 * line (free_other): as one function, a kept block paid for the registers
 * the other paths save, 80 instructions a free where now 48 (callgrind,
 * randalloc at 16-64 KiB). */
static NOINLINE void free_other(void *p, span_t *sp, heap_t *h, const char *fn);
static NOINLINE void free_batched(void *p, span_t *sp, heap_t *h, const char *fn);
void heap_free_slow(void *p, span_t *sp, heap_t *h, const char *fn) {
  if (cache_put(h, sp, p, fn)) return;
  /* RILL_REMOTE_BATCH apart, so free_other stays as it was without it: in
   * it, the batch's test cost remote frees 8 instructions (callgrind) */
  if (RILL_VARIANT == 0 && unlikely(rill_opt.remote_batch))
    free_batched(p, sp, h, fn);
  else
    free_other(p, sp, h, fn);
}

/* A checked block of a small class, freed by a thread whose heap is h: its
 * span taken over when nobody allocates from it, else a remote free. Inline
 * in both callers, so free_other's remote free makes no extra call. */
static inline __attribute__((always_inline)) void free_small_other(void *p, span_t *sp, heap_t *h,
                                                                   uint32_t key) {
  if (may_take(h, sp) && heap_take(h, sp, p)) return;
  span_free_remote(sp, p, key);
  if (h == &young_heap)
    young_tls.frees++;
  else
    atomic_store_explicit(&h->remote_frees, atomic_load_explicit(&h->remote_frees, RLX) + 1, RLX);
}

/* A thread that frees before it ever allocates (a consumer) gets its own
 * heap too: its counters must not be a line every such thread writes. */
static inline heap_t *freer_heap(heap_t *h) {
  if (unlikely(h == &rill_empty_heap)) {
    heap_t *mine = heap_get_slow();
    if (mine) h = mine;
  }
  return h;
}

static NOINLINE void free_other(void *p, span_t *sp, heap_t *h, const char *fn) {
  if (unlikely(sp->cls == CLS_LARGE)) {
    if (unlikely(!span_block_ok(sp, (uintptr_t)p))) rill_invalid(fn, p);
    large_free(sp, p, fn);
    return;
  }
  uint32_t key = span_block_key(sp, (uintptr_t)p);
  if (unlikely(key == UINT32_MAX)) rill_invalid(fn, p);
  free_small_other(p, sp, freer_heap(h), key);
}

/* free_other with the batch first: the block checked once, kept if
 * batch_put can. */
static NOINLINE void free_batched(void *p, span_t *sp, heap_t *h, const char *fn) {
  if (sp->cls == CLS_LARGE) {
    free_other(p, sp, h, fn);
    return;
  }
  uint32_t key = span_block_key(sp, (uintptr_t)p);
  if (unlikely(key == UINT32_MAX)) rill_invalid(fn, p);
  h = freer_heap(h);
  if (!batch_put(h, sp, p, fn)) free_small_other(p, sp, h, key);
}

/* Gives back up to k blocks of stack i: as the owner's frees when h is the
 * caller's heap, as remote frees when the purger drains an idle owner's. */
static void cache_give(heap_t *h, unsigned i, unsigned k, bool owner) {
  uint32_t bytes = 0;
  for (; k && h->cache[i]; k--) {
    block_t *b = h->cache[i];
    h->cache[i] = b->next;
    __atomic_store_n(&h->cache_n[i], (uint8_t)(h->cache_n[i] - 1), __ATOMIC_RELAXED);
    bytes += rill_cache_bsize[i];
    span_t *sp = span_at((uintptr_t)b - rill_arena.base);
    if (!(owner && may_take(h, sp) && heap_take(h, sp, b)))
      span_free_remote(sp, b, span_block_key(sp, (uintptr_t)b));
  }
  atomic_store_explicit(&h->cache_bytes, atomic_load_explicit(&h->cache_bytes, RLX) - bytes, RLX);
}

/* The owner's: all of its stacks (exit, rill_collect). The purger may be
 * draining them, if it found the thread waiting just before: a short wait. */
static void cache_drain(heap_t *h) {
  for (unsigned i = 0; atomic_load_explicit(&h->cache_off, ACQ); i++) os_pause(i);
  cache_growing(h);
}

/* The heap takes memory never used or given back (a fresh pool span, a run
 * with clean slots): the blocks its cache keeps go back first, so that they
 * are the next memory served rather than sit beside the new. Without this a
 * program whose big blocks moved from one class to another faulted in as
 * much afresh as the cache held (test_memory --share). */
static void cache_give_all(heap_t *h, bool owner) {
  for (unsigned i = 0; i < NCACHE; i++) {
    cache_give(h, i, UINT_MAX, owner);
    h->cache_low[i] = 0;
  }
}
static void cache_growing(heap_t *h) {
  if (!atomic_load_explicit(&h->cache_bytes, RLX) || atomic_load_explicit(&h->cache_off, ACQ))
    return;
  cache_give_all(h, true);
}

/* At the owner's first span change of a beat: what each stack kept unused
 * through the last beat goes back. */
static void cache_trim(heap_t *h) {
  if (atomic_load_explicit(&h->cache_bytes, RLX) == 0 || atomic_load_explicit(&h->cache_off, ACQ))
    return;
  for (unsigned i = 0; i < NCACHE; i++) {
    if (h->cache_low[i]) cache_give(h, i, h->cache_low[i], true);
    h->cache_low[i] = h->cache_n[i];
  }
}

/* ---- thread exit -------------------------------------------------------- */
/* Hands a span this heap tracks to the rest of the process: pooled when
 * empty, else floating (adopted by whoever frees its last blocks) or, when
 * it has room, listed on the orphanage for any thread to adopt. */
static void heap_release(span_t *sp, heap_t *lender) {
  dbg_event(sp, EV_RELEASE);
  span_collect(sp);
  atomic_store_explicit(&sp->attached, NULL, RLX);
  atomic_store_explicit(&sp->where, AT_NONE, RLX);
  /* remote frees still pending (both local lists in use) stay on the span:
   * `used` counts them, and so does the remote count the next state keeps */
  uint64_t x = atomic_load_explicit(&sp->xf, ACQ); /* the frees counted there happened */
  for (;;) {
    uint32_t used = used_get(sp), back = XF_COUNT(x);
    atomic_store_explicit(&sp->fused, used, RLX);
    if (used == back) { /* every block is back: no free can race with this */
      atomic_store_explicit(&sp->xf, XF_MAKE(ST_FREE, 0, 0), RLX);
      pool_put(sp);
      return;
    }
    unsigned st = sp->cap - used + back >= span_reuse_mark(sp) ? ST_QUEUED : ST_FLOATING;
    uint64_t tag = st == ST_FLOATING ? new_tag(sp) : 0; /* QUEUED: orphan_put tags it */
    if (atomic_compare_exchange_weak_explicit(&sp->xf, &x, XF_WITH(st, x) | tag, REL, ACQ)) {
      if (st == ST_QUEUED) orphan_put(sp, lender);
      return;
    }
  }
}

/* rill_collect: the calling thread's kept remote frees go to their spans. */
void heap_batch_push(heap_t *h) {
  if (!owns_nothing(h) && !heap_is_shared(h)) batch_push(h, true);
}

/* rill_collect(true): the calling thread also lets go of spans it holds
 * empty, hot ones included. */
void heap_collect(heap_t *h) {
  if (owns_nothing(h)) return;
  cache_drain(h);
  spin_lock(&h->hot_lock); /* heap_lend */
  for (unsigned c = 0; c < NCLASSES; c++) {
    span_t *sp = h->hot[c];
    if (sp != &rill_empty_span) {
      span_collect(sp); /* may leave frees pending: count them as back */
      if (used_get(sp) == XF_COUNT(atomic_load_explicit(&sp->xf, ACQ))) {
        hot_set(h, c, &rill_empty_span);
        pool_put(sp);
      }
    }
  }
  spin_unlock(&h->hot_lock);
}

/* Pools the empty spans on one heap's reusable lists. They are normally
 * claimed at their last free; this catches one whose owner free lost the
 * race with a remote free (see heap_span_emptied). Any thread may do it: a
 * listed span's `used` only falls and its remote count only rises, so
 * count == used means empty even if `used` was read stale, and the lock
 * keeps the owner from taking the span back between the test and the claim. */
static size_t heap_sweep(heap_t *h) {
  span_t *got = NULL;
  spin_lock(&h->lock);
  for (unsigned c = 0; c < NCLASSES; c++) {
    span_t *sp = lists(h)->list[c];
    while (sp) {
      span_t *next = sp->next;
      uint64_t x = atomic_load_explicit(&sp->xf, ACQ);
      /* acquire: pairs with the release of the owner's last free (used_dec),
       * whose accesses to the span must come before the pool's reuse of it */
      if (XF_STATE(x) == ST_LISTED && XF_COUNT(x) == __atomic_load_n(&sp->used, __ATOMIC_ACQUIRE) &&
          atomic_compare_exchange_strong_explicit(&sp->xf, &x, XF_MAKE(ST_FREE, 0, 0), ACQ, RLX)) {
        list_unlink(h, sp);
        dbg_event(sp, EV_SWEEP);
        sp->next = got;
        got = sp;
      }
      sp = next;
    }
  }
  span_t *stashed = stash_take_locked(h);
  spin_unlock(&h->lock);
  return pool_all(got) + pool_all(stashed);
}

/* rill_collect: every heap's lists and the orphanage. Returns spans pooled.
 * The purger's passes (idle_only) skip the heaps whose owners swept on this
 * beat: an owner sweeps its own lists at its first span change of a beat,
 * but a thread that sits idle, or allocates from its hot spans only, may
 * not change span again, and a span that lost the eager-return race would
 * stay on its list, resident, for good. */
size_t heap_sweep_all(bool idle_only) {
  uint64_t e = pool_epoch();
  size_t n = heap_sweep(&orphanage);
  for (unsigned k = 0; k < SHARED_N; k++)
    if (shared_in_use(k)) n += heap_sweep(&shared[k]);
  uint32_t top = heap_count();
  if (top > max_heaps) top = max_heaps;
  for (uint32_t i = 0; i < top; i++) {
    heap_t *h = &heaps[i];
    if (!atomic_load_explicit(&h->live, ACQ)) continue;
    if (idle_only && atomic_load_explicit(&h->swept, RLX) == e) continue;
    n += heap_sweep(h);
  }
  return n;
}

/* ---- lending an idle owner's listed spans ------------------------------ */
/* A span whose blocks other threads free goes back to its owner's list once
 * a quarter of it is free, and only its owner allocates from it. When the
 * owner is a thread that filled memory and then waits (a main thread in
 * pthread_join while its workers evict what it loaded, a producer parked on
 * a condition variable), its spans keep their free blocks while everyone
 * else faults in fresh memory: RocksDB's cache_bench peaked at 1.8x glibc's
 * RSS. Hoard bounds this by moving a mostly empty superblock of a heap to
 * the global heap (§3.1, §4); here an idle owner's listed spans with room
 * (a quarter free, the reuse mark) go to the orphanage, where any thread
 * adopts them as it does a finished thread's.
 *
 * The owner's frees into a listed span take no lock (attached == owner),
 * so nothing may move one while the owner could be inside such a free. The
 * spans are moved only if the owner sleeps in a futex or epoll wait
 * (os_thread_waiting), which neither rill (but for its lock waits, which it
 * counts: owner_busy) nor a signal handler that interrupted rill can call,
 * and sleeps there throughout: before and after
 * `attached` is cleared, with no context switch in between. When it wakes it
 * sees the spans unattached, so its frees into them take the slow path
 * (and adopt them back, if still orphans). Only the purger thread lends:
 * on each beat, and when a thread has just taken a span of never-used or
 * purged memory while some remote free has given a listed span room since
 * (purger_kick). Waiting for the beat let cache_bench's workers fault in 50
 * MiB first. */
static bool lendable(const span_t *sp) {
  return XF_STATE(atomic_load_explicit(&sp->xf, RLX)) == ST_LISTED &&
         listed_room(sp) >= span_reuse_mark(sp);
}

/* Has h a listed span with room? Under h's lock. */
static bool lendable_any(heap_t *h) {
  for (unsigned c = 0; c < NCLASSES; c++)
    for (span_t *sp = lists(h)->list[c]; sp; sp = sp->next)
      if (lendable(sp)) return true;
  return false;
}

/* LISTED -> QUEUED for a span leaving its list: no free claims it in
 * transit (a claim needs LISTED), and orphan_put lists it again. False if a
 * free claimed it first: it stays for that free to unlink and pool. */
static bool lend_detach(heap_t *h, span_t *sp) {
  uint64_t x = atomic_load_explicit(&sp->xf, ACQ);
  while (XF_STATE(x) == ST_LISTED)
    if (atomic_compare_exchange_weak_explicit(&sp->xf, &x, XF_WITH(ST_QUEUED, x), ACQREL, ACQ)) {
      atomic_store_explicit(&sp->fused, used_get(sp), RLX);
      list_unlink(h, sp);
      return true;
    }
  return false;
}

/* The hot spans too. A thread that waits between bursts (a worker of a
 * pool, a Ruby thread waiting for the interpreter's lock) keeps a hot span
 * per class it used, and the blocks its frees and the others' put back on
 * them stay resident while it waits: 32 Ruby threads taking turns held 14
 * MiB so, free, in 851 hot spans (docs/benchmarks.md, "Idle owners lend
 * their hot spans"). An idle owner's hot span with a quarter of its blocks
 * cut and free, and a page of them, goes to the orphanage as a listed span
 * does; the owner's next malloc of the class changes span. The hot slot
 * and `attached` are cleared together under hot_lock, which every change
 * of hot span takes, and put back if the owner ran meanwhile. */
#define LEND_HOT_MIN ((size_t)64 << 10) /* free bytes in hot spans worth a look */

/* Blocks of a hot span that were cut and are free: on its local lists or
 * pending remote frees (counted in `used` until collected). Atomic reads
 * only: the purger's first guess is made while the owner may run. */
static uint32_t hot_free_cut(const span_t *sp) {
  uint32_t cut = __atomic_load_n(&sp->carved, __ATOMIC_RELAXED) +
                 XF_COUNT(atomic_load_explicit(&sp->xf, RLX)),
           out = used_get(sp);
  return cut > out ? cut - out : 0;
}
static bool hot_worth(heap_t *h) {
  size_t bytes = atomic_load_explicit(&h->cache_bytes, RLX); /* the block cache's too */
  for (unsigned c = 0; c < NCLASSES; c++) {
    span_t *sp = hot_get(h, c);
    if (sp != &rill_empty_span) bytes += (size_t)hot_free_cut(sp) * class_size(c);
  }
  return bytes >= LEND_HOT_MIN;
}
/* With the owner asleep and hot_lock held. */
static bool hot_lendable(const span_t *sp) {
  if (sp == &rill_empty_span) return false;
  uint32_t fr = hot_free_cut(sp);
  return fr >= span_reuse_mark(sp) && (size_t)fr * sp->bsize >= rill_arena.page;
}

/* Lends h's listed spans with room, and its hot spans with room, if its
 * owner waits; *busy when it has some but its owner ran. */
static size_t heap_lend(heap_t *h, int tid, bool *busy) {
  uint64_t before, after;
  spin_lock(&h->lock);
  bool any = !h->closed && lendable_any(h);
  spin_unlock(&h->lock);
  bool hot = hot_worth(h), batch = atomic_load_explicit(&h->batch_n, RLX) != 0;
  if (!any && !hot && !batch) return 0;
  if (!os_thread_waiting(tid, &before)) {
    atomic_store_explicit(&h->lend_seen, os_now_ms(), RLX); /* busy: not again for a while */
    *busy = any; /* hot spans alone wait for the next beat, not a kick */
    return 0;
  }
  spin_lock(&h->hot_lock);
  spin_lock(&h->lock);
  if (h->closed || atomic_load_explicit(&h->tid, RLX) != tid) {
    spin_unlock(&h->lock);
    spin_unlock(&h->hot_lock);
    return 0;
  }
  for (unsigned c = 0; c < NCLASSES; c++)
    for (span_t *sp = lists(h)->list[c]; sp; sp = sp->next)
      if (lendable(sp)) atomic_store_explicit(&sp->attached, NULL, RLX);
  span_t *took[NCLASSES];
  unsigned nt = 0;
  /* the block cache: the owner skips it from now on (heap_cache_take, cache_put);
   * ours to drain below if it slept throughout */
  bool cache = (hot && atomic_load_explicit(&h->cache_bytes, RLX) != 0) || batch;
  if (cache) atomic_store_explicit(&h->cache_off, 1, RLX);
  for (unsigned c = 0; hot && c < NCLASSES; c++) {
    span_t *sp = hot_get(h, c);
    if (!hot_lendable(sp)) continue;
    atomic_store_explicit(&sp->attached, NULL, RLX); /* its frees: the slow path */
    hot_set(h, c, &rill_empty_span);                 /* its mallocs: a span change */
    took[nt++] = sp;
  }
  atomic_thread_fence(memory_order_seq_cst);
  race_window(); /* the owner may wake here: its frees find the spans unattached */
  bool still = os_thread_waiting(tid, &after) && after == before && !owner_busy(h);
  if (still) {
    owner_acquire(h);                           /* its frees came before its wait */
    atomic_store_explicit(&h->lent, true, RLX); /* and what remote frees queue next */
  }
  *busy = *busy || (!still && any);
  span_t *moved = NULL;
  size_t n = 0;
  for (unsigned c = 0; c < NCLASSES; c++)
    for (span_t *sp = lists(h)->list[c], *next; sp; sp = next) {
      next = sp->next;
      if (atomic_load_explicit(&sp->attached, RLX) == h) continue;
      /* not lent (it ran meanwhile, or a free claimed the span): attached
       * again; a free it made meanwhile went to the remote list */
      if (!still || !lend_detach(h, sp)) {
        atomic_store_explicit(&sp->attached, h, RLX);
        continue;
      }
      sp->next = moved;
      moved = sp;
      n++;
    }
  if (!still) { /* it ran: its hot spans back, before its span changes see them */
    for (unsigned i = 0; i < nt; i++) {
      atomic_store_explicit(&took[i]->attached, h, RLX);
      hot_set(h, took[i]->cls, took[i]);
    }
    nt = 0;
    if (cache) atomic_store_explicit(&h->cache_off, 0, REL);
    cache = false;
  }
  spin_unlock(&h->lock);
  spin_unlock(&h->hot_lock);
  if (cache) {
    cache_give_all(h, false);
    batch_push(h, false);
    atomic_store_explicit(&h->cache_off, 0, REL);
  }
  /* onto the orphanage's list as a finished thread's spans (heap_release),
   * and claimed there if the last block came back meanwhile */
  for (span_t *sp = moved, *next; sp; sp = next) {
    next = sp->next;
    sp->next = NULL;
    dbg_event(sp, EV_LEND);
    orphan_put(sp, h);
  }
  /* the hot spans as at the owner's exit: it sleeps, and will not find them */
  for (unsigned i = 0; i < nt; i++) {
    dbg_event(took[i], EV_LEND);
    heap_release(took[i], h);
  }
  return n + nt;
}

static _Atomic uint64_t spans_lent; /* ever, for rill_stats_print and malloc_info */
uint64_t heap_spans_lent(void) {
  return atomic_load_explicit(&spans_lent, RLX);
}

/* An owner found running is not looked at again for this long (a clock
 * time, not the purge beat: the beat moves only with pool activity, and a
 * program that allocates from fresh memory alone left it standing). */
#define LEND_RECHECK_MS 20

/* The purger's look at the heaps: lends the listed spans of every idle
 * owner. A kick looks only at heaps hinted since (a remote free gave one of
 * their listed spans room), a beat at all (`all`). An owner found running
 * keeps its hint but is not looked at again for LEND_RECHECK_MS. Returns
 * the spans lent. */
size_t heap_lend_idle(bool all) {
  uint64_t now = os_now_ms();
  size_t n = 0;
  bool busy = false;
  atomic_store_explicit(&lend_hint, 0, RLX);
  atomic_thread_fence(memory_order_seq_cst); /* a span listed from now on sets it again */
  uint32_t top = heap_count();
  if (top > max_heaps) top = max_heaps;
  for (uint32_t i = 0; i < top; i++) {
    heap_t *h = &heaps[i];
    if (!atomic_load_explicit(&h->live, ACQ) || (!all && !atomic_load_explicit(&h->lend_hint, RLX)))
      continue;
    if (now - atomic_load_explicit(&h->lend_seen, RLX) < LEND_RECHECK_MS) {
      busy = busy || atomic_load_explicit(&h->lend_hint, RLX);
      continue;
    }
    atomic_store_explicit(&h->lend_hint, 0, RLX);
    atomic_thread_fence(memory_order_seq_cst); /* a later free's hint is not lost */
    bool ran = false;
    n += heap_lend(h, atomic_load_explicit(&h->tid, RLX), &ran);
    if (ran) { /* look again at a kick after LEND_RECHECK_MS: it may wait by then */
      atomic_store_explicit(&h->lend_hint, 1, RLX);
      busy = true;
    }
  }
  if (n) atomic_fetch_add_explicit(&spans_lent, n, RLX);
  if (busy) atomic_store_explicit(&lend_hint, 1, RLX);
  return n;
}

void heap_thread_done(heap_t *h) {
  if (h == &rill_empty_heap || h == &rill_done_heap) return;
  young_tls.left = 0; /* later destructors' mallocs: the backing heap, not young blocks */
  if (h == &young_heap) {
    rill_tls = &rill_done_heap;
    atomic_fetch_sub_explicit(&young_live, 1, RLX);
    young_frees_fold();
    return;
  }
  dbg_heap_mine(h);
  cache_drain(h);
  rill_tls = &rill_done_heap;
  spin_lock(&h->lock); /* from now on, spans handed back become orphans */
  __atomic_store_n(&h->closed, true, __ATOMIC_RELAXED);
  spin_unlock(&h->lock);
  /* the kept remote frees, now that the purger looks at this heap no more
   * (heap_lend checks `closed` under the lock): a look under way ends
   * first. Before `closed`, a look begun meanwhile would have kept them
   * from batch_push, and with them their spans, for good; the same look
   * made cache_drain above skip the block cache, which goes too. As remote
   * frees: one into a span of this heap stays on its remote list, counted
   * by the release below */
  for (unsigned i = 0; atomic_load_explicit(&h->cache_off, ACQ); i++) os_pause(i);
  cache_give_all(h, false);
  batch_push(h, false);
  for (unsigned c = 0; c < NCLASSES; c++) {
    if (h->hot[c] != &rill_empty_span) heap_release(h->hot[c], NULL);
    hot_set(h, c, &rill_empty_span);
    span_t *sp;
    while ((sp = list_pop(h, c, true)) != NULL) heap_release(sp, NULL);
  }
  stash_flush(h);
  heap_recycle(h);
}

/* ---- large objects: one object per run of slots (Streamflow §3.1.2; runs.c) */
static void *large_place(heap_t *h, size_t n, size_t align, bool *zeroed, bool own) {
  if (n == 0) n = 1; /* an aligned empty object must still lie inside its span */
  size_t need = n + (align > SLOT_SIZE ? align - SLOT_SIZE : 0);
  if (need > LARGE_MAX || need < n) {
    void *p = huge_alloc(n, align);
    /* Refused a mapping of its own (the address-space limit, with the arena
     * holding what it grew into): a run of the arena's free memory, if it
     * has one. glibc's and mimalloc's freed heaps make room for such a block;
     * rill's arena, filled and freed under 768 MiB, gave no 100 MiB block. */
    if (p || need < n ||
        need >> SLOT_SHIFT >= __atomic_load_n(&rill_arena.nslots, __ATOMIC_RELAXED)) {
      *zeroed = true;
      return p;
    }
  }
  span_t *sp = run_for(h, run_slots(need), own);
  if (unlikely(!sp)) { /* the arena is full (a small one, under ulimit -v): a mapping of its own */
    *zeroed = true;
    return need > LARGE_MAX ? NULL : huge_alloc(n, align);
  }
  uintptr_t start = span_start(sp), obj = start;
  if (align > SLOT_SIZE) obj = (start + align - 1) & ~(uintptr_t)(align - 1);
  size_t pg = rill_arena.page;
  if (*zeroed && !sp->fresh) run_zero(sp, (char *)obj, n); /* calloc: what may not be zero */
  *zeroed = *zeroed || sp->fresh;
  span_init_large(sp, obj - start, (n + pg - 1) & ~(pg - 1), h);
  return (void *)obj;
}

void *large_alloc(heap_t *h, size_t n, size_t align, bool *zeroed) {
  return large_place(h, n, align, zeroed, false);
}

/* The new home of a large block realloc could not grow in place: a run of
 * this thread's shard only (run_get), so the thread's buffers stay among its
 * own runs and grow in place from there on. */
void *large_alloc_moved(heap_t *h, size_t n) {
  if (owns_nothing(h)) return NULL;
  bool zeroed = false;
  return large_place(h, n, 8, &zeroed, true);
}

/* ---- fork --------------------------------------------------------------- */
/* Every heap's list lock is held across fork, so no list is caught half
 * unlinked in the child; a free in the child may claim a span of any heap. */
/* The heaps whose locks fork_prepare holds: every record handed out, since
 * none is handed out while it holds heaps_new_lock (a record reused from the
 * free list is counted already), and the shared heaps ever used (no other
 * turns used while it holds their shared_lock). The commit lock too:
 * heap_fit takes it alone. */
void heap_fork_prepare(void) {
  for (unsigned k = 0; k < SHARED_N; k++) fork_hold(&shared_lock[k]);
  fork_hold(&heaps_new_lock);
  fork_hold(&heaps_commit_lock);
  uint32_t n = heap_count();
  if (n > max_heaps) n = max_heaps;
  /* hot locks first: an owner takes its hot lock, then list locks */
  for (uint32_t i = 0; i < n; i++) fork_hold(&heaps[i].hot_lock);
  for (uint32_t i = 0; i < n; i++) fork_hold(&heaps[i].lock);
  for (unsigned k = 0; k < SHARED_N; k++)
    if (shared_in_use(k)) fork_hold(&shared[k].lock);
  fork_hold(&orphanage.lock);
}
void heap_fork_child(void) {
  /* the forking thread has a new id here: lending looks it up by id (a
   * pre-forked server's worker waits in its event loop) */
  heap_t *h = rill_tls;
  bool young = h == &young_heap, mine = !owns_nothing(h);
  if (mine) atomic_store_explicit(&h->tid, (int32_t)gettid(), RLX);
  /* the parent's other threads do not exist here: a crowd of them must not
   * make the child's threads young (their records are never given back) */
  STORE_NEW(&heaps_live, mine ? 1u : 0u);
  live_moved();
  STORE_NEW(&young_live, young ? 1u : 0u);
}
