/* test_classes.c - proves the size-class table (size_class and class_size in
 * src/internal.h): every request from 1 B to the largest class maps to the
 * smallest class that holds it; classes grow strictly and, from 16 B, are
 * multiples of 16; no class wastes more than 25% of a request over 64 B;
 * every power of two is a class; and a power of two from 1 to 16 KiB plus up
 * to an eighth of it (a page or a buffer and its header) rounds to 9/8 of the power; spans hold
 * 64 blocks or more up to 1 KiB and 32 up to 8 KiB, pool spans up to 4 KiB; and the block
 * cache's first class (CACHE_CLS0) is the first over 8 KiB, as the docs say. */
#include "internal.h"
#include "rill_test.h"

int main(void) {
  for (unsigned c = 1; c < NPLAIN; c++)
    CHECK(class_size(c) > class_size(c - 1), "class %u (%zu B) not above class %u (%zu B)", c,
          class_size(c), c - 1, class_size(c - 1));
  CHECK(class_size(NPLAIN - 1) == CLASS_MAX, "the last class is %zu B, want %zu",
        class_size(NPLAIN - 1), CLASS_MAX);
  /* the block cache (heap.c) keeps blocks "over 8 KiB" (README, design.md) */
  CHECK(class_size(CACHE_CLS0 - 1) == 8192 && size_class(8193) == CACHE_CLS0,
        "the block cache's first class is not the first over 8 KiB (the class below: %zu B)",
        class_size(CACHE_CLS0 - 1));
  for (unsigned c = CLS_TWIN0; c < NCLASSES; c++) /* the uncoloured twins, for alignments */
    CHECK(class_size(c) == (size_t)256 << (c - CLS_TWIN0), "twin class %u is %zu B", c,
          class_size(c));
  for (unsigned c = 1; c < NCLASSES; c++)
    CHECK(class_size(c) % 16 == 0, "class %u (%zu B) is not a multiple of 16", c, class_size(c));
  unsigned bad = 0;
  for (size_t n = 1; n <= CLASS_MAX && bad < 5; n++) {
    unsigned c = size_class(n);
    size_t sz = c < NPLAIN ? class_size(c) : 0;
    bool ok = c < NPLAIN && sz >= n && (c == 0 || class_size(c - 1) < n) &&
              (n <= 64 || (sz - n) * 4 <= n);
    if (!ok) {
      FAIL("%zu B maps to class %u (%zu B): not the smallest class that holds it, or over 25%% "
           "waste",
           n, c, sz);
      bad++;
    }
  }
  for (size_t p = 8; p <= CLASS_MAX; p *= 2)
    CHECK(class_size(size_class(p)) == p, "%zu B, a power of two, rounds to %zu", p,
          class_size(size_class(p)));
  for (size_t p = 1024; p <= 16384; p *= 2)
    for (size_t d = 1; d <= p / 8; d++)
      if (class_size(size_class(p + d)) != p + p / 8) {
        FAIL("%zu B (%zu + %zu) rounds to %zu, want %zu", p + d, p, d,
             class_size(size_class(p + d)), p + p / 8);
        break;
      }
  /* blocks per span (span.c): room for 64 up to 1 KiB, 32 over it up to 8 KiB, so buffers
   * replaced at random do not change span every few mallocs (the colour of the classes of 256 B
   * to 1 KiB then takes one block of the 64); up to 4 KiB the spans are the pool's, never runs
   * (cut from free runs, small spans split those large blocks want) */
  span_module_init();
  for (unsigned c = 0; c < NPLAIN; c++) {
    size_t sz = class_size(c);
    if (sz > 8192) break;
    size_t bytes = class_is_run(c) ? class_slots(c) * SLOT_SIZE : SLOT_SIZE << class_order(c);
    size_t want = sz <= 1024 ? 64 : 32;
    CHECK(bytes / sz >= want, "class %u (%zu B): room for %zu blocks per span, want %zu", c, sz,
          bytes / sz, want);
    CHECK(sz > 4096 || !class_is_run(c), "class %u (%zu B) takes runs, not pool spans", c, sz);
  }
  /* a block's address is its span's start plus its colour plus a multiple of its size: all
   * multiples of 16 keep every block 16-aligned, and class_for (heap.c) relies on it to give
   * requests aligned to 16 or less their size's class without a look */
  for (unsigned c = 1; c < NCLASSES; c++)
    CHECK(class_color(c) % 16 == 0, "class %u (%zu B) has a colour of %zu B, not a multiple of 16",
          c, class_size(c), class_color(c));
  printf("  %u classes, 8 B .. %zu KiB: each request in its smallest class; 64 blocks per span "
         "up to 1 KiB, 32 up to 8 KiB\n",
         NPLAIN, CLASS_MAX / 1024);
  return t_finish("test_classes");
}
