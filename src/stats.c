/* stats.c - footprint statistics, gathered on demand by walking the span
 * table and the heaps: the fast paths keep no counters for them. Also
 * glibc's views of them (mallinfo, mallinfo2, malloc_stats, malloc_info). */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <unistd.h>

#include "internal.h"

__attribute__((visibility("default"))) void rill_stats_get(struct rill_stats *out) {
  struct rill_stats s = {0};
  if (atomic_load_explicit(&rill_ready, ACQ)) {
    size_t top = atomic_load_explicit(&rill_arena_top, RLX), bound = arena_bound_slots();
    if (top > bound) top = bound; /* slots being covered: their entries may not be mapped */
    s.bytes_reserved = __atomic_load_n(&rill_arena.size, __ATOMIC_RELAXED);
    for (size_t i = (size_t)1 << rill_arena.min_order; i < top;) {
      /* relaxed atomic: runs.c rewrites heads of free runs under its lock */
      if (__atomic_load_n(&rill_arena.heads[i], __ATOMIC_RELAXED) !=
          span_of_index(i)) { /* in a heap's chunk */
        i++;
        continue;
      }
      span_t *sp = span_of_index(i);
      size_t bytes = span_bytes(sp);
      uint64_t x = atomic_load_explicit(&sp->xf, RLX);
      unsigned st = XF_STATE(x);
      if (st == ST_FREE) {
        s.spans_free++;
        if (__atomic_load_n(&sp->run, __ATOMIC_RELAXED)) /* a free run: its dirty slots */
          s.bytes_committed += run_dirty_bytes(sp);
        else if (!__atomic_load_n(&sp->fresh, __ATOMIC_RELAXED))
          s.bytes_committed += bytes;
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
      uint32_t n = span_nslots(sp);
      i += n ? n : 1; /* a run split or merged meanwhile */
    }
    uint32_t nh = heap_count();
    for (uint32_t i = 0; i < nh; i++) {
      heap_t *h = heap_at(i);
      s.remote_frees += atomic_load_explicit(&h->remote_frees, RLX);
      s.threads += atomic_load_explicit(&h->live, RLX);
    }
    s.remote_frees += heap_young_frees();
    s.threads += heap_young_live();
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
  /* not in struct rill_stats, whose size is ABI: spans lent ever, and the
   * live threads still young (heap.c, "young blocks": no heap record yet) */
  o = put_num(o, " lent=", heap_spans_lent());
  o = put_num(o, " young=", heap_young_live());
  *o++ = '\n';
  ssize_t w = write(fd, buf, (size_t)(o - buf));
  (void)w;
}

void rill_stats_at_exit(void) {
  rill_stats_print(rill_stats_fd);
}

/* ---- glibc's introspection names ---------------------------------------- */
/* Programs that report their heap with mallinfo2 (servers' health pages,
 * test harnesses) would otherwise read glibc's idle arena: near zero. The
 * fields keep glibc's meaning: arena is span memory not purged, uordblks
 * and fordblks its bytes in use and free, ordblks the pooled spans, hblkhd
 * the bytes of huge (mmapped) objects. Fields rill has no counterpart for
 * (fastbins, the count of mmapped objects, keepcost) read 0. */
#ifndef RILL_NO_OVERRIDE
static struct mallinfo2 info_of(const struct rill_stats *s) {
  struct mallinfo2 m = {0};
  uint64_t small = s->bytes_in_use - s->huge_bytes;
  m.arena = s->bytes_committed;
  m.ordblks = s->spans_free;
  m.hblkhd = s->huge_bytes;
  m.uordblks = small;
  m.fordblks = s->bytes_committed > small ? s->bytes_committed - small : 0;
  return m;
}

__attribute__((visibility("default"))) struct mallinfo2 mallinfo2(void) {
  struct rill_stats s;
  rill_stats_get(&s);
  return info_of(&s);
}

static int clamp_int(size_t v) {
  return v > INT_MAX ? INT_MAX : (int)v;
}

/* The int fields wrap in glibc past 2 GiB; here they stop at INT_MAX. */
__attribute__((visibility("default"))) struct mallinfo mallinfo(void) {
  struct rill_stats s;
  rill_stats_get(&s);
  struct mallinfo2 m = info_of(&s);
  struct mallinfo r = {0};
  r.arena = clamp_int(m.arena);
  r.ordblks = clamp_int(m.ordblks);
  r.hblkhd = clamp_int(m.hblkhd);
  r.uordblks = clamp_int(m.uordblks);
  r.fordblks = clamp_int(m.fordblks);
  return r;
}

__attribute__((visibility("default"))) void malloc_stats(void) {
  rill_stats_print(2);
}

/* glibc's format is XML with one element per arena; this is one element
 * with rill's counters, under the same root. Options must be 0, as glibc
 * requires. */
__attribute__((visibility("default"))) int malloc_info(int options, FILE *fp) {
  if (options != 0 || !fp) {
    errno = EINVAL;
    return -1;
  }
  struct rill_stats s;
  rill_stats_get(&s);
  fprintf(fp,
          "<malloc version=\"rill-1\">\n"
          "<rill in_use=\"%llu\" committed=\"%llu\" reserved=\"%llu\" purged=\"%llu\" "
          "huge=\"%llu\"/>\n"
          "<spans hot=\"%llu\" floating=\"%llu\" reusable=\"%llu\" free=\"%llu\"/>\n"
          "<threads live=\"%llu\" young=\"%llu\" remote_frees=\"%llu\" spans_lent=\"%llu\"/>\n"
          "</malloc>\n",
          (unsigned long long)s.bytes_in_use, (unsigned long long)s.bytes_committed,
          (unsigned long long)s.bytes_reserved, (unsigned long long)s.bytes_purged,
          (unsigned long long)s.huge_bytes, (unsigned long long)s.spans_hot,
          (unsigned long long)s.spans_floating, (unsigned long long)s.spans_reusable,
          (unsigned long long)s.spans_free, (unsigned long long)s.threads,
          (unsigned long long)heap_young_live(), (unsigned long long)s.remote_frees,
          (unsigned long long)heap_spans_lent());
  return 0;
}
#endif
