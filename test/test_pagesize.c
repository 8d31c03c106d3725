/* test_pagesize.c - proves rill takes the page size from the running kernel:
 * valloc, pvalloc, large and huge blocks line up with sysconf's page size.
 * Run natively, and for aarch64 under qemu with 4, 16 and 64 KiB pages. */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;
#define CHECK(c, ...)                                                                              \
  do {                                                                                             \
    if (!(c)) {                                                                                    \
      failures++;                                                                                  \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
    }                                                                                              \
  } while (0)

static void *worker(void *arg) {
  size_t pg = *(size_t *)arg;
  for (int i = 0; i < 2000; i++) {
    size_t n = (size_t)(i * 37) % (3 * pg) + 1;
    unsigned char *p = malloc(n);
    CHECK(p != NULL, "malloc(%zu) failed", n);
    memset(p, i & 0xff, n);
    CHECK(p[n - 1] == (i & 0xff), "block of %zu bytes lost its contents", n);
    free(p);
  }
  return NULL;
}

int main(void) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  printf("page size %zu\n", pg);

  void *v = valloc(10);
  CHECK(v && (uintptr_t)v % pg == 0, "valloc(10) = %p not page aligned", v);
  void *pv = pvalloc(10);
  CHECK(pv && (uintptr_t)pv % pg == 0, "pvalloc(10) = %p not page aligned", pv);
  CHECK(malloc_usable_size(pv) >= pg, "pvalloc(10) usable %zu < page %zu", malloc_usable_size(pv),
        pg);
  memset(pv, 1, pg);
  free(v);
  free(pv);

  /* a large block (own span) and a huge block (own mapping) */
  size_t sizes[] = {300 * 1024, 5 * 1024 * 1024, 40 * 1024 * 1024};
  for (unsigned i = 0; i < 3; i++) {
    unsigned char *p = malloc(sizes[i]);
    CHECK(p != NULL, "malloc(%zu) failed", sizes[i]);
    size_t u = malloc_usable_size(p);
    CHECK(u >= sizes[i] && u % pg == 0, "usable %zu of %zu not a page multiple", u, sizes[i]);
    memset(p, 7, u);
    p = realloc(p, sizes[i] * 2);
    CHECK(p && p[sizes[i] - 1] == 7, "realloc lost contents at %zu", sizes[i]);
    free(p);
  }

  void *a = NULL;
  CHECK(posix_memalign(&a, 4 * pg, 100) == 0 && (uintptr_t)a % (4 * pg) == 0,
        "posix_memalign(4 pages) = %p", a);
  free(a);

  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, &pg);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);

  printf("pagesize %zu: %s\n", pg, failures ? "FAILED" : "ok");
  return failures != 0;
}
