/* test_blockquot.c - proves free's block validation (block_test in src/internal.h): for every
 * size class, every offset up to twice the class's span size and several carve counts, the
 * product falls below the span's limit exactly when the offset starts a block already cut;
 * and offsets anywhere in the arena, far past the span, never pass.
 * Compiled against the internal header alone. */
#include "internal.h"
#include "rill_test.h"

int main(void) {
  uint64_t checked = 0;
  for (unsigned c = 0; c < NCLASSES; c++) {
    size_t bs = class_size(c);
    span_t sp;
    memset(&sp, 0, sizeof sp);
    sp.magic = block_magic(bs);
    uint64_t err = sp.magic * bs; /* magic * bs - 2^64 */
    CHECK(err > 0 && err <= bs, "class %u (%zu B): err %llu outside (0, bsize]", c, bs,
          (unsigned long long)err);
    CHECK(sp.magic > ((uint64_t)1 << 45), "class %u (%zu B): magic too small", c, bs);
    size_t span = 64 * bs < 65536 ? 65536 : 64 * bs, cap = span / bs;
    size_t carves[] = {0, 1, cap / 2, cap};
    for (unsigned k = 0; k < sizeof carves / sizeof carves[0]; k++) {
      sp.limit = carves[k] * err;
      for (uint64_t off = 0; off < 2 * span; off++, checked++) {
        bool want = off % bs == 0 && off / bs < carves[k];
        bool got = block_test(&sp, off) < sp.limit;
        if (got != want) {
          FAIL("class %u (%zu B), carved %zu, offset %llu: test says %d, want %d", c, bs, carves[k],
               (unsigned long long)off, got, want);
          break;
        }
      }
    }
    /* a stale head can name a span below p's: offsets anywhere in a 1 TiB arena
     * (random ones, and block-aligned ones at the top) must not pass */
    sp.limit = cap * err;
    uint64_t x = 0x9E3779B97F4A7C15ull * (c + 1);
    for (unsigned i = 0; i < 200000; i++, checked++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift */
      uint64_t off =
          i & 1 ? (x & (((uint64_t)1 << 40) - 1)) : (((uint64_t)1 << 40) / bs - (x & 0xffff)) * bs;
      bool want = off % bs == 0 && off / bs < cap;
      if ((block_test(&sp, off) < sp.limit) != want) {
        FAIL("class %u (%zu B), offset %llu far out: test says %d", c, bs, (unsigned long long)off,
             !want);
        break;
      }
    }
  }
  printf("  %llu offsets checked over %d classes\n", (unsigned long long)checked, NCLASSES);
  return t_finish("test_blockquot");
}
