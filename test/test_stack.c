/* test_stack.c - how deep rill goes on a thread's stack. A program may give its
 * threads small stacks (glibc takes 16 KiB, PTHREAD_STACK_MIN), and any
 * malloc may run a purge pass or a heap's slow path on that stack: rill must
 * not keep big arrays there. Threads run on stacks painted with a pattern,
 * mallocing, callocing, reallocing and aligning blocks of 16 B to 8 MiB and
 * freeing them through a shared table (remote frees), with trims between
 * rounds; the depth below the thread function's own frame is what the
 * allocator used (and the dynamic linker, binding rill's symbols on first
 * call). Run with RILL_PURGE_DELAY_MS=0 so that passes run all the time, and
 * with huge pages and demand commit, whose passes keep per-region and
 * per-word state: the region pass kept 8 KiB on the stack before (13.7 KiB
 * deep in all, against 7 without), the decommit pass 3.5 KiB. */
#include "rill_test.h"

#include <pthread.h>
#include <sys/mman.h>

#define STACK   ((size_t)256 << 10)
#define PAINT   0xA5
#define LIMIT   ((size_t)8 << 10) /* below the thread function's frame */
#define THREADS 4
#define ROUNDS  20
#define N       20000

static void *shared[4096];

struct arg {
  char *stack;
  uintptr_t entry; /* an address in the thread function's frame */
  uint64_t seed;
};

static __attribute__((noinline)) void churn(uint64_t *s, void **p) {
  for (int round = 0; round < ROUNDS; round++) {
    for (int i = 0; i < N; i++) {
      uint64_t r = rng_next(s);
      size_t n = r % 100 < 90   ? 16 + r % 1009
                 : r % 100 < 98 ? 1024 + r % 300000
                                : (size_t)(1 + r % 8) << 20;
      switch (r % 5) {
      case 0:
        p[i] = T_calloc(1, n);
        break;
      case 1:
        if (T_posix_memalign(&p[i], (size_t)64 << (r % 8), n)) p[i] = NULL;
        break;
      case 2:
        p[i] = T_realloc(T_malloc(n / 2 + 1), n);
        break;
      default:
        p[i] = T_malloc(n);
      }
      if (!p[i]) DIE("allocation of %zu bytes failed", n);
      memset(p[i], 1, n < 64 ? n : 64);
    }
    for (int i = 0; i < N; i++) /* to whichever thread takes the slot next */
      T_free(__atomic_exchange_n(&shared[rng_next(s) % 4096], p[i], __ATOMIC_ACQ_REL));
    if (round % 10 == 9) T_trim();
  }
}

static void *work(void *v) {
  struct arg *a = v;
  char here;
  a->entry = (uintptr_t)&here;
  void **p =
      mmap(NULL, N * sizeof(void *), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) DIE("mmap failed");
  churn(&a->seed, p);
  munmap(p, N * sizeof(void *));
  return NULL;
}

int main(void) {
  struct arg a[THREADS];
  pthread_t t[THREADS];
  size_t worst = 0;
  for (int i = 0; i < THREADS; i++) {
    a[i].stack = mmap(NULL, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a[i].stack == MAP_FAILED) DIE("mmap failed");
    memset(a[i].stack, PAINT, STACK);
    a[i].seed = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstack(&at, a[i].stack, STACK);
    if (pthread_create(&t[i], &at, work, &a[i]) != 0) DIE("pthread_create failed");
    pthread_attr_destroy(&at);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    size_t lo = 0;
    while (lo < STACK && (unsigned char)a[i].stack[lo] == PAINT) lo++;
    size_t depth = a[i].entry - ((uintptr_t)a[i].stack + lo);
    if (depth > worst) worst = depth;
    munmap(a[i].stack, STACK);
  }
  T_free(NULL);
  for (int i = 0; i < 4096; i++) T_free(shared[i]);
  printf("stack: deepest use below the thread function: %zu bytes (limit %zu)\n", worst, LIMIT);
  CHECK(worst < LIMIT, "the allocator used %zu bytes of a thread's stack", worst);
  return t_finish("test_stack");
}
