/* test_remote.c - proves remote frees are never lost: many threads free one
 * producer's objects at once, contending on the same spans' remote lists,
 * and afterwards every byte is accounted free and the spans are reusable. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill.h"

#define CONSUMERS 4
#define OBJECTS   200000
#define ROUNDS    40

static void **objs;
static size_t obj_size;
static atomic_size_t next_obj;
static int failures;

static void *consumer(void *arg) {
  (void)arg;
  /* interleaved indices: neighbouring blocks, same spans, freed at once */
  for (;;) {
    size_t i = atomic_fetch_add(&next_obj, 1);
    if (i >= OBJECTS) break;
    unsigned char *p = objs[i];
    if (p[0] != (unsigned char)i || p[obj_size - 1] != (unsigned char)(i >> 3)) {
      fprintf(stderr, "FAIL: object %zu at %p corrupted before its free\n", i, (void *)p);
      failures++;
    }
    free(p);
  }
  return NULL;
}

static void *producer(void *arg) {
  (void)arg;
  for (size_t i = 0; i < OBJECTS; i++) {
    unsigned char *p = malloc(obj_size);
    if (!p) {
      fprintf(stderr, "FAIL: malloc(%zu) returned NULL\n", obj_size);
      exit(1);
    }
    memset(p, (unsigned char)i, obj_size);
    p[obj_size - 1] = (unsigned char)(i >> 3);
    objs[i] = p;
  }
  return NULL;
}

int main(void) {
  objs = calloc(OBJECTS, sizeof *objs);
  size_t sizes[] = {16, 64, 112, 640};
  struct rill_stats s0, s1;
  rill_stats_get(&s0);
  uint64_t committed_first = 0;
  for (int r = 0; r < ROUNDS; r++) {
    obj_size = sizes[r % 4];
    pthread_t p, c[CONSUMERS];
    pthread_create(&p, NULL, producer, NULL);
    pthread_join(p, NULL); /* the producer exits: its spans are orphans now */
    atomic_store(&next_obj, 0);
    for (int i = 0; i < CONSUMERS; i++) pthread_create(&c[i], NULL, consumer, NULL);
    for (int i = 0; i < CONSUMERS; i++) pthread_join(c[i], NULL);
    rill_stats_get(&s1);
    /* Everything the round allocated is free again: a lost remote free
     * would leave its span with live blocks forever. */
    if (s1.bytes_in_use > s0.bytes_in_use + 64 * 1024) {
      fprintf(stderr, "FAIL: round %d (%zu B objects): %llu bytes still in use after all frees\n",
              r, obj_size, (unsigned long long)(s1.bytes_in_use - s0.bytes_in_use));
      failures++;
    }
    if (s1.spans_floating > s0.spans_floating) { /* s0: the live `objs` array's span */
      fprintf(stderr, "FAIL: round %d: %llu spans still floating with no live object\n", r,
              (unsigned long long)(s1.spans_floating - s0.spans_floating));
      failures++;
    }
    if (r == 3) committed_first = s1.bytes_committed;
    if (r > 3 && s1.bytes_committed > committed_first * 2 + (8u << 20)) {
      fprintf(stderr, "FAIL: round %d: committed grew from %llu to %llu bytes\n", r,
              (unsigned long long)committed_first, (unsigned long long)s1.bytes_committed);
      failures++;
    }
    if (failures) break;
  }
  free(objs);
  printf("test_remote: %s\n", failures ? "FAILED" : "all checks passed");
  return failures != 0;
}
