/* stats.c - footprint statistics, gathered on demand by walking the span
 * table and the heaps: the fast paths keep no counters for them. */
#include <unistd.h>

#include "internal.h"

__attribute__((visibility("default"))) void rill_stats_get(struct rill_stats *out) {
  struct rill_stats s = {0};
  if (atomic_load_explicit(&rill_ready, ACQ)) {
    size_t top = atomic_load_explicit(&rill_arena_top, RLX);
    if (top > rill_arena.nslots) top = rill_arena.nslots;
    s.bytes_reserved = rill_arena.size;
    for (size_t i = 0; i < top;) {
      span_t *sp = span_of_index(i);
      size_t bytes = SLOT_SIZE << sp->order;
      uint64_t x = atomic_load_explicit(&sp->xf, RLX);
      unsigned st = XF_STATE(x);
      if (st == ST_FREE) {
        s.spans_free++;
        if (!__atomic_load_n(&sp->fresh, __ATOMIC_RELAXED)) s.bytes_committed += bytes;
      } else {
        s.bytes_committed += bytes;
        uint64_t used = st == ST_ATTACHED || st == ST_LISTED
                            ? used_get(sp)
                            : atomic_load_explicit(&sp->fused, RLX);
        uint64_t pend = XF_COUNT(x);
        used = used > pend ? used - pend : 0;
        s.bytes_in_use += sp->cls == CLS_LARGE ? sp->lsize : used * sp->bsize;
        if (st == ST_FLOATING)
          s.spans_floating++;
        else if (st == ST_QUEUED || st == ST_LISTED)
          s.spans_reusable++;
        else
          s.spans_hot++;
      }
      i += (size_t)1 << sp->order;
    }
    uint32_t nh = heap_count();
    for (uint32_t i = 0; i < nh; i++) {
      heap_t *h = heap_at(i);
      s.remote_frees += atomic_load_explicit(&h->remote_frees, RLX);
      s.threads += atomic_load_explicit(&h->live, RLX);
    }
    s.huge_bytes = huge_bytes();
    s.bytes_purged = pool_purged_bytes();
    s.bytes_in_use += s.huge_bytes;
  }
  *out = s;
}

static char *put_num(char *o, const char *label, uint64_t v) {
  while (*label) *o++ = *label++;
  char tmp[24];
  int n = 0;
  do tmp[n++] = (char)('0' + v % 10);
  while ((v /= 10) != 0);
  while (n) *o++ = tmp[--n];
  return o;
}

__attribute__((visibility("default"))) void rill_stats_print(int fd) {
  struct rill_stats s;
  rill_stats_get(&s);
  char buf[640], *o = buf;
  o = put_num(o, "rill: stats: in_use=", s.bytes_in_use);
  o = put_num(o, " committed=", s.bytes_committed);
  o = put_num(o, " reserved=", s.bytes_reserved);
  o = put_num(o, " purged=", s.bytes_purged);
  o = put_num(o, " huge=", s.huge_bytes);
  o = put_num(o, " spans_hot=", s.spans_hot);
  o = put_num(o, " spans_floating=", s.spans_floating);
  o = put_num(o, " spans_reusable=", s.spans_reusable);
  o = put_num(o, " spans_free=", s.spans_free);
  o = put_num(o, " remote_frees=", s.remote_frees);
  o = put_num(o, " threads=", s.threads);
  *o++ = '\n';
  ssize_t w = write(fd, buf, (size_t)(o - buf));
  (void)w;
}

void rill_stats_at_exit(void) {
  rill_stats_print(rill_stats_fd);
}
