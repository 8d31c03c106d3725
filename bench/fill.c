/* fill: mallocs blocks of -s bytes (1,000), writing each, until malloc returns NULL, and
 * reports the MiB it got: how much of an address-space limit (ulimit -v) an allocator
 * lets a program use. With -b, that many threads first hold a -B byte block each at
 * once (large blocks, then small ones); with -T, the blocks are freed after the fill and
 * up to that many threads are started at once, each holding its stack: how much of the
 * limit the allocator keeps once the program's memory is back. With -a, the blocks come
 * from aligned_alloc with that alignment (with -M, no limit needed: what 100,000 aligned
 * blocks cost, vm_hwm_kib). Run it under a limit, e.g.
 *   bash -c "ulimit -v 3145728; LD_PRELOAD=LIB build/bench/bench_fill"
 * Not run by the driver; see docs/benchmarks.md, "Under an address-space limit". */
#include <malloc.h>

#include "bench.h"

static pthread_barrier_t met;
static uint64_t big = 300000;

/* Holds a block of `big` bytes until every holder has one. */
static void *holder(void *arg) {
  char *volatile p = malloc(big);
  if (p) memset(p, 1, big);
  pthread_barrier_wait(&met);
  free(p);
  return arg;
}

/* Waits, its stack mapped, until every start has been tried, so the starts count the
 * stacks at once. */
static pthread_mutex_t go_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go_cond = PTHREAD_COND_INITIALIZER;
static int go;
static void *sleeper(void *arg) {
  pthread_mutex_lock(&go_lock);
  while (!go) pthread_cond_wait(&go_cond, &go_lock);
  pthread_mutex_unlock(&go_lock);
  return arg;
}

int main(int argc, char **argv) {
  uint64_t size = 1000, cap = (uint64_t)1 << 40, holders = 0, starts = 0, align = 0;
  int c;
  while ((c = getopt(argc, argv, "t:s:M:b:B:T:a:h")) != -1) {
    switch (c) {
    case 't':
      if (bench_parse_u64(optarg, 't') != 1) bench_die("fill runs one thread only (-t 1)");
      break;
    case 's':
      size = bench_parse_u64(optarg, 's');
      break;
    case 'M': /* stop after this many bytes even if malloc never fails */
      cap = bench_parse_u64(optarg, 'M');
      break;
    case 'b':
      holders = bench_parse_u64(optarg, 'b');
      break;
    case 'B':
      big = bench_parse_u64(optarg, 'B');
      break;
    case 'T':
      starts = bench_parse_u64(optarg, 'T');
      break;
    case 'a':
      align = bench_parse_u64(optarg, 'a');
      break;
    default:
      bench_die("usage: fill [-s block bytes] [-M stop after bytes] [-b holders -B their "
                "block bytes] [-T threads to start after freeing] [-a alignment]");
    }
  }
  if (size < sizeof(void *)) bench_die("-s must be at least %zu", sizeof(void *));
  if (align && (align & (align - 1) || size % align))
    bench_die("-a: a power of two that divides -s (aligned_alloc's rule)");
  if (holders > 1024 || starts > 1024) bench_die("-b and -T: 1024 at most");
  pthread_t *t = calloc(holders > starts ? holders : starts, sizeof *t);
  if (!t && (holders || starts)) bench_die("out of memory");
  if (holders) {
    pthread_barrier_init(&met, NULL, (unsigned)holders + 1);
    for (uint64_t i = 0; i < holders; i++)
      if (pthread_create(&t[i], NULL, holder, NULL)) bench_die("thread %" PRIu64, i);
    pthread_barrier_wait(&met);
    for (uint64_t i = 0; i < holders; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&met);
  }
  uint64_t got = 0;
  void *last = NULL; /* the blocks, linked through their first word */
  for (;;) {
    if (got + size > cap) break;
    char *p = align ? aligned_alloc(align, size) : malloc(size);
    if (!p) break;
    if (align && (uintptr_t)p % align)
      bench_die("aligned_alloc(%" PRIu64 ", %" PRIu64 ") = %p: not aligned", align, size,
                (void *)p);
    memset(p, 1, size);
    *(void **)p = last;
    last = p;
    got += size;
  }
  uint64_t started = 0;
  if (starts) {
    while (last) {
      void *next = *(void **)last;
      free(last);
      last = next;
    }
    malloc_trim(0);
    for (; started < starts; started++)
      if (pthread_create(&t[started], NULL, sleeper, NULL)) break;
    pthread_mutex_lock(&go_lock);
    go = 1;
    pthread_cond_broadcast(&go_cond);
    pthread_mutex_unlock(&go_lock);
    for (uint64_t i = 0; i < started; i++) pthread_join(t[i], NULL);
  }
  bench_result_begin("fill", 1, "mib", (double)got / (1 << 20), "MiB");
  bench_kv_u64("block_bytes", size);
  if (align) bench_kv_u64("align", align);
  bench_kv_u64("bytes", got);
  if (holders) bench_kv_u64("holders", holders);
  if (starts) bench_kv_u64("threads_started", started);
  bench_result_end();
  return 0;
}
