/* debug.h - consistency checks for -DRILL_DEBUG=1 builds (off by default):
 * a shadow byte per small block (1 while the block is out) and a short log
 * of each span's state changes, printed when a check fails. The shadow is
 * read and written with plain relaxed moves, not atomic read-modify-writes:
 * on x86 those are full fences and hid the very races they were meant to
 * catch. A block has one holder at a time, so the allocator's own ordering
 * orders its shadow byte too. */
#ifndef RILL_DEBUG_H
#define RILL_DEBUG_H

#ifndef RILL_DEBUG
#define RILL_DEBUG 0
#endif

/* State changes kept in a span's log (names in debug.c). */
enum {
  EV_INIT = 1,  /* formatted for a class */
  EV_RETIRE,    /* full hot span let go: floating */
  EV_LIST_PUSH, /* onto its owner's reusable list */
  EV_LIST_POP,  /* off a reusable list, attached */
  EV_TAKE,      /* taken over at a free (heap_take) */
  EV_RELEASE,   /* let go by an exiting owner */
  EV_ORPHAN,    /* listed on the orphanage */
  EV_CLAIM,     /* claimed empty off a list */
  EV_POOL,      /* into the span pool */
  EV_ADOPT,     /* adopted from the orphanage or a shared heap */
  EV_SWEEP,     /* pooled by a sweep of a heap's lists */
  EV_HAND,      /* handed to its owner's list by a remote free */
  EV_REMOTE,    /* state changed by a remote free */
  EV_LEND,      /* lent by an idle owner to the orphanage */
  EV_COUNT
};

#if RILL_DEBUG
#define DBG_MAX_BLOCKS 2048u
#define DBG_RING       32u
typedef struct dbg_ev {
  uint32_t tid, used, count;
  uint8_t ev, state, where, pad;
  uint64_t heap;
} dbg_ev_t;
typedef struct dbg_span {
  _Atomic uint8_t out[DBG_MAX_BLOCKS];
  _Atomic uint32_t at;
  dbg_ev_t ring[DBG_RING];
} dbg_span_t;
extern dbg_span_t *rill_dbg INTERNAL;
void dbg_fail(const span_t *sp, const char *what, uintptr_t p) INTERNAL __attribute__((noreturn));
void dbg_event(const span_t *sp, unsigned ev) INTERNAL;
uint32_t dbg_tid(void) INTERNAL;
void dbg_heap_fail(const char *what, uint32_t other) INTERNAL __attribute__((noreturn));
/* A heap record has one owner thread at a time (the locked variants share theirs). */
#if RILL_VARIANT == 0
#define dbg_heap_own(h) atomic_store_explicit(&(h)->owner_tid, dbg_tid(), RLX)
#define dbg_heap_mine(h)                                                                           \
  do {                                                                                             \
    uint32_t o_ = atomic_load_explicit(&(h)->owner_tid, RLX);                                      \
    if (o_ != dbg_tid()) dbg_heap_fail("heap used by a thread that does not own it", o_);          \
  } while (0)
#else
#define dbg_heap_own(h)  ((void)0)
#define dbg_heap_mine(h) ((void)0)
#endif

static inline dbg_span_t *dbg_of(const span_t *sp) {
  return &rill_dbg[span_index(sp)];
}
static inline void dbg_alloc(span_t *sp, void *p) {
  if (!p || sp->cls == CLS_LARGE || sp == &rill_empty_span) return;
  uint64_t i = ((uintptr_t)p - sp->start) / sp->bsize;
  if (i >= sp->cap || (uintptr_t)p - sp->start != i * sp->bsize)
    dbg_fail(sp, "alloc: bad block", (uintptr_t)p);
  if (i >= DBG_MAX_BLOCKS) return; /* spans of more blocks (large kernel pages): unchecked */
  _Atomic uint8_t *o = &dbg_of(sp)->out[i];
  if (atomic_load_explicit(o, RLX)) dbg_fail(sp, "alloc: block handed out twice", (uintptr_t)p);
  atomic_store_explicit(o, 1, RLX);
}
/* Addresses that are not blocks of the span are left to free's own checks. */
static inline void dbg_free(span_t *sp, void *p) {
  if (sp->cls == CLS_LARGE) return;
  uint32_t k = span_block_key(sp, (uintptr_t)p);
  if (k == UINT32_MAX) return;
  uint32_t i = (uint32_t)(((uint64_t)k << 3) / sp->bsize);
  if (i >= DBG_MAX_BLOCKS) return;
  _Atomic uint8_t *o = &dbg_of(sp)->out[i];
  if (!atomic_load_explicit(o, RLX)) dbg_fail(sp, "free: block not out", (uintptr_t)p);
  atomic_store_explicit(o, 0, RLX);
}
static inline void dbg_empty(span_t *sp, const char *what) {
  if (sp->cls == CLS_LARGE) return;
  dbg_span_t *d = dbg_of(sp);
  for (unsigned i = 0; i < sp->cap && i < DBG_MAX_BLOCKS; i++)
    if (atomic_load_explicit(&d->out[i], RLX))
      dbg_fail(sp, what, sp->start + i * (uintptr_t)sp->bsize);
}
#else
#define dbg_alloc(sp, p) ((void)0)
#define dbg_free(sp, p)  ((void)0)
#define dbg_empty(sp, w) ((void)0)
#define dbg_event(sp, e) ((void)0)
#define dbg_heap_own(h)  ((void)0)
#define dbg_heap_mine(h) ((void)0)
#endif

#endif
