/* internal.h - rill's shared internal types: size classes, span metadata,
 * thread heaps, the arena, and the declarations each layer offers the one
 * above it (alloc -> heap -> span -> pool -> arena/os). */
#ifndef RILL_INTERNAL_H
#define RILL_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill.h"

#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define INTERNAL    __attribute__((visibility("hidden")))
#define EXPORT      __attribute__((visibility("default"))) /* the library's interface */
#define NOINLINE    __attribute__((noinline))
#define COLD        __attribute__((cold, noinline))
#define RLX         memory_order_relaxed
#define ACQ         memory_order_acquire
#define REL         memory_order_release
#define ACQREL      memory_order_acq_rel
/* A relaxed store that leaves the word alone when it holds the value
 * already. The child of fork copies each page it shares with the parent at
 * its first write to it, so the child's handlers store only what changes. */
#define STORE_NEW(p, v)                                                                            \
  do {                                                                                             \
    __typeof__(v) v_ = (v);                                                                        \
    if (atomic_load_explicit((p), RLX) != v_) atomic_store_explicit((p), v_, RLX);                 \
  } while (0)

#ifndef RILL_VARIANT
#define RILL_VARIANT 0 /* 0 = thread-local heaps, 1 = global lock, 2 = hashed sub-heaps */
#endif

/* ---- geometry ---------------------------------------------------------- */
/* The arena is cut into 16 KiB slots. A span is a run of 2^order slots.
 * Small classes take the smallest span that holds 64 blocks (16 KiB for
 * classes up to 256 B): one partly used span per thread and class is what a
 * producer-consumer program holds beyond its live bytes (Hoard §2.2), and at
 * 64 KiB that was a third of xmalloc's peak at 16 threads. On kernels with
 * larger pages no span is smaller than a page (rill_arena.min_order). */
#define SLOT_SHIFT  14
#define SLOT_SIZE   ((size_t)1 << SLOT_SHIFT)
#define MAX_ORDER   11 /* 2048 slots = 32 MiB: the largest span */
#define LARGE_MAX   (SLOT_SIZE << MAX_ORDER)
#define MAX_STRIPES 64
#define HUGE_PAGE   ((size_t)2 << 20)
#define HUGE_START  ((size_t)32 << 20) /* RILL_HUGEPAGES: arena taken into use before THP */

/* ---- size classes ------------------------------------------------------ */
/* 8, then 16..128 step 16, then four classes per power of two up to 256 KiB,
 * and one more, 9/8 of the power, above 1, 2, 4, 8 and 16 KiB: no class
 * wastes more than 25% of a request over 64 bytes, and a power of two plus a
 * header (sqlite's 1,032-byte and 4,590-byte blocks: a 1 or 4 KiB page and
 * its bookkeeping; a 16 KiB TLS record buffer and its headers) wastes under
 * 12.5% there, not 24%. Eight classes per doubling from 1 KiB cost memory
 * elsewhere (docs/design.md, "Size classes"). */
/* size_class hands out the first NPLAIN classes; the three after them are
 * uncoloured twins of 256, 512 and 1,024 B, for alignments of 256-1,024
 * (class_color; heap.c, class_for) */
#define NPLAIN    58
#define NCLASSES  61
#define CLS_TWIN0 NPLAIN
#define CLASS_MAX ((size_t)256 * 1024)
#define CLS_LARGE 255
_Static_assert(NCLASSES <= 64, "heap_t.warm has a bit per class");

#define DIRECT_N    129 /* words 0..128: requests up to 1024 bytes */
#define DIRECT_MAX  1024
#define NDIRECT_CLS 21 /* classes 0..20 are the ones DIRECT_MAX covers */
extern const uint8_t rill_small_cls[DIRECT_N] INTERNAL;

extern const uint8_t rill_mid_cls[64] INTERNAL;

/* One table load either side of 1 KiB, no branch on the size beyond it:
 * malloc's fast path computes this for requests up to CLASS_MAX. */
static inline unsigned size_class(size_t n) {
  if (n <= 1024) return rill_small_cls[(n + 7) >> 3];
  unsigned k = 63 - (unsigned)__builtin_clzl(n - 1); /* 2^k < n <= 2^(k+1) */
  return rill_mid_cls[(k - 10) * 8 + (((n - 1) >> (k - 3)) & 7)];
}
static inline size_t class_size(unsigned c) {
  if (c <= 8) return c == 0 ? 8 : (size_t)c << 4;
  if (c <= 20) {
    unsigned k = 7 + (c - 9) / 4, s = (c - 9) % 4;
    return (size_t)(5 + s) << (k - 2);
  }
  if (c <= 45) {
    unsigned k = 10 + (c - 21) / 5, j = (c - 21) % 5;
    return j == 0 ? (size_t)9 << (k - 3) : (size_t)(4 + j) << (k - 2);
  }
  if (c >= CLS_TWIN0) return (size_t)256 << (c - CLS_TWIN0);
  unsigned k = 15 + (c - 46) / 4, s = (c - 46) % 4;
  return (size_t)(5 + s) << (k - 2);
}

/* ---- spans ------------------------------------------------------------- */
typedef struct block {
  struct block *next;
} block_t;

struct heap;

/* Remote-free word (scalloc §5 "Remote f-list encoding", Streamflow §3.1.1
 * `remotely_freed`): head block's key + 1 (32 bits: span_block_key), count of blocks on the
 * list (20 bits), a tag (9 bits), span state (3 bits). One CAS pushes a block and can move
 * the span to a new state in the same instruction. The tag numbers the times the span
 * was listed or floated (rill_arena.tags; 0 while attached or queued): a thread that
 * read the word and was delayed must not act on it once the span has been let go again
 * (new_tag). The count is at most a span's cap: 8,192 for 8-byte blocks on 64 KiB pages.
 *   ATTACHED  a heap allocates from it (hot), or is moving it
 *   LISTED    on its owner's reusable list (scalloc: reusable, still owned)
 *   FLOATING  full when its owner let go; `fused` holds its used count
 *   QUEUED    in the moment a free hands it back to its owner's list (or, the
 *             owner gone, to the orphanage's)
 *   FREE      in the span pool */
enum { ST_ATTACHED = 0, ST_FLOATING = 1, ST_QUEUED = 2, ST_FREE = 3, ST_LISTED = 4 };
#define XF_HEAD(x)        ((uint32_t)(x))
#define XF_COUNT(x)       ((uint32_t)((x) >> 32) & 0xfffffu)
#define XF_TAG_MASK       ((uint64_t)0x1ff << 52)
#define XF_STATE(x)       ((unsigned)((x) >> 61))
#define XF_MAKE(st, n, h) (((uint64_t)(st) << 61) | ((uint64_t)(n) << 32) | (uint64_t)(h))
/* another state, the count and head kept; the tag cleared (the caller adds a new one) */
#define XF_WITH(st, x) (((x) & ~((uint64_t)7 << 61 | XF_TAG_MASK)) | ((uint64_t)(st) << 61))

#define CHECK_ALL UINT32_MAX

/* Where an attached span sits, from its owner's point of view. */
enum { AT_NONE = 0, AT_HOT = 1, AT_LISTED = 2 };

/* Span metadata lives outside the span, in a table indexed by slot
 * (Streamflow's BIBOP table, §3.1.1): objects stay headerless and a purged
 * span keeps its metadata. Only a span's first slot has a live entry; the
 * head table (arena_t.heads) maps every slot to it. Four cache lines, by who
 * writes them, so that a producer allocating from a span and consumers
 * freeing into it do not bounce one line (the consume benchmark): the first
 * is read by every free, the second written by the owner's malloc and free,
 * the third by remote frees, the fourth rarely (large objects, pooling). */
typedef struct span {
  /* --- read-mostly: written when the span is formatted or carved --- */
  _Atomic(struct heap *) attached; /* heap whose fast path may touch this span */
  uintptr_t start;                 /* address of the first block: the span's first byte
                                    * plus its colour (class_color; a run class's varies
                                    * by run, run_colour), less than a slot, so span_start
                                    * masks it off */
  uint64_t magic;                  /* 2^64 / bsize, plus one (block_test) */
  uint64_t limit;                  /* carved * err: block_test's bound. Only the owner
                                    * writes it (__atomic stores, for remote frees' checks),
                                    * so the owner reads it plainly */
  uint32_t bsize;                  /* block size; 0 = not a block span */
  uint32_t nslots;                 /* slots in the span: 2^order, or a run's length */
  _Atomic uint32_t heap_gen;       /* the heap record's `gen` when it took the span: a
                                    * record passed to a later thread owns nothing of before */
  _Atomic(struct heap *) heap;     /* owning heap (scalloc's LAB), kept while floating; rarely
                                    * written, and read by every remote free */
  uint8_t cls;                     /* size class or CLS_LARGE */
  uint8_t order;                   /* span = 2^order slots (0 for a run: see nslots) */
  uint8_t fresh;                   /* memory known to be zero (never used, or purged) */
  uint8_t run;                     /* a run of runs.c (a large object or a big class's span),
                                    * not a span of the pool */
  /* --- the owner's --- */
  _Alignas(64) block_t *free; /* local LIFO free list (owner only) */
  block_t *spare;             /* remote frees taken while `free` was not empty: a second
                               * local list, since merging would walk cold blocks */
  uint32_t used;              /* blocks out, incl. remote frees not yet collected;
                               * written only by the owner, read by remote frees
                               * (__atomic builtins; used_inc) */
  _Atomic uint32_t check;     /* the owner's free looks further when used < check:
                               * 0 hot, 1 listed (look when empty), CHECK_ALL listed
                               * with remote frees pending (compare the remote count) */
  _Atomic uint8_t where;      /* AT_* (owner's view) */
  uint8_t whole;              /* stashed with every carved block on its local lists */
  uint16_t carve_step;        /* blocks the next carve cuts, before its caps (span_carve) */
  uint32_t carved;            /* blocks ever cut from the span (bump; owner only) */
  uint32_t cap;               /* blocks that fit: on this line, not the first, so that
                               * list_pop weighs a listed span by one line (room) */
  uint32_t listed_at;         /* span changes on listed_cpu when the span was listed */
  uint8_t listed_cpu;         /* the CPU that listed it (heap.c, COLD_CHANGES) */
  struct span *prev, *next;   /* owner's reusable list (under the heap's lock) */
  /* --- written by other threads --- */
  _Alignas(64) _Atomic uint64_t xf; /* remote list + state */
  _Atomic uint32_t fused;           /* `used`, frozen when the owner let the span go */
  /* --- rarely touched: large objects, pooling --- */
  _Alignas(64) size_t lsize; /* large object: usable size */
  uint32_t lobj;             /* large object: offset of the object in the span */
  uint32_t stamp;            /* pooled: when it went in (ms, for delayed purging) */
  _Atomic uint32_t gone_n;   /* pooled, RILL_COMMIT: slots of the stretch decommitted with
                              * this span (pool.c, pool_recommit); 0 if none */
  uint32_t gone_first;       /* pooled, RILL_COMMIT: the stretch's first slot */
  uint8_t run_free;          /* the first slot of a free large run (runs.c): 1, or RUN_WHOLE */
  uint8_t shard;             /* a run's first slot: its shard's mark (runs.c), 0 if none */
  uint8_t warm;              /* a free run on its shard's `warm` list (runs.c) */
  uint8_t inner_gone;        /* a free run: its inner slots' entries went back since it
                              * was filed (runs_entries_release) */
  uint32_t lender_gen;       /* on the orphanage: `lender`'s gen when it lent the span */
  struct heap *lender;       /* on the orphanage: the idle owner that lent it, else NULL
                              * (heap_take: only the lender's frees take it back) */
  /* a free run that holds pages: its links on its shard's warm list, and
   * the pool_grown() mark from which small spans may be cut from it (runs.c,
   * give_open) */
  struct span *warm_prev, *warm_next;
  uint32_t warm_opens;
} span_t;
#define RUN_WHOLE 2 /* run_free: a big class's run filed whole (runs.c, file_whole) */

_Static_assert(sizeof(span_t) == 256, "span metadata is four cache lines (a shift indexes it)");

/* Fields a span's formatting writes and the statistics walk reads with no
 * lock (cls, bsize, lsize, fresh): relaxed atomic stores, plain moves, so the walk's
 * relaxed loads do not race with them (stats.c; TSan, test/stress.c
 * --stats-poll). The owners' own reads stay plain. */
#define SPAN_SET(sp, field, v) __atomic_store_n(&(sp)->field, (v), __ATOMIC_RELAXED)
#define SPAN_GET(sp, field)    __atomic_load_n(&(sp)->field, __ATOMIC_RELAXED)

/* `used` is owner-written but read by remote frees: relaxed atomic loads and
 * stores compile to plain moves, so the fast paths stay free of atomic RMWs. */
static inline uint32_t used_get(const span_t *sp) {
  return __atomic_load_n(&sp->used, __ATOMIC_RELAXED);
}
static inline void used_set(span_t *sp, uint32_t n) {
  __atomic_store_n(&sp->used, n, __ATOMIC_RELAXED);
}
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RILL_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define RILL_TSAN 1
#endif
/* The lender's look (heap_lend) takes an owner asleep in a futex wait to be
 * outside rill: the fast paths make no calls. Two waits are rill's own, and
 * the owner counts itself inside while in them (rill_inside, which its heap
 * record points at), so the lender leaves it be: a wait for a lock that
 * another thread holds (lock_wait), in every build, and under TSan every call
 * under way, since its runtime may wait on a futex of its own between the
 * owner's read of a hot span and its pop (a CI report: tsan_stats_poll). */
extern __thread _Atomic int rill_inside INTERNAL __attribute__((tls_model("initial-exec")));
#define owner_mark(h) ((h)->inside = &rill_inside)
#define owner_busy(h) ((h)->inside && atomic_load_explicit((h)->inside, memory_order_relaxed) != 0)
/* heap_lend_idle moves an owner's spans once it has seen the owner asleep in
 * the kernel, which orders the owner's earlier plain writes before the move;
 * ThreadSanitizer cannot see that, so TSan builds say it (owner_release in the free fast path,
 * owner_acquire in the lender); other builds compile both to nothing. */
#ifdef RILL_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define owner_release(h) __tsan_release((void *)&(h)->tid)
#define owner_acquire(h) __tsan_acquire((void *)&(h)->tid)
#define owner_enter()    atomic_fetch_add_explicit(&rill_inside, 1, memory_order_relaxed)
#define owner_leave()    atomic_fetch_sub_explicit(&rill_inside, 1, memory_order_relaxed)
#else
#define owner_release(h) ((void)0)
#define owner_acquire(h) ((void)0)
#define owner_enter()    ((void)0)
#define owner_leave()    ((void)0)
#endif
/* The fast paths' x86-64 asm (used_inc, below_check, attached_to,
 * arena_beyond): one access each, as the portable atomics would make, but
 * folded into the add or compare that uses it. */
#if defined(__x86_64__) && !defined(RILL_TSAN)
#define RILL_X86_ASM 1
#endif
/* malloc's increment of its hot span's count. Only the owner writes `used`,
 * but another thread may read it meanwhile (a remote free that has just
 * listed the span reads it, and the CAS of its claim decides), so the
 * increment is a relaxed load and a relaxed store, not an atomic RMW. GCC
 * and clang will not fold the two into one instruction; on x86-64 an add to
 * memory is the same two accesses (a load, then one single-copy-atomic
 * 32-bit store) in one instruction, two fewer on malloc's fast path.
 * ThreadSanitizer does not see into asm, so its builds take the portable
 * form. */
static inline void used_inc(span_t *sp) {
#ifdef RILL_X86_ASM
  __asm__ volatile("addl $1, %0" : "+m"(sp->used));
#else
  __atomic_store_n(&sp->used, __atomic_load_n(&sp->used, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
#endif
}
/* A free's decrement is a release (still a plain move on x86): a remote free
 * that reads it and claims the span must see the block's link written. */
static inline void used_dec(span_t *sp, uint32_t n) {
  __atomic_store_n(&sp->used, n, __ATOMIC_RELEASE);
}
/* u < sp->check, the owner free's test for a listed span's last block. A
 * remote free may raise `check` meanwhile (span_free_remote), so it is a
 * relaxed load; on x86-64 the compare reads it from memory itself, one
 * instruction fewer than the load compilers emit for an atomic. (Taking the
 * decrement into the asm too, as a subtract from memory and a reload, saved
 * one more instruction but made recycle 3-7% slower: the reload waits for
 * the subtract's store.) */
static inline bool below_check(const span_t *sp, uint32_t u) {
#ifdef RILL_X86_ASM
  bool r;
  __asm__("cmpl %1, %2" : "=@ccb"(r) : "m"(*(const uint32_t *)&sp->check), "r"(u));
  return r;
#else
  return u < atomic_load_explicit(&sp->check, memory_order_relaxed);
#endif
}

/* Is `h` the heap the span is attached to (free's ownership test)? A relaxed
 * load, compared from memory on x86-64, as in below_check. */
static inline bool attached_to(const span_t *sp, const struct heap *h) {
#ifdef RILL_X86_ASM
  bool r;
  __asm__("cmpq %1, %2" : "=@ccz"(r) : "m"(*(struct heap *const *)&sp->attached), "r"(h));
  return r;
#else
  return atomic_load_explicit(&sp->attached, memory_order_relaxed) == h;
#endif
}

/* The owner's free of b into its span: the push onto the local list and the
 * count, whose new value (the blocks still out) it returns for
 * owner_emptied. Shared by free_fast and the batch's hand-back (heap.c). */
static inline uint32_t owner_push(span_t *sp, block_t *b, block_t *head) {
  b->next = head;
  sp->free = b;
  uint32_t u = used_get(sp) - 1;
  used_dec(sp, u);
  return u;
}

/* After owner_push: may this free have emptied a listed span (scalloc's eager
 * return)? `check` keeps it to one predictable compare on the owner's line
 * unless remote frees are pending on a listed span. */
static inline bool owner_emptied(const span_t *sp, uint32_t u) {
  return __builtin_expect(below_check(sp, u), 0) &&
         XF_COUNT(atomic_load_explicit(&sp->xf, memory_order_relaxed)) + 1 >= u;
}

/* ---- arena (arena.c) --------------------------------------------------- */
typedef struct arena {
  uintptr_t base;     /* slot 0; it never holds a span */
  size_t bound;       /* bytes from base whose head entries are all set (arena_cover); grows */
  size_t size;        /* bytes reserved */
  span_t *meta;       /* one span_t per slot, slot i's at meta - i (span_of_index); only a
                       * span's first slot's is used */
  span_t **heads;     /* per slot: its span's entry, or meta[0] (no span) below bound; above it
                       * never read (unmapped with RILL_COMMIT); at base - HEADS_GAP */
  size_t nslots;      /* slots reserved now; grows under a limit (arena_grow) */
  size_t page;        /* kernel page size, read at start-up */
  unsigned min_order; /* no span is smaller than a page */
  unsigned stripes;
  /* on the next line, which free never reads: slots the tables are reserved for, nslots
   * or under ulimit -v as many as the limit could hold (arena_grow) */
  size_t max_slots;
  _Atomic uint16_t *tags; /* per slot: the times a span there was listed or floated, never
                           * reset (heap.c, new_tag): here, not in the entry, so that the
                           * entries of free runs' inner slots may go (arena_entries_release) */
} __attribute__((aligned(64))) arena_t; /* free reads its first line: a line of its own */

extern arena_t rill_arena INTERNAL;
extern _Atomic size_t rill_arena_top INTERNAL; /* slots handed out so far */
/* Never-used slots given to spans and runs so far (the arena's top runs ahead
 * of them: runs reserve 32 MiB at a time). Counted where a chunk of small
 * spans or a run is cut, so rarely; read by purger_start_slow. */
extern _Atomic size_t rill_grown INTERNAL;
/* Slots first .. first + slots - 1 are cut for spans or runs: counted,
 * advised into huge pages once the program has grown (RILL_HUGEPAGES=1), and
 * locked if mlockall asked for it (mlock.c). False if RLIMIT_MEMLOCK refused
 * the lock; the caller does not use them. */
bool arena_grown(size_t first, size_t slots) INTERNAL;
/* Runs shard k's wilderness is slots lo .. hi - 1, handed out by the arena
 * but not in use. */
void arena_hole(unsigned k, size_t lo, size_t hi) INTERNAL;
/* fn for each stretch of the arena in use, as addresses (mlockall, mlock.c). */
void arena_each_used(void (*fn)(uintptr_t lo, uintptr_t hi, size_t *sum), size_t *sum) INTERNAL;

/* The span entries grow down from the head table's first byte, which grows
 * up: the parts of both in use meet there, on one page-table page for a
 * program's first 64 MiB of arena, where each had its own (a fork copies
 * every page-table page and the child frees it again: "What a fork costs",
 * docs/benchmarks.md). */
static inline span_t *span_of_index(size_t i) {
  return rill_arena.meta - i;
}
static inline size_t span_index(const span_t *sp) {
  return (size_t)(rill_arena.meta - sp);
}
/* The head table sits this far below the arena's base, in the same
 * reservation, so free finds it from the base it has loaded anyway: a span
 * pointer per slot of the largest arena (1 TiB / 16 KiB * 8 bytes), and
 * HEADS_SKEW more, so that with the base on a 2 MiB boundary the table
 * starts mid-way through a 2 MiB region and the entries below it share
 * that region's page table. */
#define ARENA_MAX ((size_t)1 << 40)
#define ARENA_MIN ((size_t)4 << 20) /* under a tight ulimit -v */
/* The arena's steps under an address-space limit of `limit` bytes: whole
 * largest spans, or 2 MiB under a sandbox's limit (below 128 MiB), where 32
 * MiB is a quarter of the program's room or more. */
static inline size_t limit_unit(size_t limit) {
  return limit / 2 >= 2 * LARGE_MAX ? LARGE_MAX : HUGE_PAGE;
}
#define HEADS_SKEW ((uintptr_t)1 << 20)
#define HEADS_GAP  ((uintptr_t)8 * (ARENA_MAX >> SLOT_SHIFT) + HEADS_SKEW)
/* The span holding arena offset `off` (< rill_arena.bound): meta[0], with
 * no blocks, if none does. One load: the entry is the span's pointer, read
 * at a constant distance from the base (no table pointers to load, no index
 * to scale). */
static inline span_t *span_at(uintptr_t off) {
  return ((span_t *const *)(rill_arena.base - HEADS_GAP))[off >> SLOT_SHIFT];
}
/* Is arena offset `off` at or past the bound, so not in any span (free's
 * first test)? `bound` only grows, under arena_cover's lock, before the
 * slots below it are handed out: a block that reached this thread through
 * any synchronization lies below the bound this thread sees. On x86-64 the
 * compare reads it straight from memory; compilers load a relaxed atomic
 * into a register first, one instruction more on free's fast path. */
static inline bool arena_beyond(uintptr_t off) {
#ifdef RILL_X86_ASM
  bool r;
  __asm__("cmpq %1, %2" : "=@ccae"(r) : "m"(rill_arena.bound), "r"(off));
  return r;
#else
  return off >= __atomic_load_n(&rill_arena.bound, __ATOMIC_RELAXED);
#endif
}
/* The span's first byte (spans are slot-aligned; `start` is its first block). */
static inline uintptr_t span_start(const span_t *sp) {
  return sp->start & ~(uintptr_t)(SLOT_SIZE - 1);
}
/* nslots changes while runs split and merge; rill_stats_get reads it with no
 * lock, so it is read and written with relaxed atomics (plain moves). */
static inline uint32_t span_nslots(const span_t *sp) {
  return __atomic_load_n(&sp->nslots, __ATOMIC_RELAXED);
}
static inline void span_set_nslots(span_t *sp, size_t n) {
  __atomic_store_n(&sp->nslots, (uint32_t)n, __ATOMIC_RELAXED);
}
static inline size_t span_bytes(const span_t *sp) {
  return (size_t)span_nslots(sp) << SLOT_SHIFT;
}

void arena_setup(void) INTERNAL;
bool arena_init(size_t size, size_t max) INTERNAL;
void arena_release(void) INTERNAL;
void arena_fit(size_t limit) INTERNAL; /* limits.c: the program lowered RLIMIT_AS/DATA */
size_t arena_take(size_t n) INTERNAL;
size_t arena_take_aligned(size_t n) INTERNAL; /* RILL_HUGEPAGES: runs' wildernesses */
size_t arena_huge_first(void) INTERNAL;
void arena_untake(size_t first, size_t n) INTERNAL;
bool arena_extend(size_t end, size_t n) INTERNAL;
bool arena_commit(size_t first, size_t n) INTERNAL;
bool arena_decommit(size_t first, size_t n) INTERNAL;
void arena_entries_release(size_t first, size_t end) INTERNAL;
/* Whether addresses [lo, hi) may hold huge pages: RILL_HUGEPAGES=1 advised
 * a 2 MiB region they touch (arena_grown). Timed purges keep those whole. */
bool arena_huge(uintptr_t lo, uintptr_t hi) INTERNAL;
/* RILL_COMMIT: the fewest slots worth a decommit (512 KiB), for the pool's
 * stretches and the runs' alike: each can cost the memory map two mappings. */
#define DECOMMIT_MIN 32
span_t *arena_span(size_t first, unsigned order) INTERNAL;
void arena_fork_prepare(void) INTERNAL;
bool os_purge(void *p, size_t n) INTERNAL;
bool os_purge_lazy(void *p, size_t n) INTERNAL;
uint64_t os_now_ms(void) INTERNAL;
unsigned os_cpu(unsigned n) INTERNAL;
void os_wait(_Atomic uint32_t *w, uint32_t v) INTERNAL;
void os_wait_ms(_Atomic uint32_t *w, uint32_t v, uint32_t ms) INTERNAL;
void os_wake(_Atomic uint32_t *w) INTERNAL;
bool os_thread_waiting(int tid, uint64_t *switches) INTERNAL;
void *os_map(size_t n) INTERNAL;
void os_unmap(void *p, size_t n) INTERNAL;
void *os_reserve(size_t n) INTERNAL;
bool os_commit_grow(void *tab, size_t from, size_t to) INTERNAL;
long os_read_file(const char *path, char *buf, size_t cap) INTERNAL;
void os_reserved_add(void *p, size_t n) INTERNAL; /* mlock.c: mlockall spares reservations */
void os_reserved_cut(void *p, size_t n) INTERNAL;
void os_reserved_grow(void *end, size_t n) INTERNAL;
bool os_future_locked(void) INTERNAL;             /* mlockall(MCL_FUTURE) in effect (mlock.c) */
bool os_reserved_use(void *p, size_t n) INTERNAL; /* arena bytes come into use (mlock.c) */
bool os_locks_on_use(void) INTERNAL;              /* mlockall's stand-in is in effect (mlock.c) */
bool arena_track(bool (*commit)(size_t slots), void (*fit)(size_t slots, size_t old)) INTERNAL;
void os_give_back(void *tab, size_t from, size_t to) INTERNAL;
/* Slots below the bound: every per-slot table entry below it is usable. */
static inline size_t arena_bound_slots(void) {
  return __atomic_load_n(&rill_arena.bound, __ATOMIC_ACQUIRE) >> SLOT_SHIFT;
}

/* ---- span pool (pool.c): scalloc §3.3 ----------------------------------- */
/* A heap's run of never-used slots, for spans below CHUNK_ORDER: slots
 * next .. end - 1 of the arena. */
#define CHUNK_ORDER        4 /* 16 slots, 256 KiB */
#define CHUNK_ORDER_DEMAND 6 /* with RILL_COMMIT=demand: 1 MiB (pool.c) */
typedef struct chunk {
  uint32_t next, end;
} chunk_t;
bool pool_init(void) INTERNAL;
void pool_release(void) INTERNAL;
span_t *pool_take(unsigned order) INTERNAL;
span_t *pool_fresh(unsigned order, chunk_t *ck) INTERNAL;
span_t *pool_from_runs(unsigned order, uint32_t home) INTERNAL;
void pool_put(span_t *sp) INTERNAL;
void pool_tick(uint64_t now) INTERNAL;
void pool_pages_arrived(void) INTERNAL;
size_t pool_purge_range(uintptr_t start, uintptr_t end, bool lazy, uintptr_t *from,
                        bool *refused) INTERNAL;
size_t pool_purge(void) INTERNAL;
size_t pool_purge_timed(uint64_t now, bool background) INTERNAL;
size_t pool_purge_more(void) INTERNAL;
bool pool_purge_cut(void) INTERNAL;
void pool_purge_stale(void) INTERNAL;
void pool_grew(size_t slots) INTERNAL;
void pool_grew_small(size_t slots) INTERNAL;
uint32_t pool_swap_cutoff(void) INTERNAL;
uint32_t pool_grown(void) INTERNAL;
void pool_watch(bool on) INTERNAL;
bool pool_waiting(void) INTERNAL;
void pool_wait_pages(void) INTERNAL;
void pool_settle(void) INTERNAL;
void pool_fork_prepare(void) INTERNAL;

/* ---- large runs (runs.c): spans of any length for large objects --------- */
bool runs_init(void) INTERNAL;
size_t run_slots(size_t bytes) INTERNAL;
size_t run_dirty_bytes(const span_t *sp) INTERNAL;
size_t run_clean_slots(const span_t *sp) INTERNAL;
void run_zero(span_t *sp, char *p, size_t n) INTERNAL;
#define RUN_SHARDS 8 /* free runs' locks and bins (runs.c) */
span_t *run_get(size_t n, uint32_t home, bool own) INTERNAL;
span_t *run_get_free(size_t n, uint32_t home, bool own) INTERNAL;
span_t *run_get_warm(size_t n, uint32_t home, bool own) INTERNAL;
span_t *run_get_last(size_t n, uint32_t home) INTERNAL;
span_t *run_give(size_t n, uint32_t home, uint32_t cutoff) INTERNAL;
void run_adopt(span_t *sp, uint32_t home) INTERNAL;
size_t run_free_beside(size_t first, size_t end, uint32_t home) INTERNAL;
size_t pool_spill(size_t want, uint32_t home) INTERNAL;
void pool_entries_tick(uint64_t now) INTERNAL;
size_t pool_spill_spent(size_t want, uint32_t home) INTERNAL;
bool pool_purge_wait(void) INTERNAL;
void run_put(span_t *sp) INTERNAL;
bool run_resize(span_t *sp, size_t n) INTERNAL;
/* How long the purger thread's timed pass may go on giving back batches of
 * free runs (a program thread's gives one batch a shard; pool_purge_timed). */
#define PASS_MS 10
size_t runs_purge(uint32_t cutoff, bool lazy, uint64_t until, size_t *left, bool *cut) INTERNAL;
size_t runs_purge_stale(uint32_t cutoff) INTERNAL;
void runs_entries_release(void) INTERNAL;
size_t runs_purge_some(size_t slots, uint32_t cutoff) INTERNAL;
void runs_fork_prepare(void) INTERNAL;

/* ---- background purger (purger.c), RILL_PURGE_THREAD ------------------ */
enum { PURGE_THREAD_AUTO = 0, PURGE_THREAD_OFF = 1, PURGE_THREAD_ON = 2 }; /* the option */
void purger_init(unsigned mode) INTERNAL;
void purger_thread_seen(void) INTERNAL;
void purger_start_slow(void) INTERNAL;
void purger_fork_child(void) INTERNAL;
void purger_kick(void) INTERNAL;
extern _Atomic uint32_t lend_hint INTERNAL; /* heap.c: some owner may have spans to lend */
void heap_lend_hint(span_t *sp) INTERNAL;
extern _Atomic int rill_purger_state INTERNAL; /* PURGER_* */
enum { PURGER_OFF = 0, PURGER_WANTED = 1, PURGER_RUNNING = 2, PURGER_AUTO = 3 };
/* The allocation slow path and a thread's exit call this, holding no rill
 * lock (never a free: purger_start_slow says why): the purger starts once the pool first
 * holds pages or the program has cut four heap chunks (so a small program
 * never gets it). */
static inline void purger_poll(void) {
  if (unlikely(atomic_load_explicit(&rill_purger_state, RLX) == PURGER_WANTED)) purger_start_slow();
}
uint64_t pool_purged_bytes(void) INTERNAL;
uint64_t pool_epoch(void) INTERNAL;

/* ---- spans (span.c) ----------------------------------------------------- */
void span_init_class(span_t *sp, unsigned cls, struct heap *h, bool warm) INTERNAL;
void span_rewarm(span_t *sp, struct heap *h) INTERNAL;
bool span_list_ordered(const span_t *sp) INTERNAL;
void span_prefetch(const span_t *sp) INTERNAL;
void span_init_large(span_t *sp, size_t lobj, size_t size, struct heap *h) INTERNAL;
bool span_refill(span_t *sp) INTERNAL;
uint32_t span_collect(span_t *sp) INTERNAL;
bool span_attach(span_t *sp, uint64_t *x) INTERNAL;
bool span_block_ok(const span_t *sp, uintptr_t p) INTERNAL;
/* Block validation in one multiply and one compare. magic = floor(2^64 / d)
 * + 1 for the block size d (one more when d is a power of two), so magic * d
 * = 2^64 + err with 0 < err <= d. For off = q * d + r (r < d), off * magic
 * mod 2^64 = q * err + r * magic: q * err when r = 0, and at least magic
 * otherwise. Neither wraps while (q + 1) * err < magic, and (q + 1) * err <=
 * off + d while magic > 2^45 (d <= 256 KiB): so for every offset inside the
 * arena (below 2^40), even one past its span's end that a stale head points
 * from. With limit = carved * err (at most the span's size, far below magic),
 * `block_test < limit` holds exactly for the starts of the blocks cut so
 * far: Lemire, Kaser and Kurz's divisibility test ("Faster remainder by
 * direct computation", 2019), with err kept above zero so that the same
 * compare bounds the index. The caller passes off = p - start for the span
 * the head table gives p. The span starts at or below p, its first block
 * may not: p in the colour before it (class_color or a run's run_colour,
 * under one block) wraps off to 2^64 - k with 0 < k < d, and the product is
 * then above (d - k) * 2^64 / d - 2d, at least 2^54 for d <= 1 KiB and 2^46
 * for d <= 256 KiB, far above any limit. */
static inline uint64_t block_test(const span_t *sp, uint64_t off) {
  return off * sp->magic;
}
static inline uint64_t block_magic(uint64_t d) {
  return UINT64_MAX / d + 1 + ((d & (d - 1)) == 0); /* d a power of two: err = d, not 0 */
}

/* The key of the block starting at p in a span of small blocks, its offset
 * / 8 (block sizes are multiples of 8), or UINT32_MAX if p is not the start
 * of a block the span has cut (an interior or never-used address, or a
 * pooled span: bsize 0). The remote list names its head by key: a shift each
 * way, where a block index took a multiply. Inline for the remote free. */
static inline uint32_t span_block_key(const span_t *sp, uintptr_t p) {
  uintptr_t start = sp->start;
  if (!sp->bsize || p < start) return UINT32_MAX;
  uint64_t off = p - start;
  if (block_test(sp, off) >= __atomic_load_n(&sp->limit, __ATOMIC_ACQUIRE)) return UINT32_MAX;
  return (uint32_t)(off >> 3);
}
static inline block_t *block_of_key(const span_t *sp, uint32_t key) {
  return (block_t *)(sp->start + ((uintptr_t)key << 3));
}
span_t *span_lookup(const void *p) INTERNAL;
void span_free_remote(span_t *sp, block_t *b, uint32_t key) INTERNAL;
void span_free_remote_n(span_t *sp, block_t *b, block_t *last, uint32_t k, uint32_t key) INTERNAL;
uint32_t span_reuse_mark(const span_t *sp) INTERNAL;
void span_module_init(void) INTERNAL;
unsigned class_order(unsigned cls) INTERNAL;
size_t class_slots(unsigned cls) INTERNAL;
size_t class_color(unsigned cls) INTERNAL;
bool class_is_run(unsigned cls) INTERNAL;
/* Run classes' spans start their blocks a colour in, a multiple of this, so
 * their blocks keep the 256-byte boundaries the other classes' blocks sit on
 * (span.c, run_colour; heap.c, class_for). */
#define COLOUR_STEP ((size_t)256)
bool class_run_coloured(unsigned cls) INTERNAL;
/* The spans of classes over 4 KiB are runs of runs.c rather than spans of
 * the pool (class_is_run, span.c; heap_next_span): from this order up (128
 * KiB; classes from 40 KiB) cut to the blocks a span of the order holds,
 * below it exact runs. */
#define RUN_ORDER 3
/* Orders of the pool's spans, 16-128 KiB: 128 KiB only for the classes of
 * 2-4 KiB, which need it to hold 32 blocks (span.c, BIG_BLOCKS_MIN). */
#define POOL_ORDERS 4

/* ---- thread heaps (heap.c): Streamflow §3.1.1 local heaps -------------- */
#define STASH_ORDERS POOL_ORDERS /* the spans of runs go back to runs.c */
/* Classes whose freed blocks the block cache keeps (heap.c): those over
 * 8 KiB, whose spans hold 2-16 blocks; not the twins after NPLAIN. */
#define CACHE_CLS0 36
#define NCACHE     (NPLAIN - CACHE_CLS0)
_Static_assert(CACHE_CLS0 > NDIRECT_CLS, "young classes are never cached");

/* A heap's reusable lists, in an array beside the heap records: a thread
 * that never lists a span leaves their pages untouched (896 bytes of what
 * was a 2,560-byte record; `crowd`). */
#define BATCH_N     64   /* remote frees a thread keeps before pushing them (heap.c) */
#define BATCH_BSIZE 1024 /* the largest block they may be */
typedef struct heap_lists {
  span_t *list[NCLASSES]; /* partly free spans the heap tracks (reusable) */
  span_t *tail[NCLASSES]; /* last span of each list */
} heap_lists_t;
typedef struct heap {
  _Alignas(64) span_t *direct[DIRECT_N]; /* hot span by (n + 7) / 8 for n <= 1024: one
                                          * load, no class lookup, on the malloc fast path */
  span_t *hot[NCLASSES];                 /* allocation span per class (scalloc: hot) */
  heap_lists_t *ls;                      /* the heap's lists: a fixed heap's own, or its slot's
                                          * in heap_lists, set at reset (heap.c, lists) */
  _Atomic int lock;                      /* guards list[] and closed: the owner's slow paths and
                                          * remote frees that list or claim a span take it */
  _Atomic int hot_lock;                  /* guards changes of hot[]: the owner's span changes,
                                          * and the purger lending an idle owner's hot spans
                                          * (heap_lend); taken before `lock` */
  bool closed;                           /* the owner has exited: spans handed back are orphaned */
  _Atomic bool lent;                     /* the owner was found idle (heap_lend_idle): spans a
                                          * remote free queues go to the orphanage until its next
                                          * span change */
  uint32_t id;
  _Atomic int32_t tid;        /* the owner's thread id, for heap_lend_idle's look at it */
  _Atomic uint64_t lend_seen; /* os_now_ms() when heap_lend_idle last found the owner busy */
  _Atomic int *inside;        /* the owner's rill_inside (owner_busy) */
  _Atomic uint32_t lend_hint; /* a remote free gave a listed span room since the last look */
  _Atomic uint64_t swept;     /* pool_epoch() at the owner's last sweep of its lists (the
                               * purger reads it: heap_sweep_all) */
  uint64_t let_go;            /* bit per class: its hot span was let go empty on this beat
                               * (hot_emptied); the class's next hot span stays unarmed */
  uint64_t warm;              /* bit per class: this thread has had a span of the class
                               * (its next spans are carved in full steps at once) */
  chunk_t chunk;              /* fresh address space for small spans; kept when the heap
                               * record passes to a later thread */
  _Atomic uint32_t live;      /* 1 while a thread owns this heap */
  _Atomic uint32_t gen;       /* counts the threads that have owned this record */
  _Atomic uint32_t next_free; /* heap free list link (id + 1) */
  _Atomic uint64_t remote_frees;
  /* Spans this heap's own frees emptied, most recent first, per order below
   * RUN_ORDER (heap.c, "the stash"); under `lock`, since timed passes and
   * rill_collect hand them to the pool from any thread. */
  span_t *stash[STASH_ORDERS], *stash_tail[STASH_ORDERS];
  _Atomic uint32_t stash_slots; /* slots the stash holds, for its budget */
  uint32_t stash_pops;          /* spans taken from it (the owner's only) */
  _Atomic uint32_t stash_ops;   /* the owner's pushes and pops: moves while it is busy */
  _Atomic uint32_t steal_seen;  /* stash_ops when another heap last looked to steal */
  /* The block cache (heap.c): freed blocks over 8 KiB kept for the owner's
   * next mallocs, a stack per class. The owner's alone, but for the counts,
   * which rill_stats reads, and while the purger has set cache_off. */
  block_t *cache[NCACHE];
  uint8_t cache_n[NCACHE];   /* blocks on each stack */
  uint8_t cache_low[NCACHE]; /* the fewest since the last beat: kept unused (cache_trim) */
  _Atomic uint32_t cache_bytes;
  _Atomic uint32_t cache_off; /* the purger is draining the stacks of an idle owner */
  /* RILL_REMOTE_BATCH: remote frees of small blocks not pushed yet (heap.c,
   * "remote frees in batches"); the owner's, but while the purger has set
   * cache_off. Lines of their own: other threads read `gen` and `closed`. */
  _Alignas(64) _Atomic uint32_t batch_n;
  uint8_t batch_cls[NCLASSES]; /* the kept blocks by class, for rill_stats */
  block_t *batch[BATCH_N];
#if RILL_DEBUG
  _Atomic uint32_t owner_tid; /* the thread that owns this record now */
#endif
} heap_t;

/* Makes h the span's owner (its current incarnation: see heap_gen). */
static inline void span_set_heap(span_t *sp, heap_t *h) {
  atomic_store_explicit(&sp->heap_gen, atomic_load_explicit(&h->gen, RLX), RLX);
  atomic_store_explicit(&sp->heap, h, RLX);
}

extern heap_t rill_empty_heap INTERNAL; /* never initialized: first call sets up */
extern heap_t rill_done_heap INTERNAL;  /* thread already cleaned up */
extern span_t rill_empty_span INTERNAL; /* hot[] sentinel with no free blocks */
extern __thread heap_t *rill_tls INTERNAL __attribute__((tls_model("initial-exec")));

/* *zeroed: in, whether the caller needs zeroed memory (calloc), so a large
 * object zeroes only what may not be zero; out, whether the memory is zero. */
void *heap_alloc_slow(heap_t *h, size_t n, size_t align, bool *zeroed) INTERNAL;
void *heap_alloc_class(heap_t *h, unsigned cls) INTERNAL;
void heap_free_slow(void *p, span_t *sp, heap_t *h, const char *fn) INTERNAL;
void heap_span_emptied(heap_t *h, span_t *sp) INTERNAL;
void heap_claimed(span_t *sp, bool whole) INTERNAL;
void heap_queue(span_t *sp) INTERNAL;
heap_t *heap_get_slow(void) INTERNAL;
void heap_thread_done(heap_t *h) INTERNAL;
void heap_collect(heap_t *h) INTERNAL;
void heap_batch_push(heap_t *h) INTERNAL;
void heap_stashes_flush(void) INTERNAL;
bool heap_stashed(void) INTERNAL;
size_t heap_sweep_all(bool idle_only) INTERNAL;
size_t heap_lend_idle(bool all) INTERNAL;
uint64_t heap_spans_lent(void) INTERNAL;
heap_t *heap_at(uint32_t id) INTERNAL;
uint64_t heap_young_frees(void) INTERNAL;
uint32_t heap_young_live(void) INTERNAL;
uint32_t heap_count(void) INTERNAL;
uint32_t heap_kept(unsigned cls) INTERNAL;
extern uint32_t rill_cache_bsize[NCACHE] INTERNAL; /* heap.c: the cached classes' sizes */
void *large_alloc(heap_t *h, size_t n, size_t align, bool *zeroed) INTERNAL;
void *large_alloc_moved(heap_t *h, size_t n) INTERNAL;
/* Under an address-space limit the thread-heap records take at most this
 * share of it: 1/128 (24 MiB of a 3 GiB limit, 8,192 records) is room for
 * more threads than the limit has room for stacks of 8 MiB, where a
 * sixteenth reserved 152 MiB of it. */
#define HEAPS_SHARE 128
bool heap_module_init(size_t budget) INTERNAL;
void heap_fit(size_t limit) INTERNAL; /* limits.c: the program lowered RLIMIT_AS/DATA */
heap_t *heap_new_variant(void) INTERNAL;
#if RILL_VARIANT != 0
void variant_fork_prepare(void) INTERNAL; /* alloc.c: the comparison variants' locks */
void variant_fork_release(void) INTERNAL;
#endif
void heap_fork_prepare(void) INTERNAL;
void heap_fork_child(void) INTERNAL;

/* ---- huge objects (huge.c) --------------------------------------------- */
void *huge_alloc(size_t n, size_t align) INTERNAL;
bool huge_free(void *p) INTERNAL;
size_t huge_usable(const void *p) INTERNAL;
bool huge_realloc(void *p, size_t n, void **out) INTERNAL;
uint64_t huge_bytes(void) INTERNAL;
void huge_fork_prepare(void) INTERNAL;

/* ---- start-up, options, errors (init.c) -------------------------------- */
enum { SHOW_NONE, SHOW_TOTALS, SHOW_CLASSES }; /* RILL_SHOW_STATS */
typedef struct options {
  uint8_t show_stats;   /* SHOW_*: print statistics at exit, and a line per class */
  bool purge_free;      /* RILL_PURGE=free: MADV_FREE instead of MADV_DONTNEED */
  bool hugepages;       /* RILL_HUGEPAGES=1 */
  bool remote_batch;    /* RILL_REMOTE_BATCH=1: remote frees of small blocks pushed in batches */
  uint32_t purge_delay; /* RILL_PURGE_DELAY_MS */
  bool commit_demand;   /* RILL_COMMIT: tables and arena writable only as they are used */
  uint32_t gone_max;    /* RILL_COMMIT: decommitted stretches at once, from vm.max_map_count */
  bool deepbind_keep;   /* RILL_DEEPBIND=keep: dlopen, dlmopen keep RTLD_DEEPBIND */
} options_t;
extern options_t rill_opt INTERNAL;
extern int rill_stats_fd INTERNAL;
extern _Atomic int rill_ready INTERNAL;
bool rill_init(void) INTERNAL;
COLD void rill_invalid(const char *fn, const void *p) INTERNAL __attribute__((noreturn));
void rill_message(const char *a, const char *b) INTERNAL;
void rill_fmt_hex(char *out, uintptr_t v) INTERNAL;
void rill_fmt_dec(char *out, uint64_t v) INTERNAL;
void rill_thread_register(heap_t *h) INTERNAL;
void rill_stats_at_exit(void) INTERNAL;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}
int sched_yield(void);
/* Word w of a bitmap over the slots that shares its mapping with others,
 * interleaved by cache line (pool.c's maps, runs.c's bitmaps): `first` is its
 * first line, `stride` the words from one of its lines to its next. Each
 * line belongs to one bitmap, and every bitmap's words for a slot lie
 * together, so the used part of all of them grows as one range. */
#define BITMAP_LINE 8
static inline _Atomic uint64_t *line_word(_Atomic uint64_t *first, size_t w, size_t stride) {
  return first + w / BITMAP_LINE * stride + w % BITMAP_LINE;
}
/* Bytes of such bitmaps that their first `words` words each take. */
static inline size_t line_bytes(size_t words, size_t stride) {
  return (words + BITMAP_LINE - 1) / BITMAP_LINE * stride * sizeof(uint64_t);
}
/* Across fork, fork_prepare (init.c) holds every rill lock and marks it with
 * the fork's generation; fork_parent and fork_child let them all go at once
 * by starting the next generation (fork_locks_release), and the next
 * spin_lock of a lock still marked with an older one takes it from the mark.
 * Letting go of each lock wrote its page in both processes right after the
 * fork, while the two still shared it, so each write copied the page: 13
 * pages on each side in a one-thread program, two more per thread's heap
 * (docs/benchmarks.md, "What a fork costs"). Every fork marks every lock
 * again, so no mark outlives the next fork, and generations never wrap into
 * a mark still standing. glibc runs the fork handlers that other code
 * registered before rill's in between, prepare handlers after rill's and
 * parent and child handlers before, and those may allocate (glibc's own
 * malloc takes its locks after every handler); so the forking thread,
 * rill_forker, may enter a lock marked with the running fork again, and its
 * unlock leaves the lock held. Nothing else is ever entered twice. */
extern _Atomic unsigned rill_fork_gen INTERNAL;
extern _Atomic uintptr_t rill_forker INTERNAL;        /* &rill_tls of the forking thread, or 0 */
#define LOCK_MARK(gen) (2 + (int)((gen)&0x3fffffffu)) /* 2 and up: marked (spin_lock) */
/* A mark of a fork gone by: the lock is free. Acquire: what the forking
 * thread wrote under the lock happened before its handler's release. */
static inline bool lock_stale(int seen) {
  return seen >= 2 && seen != LOCK_MARK(atomic_load_explicit(&rill_fork_gen, ACQ));
}
static inline bool fork_reentry(int seen) {
  return seen >= 2 && atomic_load_explicit(&rill_forker, RLX) == (uintptr_t)&rill_tls &&
         seen == LOCK_MARK(atomic_load_explicit(&rill_fork_gen, RLX));
}
/* The locks of rill's slow paths. A waiter spins a little, then yields a
 * little (a holder preempted on its CPU, when more threads run than cores),
 * then sleeps in a futex wait (lock_wait) until the holder's unlock wakes it.
 * Yielding alone was a livelock: a SCHED_FIFO thread that waits on a lock
 * held by a normal thread on its CPU never lets it run, and waited a second
 * here, burning it, until the kernel's real-time throttling gave the holder
 * its 5% (test_lock; allocators' users have met the same: WebKit's bmalloc
 * hung a real-time audio thread so). The lock word: 0 free, 1 held,
 * LOCK_SLEEPERS held with a thread asleep on it (or about to be), 2 and up
 * a fork's mark (above). */
#define LOCK_SLEEPERS (-1)
void lock_wait(_Atomic int *l, int seen) INTERNAL;
void lock_wake(_Atomic int *l, int n) INTERNAL;
void os_pause(unsigned tries) INTERNAL;
static inline void spin_lock(_Atomic int *l) {
  int seen = 0;
  if (__builtin_expect(!atomic_compare_exchange_strong_explicit(l, &seen, 1, ACQ, RLX), 0))
    lock_wait(l, seen);
}
static inline bool spin_trylock(_Atomic int *l) {
  int seen = 0;
  if (atomic_compare_exchange_strong_explicit(l, &seen, 1, ACQ, RLX)) return true;
  if (lock_stale(seen)) return atomic_compare_exchange_strong_explicit(l, &seen, 1, ACQ, RLX);
  return fork_reentry(seen);
}
/* An exchange, not a store: a waiter may mark the word LOCK_SLEEPERS at any
 * moment before it sleeps, and a store would lose that, and the wake. */
static inline void spin_unlock(_Atomic int *l) {
  if (__builtin_expect(atomic_load_explicit(l, RLX) >= 2, 0)) return; /* see above */
  if (__builtin_expect(atomic_exchange_explicit(l, 0, REL) == LOCK_SLEEPERS, 0)) lock_wake(l, 1);
}
/* The mark replaces LOCK_SLEEPERS, which the unlock that wakes sleepers
 * looks for, and fork_locks_release writes no lock word: so every sleeper is
 * woken now, and waits for the fork on rill_fork_gen instead (lock_wait). */
static inline void fork_hold(_Atomic int *l) {
  spin_lock(l);
  int mark = LOCK_MARK(atomic_load_explicit(&rill_fork_gen, RLX));
  if (atomic_exchange_explicit(l, mark, RLX) == LOCK_SLEEPERS) lock_wake(l, INT32_MAX);
}
/* Threads asleep until the running fork lets its locks go (lock_wait). */
extern _Atomic uint32_t rill_fork_sleepers INTERNAL;
void lock_fork_wake(void) INTERNAL;
/* Every lock fork_hold marked, let go: one store, on one page, and a wake
 * for the threads asleep on a mark. Sequentially consistent, as the
 * sleepers' count and look at the generation are: either this sees a
 * sleeper, or the sleeper sees the new generation and does not sleep. */
static inline void fork_locks_release(void) {
  atomic_store_explicit(&rill_fork_gen, atomic_load_explicit(&rill_fork_gen, RLX) + 1,
                        memory_order_seq_cst);
  if (atomic_load_explicit(&rill_fork_sleepers, memory_order_seq_cst)) lock_fork_wake();
}
/* Test builds (-DRILL_RACE_WINDOWS) yield at points where another thread
 * may claim, pool or reformat the span in hand (span_attach, span_collect,
 * after a remote free's push, listed_detach, listed_claim, heap_claimed),
 * so TSan runs on two cores meet interleavings that come once in dozens of
 * runs otherwise. */
#ifdef RILL_RACE_WINDOWS
#define race_window()                                                                              \
  do {                                                                                             \
    for (int rw_ = 0; rw_ < 8; rw_++) sched_yield();                                               \
  } while (0)
#else
#define race_window() ((void)0)
#endif
/* TSan builds with the windows also nap in a futex wait, now and then, inside
 * the fast paths with a span in hand, as TSan's runtime may (owner_busy): the
 * purger then finds the owner asleep mid-call, and must not lend its spans. */
#if defined(RILL_RACE_WINDOWS) && defined(RILL_TSAN)
void race_nap(void) INTERNAL;
#else
#define race_nap() ((void)0)
#endif

#include "debug.h"

/* A block of cached class CACHE_CLS0 + i from the thread's block cache
 * (heap.c, "the block cache"), handed out, or NULL: inline in malloc's class
 * slow path, so a hit makes no call and saves no register (12 instructions
 * fewer a hit than through calls; callgrind, randalloc at 16-64 KiB), and in
 * heap_alloc_class before a span change. After debug.h, for dbg_alloc. */
static inline block_t *heap_cache_take(heap_t *h, unsigned i) {
  if (atomic_load_explicit(&h->cache_off, memory_order_acquire)) return NULL; /* heap_lend */
  block_t *b = h->cache[i];
  if (!b) return NULL;
  block_t *nx = b->next;
  h->cache[i] = nx;
  /* no prefetch of nx, as malloc_fast's pop has: the class's next hit comes
   * after other big blocks' first lines, which share nx's few cache sets
   * (page-aligned blocks), and one measured level either way */
  uint8_t n = (uint8_t)(h->cache_n[i] - 1);
  __atomic_store_n(&h->cache_n[i], n, __ATOMIC_RELAXED);
  if (n < h->cache_low[i]) h->cache_low[i] = n;
  atomic_store_explicit(&h->cache_bytes,
                        atomic_load_explicit(&h->cache_bytes, memory_order_relaxed) -
                            rill_cache_bsize[i],
                        memory_order_relaxed);
  dbg_alloc(span_at((uintptr_t)b - rill_arena.base), b);
  owner_release(h); /* TSan builds only (heap_lend) */
  return b;
}

#endif
