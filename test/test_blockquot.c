/* test_blockquot.c - proves free's block validation (block_quot in src/internal.h): for every
 * size class and every offset up to twice the class's span size, the multiply-and-rotate
 * quotient is the block index when the offset is a multiple of the block size, and at least
 * 2^29 (above any block count) when it is not. Compiled against the internal header alone. */
#include "internal.h"
#include "rill_test.h"

/* The same inverse as span.c's, kept separate so a mistake in either shows. */
static uint64_t inverse_by_search(uint64_t d) {
  uint64_t x = 1;
  for (unsigned bit = 1; bit < 64; bit++)
    if ((d * x) >> bit & 1) x |= (uint64_t)1 << bit;
  return x;
}

int main(void) {
  uint64_t checked = 0;
  for (unsigned c = 0; c < NCLASSES; c++) {
    size_t bs = class_size(c);
    span_t sp;
    memset(&sp, 0, sizeof sp);
    sp.shift = (uint8_t)__builtin_ctzl(bs);
    sp.inv = inverse_by_search(bs >> sp.shift);
    CHECK((bs >> sp.shift) * sp.inv == 1, "class %u (%zu B): no inverse", c, bs);
    size_t span = 64 * bs < 65536 ? 65536 : 64 * bs;
    for (uint64_t off = 0; off < 2 * span; off++, checked++) {
      uint64_t q = block_quot(&sp, off);
      if (off % bs == 0) {
        if (q != off / bs) {
          FAIL("class %u (%zu B), offset %llu: quotient %llu, want %llu", c, bs,
               (unsigned long long)off, (unsigned long long)q, (unsigned long long)(off / bs));
          break;
        }
      } else if (q < ((uint64_t)1 << 29)) {
        FAIL("class %u (%zu B), offset %llu is inside a block but gives %llu", c, bs,
             (unsigned long long)off, (unsigned long long)q);
        break;
      }
    }
  }
  printf("  %llu offsets checked over %d classes\n", (unsigned long long)checked, NCLASSES);
  return t_finish("test_blockquot");
}
