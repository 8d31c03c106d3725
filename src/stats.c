/* stats.c - footprint statistics, gathered on demand by walking the span
 * table and the heaps: the fast paths keep no counters for them. Also
 * glibc's views of them (mallinfo, mallinfo2, malloc_stats, malloc_info). */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

/* Visits every span that starts a stretch of the arena (not the slots inside
 * a heap's chunk), with its state and its blocks out net of remote frees
 * not yet collected. Reads race with the owners: the figures are a moment's
 * approximation, as the fast paths keep no counters for them. */
typedef void (*span_fn)(span_t *sp, uintptr_t at, unsigned st, uint64_t used, void *ctx);
static void walk_spans(span_fn fn, void *ctx) {
  size_t top = atomic_load_explicit(&rill_arena_top, RLX), bound = arena_bound_slots();
  if (top > bound) top = bound; /* slots being covered: their entries may not be mapped */
  for (size_t i = (size_t)1 << rill_arena.min_order; i < top;) {
    /* relaxed atomic: runs.c rewrites heads of free runs under its lock */
    if (__atomic_load_n(&rill_arena.heads[i], __ATOMIC_RELAXED) !=
        span_of_index(i)) { /* in a heap's chunk */
      i++;
      continue;
    }
    span_t *sp = span_of_index(i);
    uint32_t n = span_nslots(sp);
    uint64_t x = atomic_load_explicit(&sp->xf, RLX), used = 0;
    /* no slots: a pooled span whose entry went back (pool.c), no pages */
    unsigned st = n ? XF_STATE(x) : ST_FREE;
    if (st != ST_FREE) {
      used = st == ST_ATTACHED || st == ST_LISTED ? used_get(sp)
                                                  : atomic_load_explicit(&sp->fused, RLX);
      uint64_t pend = XF_COUNT(x);
      used = used > pend ? used - pend : 0;
    }
    fn(sp, rill_arena.base + (i << SLOT_SHIFT), st, used, ctx);
    n = span_nslots(sp);
    i += n ? n : 1; /* a run split or merged meanwhile */
  }
}

/* A live span's bytes in use, and (*used) its blocks out capped at what its
 * bytes hold, counted at its class's size, not the entry's `bsize`: a span
 * formatted anew while the walk reads it gives a stale figure, never one
 * whose bytes and blocks disagree (test/stress.c --stats-poll found both).
 * One definition for the totals and the class rows. */
static uint64_t span_in_use(span_t *sp, unsigned c, size_t bytes, uint64_t *used) {
  if (c >= NCLASSES) { /* a large object; realloc shrinks its run before its size */
    uint64_t l = SPAN_GET(sp, lsize);
    return l < bytes ? l : bytes;
  }
  size_t sz = class_size(c), cap = bytes / sz;
  if (*used > cap) *used = cap;
  return *used * sz;
}

static void sum_span(span_t *sp, uintptr_t at, unsigned st, uint64_t used, void *ctx) {
  (void)at;
  struct rill_stats *s = ctx;
  size_t bytes = span_bytes(sp);
  if (st == ST_FREE) {
    s->spans_free++;
    if (SPAN_GET(sp, run)) /* a free run: its dirty slots */
      s->bytes_committed += run_dirty_bytes(sp);
    else if (!SPAN_GET(sp, fresh))
      s->bytes_committed += bytes;
    return;
  }
  s->bytes_committed += bytes;
  s->bytes_in_use += span_in_use(sp, SPAN_GET(sp, cls), bytes, &used);
  if (st == ST_FLOATING)
    s->spans_floating++;
  else if (st == ST_QUEUED || st == ST_LISTED)
    s->spans_reusable++;
  else
    s->spans_hot++;
}

EXPORT void rill_stats_get(struct rill_stats *out) {
  struct rill_stats s = {0};
  if (atomic_load_explicit(&rill_ready, ACQ)) {
    s.bytes_reserved = __atomic_load_n(&rill_arena.size, __ATOMIC_RELAXED);
    walk_spans(sum_span, &s);
    uint32_t nh = heap_count();
    for (uint32_t i = 0; i < nh; i++) {
      heap_t *h = heap_at(i);
      s.remote_frees += atomic_load_explicit(&h->remote_frees, RLX);
      s.threads += atomic_load_explicit(&h->live, RLX);
    }
    s.remote_frees += heap_young_frees();
    s.threads += heap_young_live();
    /* blocks in the threads' block caches and batches of remote frees are
     * free, though their spans count them out (heap.c, "the block cache",
     * "remote frees in batches") */
    uint64_t cached = 0;
    for (unsigned c = 0; c < NCLASSES; c++) cached += (uint64_t)heap_kept(c) * class_size(c);
    s.bytes_in_use -= cached < s.bytes_in_use ? cached : s.bytes_in_use;
    s.huge_bytes = huge_bytes();
    s.bytes_purged = pool_purged_bytes();
    s.bytes_in_use += s.huge_bytes;
  }
  *out = s;
}

/* ---- class by class ----------------------------------------------------- */
/* Pages of [a, a + n) in physical memory, by mincore in steps of 256 pages.
 * Where mincore is refused (ENOSYS or EPERM from a sandbox's system call
 * filter) the rest counts as resident: an upper bound, not 0, which would
 * read as memory given back. The caller's errno is left as it was. */
static uint64_t resident_bytes(uintptr_t a, size_t n) {
  size_t pg = rill_arena.page;
  unsigned char vec[256];
  uint64_t r = 0;
  int saved = errno;
  for (uintptr_t end = a + n; a < end;) {
    size_t k = (end - a + pg - 1) / pg;
    if (k > sizeof vec) k = sizeof vec;
    if (mincore((void *)a, k * pg, vec)) {
      if (errno != ENOMEM) r += (end - a + pg - 1) / pg; /* ENOMEM: not mapped */
      break;
    }
    for (size_t j = 0; j < k; j++) r += vec[j] & 1;
    a += k * pg;
  }
  errno = saved;
  return r * pg;
}

/* Rows 0..NCLASSES-1 by class, row NCLASSES for large objects. */
static void class_span(span_t *sp, uintptr_t at, unsigned st, uint64_t used, void *ctx) {
  if (st == ST_FREE) return;
  struct rill_class_stats *rows = ctx;
  unsigned c = SPAN_GET(sp, cls);
  struct rill_class_stats *r = &rows[c < NCLASSES ? c : NCLASSES];
  size_t bytes = span_bytes(sp);
  r->spans++;
  r->bytes_committed += bytes;
  r->bytes_resident += resident_bytes(at, bytes);
  r->bytes_in_use += span_in_use(sp, c, bytes, &used);
  if (c >= NCLASSES) {
    r->blocks_in_use++;
    return;
  }
  uint64_t carved = SPAN_GET(sp, carved), cap = bytes / class_size(c);
  if (carved > cap) carved = cap; /* stale, as in span_in_use */
  r->blocks_in_use += used;
  r->blocks_free += carved > used ? carved - used : 0;
}

EXPORT size_t rill_class_stats_get(struct rill_class_stats *out, size_t n) {
  if (!atomic_load_explicit(&rill_ready, ACQ)) return 0;
  struct rill_class_stats rows[NCLASSES + 1];
  memset(rows, 0, sizeof rows);
  walk_spans(class_span, rows);
  for (unsigned c = 0; c < NCLASSES; c++) { /* as in rill_stats_get */
    uint64_t k = heap_kept(c);
    if (k > rows[c].blocks_in_use) k = rows[c].blocks_in_use;
    rows[c].blocks_in_use -= k;
    rows[c].blocks_free += k;
    rows[c].bytes_in_use -=
        k * class_size(c) < rows[c].bytes_in_use ? k * class_size(c) : rows[c].bytes_in_use;
  }
  /* by block size: the twins (uncoloured 256, 512, 1,024 B) sit after the
   * plain classes in class order */
  unsigned order[NCLASSES + 1], k = 0;
  for (unsigned c = 0; c < NCLASSES; c++) {
    rows[c].block_size = class_size(c);
    unsigned j = k++;
    for (; j > 0 && class_size(order[j - 1]) > rows[c].block_size; j--) order[j] = order[j - 1];
    order[j] = c;
  }
  order[k++] = NCLASSES;
  size_t m = 0;
  for (unsigned i = 0; i < k; i++) {
    if (!rows[order[i]].spans) continue;
    if (m < n) out[m] = rows[order[i]];
    m++;
  }
  return m;
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

EXPORT void rill_stats_print(int fd) {
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

/* RILL_SHOW_STATS=classes: a line per class after the totals. */
static void print_classes(int fd) {
  struct rill_class_stats rows[NCLASSES + 1];
  size_t n = rill_class_stats_get(rows, NCLASSES + 1);
  for (size_t i = 0; i < n; i++) {
    const struct rill_class_stats *r = &rows[i];
    char buf[256], *o = buf;
    if (r->block_size) {
      o = put_num(o, "rill: class ", r->block_size);
      o = put_num(o, ": spans=", r->spans);
      o = put_num(o, " blocks_in_use=", r->blocks_in_use);
      o = put_num(o, " blocks_free=", r->blocks_free);
    } else {
      o = put_num(o, "rill: large: objects=", r->spans);
    }
    o = put_num(o, " in_use=", r->bytes_in_use);
    o = put_num(o, " committed=", r->bytes_committed);
    o = put_num(o, " resident=", r->bytes_resident);
    *o++ = '\n';
    ssize_t w = write(fd, buf, (size_t)(o - buf));
    (void)w;
  }
}

void rill_stats_at_exit(void) {
  rill_stats_print(rill_stats_fd);
  if (rill_opt.show_stats == SHOW_CLASSES) print_classes(rill_stats_fd);
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

EXPORT struct mallinfo2 mallinfo2(void) {
  struct rill_stats s;
  rill_stats_get(&s);
  return info_of(&s);
}

static int clamp_int(size_t v) {
  return v > INT_MAX ? INT_MAX : (int)v;
}

/* The int fields wrap in glibc past 2 GiB; here they stop at INT_MAX. */
EXPORT struct mallinfo mallinfo(void) {
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

EXPORT void malloc_stats(void) {
  rill_stats_print(2);
}

/* glibc's format is XML with one element per arena; this is one element
 * with rill's counters, under the same root. Options must be 0, as glibc
 * requires. */
EXPORT int malloc_info(int options, FILE *fp) {
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
          "<threads live=\"%llu\" young=\"%llu\" remote_frees=\"%llu\" spans_lent=\"%llu\"/>\n",
          (unsigned long long)s.bytes_in_use, (unsigned long long)s.bytes_committed,
          (unsigned long long)s.bytes_reserved, (unsigned long long)s.bytes_purged,
          (unsigned long long)s.huge_bytes, (unsigned long long)s.spans_hot,
          (unsigned long long)s.spans_floating, (unsigned long long)s.spans_reusable,
          (unsigned long long)s.spans_free, (unsigned long long)s.threads,
          (unsigned long long)heap_young_live(), (unsigned long long)s.remote_frees,
          (unsigned long long)heap_spans_lent());
  struct rill_class_stats rows[NCLASSES + 1];
  size_t n = rill_class_stats_get(rows, NCLASSES + 1);
  for (size_t i = 0; i < n; i++)
    fprintf(fp,
            "<class size=\"%llu\" spans=\"%llu\" blocks_in_use=\"%llu\" blocks_free=\"%llu\" "
            "in_use=\"%llu\" committed=\"%llu\" resident=\"%llu\"/>\n",
            (unsigned long long)rows[i].block_size, (unsigned long long)rows[i].spans,
            (unsigned long long)rows[i].blocks_in_use, (unsigned long long)rows[i].blocks_free,
            (unsigned long long)rows[i].bytes_in_use, (unsigned long long)rows[i].bytes_committed,
            (unsigned long long)rows[i].bytes_resident);
  fputs("</malloc>\n", fp);
  return 0;
}
#endif
