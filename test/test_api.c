/* test_api.c - proves the allocator's C interface behaves like glibc's: size classes,
 * alignment, usable sizes, calloc zeroing, realloc contents, aligned and page allocation,
 * ENOMEM/EINVAL failures, sized frees, and (standard names) glibc's mallinfo2/malloc_info.
 * Built once per API (rill_ names, standard names). */
#include "rill_test.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#define LARGEST_CLASS (256 * KiB)
#define HUGE_SIZE     (64 * MiB)

/* --quick: coarser walks, and big blocks sampled (t_sparse), for slow runs such as valgrind */
static bool quick;

/* What the test was doing, printed if the allocator aborts the process. */
static char where[256];
#define WHERE(...) snprintf(where, sizeof where, __VA_ARGS__)

static void on_abort(int sig) {
  static const char msg[] = "test_api: aborted (SIGABRT) while checking: ";
  if (write(2, msg, sizeof msg - 1) < 0 || write(2, where, strnlen(where, sizeof where)) < 0 ||
      write(2, "\n", 1) < 0) {
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

/* Minimum alignment rill promises for a request of n bytes. */
static size_t min_align(size_t n) {
  return n >= 16 ? 16 : 8;
}

/* Allocates with T_malloc, checks alignment and usable size, writes and verifies the whole
 * usable area. Returns the block (filled with its pattern) or NULL after a failure. */
static void *alloc_checked(size_t n, const char *ctx) {
  WHERE("%s: " T_API "malloc(%zu)", ctx, n);
  errno = 0;
  void *p = keep(T_malloc(n));
  if (!p) {
    FAIL("%s: " T_API "malloc(%zu) returned NULL (errno %d)", ctx, n, errno);
    return NULL;
  }
  if ((uintptr_t)p % min_align(n))
    FAIL("%s: " T_API "malloc(%zu) = %p not %zu-aligned", ctx, n, p, min_align(n));
  size_t u = T_usable(p);
  if (u < n) FAIL("%s: usable size %zu < request %zu (block %p)", ctx, u, n, p);
  pat_fill(p, u, pat_seed(p, u));
  return p;
}

/* Verifies the pattern written by alloc_checked, then frees. */
static void free_checked(void *p, const char *ctx) {
  if (!p) return;
  size_t u = T_usable(p);
  PAT_CHECK(p, u, pat_seed(p, u), "%s", ctx);
  T_free(p);
}

/* ---- consecutive small blocks ------------------------------------------------------ */

static void *fresh_thread_16(void *arg) {
  void **out = arg;
  for (int i = 0; i < 8; i++) out[i] = T_malloc(16);
  return NULL;
}

/* A fresh thread's consecutive malloc(16) results are packed 16 bytes apart. */
static void t_fresh_thread_16(void) {
  void *p[8] = {0};
  pthread_t th;
  if (pthread_create(&th, NULL, fresh_thread_16, p)) DIE("pthread_create");
  pthread_join(th, NULL);
  intptr_t step = (intptr_t)p[1] - (intptr_t)p[0];
  if (step != 16 && step != -16) {
    FAIL("fresh thread: malloc(16) twice gave %p then %p (%+ld bytes apart, want 16)", p[0], p[1],
         (long)step);
  } else {
    for (int i = 1; i < 8; i++) {
      intptr_t d = (intptr_t)p[i] - (intptr_t)p[i - 1];
      if (d != step)
        FAIL("fresh thread: malloc(16) #%d at %p, #%d at %p: %+ld bytes apart, want %+ld", i - 1,
             p[i - 1], i, p[i], (long)d, (long)step);
    }
  }
  for (int i = 0; i < 8; i++) {
    if (!p[i]) FAIL("fresh thread: malloc(16) #%d returned NULL", i);
    T_free(p[i]);
  }
}

/* ---- malloc(0), NULL handling ------------------------------------------------------ */

static void t_zero_and_null(void) {
  void *a = keep(T_malloc(0)), *b = keep(T_malloc(0));
  CHECK(a && b, T_API "malloc(0) returned NULL (%p, %p); glibc returns a unique pointer", a, b);
  CHECK(!a || a != b, T_API "malloc(0) returned the same pointer %p twice", a);
  T_free(a);
  T_free(b);
  T_free(NULL);
  CHECK(T_usable(NULL) == 0, T_API "malloc_usable_size(NULL) = %zu, want 0", T_usable(NULL));
  void *c = keep(T_realloc(NULL, 100));
  CHECK(c != NULL, T_API "realloc(NULL, 100) returned NULL");
  if (c) {
    CHECK(T_usable(c) >= 100, "realloc(NULL,100) usable %zu", T_usable(c));
    memset(c, 1, 100);
  }
  /* glibc: realloc(p, 0) frees p and returns NULL. */
  errno = 0;
  void *d = T_realloc(c, 0);
  CHECK(d == NULL, T_API "realloc(%p, 0) = %p; glibc frees the block and returns NULL", c, d);
  if (d) T_free(d);
  void *e = keep(T_reallocarray(NULL, 10, 10));
  CHECK(e != NULL && T_usable(e) >= 100, T_API "reallocarray(NULL, 10, 10) = %p", e);
  T_free(e);
}

/* ---- size walk and size classes ---------------------------------------------------- */

/* Walks request sizes from 0 past the largest class with a step, keeping a ring of 16
 * live blocks so overlapping blocks would corrupt each other's patterns. */
static void t_walk_sizes(void) {
  enum { RING = 16 };
  void *ring[RING] = {0};
  size_t r = 0, prev_usable = 0, prev_n = 0;
  size_t step_small = quick ? 7 : 1, step_mid = quick ? 509 : 37;
  for (size_t n = 0; n <= LARGEST_CLASS + 64 * KiB; n += (n < 4096 ? step_small : step_mid)) {
    void *p = alloc_checked(n, "size walk");
    if (!p) continue;
    size_t u = T_usable(p);
    if (n <= LARGEST_CLASS && n > 0 && u < prev_usable)
      FAIL("size walk: usable(%zu) = %zu < usable(%zu) = %zu: classes not monotonic", n, u, prev_n,
           prev_usable);
    prev_usable = u;
    prev_n = n;
    free_checked(ring[r], "size walk ring");
    ring[r] = p;
    r = (r + 1) % RING;
  }
  /* Beyond the classes: large and huge requests up to 64 MiB, at odd sizes. */
  for (size_t n = LARGEST_CLASS + 1; n <= HUGE_SIZE + 4096; n = n + n / (quick ? 2 : 5) + 4093) {
    void *p = alloc_checked(n, "large walk");
    free_checked(ring[r], "large walk ring");
    ring[r] = p;
    r = (r + 1) % RING;
  }
  for (int i = 0; i < RING; i++) free_checked(ring[i], "walk final");
}

/* The size classes up to LARGEST_CLASS, discovered through the usable size. */
static size_t classes[4096];
static size_t nclasses;

static void discover_classes(void) {
  nclasses = 0;
  for (size_t n = 1; n <= LARGEST_CLASS;) {
    void *p = keep(T_malloc(n));
    if (!p) DIE("malloc(%zu) failed while discovering classes", n);
    size_t u = T_usable(p);
    T_free(p);
    if (u < n) DIE("usable(%zu) = %zu is below the request", n, u);
    if (nclasses == sizeof classes / sizeof classes[0]) {
      FAIL("more than %zu distinct usable sizes up to %zu bytes: no size classes?", nclasses, n);
      return;
    }
    classes[nclasses++] = u;
    n = u + 1;
  }
}

/* Each class: its size is its usable size, waste is at most 25% of any request above
 * 64 B, and the sizes c-1, c, c+1 around each boundary behave. */
static void t_classes(void) {
  discover_classes();
  printf("  %zu size classes up to %zu bytes, largest %zu\n", nclasses, LARGEST_CLASS,
         classes[nclasses - 1]);
  CHECK(classes[nclasses - 1] == LARGEST_CLASS,
        "largest class is %zu bytes, want %zu (request %zu has usable size %zu)",
        classes[nclasses - 1], LARGEST_CLASS, LARGEST_CLASS, classes[nclasses - 1]);
  size_t lo = 1; /* smallest request mapping to the current class */
  for (size_t i = 0; i < nclasses; i++) {
    size_t c = classes[i];
    /* The worst request for this class is the smallest one, lo. */
    if (lo > 64 && (c - lo) * 4 > lo)
      FAIL("class %zu wastes %zu bytes (%.1f%%) for request %zu: more than 25%%", c, c - lo,
           100.0 * (double)(c - lo) / (double)lo, lo);
    const size_t probe[] = {lo, c - 1, c, c + 1};
    for (int k = 0; k < 4; k++) {
      size_t n = probe[k];
      if (n == 0) continue;
      void *p = alloc_checked(n, "class boundary");
      if (!p) continue;
      size_t u = T_usable(p);
      size_t want = (n <= c) ? c : (i + 1 < nclasses ? classes[i + 1] : 0);
      if (want && u != want) FAIL("request %zu: usable size %zu, want class size %zu", n, u, want);
      free_checked(p, "class boundary");
    }
    /* A class size requested exactly maps to itself. */
    void *p = keep(T_malloc(c));
    if (p && T_usable(p) != c)
      FAIL("malloc(%zu) (a class size) has usable size %zu", c, T_usable(p));
    T_free(p);
    /* Block colour (span.c): blocks of a coloured class start 128 B past a
     * 256-byte boundary, every other class's at a multiple of its size's
     * largest power-of-two factor (up to 256) from one. */
    void *q[8];
    for (int k = 0; k < 8; k++) q[k] = keep(T_malloc(c));
    size_t pow2 = c & (~c + 1), m = pow2 < 256 ? pow2 : 256, phase = (size_t)T_COLOR(c) % m;
    for (int k = 0; k < 8; k++)
      if (q[k] && (uintptr_t)q[k] % m != phase)
        FAIL("malloc(%zu) = %p: want %zu past a multiple of %zu (block colour)", c, q[k], phase, m);
    for (int k = 0; k < 8; k++) T_free(q[k]);
    lo = c + 1;
  }
}

/* Many blocks of random sizes alive at once never overlap and keep their contents. */
static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)(*(void *const *)a), y = (uintptr_t)(*(void *const *)b);
  return x < y ? -1 : x > y;
}

static void t_no_overlap(void) {
  enum { N = 20000 };
  void **v = calloc(N, sizeof *v); /* test bookkeeping: whichever allocator */
  if (!v) DIE("calloc");
  uint64_t rs = 42;
  for (int i = 0; i < N; i++) {
    uint64_t r = rng_next(&rs);
    size_t n = (r % 16 == 0) ? (size_t)(r >> 8) % (512 * KiB) : (size_t)(r >> 8) % 600;
    v[i] = alloc_checked(n, "overlap");
  }
  qsort(v, N, sizeof *v, cmp_ptr);
  for (int i = 0; i + 1 < N; i++) {
    if (!v[i]) continue;
    uintptr_t end = (uintptr_t)v[i] + T_usable(v[i]);
    if (end > (uintptr_t)v[i + 1])
      FAIL("blocks overlap: %p + usable %zu runs into %p", v[i], T_usable(v[i]), v[i + 1]);
  }
  for (int i = 0; i < N; i++) free_checked(v[i], "overlap");
  free(v);
}

/* ---- aligned allocation ------------------------------------------------------------ */

enum { VIA_POSIX, VIA_ALIGNED_ALLOC, VIA_MEMALIGN };
static const char *const via_name[] = {T_API "posix_memalign", T_API "aligned_alloc",
                                       T_API "memalign"};

static void *aligned_via(int via, size_t align, size_t n) {
  void *p = NULL;
  errno = 0;
  switch (via) {
  case VIA_POSIX: {
    int rc = T_posix_memalign(&p, align, n);
    if (rc) {
      FAIL("posix_memalign(align %zu, size %zu) returned %d", align, n, rc);
      return NULL;
    }
    break;
  }
  case VIA_ALIGNED_ALLOC:
    p = T_aligned_alloc(align, n);
    break;
  default:
    p = T_memalign(align, n);
    break;
  }
  keep(p);
  if (!p) FAIL("%s(align %zu, size %zu) returned NULL (errno %d)", via_name[via], align, n, errno);
  return p;
}

/* Live blocks must not overlap (a zero-size block counts as 1 byte). */
static void check_disjoint(void *const *v, const size_t *req, size_t n, const char *ctx) {
  for (size_t i = 0; i < n; i++) {
    if (!v[i]) continue;
    uintptr_t a0 = (uintptr_t)v[i], a1 = a0 + (T_usable(v[i]) ? T_usable(v[i]) : 1);
    for (size_t j = i + 1; j < n; j++) {
      if (!v[j]) continue;
      uintptr_t b0 = (uintptr_t)v[j], b1 = b0 + (T_usable(v[j]) ? T_usable(v[j]) : 1);
      if (a0 < b1 && b0 < a1)
        FAIL("%s: live blocks overlap: %p (%zu bytes) and %p (%zu bytes)", ctx, v[i], req[i], v[j],
             req[j]);
    }
  }
}

static void t_aligned(void) {
  for (size_t align = 8; align <= 4 * MiB; align *= 2) {
    const size_t sizes[] = {
        0, 0, 1, 8, 16, 24, 100, align / 2 + 1, align - 1, align, align + 1, 3 * align + 5, 70000};
    enum { NS = sizeof sizes / sizeof sizes[0] };
    for (int via = 0; via < 3; via++) {
      void *live[NS] = {0};
      for (size_t k = 0; k < NS; k++) {
        size_t n = sizes[k];
        void *p = aligned_via(via, align, n);
        if (!p) continue;
        WHERE("%s(align %zu, size %zu) returned %p", via_name[via], align, n, p);
        bool dup = false;
        for (size_t j = 0; j < k; j++) {
          if (live[j] == p) {
            FAIL("%s(align %zu, size %zu) returned %p, already live (from a request of %zu "
                 "bytes)",
                 via_name[via], align, n, p, sizes[j]);
            dup = true;
          }
        }
        if (dup) continue; /* not touched, not freed twice */
        size_t want = align > min_align(n) ? align : min_align(n);
        if ((uintptr_t)p % want)
          FAIL("%s(align %zu, size %zu) = %p is not %zu-aligned", via_name[via], align, n, p, want);
        size_t u = T_usable(p);
        if (u < n) FAIL("%s(align %zu, size %zu): usable size %zu", via_name[via], align, n, u);
        /* an alignment up to a slot, for no more than its own size, takes the class of that
         * size: 256-1,024 B have uncoloured twins of their coloured classes for it (256 B
         * aligned to 256 took a block of 1,280) */
        if (n && n <= align && align >= 16 && align <= 16 * KiB && u != align)
          FAIL("%s(align %zu, size %zu): usable size %zu, want %zu", via_name[via], align, n, u,
               align);
        pat_fill(p, u, pat_seed(p, u));
        live[k] = p;
      }
      char ctx[96];
      snprintf(ctx, sizeof ctx, "%s with alignment %zu", via_name[via], align);
      check_disjoint(live, sizes, NS, ctx);
      for (size_t k = 0; k < NS; k++) {
        void *p = live[k];
        if (!p) continue;
        size_t u = T_usable(p);
        PAT_CHECK(p, u, pat_seed(p, u), "%s(align %zu, size %zu)", via_name[via], align, sizes[k]);
      }
      for (size_t k = 0; k < NS; k++) {
        void *p = live[k];
        if (!p) continue;
        if (via == VIA_ALIGNED_ALLOC && (k & 1))
          T_free_aligned_sized(p, align, sizes[k]);
        else
          T_free(p);
      }
    }
  }
  /* Runs of zero-size and one-byte aligned requests: all live blocks must be distinct. */
  for (size_t align = 8; align <= 4 * MiB; align *= 2) {
    for (int via = 0; via < 3; via++) {
      for (size_t n = 0; n <= 1; n++) {
        void *v[8] = {0};
        for (int i = 0; i < 8; i++) {
          v[i] = aligned_via(via, align, n);
          for (int j = 0; j < i && v[i]; j++) {
            if (v[j] == v[i]) {
              FAIL("%s(align %zu, size %zu) #%d returned %p, still live from #%d", via_name[via],
                   align, n, i, v[i], j);
              v[i] = NULL; /* never free the same block twice */
              break;
            }
          }
          if (v[i] && (uintptr_t)v[i] % align)
            FAIL("%s(align %zu, size %zu) = %p is misaligned", via_name[via], align, n, v[i]);
        }
        for (int i = 0; i < 8; i++) T_free(v[i]);
      }
    }
  }
  /* Size 0 with posix_memalign succeeds like glibc's. */
  void *z = NULL;
  int rc = T_posix_memalign(&z, 64, 0);
  CHECK(rc == 0, T_API "posix_memalign(64, 0) returned %d, want 0", rc);
  CHECK(rc != 0 || (uintptr_t)z % 64 == 0, T_API "posix_memalign(64, 0) = %p not aligned", z);
  if (rc == 0) T_free(z);
}

static void t_page_alloc(void) {
  size_t pg = page_size();
  const size_t sizes[] = {1,           100,       pg - 1,      pg,      pg + 1,
                          10 * pg + 3, 300 * KiB, 1 * MiB + 5, 40 * MiB};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k];
    void *p = keep(T_valloc(n));
    if (!p) {
      FAIL(T_API "valloc(%zu) returned NULL", n);
    } else {
      CHECK((uintptr_t)p % pg == 0, T_API "valloc(%zu) = %p not page aligned", n, p);
      size_t u = T_usable(p);
      CHECK(u >= n, T_API "valloc(%zu): usable %zu", n, u);
      pat_fill(p, u, 7);
      PAT_CHECK(p, u, 7, T_API "valloc(%zu)", n);
      T_free(p);
    }
    p = keep(T_pvalloc(n));
    if (!p) {
      FAIL(T_API "pvalloc(%zu) returned NULL", n);
    } else {
      size_t rounded = (n + pg - 1) / pg * pg;
      CHECK((uintptr_t)p % pg == 0, T_API "pvalloc(%zu) = %p not page aligned", n, p);
      size_t u = T_usable(p);
      CHECK(u >= rounded, T_API "pvalloc(%zu): usable %zu < page-rounded size %zu", n, u, rounded);
      pat_fill(p, u, 9);
      PAT_CHECK(p, u, 9, T_API "pvalloc(%zu)", n);
      T_free(p);
    }
  }
  void *p = keep(T_pvalloc(0));
  CHECK(p != NULL, T_API "pvalloc(0) returned NULL");
  T_free(p);
}

/* ---- calloc ------------------------------------------------------------------------ */

/* Dirties blocks of size n with 0xAA, frees them, then callocs the same size many times:
 * every byte of every request must read zero. */
static void calloc_round(size_t n, int count, const char *ctx) {
  WHERE("%s: " T_API "calloc of %zu bytes", ctx, n);
  void *v[64];
  if (count > 64) count = 64;
  for (int i = 0; i < count; i++) {
    v[i] = keep(T_malloc(n));
    if (v[i]) t_dirty(v[i], T_usable(v[i]), 0xAA);
  }
  for (int i = 0; i < count; i++) T_free(v[i]);
  for (int i = 0; i < count; i++) {
    errno = 0;
    v[i] = keep((i & 1) ? T_calloc(n, 1) : T_calloc(1, n));
    if (!v[i]) {
      FAIL("%s: " T_API "calloc(%zu) returned NULL (errno %d)", ctx, n, errno);
      continue;
    }
    size_t bad = first_nonzero(v[i], n);
    if (bad != SIZE_MAX)
      FAIL("%s: " T_API "calloc(%zu) = %p: byte at offset %zu is 0x%02x, not zero", ctx, n, v[i],
           bad, ((unsigned char *)v[i])[bad]);
    t_dirty(v[i], T_usable(v[i]), 0xAA); /* dirty again for the next round */
  }
  for (int i = 0; i < count; i++) T_free(v[i]);
}

static void t_calloc(void) {
  if (!nclasses) discover_classes();
  for (size_t i = 0; i < nclasses; i++) {
    calloc_round(classes[i], 32, "calloc per class");
    if (classes[i] > 1) calloc_round(classes[i] - 1, 8, "calloc per class -1");
  }
  const size_t big[] = {LARGEST_CLASS + 1, 300 * KiB, 1 * MiB, 4 * MiB + 3,
                        31 * MiB,          33 * MiB,  40 * MiB};
  for (size_t k = 0; k < sizeof big / sizeof big[0]; k++) calloc_round(big[k], 4, "calloc large");
  /* After a purge the recycled memory must still read zero. */
  for (int round = 0; round < 3; round++) {
    const size_t sizes[] = {16, 48, 1000, 8192, 100000, 1 * MiB};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      calloc_round(sizes[k], 64, "calloc before purge");
      T_trim();
      calloc_round(sizes[k], 64, "calloc after purge");
    }
  }
  /* calloc(0, n) and calloc(n, 0) give freeable blocks like glibc. */
  void *a = keep(T_calloc(0, 16)), *b = keep(T_calloc(16, 0));
  CHECK(a && b, T_API "calloc with a zero count/size returned NULL (%p, %p)", a, b);
  T_free(a);
  T_free(b);
}

/* ---- realloc ----------------------------------------------------------------------- */

/* Reallocs p (holding `have` bytes of pattern seed) to n and checks the common prefix. */
static void *realloc_checked(void *p, size_t have, size_t n, uint64_t seed, const char *ctx) {
  WHERE("%s: " T_API "realloc(%p, %zu) from %zu bytes", ctx, p, n, have);
  errno = 0;
  void *q = keep(T_realloc(p, n));
  if (!q) {
    FAIL("%s: " T_API "realloc(%p, %zu) from %zu bytes returned NULL (errno %d)", ctx, p, n, have,
         errno);
    return NULL;
  }
  if ((uintptr_t)q % min_align(n))
    FAIL("%s: realloc to %zu gave %p, not %zu-aligned", ctx, n, q, min_align(n));
  size_t u = T_usable(q);
  if (u < n) FAIL("%s: realloc to %zu: usable size %zu", ctx, n, u);
  size_t keep_n = have < n ? have : n;
  PAT_CHECK(q, keep_n, seed, "%s: realloc %zu -> %zu lost contents", ctx, have, n);
  pat_fill(q, u, seed); /* whole usable area carries the pattern again */
  return q;
}

static void t_realloc(void) {
  if (!nclasses) discover_classes();
  /* Across every class boundary, growing and shrinking by one byte. */
  for (size_t i = 0; i < nclasses; i++) {
    size_t c = classes[i];
    uint64_t seed = 1000 + i;
    void *p = keep(T_malloc(c - (c > 1)));
    if (!p) {
      FAIL("malloc(%zu) NULL", c - 1);
      continue;
    }
    size_t have = c - (c > 1);
    pat_fill(p, have, seed);
    const size_t steps[] = {c + 1, c, c - (c > 1), c + 1, 2 * c + 3, c / 2 + 1, c};
    for (size_t k = 0; k < sizeof steps / sizeof steps[0] && p; k++) {
      p = realloc_checked(p, have, steps[k], seed, "realloc across class boundary");
      if (p) have = T_usable(p);
    }
    T_free(p);
  }
  /* Growing from 1 byte to 64 MiB and back, checking the contents at every step. */
  size_t sizes[200], ns = 0;
  for (size_t n = 1; n <= HUGE_SIZE && ns < 200; n = n + n / 3 + 7) sizes[ns++] = n;
  sizes[ns++] = HUGE_SIZE;
  void *p = keep(T_malloc(1));
  size_t have = 1;
  uint64_t seed = 77;
  if (p) pat_fill(p, 1, seed);
  for (size_t k = 0; k < ns && p; k++) {
    p = realloc_checked(p, have, sizes[k], seed, "realloc growing");
    if (p) have = T_usable(p);
  }
  for (size_t k = ns; k-- > 0 && p;) {
    p = realloc_checked(p, have, sizes[k], seed, "realloc shrinking");
    if (p) have = T_usable(p);
  }
  T_free(p);
  /* Huge to huge, and huge to small. */
  const size_t hs[] = {40 * MiB, 100 * MiB, 33 * MiB + 1, HUGE_SIZE, 1000, 40 * MiB};
  p = keep(T_malloc(32 * MiB + 1));
  have = 32 * MiB + 1;
  if (p) pat_fill(p, have, 5);
  for (size_t k = 0; k < sizeof hs / sizeof hs[0] && p; k++) {
    p = realloc_checked(p, have, hs[k], 5, "realloc huge");
    if (p) have = T_usable(p);
  }
  T_free(p);
  /* An aligned block can be realloced. */
  p = keep(T_memalign(4096, 100));
  if (p) {
    pat_fill(p, 100, 3);
    p = realloc_checked(p, 100, 10000, 3, "realloc of memalign block");
    T_free(p);
  }
  /* reallocarray grows like realloc. */
  p = keep(T_reallocarray(NULL, 100, 3));
  if (p) {
    pat_fill(p, 300, 11);
    void *q = keep(T_reallocarray(p, 1000, 3));
    CHECK(q != NULL, T_API "reallocarray(p, 1000, 3) returned NULL");
    if (q) {
      PAT_CHECK(q, 300, 11, "reallocarray 300 -> 3000");
      p = q;
    }
    T_free(p);
  }
}

/* ---- failures: ENOMEM and EINVAL --------------------------------------------------- */

static void expect_enomem(void *p, const char *call) {
  int e = errno;
  if (p) {
    FAIL("%s returned %p, want NULL", call, p);
    T_free(p);
  } else if (e != ENOMEM) {
    FAIL("%s: errno %d (%s), want ENOMEM", call, e, strerror(e));
  }
}

static void t_overflow(void) {
  char call[160];
  /* 2^47 and up exceed the user address space, so no system can satisfy them. */
  const size_t bad[] = {SIZE_MAX,           SIZE_MAX - 1,
                        SIZE_MAX - 15,      SIZE_MAX - 4096,
                        SIZE_MAX - 4 * MiB, SIZE_MAX / 2 + 1,
                        SIZE_MAX / 2,       (size_t)PTRDIFF_MAX,
                        (size_t)1 << 47,    ((size_t)1 << 48) + 12345};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    size_t n = bad[k];
    errno = 0;
    snprintf(call, sizeof call, T_API "malloc(%#zx)", n);
    expect_enomem(keep(T_malloc(n)), call);
    errno = 0;
    snprintf(call, sizeof call, T_API "calloc(1, %#zx)", n);
    expect_enomem(keep(T_calloc(1, n)), call);
    errno = 0;
    snprintf(call, sizeof call, T_API "aligned_alloc(64, %#zx)", n);
    expect_enomem(keep(T_aligned_alloc(64, n)), call);
    errno = 0;
    snprintf(call, sizeof call, T_API "memalign(4096, %#zx)", n);
    expect_enomem(keep(T_memalign(4096, n)), call);
    errno = 0;
    snprintf(call, sizeof call, T_API "valloc(%#zx)", n);
    expect_enomem(keep(T_valloc(n)), call);
    errno = 0;
    snprintf(call, sizeof call, T_API "pvalloc(%#zx)", n);
    expect_enomem(keep(T_pvalloc(n)), call);
    void *out = NULL;
    int rc = T_posix_memalign(&out, 256, n);
    CHECK(rc == ENOMEM, T_API "posix_memalign(256, %#zx) returned %d, want ENOMEM", n, rc);
    if (rc == 0) T_free(out);
    /* realloc failure leaves the old block alive and intact. */
    void *p = keep(T_malloc(200));
    if (!p) continue;
    pat_fill(p, 200, n);
    errno = 0;
    void *q = T_realloc(p, n);
    snprintf(call, sizeof call, T_API "realloc(p, %#zx)", n);
    expect_enomem(q, call);
    if (!q) PAT_CHECK(p, 200, n, "block after failed realloc to %#zx", n);
    T_free(q ? NULL : p);
  }
  /* Products that overflow size_t. */
  const size_t pairs[][2] = {
      {SIZE_MAX / 2 + 1, 2}, {(size_t)1 << 33, (size_t)1 << 31},
      {SIZE_MAX, SIZE_MAX},  {(size_t)1 << 32, (size_t)1 << 32},
      {3, SIZE_MAX / 3 + 1}, {(size_t)1 << 24, (size_t)1 << 24} /* no overflow, 256 TiB */};
  for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
    size_t a = pairs[k][0], b = pairs[k][1];
    errno = 0;
    snprintf(call, sizeof call, T_API "calloc(%#zx, %#zx)", a, b);
    expect_enomem(keep(T_calloc(a, b)), call);
    errno = 0;
    snprintf(call, sizeof call, T_API "reallocarray(NULL, %#zx, %#zx)", a, b);
    expect_enomem(keep(T_reallocarray(NULL, a, b)), call);
    void *p = keep(T_malloc(64));
    if (!p) continue;
    pat_fill(p, 64, k);
    errno = 0;
    void *q = T_reallocarray(p, a, b);
    snprintf(call, sizeof call, T_API "reallocarray(p, %#zx, %#zx)", a, b);
    expect_enomem(q, call);
    if (!q) PAT_CHECK(p, 64, k, "block after failed reallocarray");
    T_free(q ? NULL : p);
  }
  /* An alignment that is a valid power of two but cannot be met. */
  errno = 0;
  expect_enomem(keep(T_aligned_alloc((size_t)1 << 63, 64)), T_API "aligned_alloc(2^63, 64)");
  void *out = NULL;
  int rc = T_posix_memalign(&out, (size_t)1 << 63, 64);
  CHECK(rc == ENOMEM, T_API "posix_memalign(2^63, 64) returned %d, want ENOMEM", rc);
  if (rc == 0) T_free(out);
}

static void t_bad_alignment(void) {
  const size_t bad_posix[] = {0,  1,  2,  3,   4,    5,        6,        7,           12,
                              24, 40, 48, 100, 4097, 3 * 4096, SIZE_MAX, SIZE_MAX / 2};
  for (size_t k = 0; k < sizeof bad_posix / sizeof bad_posix[0]; k++) {
    void *out = (void *)0x1;
    int rc = T_posix_memalign(&out, bad_posix[k], 64);
    CHECK(rc == EINVAL, T_API "posix_memalign(align %zu, 64) returned %d, want EINVAL",
          bad_posix[k], rc);
    if (rc == 0) T_free(out);
  }
  const size_t bad_aa[] = {3, 5, 6, 7, 12, 24, 48, 100, 4097, 3 * 4096, SIZE_MAX};
  for (size_t k = 0; k < sizeof bad_aa / sizeof bad_aa[0]; k++) {
    errno = 0;
    void *p = keep(T_aligned_alloc(bad_aa[k], 64));
    int e = errno;
    CHECK(p == NULL && e == EINVAL,
          T_API "aligned_alloc(align %zu, 64) = %p errno %d, want NULL and EINVAL", bad_aa[k], p,
          e);
    if (p) T_free(p);
  }
}

/* ---- sized frees and statistics ---------------------------------------------------- */

static uint64_t in_use_now(void) {
  struct rill_stats s;
  memset(&s, 0, sizeof s);
  rill_stats_get(&s);
  return s.bytes_in_use;
}

/* Blocks freed with free_sized / free_aligned_sized are really released, and allocations
 * made through this API are counted by rill (so rill, not libc, served them). */
static void t_sized_and_stats(void) {
  enum { N = 65536 };
  void **v = calloc(N, sizeof *v);
  if (!v) DIE("calloc");
  for (int round = 0; round < 3; round++) {
    uint64_t base = in_use_now();
    size_t n = round == 2 ? 1500 : 1024;
    for (int i = 0; i < N; i++) {
      v[i] = keep(round == 2 ? T_aligned_alloc(512, n) : T_malloc(n));
      if (!v[i]) DIE("allocation %d of %zu bytes failed", i, n);
      memset(v[i], i, 64);
    }
    uint64_t peak = in_use_now();
    CHECK(peak >= base + (uint64_t)N * n / 2,
          "rill_stats bytes_in_use went from %" PRIu64 " to %" PRIu64 " after %d x %zu-byte " T_API
          "mallocs: rill did not serve them",
          base, peak, N, n);
    for (int i = 0; i < N; i++) {
      if (round == 0)
        T_free_sized(v[i], n);
      else if (round == 1)
        T_free(v[i]);
      else
        T_free_aligned_sized(v[i], 512, n);
    }
    uint64_t after = in_use_now();
    CHECK(after <= base + 8 * MiB,
          "round %d: bytes_in_use %" PRIu64 " after freeing everything, was %" PRIu64
          " before: frees not accounted",
          round, after, base);
  }
  free(v);
  T_free_sized(NULL, 0);
  T_free_aligned_sized(NULL, 64, 0);
  /* Sized free of huge and large blocks. */
  const size_t sizes[] = {1, 17, 300, 5000, 200 * KiB, 2 * MiB, 40 * MiB};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    void *p = alloc_checked(sizes[k], "free_sized");
    if (p) T_free_sized(p, sizes[k]);
    p = aligned_via(VIA_ALIGNED_ALLOC, 4096, sizes[k]);
    if (p) T_free_aligned_sized(p, 4096, sizes[k]);
  }
  /* Purging empty spans leaves live blocks intact. */
  void *keepers[64];
  for (int i = 0; i < 64; i++) keepers[i] = alloc_checked((size_t)(i * 97 + 1), "trim");
  T_trim();
  (void)rill_collect(false);
  for (int i = 0; i < 64; i++) free_checked(keepers[i], "live block across a purge");
}

/* rill_class_stats_get's row for block size bs (the plain class, not a twin), or zeros. */
static struct rill_class_stats class_row(uint64_t bs) {
  struct rill_class_stats rows[96], z;
  memset(&z, 0, sizeof z);
  size_t n = rill_class_stats_get(rows, 96);
  CHECK(n <= 96, "rill_class_stats_get: %zu rows, more than there are classes", n);
  for (size_t i = 0; i < n && i < 96; i++)
    if (rows[i].block_size == bs) return rows[i];
  return z;
}

/* The class by class statistics follow one class's blocks out and back, count the pages
 * written as resident, list large objects last, and add up to rill_stats' bytes in use. */
static void t_class_stats(void) {
  enum { N = 40, SZ = 6000, CLS = 6144 };
  void *v[N];
  struct rill_class_stats r0 = class_row(CLS), large0 = class_row(0);
  for (int i = 0; i < N; i++) {
    v[i] = keep(T_malloc(SZ));
    if (!v[i]) DIE("malloc(%d) failed", SZ);
    memset(v[i], i, SZ);
  }
  void *big = keep(T_malloc(MiB));
  if (!big) DIE("malloc(1 MiB) failed");
  memset(big, 1, MiB);
  struct rill_class_stats r1 = class_row(CLS), large1 = class_row(0);
  CHECK(r1.blocks_in_use == r0.blocks_in_use + N && r1.bytes_in_use == r1.blocks_in_use * CLS,
        "class %d: blocks_in_use %" PRIu64 " -> %" PRIu64 ", bytes %" PRIu64
        " after %d mallocs of %d B",
        CLS, r0.blocks_in_use, r1.blocks_in_use, r1.bytes_in_use, N, SZ);
  CHECK(r1.spans >= 1 && r1.bytes_committed >= r1.bytes_in_use &&
            r1.bytes_resident >= r0.bytes_resident + (uint64_t)N * SZ - 2 * 4096 &&
            r1.bytes_resident <= r1.bytes_committed,
        "class %d: spans %" PRIu64 ", committed %" PRIu64 ", resident %" PRIu64 " -> %" PRIu64
        " after writing %d blocks",
        CLS, r1.spans, r1.bytes_committed, r0.bytes_resident, r1.bytes_resident, N);
  CHECK(large1.spans == large0.spans + 1 && large1.bytes_in_use >= large0.bytes_in_use + MiB &&
            large1.bytes_resident >= large0.bytes_resident + MiB,
        "large objects: %" PRIu64 " -> %" PRIu64 ", in use %" PRIu64 " -> %" PRIu64
        ", resident %" PRIu64 " -> %" PRIu64 " after a written 1 MiB malloc",
        large0.spans, large1.spans, large0.bytes_in_use, large1.bytes_in_use, large0.bytes_resident,
        large1.bytes_resident);
  /* rows by block size, large objects last; their in-use bytes are rill_stats' (no huge
   * objects are live, and this thread alone allocates) */
  struct rill_class_stats rows[96];
  size_t n = rill_class_stats_get(rows, 96), n0 = rill_class_stats_get(NULL, 0);
  struct rill_stats s;
  rill_stats_get(&s);
  uint64_t sum = 0;
  for (size_t i = 0; i < n && i < 96; i++) {
    sum += rows[i].bytes_in_use;
    CHECK(rows[i].spans > 0, "row %zu (block size %" PRIu64 ") has no spans", i,
          rows[i].block_size);
    if (i > 0 && rows[i].block_size)
      CHECK(rows[i].block_size >= rows[i - 1].block_size && rows[i - 1].block_size,
            "rows out of order: %" PRIu64 " after %" PRIu64, rows[i].block_size,
            rows[i - 1].block_size);
  }
  CHECK(n == n0 && n > 1 && rows[n - 1].block_size == 0,
        "rill_class_stats_get: %zu rows, %zu when only counting, last block size %" PRIu64, n, n0,
        n ? rows[n - 1].block_size : 0);
  CHECK(sum == s.bytes_in_use - s.huge_bytes,
        "class rows add up to %" PRIu64 " bytes in use, rill_stats says %" PRIu64, sum,
        s.bytes_in_use - s.huge_bytes);
  /* every other block back: half out, the rest free in the class's spans */
  for (int i = 0; i < N; i += 2) T_free(v[i]);
  struct rill_class_stats r2 = class_row(CLS);
  CHECK(r2.blocks_in_use == r1.blocks_in_use - N / 2 && r2.blocks_free >= r1.blocks_free + N / 2,
        "class %d: in use %" PRIu64 " -> %" PRIu64 ", free %" PRIu64 " -> %" PRIu64
        " after %d frees",
        CLS, r1.blocks_in_use, r2.blocks_in_use, r1.blocks_free, r2.blocks_free, N / 2);
  for (int i = 1; i < N; i += 2) T_free(v[i]);
  T_free(big);
  CHECK(class_row(CLS).blocks_in_use == r0.blocks_in_use && class_row(0).spans == large0.spans,
        "class %d: %" PRIu64 " blocks in use after freeing all, %" PRIu64 " before", CLS,
        class_row(CLS).blocks_in_use, r0.blocks_in_use);
}

#ifndef USE_RILL_API
/* glibc's introspection calls report rill's heap, not glibc's idle arena: mallinfo2 and
 * mallinfo follow allocations and frees, huge objects show as mmapped bytes, malloc_info
 * writes rill's counters and rejects options glibc rejects, malloc_stats prints rill's. */
static struct mallinfo2 info2(void) {
  return mallinfo2();
}
static void t_glibc_info(void) {
  enum { N = 4096, SZ = 1000 };
  static void *v[N];
  struct mallinfo2 m0 = info2();
  for (int i = 0; i < N; i++) {
    v[i] = keep(T_malloc(SZ));
    if (!v[i]) DIE("malloc(%d) failed", SZ);
    memset(v[i], i, SZ);
  }
  struct mallinfo2 m1 = info2();
  CHECK(m1.uordblks >= m0.uordblks + (size_t)N * SZ,
        "mallinfo2 uordblks %zu -> %zu after %d x %d-byte mallocs: not rill's heap", m0.uordblks,
        m1.uordblks, N, SZ);
  CHECK(m1.arena >= m1.uordblks && m1.arena == m1.uordblks + m1.fordblks,
        "mallinfo2: arena %zu is not uordblks %zu + fordblks %zu", m1.arena, m1.uordblks,
        m1.fordblks);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  struct mallinfo m = mallinfo();
#pragma GCC diagnostic pop
  CHECK((size_t)m.uordblks + 64 * KiB >= m1.uordblks &&
            (size_t)m.uordblks <= m1.uordblks + 64 * KiB,
        "mallinfo uordblks %d, mallinfo2 %zu: the two disagree", m.uordblks, m1.uordblks);
  for (int i = 0; i < N; i++) T_free(v[i]);
  struct mallinfo2 m2 = info2();
  CHECK(m2.uordblks + (size_t)N * SZ / 2 <= m1.uordblks,
        "mallinfo2 uordblks %zu -> %zu after freeing them: frees not seen", m1.uordblks,
        m2.uordblks);
  char *big = keep(T_malloc(HUGE_SIZE));
  if (!big) DIE("malloc(%zu) failed", (size_t)HUGE_SIZE);
  struct mallinfo2 m3 = info2();
  CHECK(m3.hblkhd >= m2.hblkhd + HUGE_SIZE, "mallinfo2 hblkhd %zu -> %zu after a %zu-byte malloc",
        m2.hblkhd, m3.hblkhd, (size_t)HUGE_SIZE);
  T_free(big);
  CHECK(info2().hblkhd == m2.hblkhd, "mallinfo2 hblkhd %zu after freeing the huge block, was %zu",
        info2().hblkhd, m2.hblkhd);

  char *text = NULL;
  size_t len = 0;
  FILE *fp = open_memstream(&text, &len);
  if (!fp) DIE("open_memstream: %s", strerror(errno));
  int rc = malloc_info(0, fp);
  fclose(fp);
  CHECK(rc == 0 && text && strstr(text, "<malloc") && strstr(text, "in_use=\"") &&
            strstr(text, "<class size=\"") && strstr(text, "</malloc>"),
        "malloc_info(0) returned %d and wrote: %s", rc, text ? text : "(nothing)");
  free(text);
  errno = 0;
  rc = malloc_info(1, stdout);
  CHECK(rc == -1 && errno == EINVAL, "malloc_info(1): %d, errno %d; want -1 and EINVAL", rc, errno);

  /* malloc_stats writes to stderr: catch it in a pipe */
  int pfd[2];
  if (pipe(pfd)) DIE("pipe: %s", strerror(errno));
  fflush(stderr);
  int saved = dup(2);
  dup2(pfd[1], 2);
  malloc_stats();
  dup2(saved, 2);
  close(saved);
  close(pfd[1]);
  char buf[1024] = {0};
  ssize_t got = read(pfd[0], buf, sizeof buf - 1);
  close(pfd[0]);
  CHECK(got > 0 && strstr(buf, "rill: stats: in_use="), "malloc_stats printed: %s",
        got > 0 ? buf : "(nothing)");
}

/* mallopt is rill's (glibc's would also answer 1, so ask the loader whose it is), tunes
 * nothing, and answers as glibc's does: 0 only for M_MXFAST out of its range. The static
 * link this matters for is in test/install.sh. */
static void t_mallopt(void) {
  Dl_info lib;
  CHECK(dladdr((void *)mallopt, &lib) && lib.dli_fname && strstr(lib.dli_fname, "librill"),
        "mallopt comes from %s, not librill", lib.dli_fname ? lib.dli_fname : "(unknown)");
  const struct {
    int param, value, want;
  } cases[] = {{M_ARENA_MAX, 2, 1},       {M_MMAP_THRESHOLD, 1 << 20, 1},
               {M_TRIM_THRESHOLD, -1, 1}, {M_TOP_PAD, 0, 1},
               {M_MMAP_MAX, 0, 1},        {M_PERTURB, 0xa5, 1},
               {M_CHECK_ACTION, 3, 1},    {M_ARENA_TEST, 8, 1},
               {M_MXFAST, 0, 1},          {M_MXFAST, 160, 1},
               {M_MXFAST, 161, 0},        {M_MXFAST, -1, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int got = mallopt(cases[i].param, cases[i].value);
    CHECK(got == cases[i].want, "mallopt(%d, %d) = %d, glibc answers %d", cases[i].param,
          cases[i].value, got, cases[i].want);
  }
}
#endif

/* Runs one group of checks in a child process, so that an allocator abort in one group
 * is reported as that group's failure and the other groups still run. */
static bool run_group(const char *name, void (*fn)(void), bool in_child) {
  if (!in_child) {
    long before = atomic_load(&t_failures);
    WHERE("%s", name);
    fn();
    return atomic_load(&t_failures) == before;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) DIE("fork: %s", strerror(errno));
  if (pid == 0) {
    atomic_store(&t_failures, 0); /* count this group's failures only */
    WHERE("%s", name);
    fn();
    fflush(NULL);
    _exit(atomic_load(&t_failures) ? 1 : 0);
  }
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) DIE("waitpid: %s", strerror(errno));
  if (WIFSIGNALED(st)) {
    FAIL("%s: the test process was killed by signal %d (%s)", name, WTERMSIG(st),
         strsignal(WTERMSIG(st)));
    return false;
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    atomic_fetch_add(&t_failures, 1); /* the child printed its failures */
    return false;
  }
  return true;
}

int main(int argc, char **argv) {
  bool fork_groups = true;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) {
      quick = true;
      t_sparse = true;
    } else if (!strcmp(argv[i], "--no-fork"))
      fork_groups = false;
    else
      DIE("unknown argument %s (use --quick, --no-fork)", argv[i]);
  }
  setvbuf(stdout, NULL, _IONBF, 0);
  signal(SIGABRT, on_abort);
  const char *name = "test_api(" T_API "names)";
  /* Before anything else fills the heaps. */
  t_fresh_thread_16();
  struct {
    const char *name;
    void (*fn)(void);
  } tests[] = {
      {"malloc(0) and NULL", t_zero_and_null},
      {"size walk", t_walk_sizes},
      {"size classes", t_classes},
      {"no overlap", t_no_overlap},
      {"aligned allocation", t_aligned},
      {"valloc/pvalloc", t_page_alloc},
      {"calloc zeroing", t_calloc},
      {"realloc contents", t_realloc},
      {"ENOMEM", t_overflow},
      {"EINVAL", t_bad_alignment},
      {"sized free and stats", t_sized_and_stats},
      {"class statistics", t_class_stats},
#ifndef USE_RILL_API
      {"glibc introspection", t_glibc_info},
      {"mallopt", t_mallopt},
#endif
  };
  for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
    bool ok = run_group(tests[i].name, tests[i].fn, fork_groups);
    printf("%-24s %s\n", tests[i].name, ok ? "ok" : "FAILED");
  }
  return t_finish(name);
}
