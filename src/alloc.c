/* alloc.c - the public API: rill_* entry points with their inline fast paths,
 * and the standard C names (malloc, free, ...) that replace the C library's
 * allocator. The fast paths touch one TLS pointer and the span, nothing else. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <string.h>

#include "internal.h"

/* ---- which heap: the thread's own, or a locked shared one (variants) ---- */
#if RILL_VARIANT == 0
static inline heap_t *cur_heap(void) {
  return rill_tls;
}
#define LOCK(h)   owner_enter() /* TSan builds only (heap_lend) */
#define UNLOCK(h) owner_leave()
#else
/* Comparison baselines built from the same sources (ar-malloc note, LKmalloc
 * §6-7): variant 1 puts every operation under one lock; variant 2 maps
 * threads onto NSUB locked heaps by hashing the thread id. */
#define NSUB (RILL_VARIANT == 1 ? 1 : 8)
static heap_t *subheap[NSUB];
static pthread_mutex_t sublock[NSUB] = {[0 ... NSUB - 1] = PTHREAD_MUTEX_INITIALIZER};
static _Atomic int sub_ready;
static _Atomic int sub_init_lock; /* held across fork too (variant_fork_prepare) */
static unsigned sub_index(void) {
  uint64_t t = (uint64_t)pthread_self();
  return (unsigned)(((t >> 12) * 0x9E3779B97F4A7C15ull) >> 40) % NSUB;
}
static COLD void sub_init(void) {
  spin_lock(&sub_init_lock);
  if (!atomic_load_explicit(&sub_ready, RLX) && rill_init()) {
    for (unsigned i = 0; i < NSUB; i++) subheap[i] = heap_new_variant();
    atomic_store_explicit(&sub_ready, 1, REL);
  }
  spin_unlock(&sub_init_lock);
}
static inline heap_t *cur_heap(void) {
  if (unlikely(!atomic_load_explicit(&sub_ready, ACQ))) sub_init();
  return subheap[sub_index()];
}
/* The forking thread holds every sub-heap lock from fork's prepare handler
 * to its parent and child handlers (variant_fork_prepare), and other
 * libraries' handlers that run in between may allocate: it goes in
 * without the lock it already holds, as rill's own locks let it (LOCK_MARK,
 * internal.h). */
static inline bool sub_forker(void) {
  return unlikely(atomic_load_explicit(&rill_forker, RLX) == (uintptr_t)&rill_tls);
}
#define LOCK(h)                                                                                    \
  do {                                                                                             \
    if (!sub_forker()) pthread_mutex_lock(&sublock[(h)->id % NSUB]);                               \
  } while (0)
#define UNLOCK(h)                                                                                  \
  do {                                                                                             \
    if (!sub_forker()) pthread_mutex_unlock(&sublock[(h)->id % NSUB]);                             \
  } while (0)

/* A thread that holds a sub-heap lock may be inside rill, waiting for its
 * locks, so fork takes these first and lets them go last (init.c): without
 * them a child forked while another thread allocated found that thread's
 * lock held for good (test_fork --nested hung under both variants). Parent
 * and child unlock them, the use POSIX gives pthread_atfork: the child's
 * one thread is the one that locked them. */
void variant_fork_prepare(void) {
  for (unsigned i = 0; i < NSUB; i++) pthread_mutex_lock(&sublock[i]);
  fork_hold(&sub_init_lock); /* before init_lock, which sub_init takes inside it */
}
void variant_fork_release(void) {
  for (unsigned i = 0; i < NSUB; i++) pthread_mutex_unlock(&sublock[i]);
}
#endif

/* ---- fast paths --------------------------------------------------------- */
/* The slow paths take the caller's argument first (n, p), so it stays in the
 * register it arrived in: one move fewer in each fast path (callgrind). */
static NOINLINE void *malloc_slow(size_t n, heap_t *h) {
  bool z = false;
  void *p = heap_alloc_slow(h, n, 8, &z);
  if (unlikely(!p)) errno = ENOMEM;
  return p;
}

/* A class's hot span has no free block. The class comes from malloc_fast:
 * computed again here it cost a tenth of a block-cache hit's instructions
 * (callgrind, randalloc at 16-64 KiB). */
static NOINLINE void *malloc_class_slow(size_t n, unsigned cls, heap_t *h) {
  if (cls - CACHE_CLS0 < NCACHE) { /* a big block the thread freed (heap.c) */
    block_t *b = heap_cache_take(h, cls - CACHE_CLS0);
    if (b) return b;
  }
  return malloc_slow(n, h);
}

/* Pop the hot span's local free list: no lock, no atomic read-modify-write
 * (Streamflow §3.1.1 "Object allocation"). */
static inline void *malloc_fast(heap_t *h, size_t n) {
  span_t *sp;
  /* relaxed atomic loads, plain movs: the purger may swap an idle owner's
   * hot spans (heap_lend) */
  block_t *b;
  if (likely(n <= DIRECT_MAX)) {
    sp = __atomic_load_n(&h->direct[(n + 7) >> 3], __ATOMIC_RELAXED);
    b = sp->free;
  } else if (n <= CLASS_MAX) {
    unsigned c = size_class(n);
    sp = __atomic_load_n(&h->hot[c], __ATOMIC_RELAXED);
    b = sp->free;
    if (unlikely(!b)) return malloc_class_slow(n, c, h);
  } else
    return malloc_slow(n, h);
  if (likely(b != NULL)) {
    race_nap();
    block_t *nx = b->next;
    sp->free = nx;
    /* the next pop reads nx's link: a block last written on another core
     * (a remote free, a block a thread handed on) or long unused missed
     * there, inside the call. One instruction; the soak's malloc p99 at
     * four workers 190 -> 90 ns (docs/benchmarks.md, "Malloc's tail") */
    __builtin_prefetch(nx, 1);
    used_inc(sp);
    dbg_alloc(sp, b);
    owner_release(h); /* TSan builds only (heap_lend) */
    return b;
  }
  return malloc_slow(n, h);
}

static COLD void free_outside(void *p, const char *fn) {
  if (!huge_free(p)) rill_invalid(fn, p);
}

/* Push onto the span's local free list when this heap owns the span; the
 * block test (block_test) rejects interior and never-allocated addresses. */
static inline void free_fast(heap_t *h, void *p, const char *fn) {
  uintptr_t off = (uintptr_t)p - rill_arena.base;
  if (unlikely(arena_beyond(off))) {
    if (p) free_outside(p, fn);
    return;
  }
  span_t *sp = span_at(off); /* meta[0], whose block test fails, if no span covers p */
  dbg_free(sp, p);
  if (likely(attached_to(sp, h))) {
    uint64_t t = block_test(sp, (uintptr_t)p - sp->start);
    block_t *b = p, *head = sp->free;
    /* the head test catches the common double free (glibc's "fasttop");
     * `limit` is read plainly: this thread owns the span and is its only
     * writer, so the compare takes it straight from memory */
    if (unlikely(t >= sp->limit || b == head)) rill_invalid(fn, p);
    race_nap();
    uint32_t u = owner_push(sp, b, head);
    owner_release(h); /* TSan builds only (heap_lend_idle) */
    /* a span on the reusable list goes back to the pool when its last block
     * returns: here or in a remote free (scalloc's eager return) */
    if (owner_emptied(sp, u)) heap_span_emptied(h, sp);
    return;
  }
  heap_free_slow(p, sp, h, fn);
}

/* ---- the rill_ API ------------------------------------------------------ */
EXPORT __attribute__((aligned(64))) void *rill_malloc(size_t n) {
  heap_t *h = cur_heap();
  LOCK(h);
  void *p = malloc_fast(h, n);
  UNLOCK(h);
  return p;
}

EXPORT __attribute__((aligned(64))) void rill_free(void *p) {
  heap_t *h = cur_heap();
  LOCK(h);
  free_fast(h, p, "free");
  UNLOCK(h);
}

static void free_named(void *p, const char *fn) {
  heap_t *h = cur_heap();
  LOCK(h);
  free_fast(h, p, fn);
  UNLOCK(h);
}

/* Usable size of a live block; aborts on an address rill never handed out. */
static size_t usable(const void *p, const char *fn) {
  span_t *sp = span_lookup(p);
  if (sp) {
    if (!span_block_ok(sp, (uintptr_t)p)) rill_invalid(fn, p);
    return sp->cls == CLS_LARGE ? sp->lsize : sp->bsize;
  }
  size_t n = huge_usable(p);
  if (!n) rill_invalid(fn, p);
  return n;
}

EXPORT size_t rill_malloc_usable_size(const void *p) {
  return p ? usable(p, "malloc_usable_size") : 0;
}

static void *alloc_general(size_t n, size_t align, bool *zeroed) {
  heap_t *h = cur_heap();
  LOCK(h);
  void *p = heap_alloc_slow(h, n, align, zeroed);
  UNLOCK(h);
  if (unlikely(!p)) errno = ENOMEM;
  return p;
}

static void *alloc_aligned(size_t align, size_t n) {
  if (align <= 8 || (align <= 16 && n >= 16)) return rill_malloc(n);
  bool z = false;
  if (n > SIZE_MAX - align) {
    errno = ENOMEM;
    return NULL;
  }
  return alloc_general(n, align, &z);
}

EXPORT void *rill_calloc(size_t count, size_t size) {
  size_t n;
  if (unlikely(__builtin_mul_overflow(count, size, &n))) {
    errno = ENOMEM;
    return NULL;
  }
  void *p;
  if (likely(n <= CLASS_MAX)) {
    p = rill_malloc(n);
    if (p) memset(p, 0, n);
    return p;
  }
  bool zeroed = true; /* in: zeroed memory wanted; out: it is zero */
  p = alloc_general(n, 8, &zeroed);
  if (p && !zeroed) memset(p, 0, n);
  return p;
}

#define REMAP_MIN ((size_t)1 << 20)

/* A block realloc grows to this size or more becomes a large object, a run
 * of pages that can go on growing in place, even where malloc would use a
 * size class (up to CLASS_MAX): a buffer grown in steps from 64 KiB copied
 * itself into the 128, 192 and 256 KiB classes in turn, and each class's
 * span of two or three blocks stayed resident beside it. A run shrunk to
 * this size or more stays a run, in place, its tail given back. */
#define GROW_RUN_MIN ((size_t)64 << 10)

/* Whether n bytes at p all read as zero: a word at a time, so a page that
 * holds data is told apart at its first nonzero word. */
static bool reads_zero(const char *p, size_t n) {
  uint64_t acc = 0;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    uint64_t w[8];
    memcpy(w, p + i, sizeof w);
    acc |= w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7];
    if (acc) return false;
  }
  for (; i < n; i++) acc |= (unsigned char)p[i];
  return !acc;
}

/* Copies a block into a new mapping, which reads as zero, leaving out the
 * pages of the source that read as zero too. A buffer that grew in place at
 * the arena's top while the program wrote a byte per 64 KiB step moved to
 * a mapping at 17 MiB, and a plain copy made all 17 MiB resident: realloc
 * at two threads peaked at 44 MiB or 32 from run to run, by whether one of
 * its eight buffers had grown there. */
static void copy_to_fresh(char *dst, const char *src, size_t n) {
  size_t pg = rill_arena.page;
  for (size_t off = 0; off < n; off += pg) {
    size_t len = n - off < pg ? n - off : pg;
    if (!reads_zero(src + off, len)) memcpy(dst + off, src + off, len);
  }
}

/* A block that must move to grow to GROW_RUN_MIN or more: a run of this
 * thread's shard (see large_alloc_moved), else wherever malloc would put it. */
static void *malloc_moved(size_t n) {
  heap_t *h = cur_heap();
  LOCK(h);
  void *q = large_alloc_moved(h, n);
  UNLOCK(h);
  return q ? q : rill_malloc(n);
}

/* A small block stays in place while the new size still fits it and does
 * not shrink it below half; a large one's run shrinks in place, and grows in
 * place into a free neighbour or the arena's top, to any size from
 * GROW_RUN_MIN on; huge blocks move with mremap. */
static void *realloc_named(void *p, size_t n, const char *fn) {
  if (!p) return rill_malloc(n);
  if (n == 0) { /* glibc frees and returns NULL */
    free_named(p, fn);
    return NULL;
  }
  span_t *sp = span_lookup(p);
  size_t old;
  if (sp) {
    if (!span_block_ok(sp, (uintptr_t)p)) rill_invalid(fn, p);
    if (sp->cls == CLS_LARGE) {
      /* a large block's run shrinks or grows in place when it can */
      old = sp->lsize;
      size_t need = sp->lobj + n;
      /* (a run past LARGE_MAX is a huge block the kernel would not map: large_place) */
      if (n >= GROW_RUN_MIN && (need <= LARGE_MAX || old > LARGE_MAX) &&
          run_resize(sp, run_slots(need))) {
        size_t pg = rill_arena.page;
        SPAN_SET(sp, lsize, (n + pg - 1) & ~(pg - 1));
        return p;
      }
      /* It must move to grow. A buffer grown past REMAP_MIN leaves the arena
       * for a mapping of its own: one copy now, and each later move is an
       * mremap of page tables rather than a copy (four buffers growing in
       * turn to 24 MiB copied 3.4 GB in 64 KiB steps). Pages it never
       * touched stay unmapped, and free unmaps it at once. */
      if (n > old && n >= REMAP_MIN) {
        void *q = huge_alloc(n, 16);
        if (q) {
          copy_to_fresh(q, p, old);
          free_named(p, fn);
          return q;
        }
      }
    } else {
      old = sp->bsize;
      if (n <= old && (n > old / 2 || old <= 16)) return p;
    }
  } else {
    void *q;
    if (!huge_realloc(p, n, &q)) rill_invalid(fn, p);
    if (q) return q;
    /* the kernel refused the mremap (an address-space limit): a block
     * wherever malloc finds room, the arena's free memory included (a buffer
     * grown by a quarter at a time after 676 MiB of small blocks were freed
     * under 768 MiB stopped at 11 MiB; glibc's reached 646) */
    q = rill_malloc(n);
    if (!q) return NULL;
    size_t had = huge_usable(p); /* p is still registered, unchanged */
    memcpy(q, p, had < n ? had : n);
    free_named(p, fn);
    return q;
  }
  void *q = n > old && n >= GROW_RUN_MIN ? malloc_moved(n) : rill_malloc(n);
  if (!q) return NULL;
  memcpy(q, p, old < n ? old : n);
  free_named(p, fn);
  return q;
}

EXPORT void *rill_realloc(void *p, size_t n) {
  return realloc_named(p, n, "realloc");
}

EXPORT void *rill_reallocarray(void *p, size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) {
    errno = ENOMEM;
    return NULL;
  }
  return realloc_named(p, n, "reallocarray");
}

static inline bool pow2(size_t a) {
  return a && !(a & (a - 1));
}

EXPORT int rill_posix_memalign(void **out, size_t align, size_t n) {
  if (!pow2(align) || align % sizeof(void *)) return EINVAL;
  int saved = errno;
  void *p = alloc_aligned(align, n);
  if (!p) {
    errno = saved;
    return ENOMEM;
  }
  *out = p;
  return 0;
}

EXPORT void *rill_aligned_alloc(size_t align, size_t n) {
  if (!pow2(align)) {
    errno = EINVAL;
    return NULL;
  }
  return alloc_aligned(align, n);
}

/* glibc rounds a non-power-of-two alignment up to the next power of two. */
EXPORT void *rill_memalign(size_t align, size_t n) {
  if (align > ((size_t)1 << 62)) {
    errno = EINVAL;
    return NULL;
  }
  if (!pow2(align)) {
    size_t a = 1;
    while (a < align) a <<= 1;
    align = a;
  }
  return alloc_aligned(align, n);
}

static size_t page_size(void) {
  if (!atomic_load_explicit(&rill_ready, ACQ)) rill_init();
  return rill_arena.page ? rill_arena.page : 4096;
}

EXPORT void *rill_valloc(size_t n) {
  return alloc_aligned(page_size(), n);
}

EXPORT void *rill_pvalloc(size_t n) {
  size_t pg = page_size(), r = (n + pg - 1) & ~(pg - 1);
  if (r < n) {
    errno = ENOMEM;
    return NULL;
  }
  return alloc_aligned(pg, r ? r : pg);
}

EXPORT void rill_free_sized(void *p, size_t size) {
  (void)size;
  free_named(p, "free_sized");
}

EXPORT void rill_free_aligned_sized(void *p, size_t align, size_t size) {
  (void)align;
  (void)size;
  free_named(p, "free_aligned_sized");
}

EXPORT size_t rill_collect(bool force) {
  if (!atomic_load_explicit(&rill_ready, ACQ)) return 0;
  heap_batch_push(rill_tls); /* RILL_REMOTE_BATCH: the caller's kept remote frees */
  if (force) heap_collect(rill_tls);
  heap_sweep_all(false);
  return pool_purge();
}

/* ---- the standard names ------------------------------------------------- */
/* Defining them here makes a preloaded or linked librill the process's
 * allocator. RILL_NO_OVERRIDE builds keep only the rill_ names (sanitizer
 * builds, which bring their own malloc). */
#ifndef RILL_NO_OVERRIDE
#define ALIAS(name) __attribute__((alias(#name), visibility("default")))
void *malloc(size_t n) ALIAS(rill_malloc);
void free(void *p) ALIAS(rill_free);
void *calloc(size_t c, size_t n) ALIAS(rill_calloc);
void *realloc(void *p, size_t n) ALIAS(rill_realloc);
void *reallocarray(void *p, size_t c, size_t n) ALIAS(rill_reallocarray);
int posix_memalign(void **out, size_t a, size_t n) ALIAS(rill_posix_memalign);
void *aligned_alloc(size_t a, size_t n) ALIAS(rill_aligned_alloc);
void *memalign(size_t a, size_t n) ALIAS(rill_memalign);
void *valloc(size_t n) ALIAS(rill_valloc);
void *pvalloc(size_t n) ALIAS(rill_pvalloc);
size_t malloc_usable_size(void *p) ALIAS(rill_malloc_usable_size);
void free_sized(void *p, size_t n) ALIAS(rill_free_sized);
void free_aligned_sized(void *p, size_t a, size_t n) ALIAS(rill_free_aligned_sized);
void cfree(void *p) ALIAS(rill_free);
/* glibc's own internal names, used by parts of libc that bypass the PLT */
void *__libc_malloc(size_t n) ALIAS(rill_malloc);
void __libc_free(void *p) ALIAS(rill_free);
void *__libc_calloc(size_t c, size_t n) ALIAS(rill_calloc);
void *__libc_realloc(void *p, size_t n) ALIAS(rill_realloc);
void *__libc_memalign(size_t a, size_t n) ALIAS(rill_memalign);
void *__libc_valloc(size_t n) ALIAS(rill_valloc);
void *__libc_pvalloc(size_t n) ALIAS(rill_pvalloc);

EXPORT int malloc_trim(size_t pad) {
  (void)pad;
  return rill_collect(true) > 0;
}

/* glibc's tuning call. Its knobs (arenas, the trim and mmap thresholds,
 * fastbins) have no counterpart here, so it changes nothing; rill is tuned
 * by its RILL_* variables. It answers as glibc 2.36 does, 1 except for
 * M_MXFAST outside 0..80 * sizeof(size_t) / 4, so a program that checks the
 * result behaves as before. Defining it matters for fully static programs:
 * without it, a call pulls libc.a's malloc.o, whose malloc clashes with
 * ours at link time. */
EXPORT int mallopt(int param, int value) {
  enum { MXFAST_MAX = 80 * sizeof(size_t) / 4 };
  if (param == M_MXFAST) return value >= 0 && value <= MXFAST_MAX;
  return 1;
}
#endif
