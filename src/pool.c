/* pool.c - the global span pool (scalloc §3.3): empty spans in lock-free
 * Treiber stacks, one per span order and per stripe (stripe = heap id mod
 * cores), plus per-class stacks of orphaned partly free spans (Streamflow
 * §3.1.1 "Thread termination"). No locks anywhere in this file. */
#include "internal.h"

static span_stack_t pool[NORDERS][MAX_STRIPES];
static span_stack_t orphans[NCLASSES];

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

/* Empty span of 2^order slots: the caller's stripe first (locality, scalloc
 * Listing 1 line 31), then any stripe, then fresh address space. */
span_t *pool_get(unsigned order, unsigned stripe) {
  span_t *sp = stack_pop(&pool[order][stripe]);
  for (unsigned i = 1; !sp && i < rill_arena.stripes; i++)
    sp = stack_pop(&pool[order][(stripe + i) % rill_arena.stripes]);
  if (!sp) sp = arena_fresh(order);
  return sp;
}

void pool_put(span_t *sp, unsigned stripe) {
  sp->bsize = 0; /* frees into a pooled span are now invalid */
  atomic_store_explicit(&sp->attached, NULL, RLX);
  atomic_store_explicit(&sp->where, AT_NONE, RLX);
  atomic_store_explicit(&sp->xf, XF_MAKE(ST_FREE, 0, 0), RLX);
  stack_push(&pool[sp->order][stripe % rill_arena.stripes], sp);
}

/* Gives back the pages of every pooled span now (rill_collect, malloc_trim).
 * Each stack is taken whole, purged, and pushed back; spans another thread
 * pops meanwhile are simply not seen. */
size_t pool_purge(void) {
  size_t bytes = 0;
  for (unsigned o = 0; o < NORDERS; o++)
    for (unsigned s = 0; s < rill_arena.stripes; s++) {
      span_t *sp = stack_take_all(&pool[o][s]);
      while (sp) {
        span_t *next = chain_next(sp);
        if (!sp->fresh) {
          os_purge((void *)span_start(sp), span_bytes(sp));
          bytes += span_bytes(sp);
          sp->fresh = 1;
        }
        stack_push(&pool[o][s], sp);
        sp = next;
      }
    }
  return bytes;
}

size_t pool_count(unsigned order) {
  size_t n = 0;
  for (unsigned s = 0; s < rill_arena.stripes; s++) {
    uint64_t h = atomic_load_explicit(&pool[order][s], ACQ);
    /* approximate: walks a chain that may change under us; bounded */
    for (uint32_t l = (uint32_t)h; l && n < rill_arena.nslots; n++)
      l = atomic_load_explicit(&span_of_index(l - 1)->link, RLX);
  }
  return n;
}

void orphan_put(span_t *sp) { stack_push(&orphans[sp->cls], sp); }

span_t *orphan_get(unsigned cls) { return stack_pop(&orphans[cls]); }
