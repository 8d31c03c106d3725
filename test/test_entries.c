/* test_entries.c - proves that the span entries (256 bytes per 16 KiB slot, src/arena.c) of
 * memory given back do not stay resident: two threads fill 256 MiB of 16-64 KiB buffers,
 * whose spans are runs of 2-8 slots (runs.c), free them all and exit; after rill_collect,
 * at most 3% of the pages of entries for the slots in use may be resident. A run purged
 * whole gives back its inner slots' entries, but merging it with its free neighbours made
 * their head entries inner ones, which stayed: 95-114 of 1,282 pages (7-9%) did, 8-13 now
 * (runs_entries_release). Linked with the static library and the internal header, to find
 * the entries. */
#include "internal.h"
#include "rill_test.h"

#include <pthread.h>
#include <sys/mman.h>

#define PER_THREAD ((size_t)128 << 20)
static pthread_barrier_t filled; /* both threads hold their buffers before either frees */

static void *burst(void *arg) {
  uint64_t r = (uintptr_t)arg;
  size_t cap = PER_THREAD / 16384 + 1, n = 0, bytes = 0;
  void **v = malloc(cap * sizeof *v);
  if (!v) DIE("malloc failed");
  while (bytes < PER_THREAD && n < cap) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    size_t sz = 16384 + (size_t)(r >> 33) % (65536 - 16384);
    v[n] = malloc(sz);
    if (!v[n]) DIE("malloc(%zu) failed", sz);
    memset(v[n], 1, 64);
    bytes += sz;
    n++;
  }
  pthread_barrier_wait(&filled);
  for (size_t i = 0; i < n; i++) free(v[i]);
  free(v);
  return NULL;
}

int main(void) {
  pthread_t t[2];
  pthread_barrier_init(&filled, NULL, 2);
  for (uintptr_t i = 0; i < 2; i++)
    if (pthread_create(&t[i], NULL, burst, (void *)(i + 1))) DIE("pthread_create failed");
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  rill_collect(true);

  size_t page = (size_t)sysconf(_SC_PAGESIZE), per = page / sizeof(span_t);
  size_t top = atomic_load(&rill_arena_top), pages = 0, resident = 0;
  CHECK(top >= 2 * PER_THREAD >> SLOT_SHIFT, "the burst used %zu slots, fewer than its bytes", top);
  /* slot i's entry is at meta - i: the page of slots i .. i + per - 1 starts at the last's */
  for (size_t i = 0; per && i + per <= top; i += per) {
    uintptr_t a = (uintptr_t)span_of_index(i + per - 1) & ~(uintptr_t)(page - 1);
    unsigned char in = 0;
    if (mincore((void *)a, page, &in) != 0) DIE("mincore: %s", strerror(errno));
    pages++;
    resident += in & 1;
  }
  printf("  %zu of %zu pages of span entries resident after 256 MiB of 16-64 KiB buffers "
         "were freed and collected\n",
         resident, pages);
  CHECK(pages > 0, "no whole page of entries below the arena's top (%zu slots)", top);
  CHECK(resident * 100 <= pages * 3,
        "%zu of %zu pages of span entries still resident after the buffers were freed and "
        "collected: free runs' inner entries stayed",
        resident, pages);
  return t_finish("test_entries");
}
