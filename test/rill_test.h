/* rill_test.h - helpers shared by the C tests: which allocator entry points a test calls
 * (rill_ API or the standard names), byte patterns that detect any corruption of a block,
 * and failure reporting that names the size and address involved. */
#ifndef RILL_TEST_H
#define RILL_TEST_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rill.h"

/* Tests compiled with USE_RILL_API call rill_* directly; otherwise they call the standard
 * names, which the rill library overrides when linked in or preloaded. */
#ifdef USE_RILL_API
#define T_API                "rill_"
#define T_malloc             rill_malloc
#define T_free               rill_free
#define T_calloc             rill_calloc
#define T_realloc            rill_realloc
#define T_reallocarray       rill_reallocarray
#define T_posix_memalign     rill_posix_memalign
#define T_aligned_alloc      rill_aligned_alloc
#define T_memalign           rill_memalign
#define T_valloc             rill_valloc
#define T_pvalloc            rill_pvalloc
#define T_usable             rill_malloc_usable_size
#define T_free_sized         rill_free_sized
#define T_free_aligned_sized rill_free_aligned_sized
#define T_trim()             ((void)rill_collect(true))
#else
#define T_API                ""
#define T_malloc             malloc
#define T_free               free
#define T_calloc             calloc
#define T_realloc            realloc
#define T_reallocarray       reallocarray
#define T_posix_memalign     posix_memalign
#define T_aligned_alloc      aligned_alloc
#define T_memalign           memalign
#define T_valloc             valloc
#define T_pvalloc            pvalloc
#define T_usable             malloc_usable_size
#define T_free_sized         free_sized
#define T_free_aligned_sized free_aligned_sized
#define T_trim()             ((void)malloc_trim(0))
/* C23 / glibc 2.39 names; older C libraries do not declare them, rill defines them. */
void free_sized(void *ptr, size_t size);
void free_aligned_sized(void *ptr, size_t alignment, size_t size);
#endif

/* ---- failure reporting ------------------------------------------------------------- */

static atomic_long t_failures;

/* Records a failure and keeps going (the first 60 are printed). */
#define FAIL(...) t_fail(__FILE__, __LINE__, __VA_ARGS__)
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) FAIL(__VA_ARGS__);                                                                \
  } while (0)
/* Stops the whole program at once: for states where going on makes no sense. */
#define DIE(...) t_die(__FILE__, __LINE__, __VA_ARGS__)

__attribute__((format(printf, 3, 4))) static inline void t_fail(const char *file, int line,
                                                                const char *fmt, ...) {
  long n = atomic_fetch_add(&t_failures, 1);
  if (n >= 60) {
    if (n == 60) fprintf(stderr, "FAIL: (further failures not printed)\n");
    return;
  }
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "FAIL %s:%d: %s\n", file, line, buf);
}

__attribute__((format(printf, 3, 4), noreturn)) static inline void t_die(const char *file, int line,
                                                                         const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "FATAL %s:%d: %s\n", file, line, buf);
  fflush(stderr);
  _exit(1);
}

/* Prints the verdict of one test program and returns its exit status. */
static inline int t_finish(const char *name) {
  long n = atomic_load(&t_failures);
  if (n) {
    fprintf(stderr, "%s: %ld check(s) FAILED\n", name, n);
    return 1;
  }
  printf("%s: all checks passed\n", name);
  return 0;
}

/* ---- threads ----------------------------------------------------------------------- */

/* The whole of /proc/self/smaps, NUL-terminated, in a static buffer (no malloc, so reading
 * it does not change the heap being looked at). */
static inline char *t_read_smaps(void) {
  static char buf[8 << 20];
  int fd = open("/proc/self/smaps", O_RDONLY);
  if (fd < 0) DIE("open /proc/self/smaps: %s", strerror(errno));
  size_t len = 0;
  ssize_t got;
  while (len < sizeof buf - 1 && (got = read(fd, buf + len, sizeof buf - 1 - len)) > 0)
    len += (size_t)got;
  close(fd);
  buf[len] = 0;
  return buf;
}
/* Threads named rill-purger, and whether each blocks every signal. */
static inline int t_purger_threads(bool *all_blocked) {
  int count = 0;
  *all_blocked = true;
  DIR *d = opendir("/proc/self/task");
  if (!d) DIE("cannot list /proc/self/task");
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[300], line[256];
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    bool is = fgets(line, sizeof line, f) && strncmp(line, "rill-purger", 11) == 0;
    fclose(f);
    if (!is) continue;
    count++;
    snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
    f = fopen(path, "r");
    if (!f) continue;
    while (fgets(line, sizeof line, f))
      if (strncmp(line, "SigBlk:", 7) == 0) {
        /* signals a program might direct at itself all stay blocked here */
        unsigned long long m = strtoull(line + 7, NULL, 16);
        const int sigs[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGUSR1, SIGUSR2,     SIGPIPE,
                            SIGALRM, SIGTERM, SIGCHLD, SIGPROF, SIGRTMIN + 1};
        for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
          if (!(m & (1ull << (sigs[i] - 1)))) *all_blocked = false;
      }
    fclose(f);
  }
  closedir(d);
  return count;
}

/* ---- patterns ---------------------------------------------------------------------- */

/* Byte i of a block filled with seed s is byte (i % 8) of pat_word(s, i / 8), so a prefix
 * of a block keeps its pattern when the block is resized (realloc). */
static inline uint64_t pat_word(uint64_t seed, size_t k) {
  uint64_t x = seed ^ ((uint64_t)k * 0x9E3779B97F4A7C15ull);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return x;
}

/* A seed that depends on where a block is and how big it is. */
static inline uint64_t pat_seed(const void *p, size_t n) {
  return ((uint64_t)(uintptr_t)p * 0xD6E8FEB86659FD93ull) ^ ((uint64_t)n << 17) ^ 0x5bd1e995u;
}

/* With t_sparse set, blocks are filled and checked sparsely past their first 4 KiB: one word
 * in 64 (every 512 bytes), the same words whatever the block's size, so a block's prefix
 * kept by realloc is checked at the words that were filled. For runs where each byte costs,
 * such as test_api --quick under valgrind; lost or unzeroed contents come in whole pages,
 * which a word every 512 bytes still catches. */
static bool t_sparse;

/* Whether word k (bytes 8k..8k+7) of a block is filled and checked. */
static inline bool pat_sampled(size_t k) {
  return !t_sparse || k < 512 || k % 64 == 0;
}

static inline void pat_fill(void *p, size_t n, uint64_t seed) {
  unsigned char *b = (unsigned char *)p;
  size_t k = 0;
  for (; (k + 1) * 8 <= n; k++) {
    if (!pat_sampled(k)) continue;
    uint64_t w = pat_word(seed, k);
    memcpy(b + k * 8, &w, 8);
  }
  if (k * 8 < n && pat_sampled(k)) {
    uint64_t w = pat_word(seed, k);
    memcpy(b + k * 8, &w, n - k * 8);
  }
}

/* Sets the n bytes at p to c, or their sampled words (t_sparse). */
static inline void t_dirty(void *p, size_t n, int c) {
  if (!t_sparse) {
    memset(p, c, n);
    return;
  }
  unsigned char *b = (unsigned char *)p;
  for (size_t k = 0; k * 8 < n; k++)
    if (pat_sampled(k)) memset(b + k * 8, c, n - k * 8 < 8 ? n - k * 8 : 8);
}

/* Returns SIZE_MAX when the n bytes at p carry the pattern, else the first bad offset. */
static inline size_t pat_find_bad(const void *p, size_t n, uint64_t seed) {
  const unsigned char *b = (const unsigned char *)p;
  size_t k = 0;
  for (; (k + 1) * 8 <= n; k++) {
    if (!pat_sampled(k)) continue;
    uint64_t w = pat_word(seed, k), v;
    memcpy(&v, b + k * 8, 8);
    if (v != w) {
      for (size_t i = 0; i < 8; i++)
        if (((const unsigned char *)&v)[i] != ((const unsigned char *)&w)[i]) return k * 8 + i;
    }
  }
  if (k * 8 < n && pat_sampled(k)) {
    uint64_t w = pat_word(seed, k);
    for (size_t i = 0; k * 8 + i < n; i++)
      if (b[k * 8 + i] != ((const unsigned char *)&w)[i]) return k * 8 + i;
  }
  return SIZE_MAX;
}

/* Checks a pattern, reporting block, size and offset on a mismatch; true when intact. */
#define PAT_CHECK(p, n, seed, ...) t_pat_check(__FILE__, __LINE__, (p), (n), (seed), __VA_ARGS__)
__attribute__((format(printf, 6, 7))) static inline bool t_pat_check(const char *file, int line,
                                                                     const void *p, size_t n,
                                                                     uint64_t seed, const char *fmt,
                                                                     ...) {
  size_t bad = pat_find_bad(p, n, seed);
  if (bad == SIZE_MAX) return true;
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  t_fail(file, line, "%s: block %p size %zu corrupted at offset %zu (byte 0x%02x)", what, p, n, bad,
         ((const unsigned char *)p)[bad]);
  return false;
}

/* Returns the first non-zero offset in n bytes (in their sampled words, t_sparse), or
 * SIZE_MAX. */
static inline size_t first_nonzero(const void *p, size_t n) {
  const unsigned char *b = (const unsigned char *)p;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if (!pat_sampled(i / 8)) continue;
    uint64_t v;
    memcpy(&v, b + i, 8);
    if (v) break;
  }
  if (!pat_sampled(i / 8)) return SIZE_MAX;
  for (; i < n; i++)
    if (b[i]) return i;
  return SIZE_MAX;
}

/* ---- misc -------------------------------------------------------------------------- */

/* Small, fast, deterministic random numbers (xorshift64*). */
static inline uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/* Keeps a pointer observable so the compiler cannot drop an allocation. */
static void *volatile t_sink;
static inline void *keep(void *p) {
  t_sink = p;
  return p;
}

static inline size_t page_size(void) {
  return (size_t)sysconf(_SC_PAGESIZE);
}

/* Resident set size of this process in bytes, from /proc/self/statm. */
static inline size_t rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long size = 0, res = 0;
  if (!f) DIE("cannot open /proc/self/statm");
  if (fscanf(f, "%lu %lu", &size, &res) != 2) DIE("cannot parse /proc/self/statm");
  fclose(f);
  return (size_t)res * page_size();
}

/* Resident bytes a -DRILL_DEBUG build adds for good once `bytes` of blocks have been used:
 * its shadow record is about 2.8 KiB per 16 KiB slot (src/debug.h). CMake sets
 * RILL_TEST_DEBUG_SHADOW in such builds; elsewhere this is 0. */
static inline size_t debug_shadow_bytes(size_t bytes) {
  return getenv("RILL_TEST_DEBUG_SHADOW") ? bytes / 16384 * 2900 : 0;
}

/* A counter of rill_stats_print's line that struct rill_stats has no room for (its size is
 * part of the ABI): " lent=", " young=". */
static inline unsigned long long stats_field(const char *name) {
  int fd[2];
  char line[1024];
  if (pipe(fd) != 0) DIE("pipe failed");
  rill_stats_print(fd[1]);
  close(fd[1]);
  ssize_t n = read(fd[0], line, sizeof line - 1);
  close(fd[0]);
  line[n > 0 ? n : 0] = 0;
  const char *at = strstr(line, name);
  if (!at) DIE("rill_stats_print wrote no%s: %s", name, line);
  return strtoull(at + strlen(name), NULL, 10);
}

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)

/* Bytes of the span that serves blocks of `sz`, for sizes that are exact classes up to 4 KiB
 * on 4 KiB-page kernels: span.c's rule (the smallest span of 64 blocks for classes up to
 * 1 KiB, 16 KiB at least; 64 KiB for bigger ones up to 2 KiB, 128 KiB for 2-4 KiB). Every span
 * starts at a multiple of 16 KiB, so only one-slot spans are aligned to their own size. Tests that
 * rely on it check their premise (a fresh thread's blocks are contiguous within a span). */
#define T_SLOT_BYTES 16384
#define T_SPAN_BYTES(sz)                                                                           \
  ((sz) <= 64     ? 2 * T_SLOT_BYTES                                                               \
   : (sz) <= 256  ? T_SLOT_BYTES                                                                   \
   : (sz) <= 512  ? 2 * T_SLOT_BYTES                                                               \
   : (sz) <= 2048 ? 4 * T_SLOT_BYTES                                                               \
                  : 8 * T_SLOT_BYTES)
/* Bytes before a span's first block (span.c, class_color): 128 for the classes of 256 B to
 * 1 KiB whose size is a multiple of 256, else none; and the blocks a span of `sz` holds. */
#define T_COLOR(sz)    ((sz) >= 256 && (sz) <= 1024 && (sz) % 256 == 0 ? 128 : 0)
#define T_SPAN_CAP(sz) ((T_SPAN_BYTES(sz) - T_COLOR(sz)) / (sz))

#endif
