/* test_wholes.c - proves that the spans of the 4.5-8 KiB classes, runs of 10-16 slots
 * (runs.c), are filed whole when they empty, as the 9-64 KiB classes' runs of 4-8 slots
 * are: not merged with their free neighbours, so the next span of their length is cut
 * where one was. Merged at once, they were cut again from longer free runs and left
 * pieces of 1-3 slots beside the other classes' whole runs, which no class's span fits:
 * the object-size sweep at 4-16 KiB peaked 3-5% higher (docs/benchmarks.md). For each
 * class, a thread fills 16 spans' worth of blocks and frees them all; at least 8 of those
 * spans must then be whole free runs of their length (the thread keeps a few: its hot span
 * and its stash). Linked with the static library and the internal header, to walk the
 * arena's runs. */
#include "internal.h"
#include "rill_test.h"

#define SPANS 16

/* Of the spans that blocks v[0..n) lay in, those now whole free runs of n slots. Spans
 * are told by their first slot, so a span counts once however many blocks it held. */
static size_t wholes_among(char **v, size_t n, size_t slots) {
  size_t top = atomic_load(&rill_arena_top), whole = 0;
  unsigned char *seen = calloc(top, 1);
  if (!seen) DIE("calloc failed");
  for (size_t i = 0; i < n; i++) {
    size_t s = span_index(span_at((uintptr_t)v[i] - rill_arena.base));
    if (s >= top || seen[s]) continue;
    seen[s] = 1;
    const span_t *sp = span_of_index(s);
    whole += sp->run && sp->run_free == RUN_WHOLE && sp->nslots == slots;
  }
  free(seen);
  return whole;
}

int main(void) {
  static const size_t sizes[] = {4500, 5000, 6000, 7000, 8000}; /* one per class */
  free(malloc(1)); /* start-up: the classes' geometry is worked out there */
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t sz = sizes[k];
    unsigned cls = size_class(sz);
    size_t bs = class_size(cls), slots = class_slots(cls), per = (slots << SLOT_SHIFT) / bs;
    CHECK(class_is_run(cls) && slots > 8 && slots <= 16,
          "%zu B blocks (class %zu B) take %zu-slot spans, not runs of 10-16 slots", sz, bs, slots);
    size_t n = SPANS * per;
    char **v = malloc(n * sizeof *v);
    if (!v) DIE("malloc failed");
    for (size_t i = 0; i < n; i++) {
      v[i] = malloc(sz);
      if (!v[i]) DIE("malloc(%zu) failed", sz);
      memset(v[i], (int)k, sz);
    }
    for (size_t i = 0; i < n; i++) free(v[i]);
    /* the addresses only, after the frees: another class's whole runs of the same length
     * (4.5 and 6 KiB blocks both take 12 slots) do not count */
    size_t whole = wholes_among(v, n, slots);
    free(v);
    printf("  %zu B blocks: %zu of about %d emptied %zu-slot spans filed whole\n", sz, whole, SPANS,
           slots);
    CHECK(whole >= SPANS / 2,
          "%zu B blocks: only %zu of %d emptied %zu-slot spans were filed whole; the rest merged "
          "with their neighbours",
          sz, whole, SPANS, slots);
  }
  return t_finish("test_wholes");
}
