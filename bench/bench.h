/* bench.h - helpers shared by the rill benchmark programs: option parsing,
 * a small fast PRNG, timing, peak-live-bytes tracking and the RESULT line.
 * Header-only (static functions) so that every benchmark stays one .c file. */
#ifndef RILL_BENCH_H
#define RILL_BENCH_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Upper bound on worker threads; per-thread state lives in static arrays so
 * that the harness itself does not allocate (or falsely share) per thread. */
#define BENCH_MAX_THREADS 256
#define BENCH_CACHE_LINE  64

/* ---- errors ---------------------------------------------------------- */

static inline void bench_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static inline void bench_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

/* malloc that treats failure as fatal: a benchmark cannot continue without
 * its memory, and a silent NULL would turn into undefined behaviour. */
static inline void *bench_xmalloc(size_t size) {
  void *p = malloc(size);
  if (p == NULL) {
    fprintf(stderr, "error: out of memory allocating %zu bytes\n", size);
    abort();
  }
  return p;
}

static inline void bench_spawn(pthread_t *tid, void *(*fn)(void *), void *arg) {
  int rc = pthread_create(tid, NULL, fn, arg);
  if (rc != 0) bench_die("pthread_create: %s", strerror(rc));
}

static inline void bench_join(pthread_t tid) {
  int rc = pthread_join(tid, NULL);
  if (rc != 0) bench_die("pthread_join: %s", strerror(rc));
}

/* ---- option parsing -------------------------------------------------- */

/* Parses a non-negative integer. Accepts a binary suffix K, M or G
 * (x1024^n), or a decimal exponent such as 1e7. */
static inline uint64_t bench_parse_u64(const char *s, char opt) {
  if (s == NULL || *s == '\0' || *s == '-') bench_die("option -%c: expected a number", opt);
  errno = 0;
  char *end = NULL;
  uint64_t v = strtoull(s, &end, 10);
  if (errno != 0) bench_die("option -%c: '%s' is out of range", opt, s);
  if (*end == 'e' || *end == 'E') {
    char *end2 = NULL;
    unsigned long e = strtoul(end + 1, &end2, 10);
    if (end2 == end + 1 || e > 19) bench_die("option -%c: bad exponent in '%s'", opt, s);
    for (unsigned long i = 0; i < e; i++) {
      if (v > UINT64_MAX / 10) bench_die("option -%c: '%s' is out of range", opt, s);
      v *= 10;
    }
    end = end2;
  } else if (*end == 'K' || *end == 'M' || *end == 'G') {
    unsigned shift = *end == 'K' ? 10 : *end == 'M' ? 20 : 30;
    if (v > (UINT64_MAX >> shift)) bench_die("option -%c: '%s' is out of range", opt, s);
    v <<= shift;
    end++;
  }
  if (end == s || *end != '\0') bench_die("option -%c: '%s' is not a number", opt, s);
  return v;
}

static inline double bench_parse_double(const char *s, char opt) {
  errno = 0;
  char *end = NULL;
  double v = strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !(v >= 0.0) || isinf(v))
    bench_die("option -%c: '%s' is not a non-negative number", opt, s);
  return v;
}

static inline unsigned bench_parse_threads(const char *s, char opt) {
  uint64_t v = bench_parse_u64(s, opt);
  if (v < 1 || v > BENCH_MAX_THREADS)
    bench_die("option -%c: thread count must be 1..%d", opt, BENCH_MAX_THREADS);
  return (unsigned)v;
}

/* ---- time ------------------------------------------------------------ */

static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The time span of a parallel phase: every worker calls bench_span_begin right
 * after the start barrier and bench_span_end when it is done; the span runs
 * from the earliest begin to the latest end. Timing in the main thread instead
 * goes wrong when the main thread is descheduled just after the barrier. */
struct bench_span {
  _Atomic uint64_t begin_ns, end_ns;
};
#define BENCH_SPAN_INIT                                                                            \
  { UINT64_MAX, 0 }

static inline uint64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void bench_span_begin(struct bench_span *s) {
  uint64_t t = bench_now_ns();
  uint64_t cur = atomic_load_explicit(&s->begin_ns, memory_order_relaxed);
  while (t < cur && !atomic_compare_exchange_weak_explicit(
                        &s->begin_ns, &cur, t, memory_order_relaxed, memory_order_relaxed)) {
  }
}

static inline void bench_span_end(struct bench_span *s) {
  uint64_t t = bench_now_ns();
  uint64_t cur = atomic_load_explicit(&s->end_ns, memory_order_relaxed);
  while (t > cur && !atomic_compare_exchange_weak_explicit(
                        &s->end_ns, &cur, t, memory_order_relaxed, memory_order_relaxed)) {
  }
}

/* Seconds from the first begin to the last end (read after joining). */
static inline double bench_span_seconds(struct bench_span *s) {
  uint64_t b = atomic_load_explicit(&s->begin_ns, memory_order_relaxed);
  uint64_t e = atomic_load_explicit(&s->end_ns, memory_order_relaxed);
  return e > b ? (double)(e - b) * 1e-9 : 0.0;
}

static inline void bench_sleep(double seconds) {
  if (seconds <= 0) return;
  struct timespec ts;
  ts.tv_sec = (time_t)seconds;
  ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ---- PRNG: splitmix64 (one add, three xor-shift-multiplies) ---------- */

struct bench_rng {
  uint64_t state;
};

static inline void bench_rng_seed(struct bench_rng *r, uint64_t seed, uint64_t stream) {
  r->state = seed ^ (stream * 0xd1b54a32d192ed03u) ^ 0x5851f42d4c957f2du;
}

static inline uint64_t bench_rng_next(struct bench_rng *r) {
  uint64_t z = (r->state += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

/* Uniform in [0, n) for n <= 2^32, by multiply-shift (no modulo bias worth
 * mentioning at these ranges, and no division). */
static inline uint32_t bench_rng_below(struct bench_rng *r, uint32_t n) {
  return (uint32_t)(((bench_rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

/* Uniform in [lo, hi], inclusive. */
static inline size_t bench_rng_range(struct bench_rng *r, size_t lo, size_t hi) {
  if (hi <= lo) return lo;
  uint64_t span = (uint64_t)(hi - lo) + 1;
  if (span > UINT32_MAX) return lo + (size_t)(bench_rng_next(r) % span);
  return lo + bench_rng_below(r, (uint32_t)span);
}

/* ---- peak live bytes --------------------------------------------------
 * Two ways to track the peak of the bytes a benchmark holds:
 *
 * bench_live_shared(delta) updates one shared counter and its maximum at once.
 * It is exact but costs two atomic operations on a shared cache line, so use
 * it at batch granularity (a round, a block of objects), not per operation.
 *
 * bench_live_add (per thread, for per-operation accounting): each thread keeps
 * its exact live bytes and its own peak, and bench_live_done adds that peak to
 * a global sum when the thread ends. This costs no shared-memory traffic; with
 * one thread it is exact, with more it slightly over-estimates (threads rarely
 * peak at the same moment), which is close for the steady-state benchmarks that
 * use it. The printed peak is the larger of the two. */

static _Atomic int64_t bench_live_now;  /* shared counter */
static _Atomic int64_t bench_live_peak; /* its maximum, or a structural peak */
static _Atomic int64_t bench_live_sum;  /* sum of per-thread peaks */

static inline void bench_atomic_max(_Atomic int64_t *target, int64_t v) {
  int64_t cur = atomic_load_explicit(target, memory_order_relaxed);
  while (v > cur && !atomic_compare_exchange_weak_explicit(target, &cur, v, memory_order_relaxed,
                                                           memory_order_relaxed)) {
  }
}

static inline void bench_live_shared(int64_t delta) {
  int64_t now = atomic_fetch_add_explicit(&bench_live_now, delta, memory_order_relaxed) + delta;
  if (delta > 0) bench_atomic_max(&bench_live_peak, now);
}

struct bench_live {
  int64_t now, peak;
};

static inline void bench_live_add(struct bench_live *l, int64_t delta) {
  l->now += delta;
  if (l->now > l->peak) l->peak = l->now;
}

/* Call once when the thread is done. */
static inline void bench_live_done(struct bench_live *l) {
  atomic_fetch_add_explicit(&bench_live_sum, l->peak, memory_order_relaxed);
}

/* Records a live-byte count known from the program's structure. */
static inline void bench_live_note_peak(int64_t bytes) {
  bench_atomic_max(&bench_live_peak, bytes);
}

static inline int64_t bench_live_peak_bytes(void) {
  int64_t a = atomic_load_explicit(&bench_live_sum, memory_order_relaxed);
  int64_t b = atomic_load_explicit(&bench_live_peak, memory_order_relaxed);
  return a > b ? a : b;
}

/* ---- checksum sink ----------------------------------------------------
 * Benchmarks read back bytes they wrote into their blocks and fold them into
 * this value, which is printed; that keeps the compiler from discarding
 * allocations and proves the memory was really usable. */

static _Atomic uint64_t bench_check;

static inline void bench_check_add(uint64_t v) {
  atomic_fetch_add_explicit(&bench_check, v, memory_order_relaxed);
}

/* ---- barrier ------------------------------------------------------- */

static inline void bench_barrier_init(pthread_barrier_t *b, unsigned count) {
  int rc = pthread_barrier_init(b, NULL, count);
  if (rc != 0) bench_die("pthread_barrier_init: %s", strerror(rc));
}

/* Worker i's share of `total` among n: the remainder goes to the first ones. */
static inline uint64_t bench_share(uint64_t total, unsigned n, unsigned i) {
  return total / n + (i < total % n ? 1 : 0);
}

/* Runs fn on n workers, the elements of `workers` (each `size` bytes), which
 * wait on `start` (made here for n + 1) and time themselves into `span`
 * (bench_span_begin/end); returns the span's seconds once all are joined. */
static inline double bench_run_workers(unsigned n, void *(*fn)(void *), void *workers, size_t size,
                                       pthread_barrier_t *start, struct bench_span *span) {
  pthread_t tid[BENCH_MAX_THREADS];
  bench_barrier_init(start, n + 1);
  for (unsigned i = 0; i < n; i++) bench_spawn(&tid[i], fn, (char *)workers + i * size);
  pthread_barrier_wait(start);
  for (unsigned i = 0; i < n; i++) bench_join(tid[i]);
  pthread_barrier_destroy(start);
  return bench_span_seconds(span);
}

/* ---- the RESULT line ---------------------------------------------------
 * One line, space-separated key=value pairs, no spaces inside values:
 *   RESULT benchmark=NAME threads=T metric=M value=V unit=U [key=value...]
 * Call bench_result_begin, then bench_kv_* for extra fields, then
 * bench_result_end. */

static inline void bench_result_begin(const char *name, unsigned threads, const char *metric,
                                      double value, const char *unit) {
  printf("RESULT benchmark=%s threads=%u metric=%s value=%.9g unit=%s", name, threads, metric,
         value, unit);
}

static inline void bench_kv_u64(const char *key, uint64_t v) {
  printf(" %s=%" PRIu64, key, v);
}
static inline void bench_kv_dbl(const char *key, double v) {
  printf(" %s=%.9g", key, v);
}
static inline void bench_kv_str(const char *key, const char *v) {
  printf(" %s=%s", key, v);
}

/* Resident set size now, from /proc/self/statm, without stdio (which may
 * allocate): benchmarks read it where no allocator call may run. */
static inline long bench_rss_kib(void) {
  char buf[128];
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  char *s = strchr(buf, ' ');
  return s ? strtol(s + 1, NULL, 10) * (sysconf(_SC_PAGESIZE) / 1024) : -1;
}

/* A field of /proc/self/status in KiB (key with its colon: "VmPTE:"), or -1. */
static inline long bench_status_kib(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL) return -1;
  char line[256];
  size_t n = strlen(key);
  long kib = -1;
  while (fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, key, n) == 0) {
      kib = strtol(line + n, NULL, 10);
      break;
    }
  }
  fclose(f);
  return kib;
}

/* Peak RSS of this process image (VmHWM, KiB), or -1. Unlike ru_maxrss it
 * does not include the parent's RSS from before the exec. */
static inline long bench_vm_hwm_kib(void) {
  return bench_status_kib("VmHWM:");
}

/* The process's private writable mappings, KiB: what a kernel with strict
 * overcommit (vm.overcommit_memory=2) charges it, touched or not. With
 * `count`, the number of mappings instead. */
static inline long bench_maps_kib(bool count) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) bench_die("cannot open /proc/self/maps");
  char line[512];
  unsigned long long sum = 0, n = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long long lo, hi;
    char perm[8];
    n++;
    if (sscanf(line, "%llx-%llx %7s", &lo, &hi, perm) == 3 && perm[1] == 'w' && perm[3] == 'p')
      sum += hi - lo;
  }
  fclose(f);
  return (long)(count ? n : sum >> 10);
}

/* The system's committed memory (Committed_AS in /proc/meminfo), KiB. */
static inline long bench_committed_kib(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) bench_die("cannot open /proc/meminfo");
  char line[256];
  long v = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "Committed_AS: %ld", &v) == 1) break;
  fclose(f);
  return v;
}

static inline void bench_result_end(void) {
  printf(" live_peak_bytes=%" PRId64 " vm_hwm_kib=%ld check=%" PRIu64 "\n", bench_live_peak_bytes(),
         bench_vm_hwm_kib(), atomic_load_explicit(&bench_check, memory_order_relaxed));
  fflush(stdout);
}

#endif /* RILL_BENCH_H */
