/* debug.c - the failure report of -DRILL_DEBUG=1 builds: which check failed,
 * the span's state, and its last state changes (debug.h). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h" /* and debug.h, at its end */

#if RILL_DEBUG
dbg_span_t *rill_dbg;
static __thread uint32_t tid; /* gettid is a system call: once per thread */
static const char *const ev_name[EV_COUNT] = {"?",     "init",    "retire", "list-push", "list-pop",
                                              "take",  "release", "orphan", "claim",     "pool",
                                              "adopt", "sweep",   "hand",   "remote",    "lend"};

uint32_t dbg_tid(void) {
  if (!tid) tid = (uint32_t)gettid();
  return tid;
}

void dbg_heap_fail(const char *what, uint32_t other) {
  char buf[256];
  int n =
      snprintf(buf, sizeof buf, "rill debug: %s (thread %u, owner %u)\n", what, dbg_tid(), other);
  if (write(2, buf, (size_t)n) < 0) {
  }
  abort();
}

void dbg_event(const span_t *sp, unsigned ev) {
  if (!rill_dbg || sp == &rill_empty_span) return;
  dbg_span_t *d = dbg_of(sp);
  uint32_t i = atomic_fetch_add_explicit(&d->at, 1, RLX) % DBG_RING;
  uint64_t x = atomic_load(&sp->xf);
  d->ring[i] = (dbg_ev_t){.tid = dbg_tid(),
                          .used = used_get(sp),
                          .count = XF_COUNT(x),
                          .ev = (uint8_t)ev,
                          .state = (uint8_t)XF_STATE(x),
                          .where = atomic_load(&sp->where),
                          .heap = (uint64_t)(uintptr_t)atomic_load(&sp->heap)};
}

void dbg_fail(const span_t *sp, const char *what, uintptr_t p) {
  char buf[4096];
  uint64_t x = atomic_load(&sp->xf);
  int n = snprintf(buf, sizeof buf,
                   "rill debug: %s: %#lx (thread %d) span %zu start %#lx cls %u bsize %u cap %u "
                   "carved %u used %u fused %u state %u count %u where %u heap %p attached %p\n",
                   what, (unsigned long)p, (int)dbg_tid(), span_index(sp), (unsigned long)sp->start,
                   sp->cls, sp->bsize, sp->cap, __atomic_load_n(&sp->carved, __ATOMIC_RELAXED),
                   used_get(sp), atomic_load(&sp->fused), XF_STATE(x), XF_COUNT(x),
                   atomic_load(&sp->where), (void *)atomic_load(&sp->heap),
                   (void *)atomic_load(&sp->attached));
  dbg_span_t *d = dbg_of(sp);
  uint32_t at = atomic_load(&d->at);
  for (uint32_t k = at > DBG_RING ? at - DBG_RING : 0; k < at && n < (int)sizeof buf - 160; k++) {
    dbg_ev_t *e = &d->ring[k % DBG_RING];
    n += snprintf(buf + n, sizeof buf - (size_t)n,
                  "  #%u %-9s tid %u state %u count %u used %u where %u heap %#lx\n", k,
                  e->ev < EV_COUNT ? ev_name[e->ev] : "?", e->tid, e->state, e->count, e->used,
                  e->where, (unsigned long)e->heap);
  }
  if (write(2, buf, (size_t)n) < 0) {
  }
  abort();
}
#endif
