/* pool.c - the global span pool (scalloc §3.3): empty spans in lock-free
 * Treiber stacks, one per span order and per stripe (stripe = heap id mod
 * cores), and their delayed, batched purging. The stacks take no lock; one
 * lock keeps purge passes apart from each other and from fork. */
#include "internal.h"

/* one cache line per head, so stripes do not false-share */
typedef struct {
  _Alignas(64) span_stack_t top;
} padded_stack_t;
static padded_stack_t pool[NORDERS][MAX_STRIPES];

/* Heads carry a 32-bit tag bumped on every change, so a pop that read a
 * stale `link` fails its CAS instead of corrupting the stack (ABA). */
void stack_push(span_stack_t *st, span_t *sp) {
  uint64_t old = atomic_load_explicit(st, RLX), nw;
  uint32_t me = (uint32_t)span_index(sp) + 1;
  do {
    atomic_store_explicit(&sp->link, (uint32_t)old, RLX);
    nw = ((old >> 32) + 1) << 32 | me;
  } while (!atomic_compare_exchange_weak_explicit(st, &old, nw, REL, RLX));
}

span_t *stack_pop(span_stack_t *st) {
  uint64_t old = atomic_load_explicit(st, ACQ), nw;
  span_t *sp;
  do {
    uint32_t top = (uint32_t)old;
    if (!top) return NULL;
    sp = span_of_index(top - 1);
    nw = ((old >> 32) + 1) << 32 | atomic_load_explicit(&sp->link, RLX);
  } while (!atomic_compare_exchange_weak_explicit(st, &old, nw, ACQ, ACQ));
  return sp;
}

/* Takes the whole stack at once; the caller owns the chain through `link`. */
static span_t *stack_take_all(span_stack_t *st) {
  uint64_t old = atomic_load_explicit(st, ACQ);
  while ((uint32_t)old) {
    uint64_t nw = ((old >> 32) + 1) << 32;
    if (atomic_compare_exchange_weak_explicit(st, &old, nw, ACQ, ACQ))
      return span_of_index((uint32_t)old - 1);
  }
  return NULL;
}

static span_t *chain_next(span_t *sp) {
  uint32_t l = atomic_load_explicit(&sp->link, RLX);
  return l ? span_of_index(l - 1) : NULL;
}

/* ---- purging (scalloc §3.3 madvise, made lazy and batched) ------------- */
/* Empty spans keep their pages for RILL_PURGE_DELAY_MS, so a program that
 * frees and reallocates spans in a loop makes no system calls. Whichever
 * thread passes a due time first runs one pass over the pool; it madvises
 * the spans that have waited long enough, merging neighbours into one call. */
static _Atomic uint64_t purge_due;
static _Atomic uint64_t purged_bytes;
/* A pass holds whole stacks for a moment: a fork then would lose them in the
 * child, so passes and fork exclude each other (timed passes just skip). */
static _Atomic int purge_lock;

#define BATCH 128
typedef struct batch {
  span_t *sp[BATCH];
  unsigned n;
  size_t bytes;
  bool lazy;
} batch_t;

/* Insertion sort by address: qsort may call malloc, which must not happen
 * inside the allocator (the locked variants would deadlock on themselves). */
static void sort_spans(span_t **v, unsigned n) {
  for (unsigned i = 1; i < n; i++) {
    span_t *x = v[i];
    unsigned j = i;
    for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
    v[j] = x;
  }
}

static void batch_flush(batch_t *b, span_stack_t *home) {
  if (!b->n) return;
  sort_spans(b->sp, b->n);
  for (unsigned i = 0; i < b->n;) {
    uintptr_t start = span_start(b->sp[i]), end = start + span_bytes(b->sp[i]);
    unsigned j = i + 1;
    while (j < b->n && span_start(b->sp[j]) == end) end += span_bytes(b->sp[j++]);
    uintptr_t ps = start, pe = end;
    if (b->lazy && rill_opt.hugepages && end > rill_arena.base + HUGE_START) {
      /* timed purging never splits a huge page: only whole ones go */
      ps = (start + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
      pe = end & ~(uintptr_t)(HUGE_PAGE - 1);
    }
    if (pe > ps) {
      if (b->lazy)
        os_purge_lazy((void *)ps, pe - ps);
      else
        os_purge((void *)ps, pe - ps);
      b->bytes += pe - ps;
    }
    for (unsigned k = i; k < j; k++) {
      span_t *sp = b->sp[k];
      if (span_start(sp) < ps || span_start(sp) + span_bytes(sp) > pe) continue; /* kept */
      /* relaxed atomic: rill_stats_get reads it from any thread */
      if (!b->lazy || !rill_opt.purge_free) __atomic_store_n(&sp->fresh, 1, __ATOMIC_RELAXED);
      sp->stamp = UINT32_MAX; /* purged: nothing left to give back */
    }
    i = j;
  }
  for (unsigned i = 0; i < b->n; i++) stack_push(home, b->sp[i]);
  b->n = 0;
}

/* Purges pooled spans that entered the pool at or before `cutoff` ms; *left
 * counts those that still hold pages, too young to go. */
static size_t purge_pass(uint32_t cutoff, bool lazy, size_t *left) {
  batch_t b = {.n = 0, .bytes = 0, .lazy = lazy};
  *left = 0;
  for (unsigned o = 0; o < NORDERS; o++)
    for (unsigned s = 0; s < rill_arena.stripes; s++) {
      span_stack_t *st = &pool[o][s].top;
      for (span_t *sp = stack_take_all(st); sp;) {
        span_t *next = chain_next(sp);
        if (sp->fresh || sp->stamp == UINT32_MAX || (int32_t)(sp->stamp - cutoff) > 0) {
          if (!sp->fresh && sp->stamp != UINT32_MAX) ++*left;
          stack_push(st, sp);
        } else {
          b.sp[b.n++] = sp;
          if (b.n == BATCH) batch_flush(&b, st);
        }
        sp = next;
      }
      batch_flush(&b, st);
    }
  atomic_fetch_add_explicit(&purged_bytes, b.bytes, RLX);
  return b.bytes;
}

/* One timed pass if one is due (every quarter delay) and no other pass runs.
 * Returns the spans left holding pages, or 1 when no pass ran. */
size_t pool_purge_timed(uint64_t now) {
  uint64_t due = atomic_load_explicit(&purge_due, RLX);
  if (now < due) return 1;
  uint32_t d = rill_opt.purge_delay, step = d / 4 > 10 ? d / 4 : 10;
  if (!atomic_compare_exchange_strong_explicit(&purge_due, &due, now + step, RLX, RLX)) return 1;
  if (atomic_exchange_explicit(&purge_lock, 1, ACQ)) return 1;
  size_t left;
  purge_pass((uint32_t)(now - d), true, &left);
  spin_unlock(&purge_lock);
  return left;
}

/* ---- the background purger's view (purger.c) ---------------------------- */
/* `waiting` is 1 while some pooled span may still hold pages. pool_put
 * raises it; once a purger watches, the 0 -> 1 change wakes it: one futex
 * call per idle -> busy transition, not one per span. */
static _Atomic int watched;
static _Atomic uint32_t waiting;

void pool_watch(void) {
  atomic_store_explicit(&waiting, 1, RLX); /* look once: spans may be pooled already */
  atomic_store_explicit(&watched, 1, memory_order_seq_cst);
}

bool pool_waiting(void) {
  return atomic_load_explicit(&waiting, RLX) != 0;
}

static inline void pages_arrived(void) {
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
  purge_pass((uint32_t)(os_now_ms() - rill_opt.purge_delay), true, &left);
  spin_unlock(&purge_lock);
  if (left) atomic_store_explicit(&waiting, 1, RLX);
}

static inline void purge_maybe(uint64_t now) {
  if (now >= atomic_load_explicit(&purge_due, RLX)) pool_purge_timed(now);
}

void pool_fork_prepare(void) {
  spin_lock(&purge_lock);
}
void pool_fork_parent(void) {
  spin_unlock(&purge_lock);
}
void pool_fork_child(void) {
  atomic_store_explicit(&purge_lock, 0, RLX);
}

uint64_t pool_purged_bytes(void) {
  return atomic_load_explicit(&purged_bytes, RLX);
}

/* A pooled span of 2^order slots: the caller's stripe first (locality,
 * scalloc Listing 1 line 31), then any stripe. */
static span_t *pool_pop(unsigned order, unsigned stripe) {
  span_t *sp = stack_pop(&pool[order][stripe].top);
  for (unsigned i = 1; !sp && i < rill_arena.stripes; i++)
    sp = stack_pop(&pool[order][(stripe + i) % rill_arena.stripes].top);
  return sp;
}

/* Empty span of 2^order slots, from the pool or else fresh address space. */
span_t *pool_get(unsigned order, unsigned stripe) {
  span_t *sp = pool_pop(order, stripe);
  if (!sp) sp = arena_fresh(order);
  purge_maybe(os_now_ms());
  return sp;
}

/* For one large object: a span of at least 2^order slots. Orders never split
 * or merge, so a program whose large sizes wander across a power of two
 * would fault in fresh spans while pooled ones one order up sit resident and
 * idle (the sizes benchmark, 1-4 MiB). A span one order up is taken before
 * fresh memory: its pages are in RSS already, and the object still touches
 * only what it uses. Two orders up would leave up to 7/8 of a span idle under
 * a live object, where no purge can reach it; one order up bounds that at
 * 3/4 of the span, which the pool would have kept resident for the purge
 * delay anyway. */
span_t *pool_get_large(unsigned order, unsigned stripe) {
  span_t *sp = pool_pop(order, stripe);
  if (!sp && order < MAX_ORDER) sp = pool_pop(order + 1, stripe);
  if (!sp) sp = arena_fresh(order);
  purge_maybe(os_now_ms());
  return sp;
}

void pool_put(span_t *sp, unsigned stripe) {
  uint64_t now = os_now_ms();
  sp->bsize = 0;           /* frees into a pooled span are now invalid */
  bool pages = !sp->fresh; /* read before the push: sp is anyone's after it */
  sp->stamp = pages ? (uint32_t)now : UINT32_MAX;
  atomic_store_explicit(&sp->attached, NULL, RLX);
  atomic_store_explicit(&sp->where, AT_NONE, RLX);
  atomic_store_explicit(&sp->xf, XF_MAKE(ST_FREE, 0, 0), RLX);
  stack_push(&pool[sp->order][stripe % rill_arena.stripes].top, sp);
  if (pages) pages_arrived();
  purge_maybe(now);
}

/* rill_collect and malloc_trim: every pooled span, now, with MADV_DONTNEED
 * so the pages leave RSS at once. Spans popped meanwhile are not seen. */
size_t pool_purge(void) {
  size_t left;
  spin_lock(&purge_lock);
  size_t n = purge_pass((uint32_t)os_now_ms() + 1, false, &left);
  spin_unlock(&purge_lock);
  return n;
}
