/* soak: a worker-pool server under steady load for a long time; reports throughput, RSS drift
 * over the run and sampled malloc/free latency percentiles (stability and predictable speed).
 * Follows LKmalloc (ISMM'98) sec. 3-4 (requests, requirements 7-8) and sec. 7 (bleeding). */
#include "bench.h"

#include <dlfcn.h>

#include "rill.h" /* struct rill_stats only: the library is not linked */

/* Each worker repeatedly serves a request: about -a allocations, 80% of them 8..40 B and the
 * rest 41..1000 B, held in a working set of at most -w blocks from which a random block is
 * retired after about every second allocation; at the end of the request the rest is retired.
 * A retired block is usually freed; -b per mille "bleed" to a random other worker's mailbox
 * (that worker frees them at the start of its next request: remote frees), and -k per mille
 * replace a random entry of the worker's cache of -c blocks, which lives across requests and
 * is filled before the clock starts, so the live set is steady from the first request.
 *
 * The main thread samples RSS (/proc/self/statm) and the live bytes every -i ms. Drift is the
 * mean RSS over the last tenth of the run against the mean over the tenth after the warm-up
 * (the first tenth). One call in about 64 (a random gap of 1..127 calls) to malloc and to free
 * is timed with clock_gettime(CLOCK_MONOTONIC); samples go into per-thread arrays allocated and
 * touched before the run (reservoir sampling once they are full), so measuring allocates
 * nothing and does not grow RSS. */

struct block {
  char *p;
  uint32_t size;
};

/* A worker's mailbox: senders append under the mutex; the owner swaps the array with its
 * spare one under the mutex and frees the blocks outside it. */
struct mailbox {
  _Alignas(BENCH_CACHE_LINE) pthread_mutex_t lock;
  struct block *in;
  size_t n;
  _Atomic int64_t bytes; /* read by the sampler */
};

/* Latency samples of one operation in one thread. */
struct lat {
  uint32_t *s;   /* reservoir of opt_lat_cap samples, ns */
  uint64_t seen; /* calls timed */
  uint64_t max;  /* exact maximum over the timed calls */
  uint32_t gap;  /* calls until the next timed one */
};

struct worker {
  _Alignas(BENCH_CACHE_LINE) unsigned id;
  struct bench_rng rng;  /* the workload */
  struct bench_rng srng; /* sampling decisions, so they do not perturb the workload */
  struct block *ws, *cache, *spare;
  size_t nws, ncache;
  struct lat lm, lf;
  int64_t live;
  uint64_t ops, requests, check, bled, kept, received, overflow;
  _Atomic int64_t live_pub; /* live bytes this worker holds, read by the sampler */
};

struct sample {
  uint32_t ms, rss_kib, live_kib;
};

static struct worker workers[BENCH_MAX_THREADS];
static struct mailbox mailboxes[BENCH_MAX_THREADS];
static unsigned nthreads = 1;
static pthread_barrier_t start_barrier;
static struct bench_span span = BENCH_SPAN_INIT;
static _Atomic int stop;

static uint64_t opt_allocs = 1000, opt_small_pct = 80, opt_min = 8, opt_small_max = 40,
                opt_max = 1000, opt_bleed = 25, opt_keep = 10, opt_cache = 16384, opt_ws = 256,
                opt_interval = 100, opt_lat_cap = 65536, opt_mbox = 16384, opt_seed = 1,
                opt_rill_every = 0;

/* ---- the allocator's own view (rill only) ------------------------------ */

/* With -R, and when the process runs on rill, its footprint statistics are printed every -R
 * seconds as "RILL_STATS ms=..." lines, to tell what an RSS step is made of. rill_stats_get
 * is looked up at run time, so the benchmark still runs on every allocator; only the
 * struct's declaration comes from rill's header. */
static void print_rill_stats(void (*get)(struct rill_stats *), uint64_t ms, long rss) {
  struct rill_stats v;
  get(&v);
  printf("RILL_STATS ms=%" PRIu64 " rss_kib=%ld in_use_kib=%" PRIu64 " committed_kib=%" PRIu64
         " purged_mib=%" PRIu64 " hot=%" PRIu64 " floating=%" PRIu64 " reusable=%" PRIu64
         " free=%" PRIu64 "\n",
         ms, rss, v.bytes_in_use / 1024, v.bytes_committed / 1024, v.bytes_purged >> 20,
         v.spans_hot, v.spans_floating, v.spans_reusable, v.spans_free);
  fflush(stdout);
}

/* ---- timing ------------------------------------------------------------ */

static inline uint64_t next_gap(struct worker *w) {
  return 1 + bench_rng_below(&w->srng, 127); /* mean 64 */
}

static void lat_add(struct worker *w, struct lat *l, uint64_t ns) {
  if (ns > l->max) l->max = ns;
  uint32_t v = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
  uint64_t k = l->seen++;
  if (k < opt_lat_cap) {
    l->s[k] = v;
  } else { /* reservoir: keep each of the k+1 samples with equal probability */
    uint64_t j = bench_rng_next(&w->srng) % (k + 1);
    if (j < opt_lat_cap) l->s[j] = v;
  }
}

static inline char *w_malloc(struct worker *w, size_t size) {
  void *p;
  if (--w->lm.gap != 0) {
    p = malloc(size);
  } else {
    w->lm.gap = (uint32_t)next_gap(w);
    uint64_t t0 = bench_now_ns();
    p = malloc(size);
    uint64_t t1 = bench_now_ns();
    lat_add(w, &w->lm, t1 - t0);
  }
  if (p == NULL) bench_die("out of memory allocating %zu bytes", size);
  w->ops++;
  w->live += (int64_t)size;
  return p;
}

static inline void w_free(struct worker *w, struct block b) {
  w->check += (unsigned char)b.p[b.size - 1];
  if (--w->lf.gap != 0) {
    free(b.p);
  } else {
    w->lf.gap = (uint32_t)next_gap(w);
    uint64_t t0 = bench_now_ns();
    free(b.p);
    uint64_t t1 = bench_now_ns();
    lat_add(w, &w->lf, t1 - t0);
  }
  w->ops++;
  w->live -= (int64_t)b.size;
}

/* ---- the workload ------------------------------------------------------ */

static inline struct block new_block(struct worker *w) {
  size_t size = bench_rng_below(&w->rng, 100) < opt_small_pct
                    ? bench_rng_range(&w->rng, (size_t)opt_min, (size_t)opt_small_max)
                    : bench_rng_range(&w->rng, (size_t)opt_small_max + 1, (size_t)opt_max);
  char *p = w_malloc(w, size);
  p[0] = (char)size;
  p[size - 1] = (char)w->ops;
  return (struct block){p, (uint32_t)size};
}

/* Hands b to another worker (to itself when it is alone). */
static void bleed(struct worker *w, struct block b) {
  unsigned to = w->id;
  if (nthreads > 1) to = (w->id + 1 + bench_rng_below(&w->rng, nthreads - 1)) % nthreads;
  struct mailbox *m = &mailboxes[to];
  pthread_mutex_lock(&m->lock);
  int full = m->n == opt_mbox;
  if (!full) {
    m->in[m->n++] = b;
    atomic_fetch_add_explicit(&m->bytes, b.size, memory_order_relaxed);
  }
  pthread_mutex_unlock(&m->lock);
  if (full) {
    w->overflow++;
    w_free(w, b);
    return;
  }
  w->bled++;
  w->live -= (int64_t)b.size; /* the mailbox counts it now */
}

/* Frees what other workers handed to this one. */
static void drain_mailbox(struct worker *w) {
  struct mailbox *m = &mailboxes[w->id];
  pthread_mutex_lock(&m->lock);
  size_t n = m->n;
  struct block *got = m->in;
  int64_t bytes = 0;
  if (n) {
    m->in = w->spare;
    m->n = 0;
    w->spare = got;
  }
  pthread_mutex_unlock(&m->lock);
  for (size_t i = 0; i < n; i++) {
    bytes += got[i].size;
    w->live += got[i].size; /* w_free subtracts it again */
    w_free(w, got[i]);
  }
  if (n) atomic_fetch_sub_explicit(&m->bytes, bytes, memory_order_relaxed);
  w->received += n;
}

/* A block leaves the request's working set: freed, bled or kept. */
static void retire(struct worker *w, struct block b) {
  uint32_t r = bench_rng_below(&w->rng, 1000);
  if (r < opt_bleed) {
    bleed(w, b);
  } else if (r < opt_bleed + opt_keep && opt_cache > 0) {
    w->kept++;
    size_t i = bench_rng_below(&w->rng, (uint32_t)w->ncache);
    struct block old = w->cache[i];
    w->cache[i] = b;
    w_free(w, old);
  } else {
    w_free(w, b);
  }
}

static void serve_request(struct worker *w) {
  drain_mailbox(w);
  for (uint64_t i = 0; i < opt_allocs; i++) {
    w->ws[w->nws++] = new_block(w);
    if (w->nws == opt_ws || bench_rng_below(&w->rng, 2) == 0) {
      size_t j = bench_rng_below(&w->rng, (uint32_t)w->nws);
      struct block b = w->ws[j];
      w->ws[j] = w->ws[--w->nws];
      retire(w, b);
    }
  }
  while (w->nws > 0) retire(w, w->ws[--w->nws]);
  w->requests++;
  atomic_store_explicit(&w->live_pub, w->live, memory_order_relaxed);
}

static void *run(void *arg) {
  struct worker *w = arg;
  /* the live set that survives across requests, before the clock starts */
  for (size_t i = 0; i < opt_cache; i++) w->cache[i] = new_block(w);
  w->ncache = opt_cache;
  w->ops = 0;
  atomic_store_explicit(&w->live_pub, w->live, memory_order_relaxed);
  pthread_barrier_wait(&start_barrier);
  bench_span_begin(&span);
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) serve_request(w);
  bench_span_end(&span);
  /* clean-up, not counted */
  uint64_t ops = w->ops;
  drain_mailbox(w);
  for (size_t i = 0; i < w->ncache; i++) w_free(w, w->cache[i]);
  w->ncache = 0;
  w->ops = ops;
  return NULL;
}

/* ---- sampling RSS ------------------------------------------------------- */

static int64_t live_now(void) {
  int64_t sum = 0;
  for (unsigned i = 0; i < nthreads; i++) {
    sum += atomic_load_explicit(&workers[i].live_pub, memory_order_relaxed);
    sum += atomic_load_explicit(&mailboxes[i].bytes, memory_order_relaxed);
  }
  return sum;
}

static void sleep_until_ns(uint64_t t) {
  struct timespec ts = {(time_t)(t / 1000000000u), (long)(t % 1000000000u)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

/* Mean of field f over the samples with lo <= ms < hi (hi inclusive when last is set). */
static double window_mean(const struct sample *s, size_t n, double lo, double hi, int rss) {
  double sum = 0;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i].ms < lo || s[i].ms > hi) continue;
    sum += rss ? s[i].rss_kib : s[i].live_kib;
    k++;
  }
  return k ? sum / (double)k : NAN;
}

static void print_series(const char *tag, const struct sample *s, size_t n, int rss) {
  fputs(tag, stdout);
  for (size_t i = 0; i < n; i++)
    printf("%c%u:%u", i ? ',' : ' ', s[i].ms, rss ? s[i].rss_kib : s[i].live_kib);
  putchar('\n');
}

/* ---- percentiles -------------------------------------------------------- */
/* Computed in place, without allocating: a temporary array here would raise the peak RSS that
 * the run reports. Each thread's reservoir is sorted (heapsort; qsort may allocate), and stands
 * for all its timed calls: a sample of a thread that timed `seen` calls and kept `k` weighs
 * seen/k. The q-quantile is the smallest value v whose weighted count of samples <= v reaches
 * q of the total, found by bisection on v. */

static void sift_down(uint32_t *a, size_t root, size_t n) {
  for (;;) {
    size_t child = 2 * root + 1;
    if (child >= n) return;
    if (child + 1 < n && a[child + 1] > a[child]) child++;
    if (a[root] >= a[child]) return;
    uint32_t t = a[root];
    a[root] = a[child];
    a[child] = t;
    root = child;
  }
}

static void heap_sort(uint32_t *a, size_t n) {
  for (size_t i = n / 2; i-- > 0;) sift_down(a, i, n);
  for (size_t end = n; end-- > 1;) {
    uint32_t t = a[0];
    a[0] = a[end];
    a[end] = t;
    sift_down(a, 0, end);
  }
}

/* Number of values <= v in the sorted array a[0..n). */
static size_t count_le(const uint32_t *a, size_t n, uint32_t v) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (a[mid] <= v)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

struct pct {
  uint64_t p50, p99, p999, max, samples;
};

static size_t kept(const struct lat *l) {
  return l->seen < opt_lat_cap ? (size_t)l->seen : (size_t)opt_lat_cap;
}

static double weighted_le(int which_free, uint32_t v) {
  double c = 0;
  for (unsigned t = 0; t < nthreads; t++) {
    struct lat *l = which_free ? &workers[t].lf : &workers[t].lm;
    size_t k = kept(l);
    if (k) c += (double)count_le(l->s, k, v) * ((double)l->seen / (double)k);
  }
  return c;
}

static struct pct percentiles(int which_free) {
  struct pct r = {0, 0, 0, 0, 0};
  uint32_t top = 0;
  for (unsigned t = 0; t < nthreads; t++) {
    struct lat *l = which_free ? &workers[t].lf : &workers[t].lm;
    size_t k = kept(l);
    heap_sort(l->s, k);
    if (k && l->s[k - 1] > top) top = l->s[k - 1];
    r.samples += l->seen;
    if (l->max > r.max) r.max = l->max;
  }
  if (r.samples == 0) return r;
  const double q[3] = {0.50, 0.99, 0.999};
  uint64_t *out[3] = {&r.p50, &r.p99, &r.p999};
  for (int j = 0; j < 3; j++) {
    uint32_t lo = 0, hi = top; /* the answer is in [lo, hi] */
    while (lo < hi) {
      uint32_t mid = lo + (hi - lo) / 2;
      if (weighted_le(which_free, mid) >= q[j] * (double)r.samples)
        hi = mid;
      else
        lo = mid + 1;
    }
    *out[j] = lo;
  }
  return r;
}

/* Median cost of one clock_gettime pair, which every timed call includes. */
static uint64_t timer_overhead_ns(void) {
  uint64_t d[101];
  for (int i = 0; i < 101; i++) {
    uint64_t t0 = bench_now_ns();
    uint64_t t1 = bench_now_ns();
    d[i] = t1 - t0;
  }
  for (int i = 1; i < 101; i++) /* insertion sort, 101 values */
    for (int j = i; j > 0 && d[j - 1] > d[j]; j--) {
      uint64_t x = d[j];
      d[j] = d[j - 1];
      d[j - 1] = x;
    }
  return d[50];
}

/* ---- main --------------------------------------------------------------- */

static void usage(void) {
  fprintf(
      stderr,
      "usage: soak [-t workers] [-d seconds] [-a allocs] [-b bleed] [-k keep] [-c cache]\n"
      "            [-w working-set] [-s small%%] [-m min] [-x small-max] [-M max]\n"
      "            [-i interval-ms] [-L samples] [-q mailbox] [-S seed] [-R seconds]\n"
      "  -t  worker threads (1)            -d  run time in seconds (10)\n"
      "  -a  allocations per request (1000)\n"
      "  -b  per mille of blocks handed to another worker, who frees them (25)\n"
      "  -k  per mille of blocks kept in the worker's cache across requests (10)\n"
      "  -c  cache entries per worker, filled before the run (16384)\n"
      "  -w  most blocks a request holds at once (256)\n"
      "  -s  percent of small blocks (80); sizes: small -m..-x (8..40), else -x+1..-M (..1000)\n"
      "  -i  RSS sampling interval in ms (100)\n"
      "  -L  latency samples kept per thread and operation (65536)\n"
      "  -q  mailbox capacity in blocks (16384)\n"
      "  -R  on rill, print its footprint statistics every this many seconds (0: never)\n");
  exit(2);
}

int main(int argc, char **argv) {
  double duration = 10.0;
  int c;
  while ((c = getopt(argc, argv, "t:d:a:b:k:c:w:s:m:x:M:i:L:q:S:R:h")) != -1) {
    switch (c) {
    case 't':
      nthreads = bench_parse_threads(optarg, 't');
      break;
    case 'd':
      duration = bench_parse_double(optarg, 'd');
      break;
    case 'a':
      opt_allocs = bench_parse_u64(optarg, 'a');
      break;
    case 'b':
      opt_bleed = bench_parse_u64(optarg, 'b');
      break;
    case 'k':
      opt_keep = bench_parse_u64(optarg, 'k');
      break;
    case 'c':
      opt_cache = bench_parse_u64(optarg, 'c');
      break;
    case 'w':
      opt_ws = bench_parse_u64(optarg, 'w');
      break;
    case 's':
      opt_small_pct = bench_parse_u64(optarg, 's');
      break;
    case 'm':
      opt_min = bench_parse_u64(optarg, 'm');
      break;
    case 'x':
      opt_small_max = bench_parse_u64(optarg, 'x');
      break;
    case 'M':
      opt_max = bench_parse_u64(optarg, 'M');
      break;
    case 'i':
      opt_interval = bench_parse_u64(optarg, 'i');
      break;
    case 'L':
      opt_lat_cap = bench_parse_u64(optarg, 'L');
      break;
    case 'q':
      opt_mbox = bench_parse_u64(optarg, 'q');
      break;
    case 'S':
      opt_seed = bench_parse_u64(optarg, 'S');
      break;
    case 'R':
      opt_rill_every = bench_parse_u64(optarg, 'R');
      break;
    default:
      usage();
    }
  }
  if (optind != argc || duration <= 0 || duration > 30 * 24 * 3600.0 || opt_allocs < 1 ||
      opt_bleed + opt_keep > 1000 || opt_cache > (1u << 24) || opt_ws < 1 || opt_ws > (1u << 24) ||
      opt_small_pct > 100 || opt_min < 1 || opt_small_max < opt_min || opt_max <= opt_small_max ||
      opt_max > (1u << 30) || opt_interval < 1 || opt_interval > 60000 || opt_lat_cap < 1 ||
      opt_lat_cap > (1u << 26) || opt_mbox < 1 || opt_mbox > (1u << 26))
    usage();
  if (opt_keep > 0 && opt_cache == 0) opt_keep = 0;

  /* everything the run needs, allocated and touched now */
  for (unsigned t = 0; t < nthreads; t++) {
    struct worker *w = &workers[t];
    w->id = t;
    bench_rng_seed(&w->rng, opt_seed, t);
    bench_rng_seed(&w->srng, opt_seed ^ 0x5ca1ab1eu, t);
    w->ws = bench_xmalloc((size_t)opt_ws * sizeof *w->ws);
    w->cache = bench_xmalloc((opt_cache ? (size_t)opt_cache : 1) * sizeof *w->cache);
    w->spare = bench_xmalloc((size_t)opt_mbox * sizeof *w->spare);
    memset(w->spare, 0, (size_t)opt_mbox * sizeof *w->spare);
    w->lm.s = bench_xmalloc((size_t)opt_lat_cap * sizeof(uint32_t));
    w->lf.s = bench_xmalloc((size_t)opt_lat_cap * sizeof(uint32_t));
    memset(w->lm.s, 0, (size_t)opt_lat_cap * sizeof(uint32_t));
    memset(w->lf.s, 0, (size_t)opt_lat_cap * sizeof(uint32_t));
    w->lm.gap = (uint32_t)next_gap(w);
    w->lf.gap = (uint32_t)next_gap(w);
    struct mailbox *m = &mailboxes[t];
    int rc = pthread_mutex_init(&m->lock, NULL);
    if (rc != 0) bench_die("pthread_mutex_init: %s", strerror(rc));
    m->in = bench_xmalloc((size_t)opt_mbox * sizeof *m->in);
    memset(m->in, 0, (size_t)opt_mbox * sizeof *m->in);
  }
  size_t cap = (size_t)(duration * 1000.0 / (double)opt_interval) + 2;
  struct sample *samples = bench_xmalloc(cap * sizeof *samples);
  memset(samples, 0, cap * sizeof *samples);
  uint64_t overhead = timer_overhead_ns();

  pthread_t tid[BENCH_MAX_THREADS];
  bench_barrier_init(&start_barrier, nthreads + 1);
  for (unsigned t = 0; t < nthreads; t++) bench_spawn(&tid[t], run, &workers[t]);
  pthread_barrier_wait(&start_barrier);

  /* this thread is the sampler: one sample at 0, every interval, and one at the end */
  uint64_t t0 = bench_now_ns(), dur_ns = (uint64_t)(duration * 1e9);
  size_t ns = 0;
  int64_t live_max = 0;
  void (*rill_get)(struct rill_stats *) = NULL;
  if (opt_rill_every) *(void **)&rill_get = dlsym(RTLD_DEFAULT, "rill_stats_get");
  uint64_t rill_next = 0;
  for (uint64_t k = 0; ns < cap; k++) {
    uint64_t at = k * opt_interval * 1000000u;
    int last = at >= dur_ns;
    if (last) at = dur_ns;
    sleep_until_ns(t0 + at);
    long rss = bench_rss_kib();
    int64_t live = live_now();
    if (live > live_max) live_max = live;
    samples[ns].ms = (uint32_t)((bench_now_ns() - t0) / 1000000u);
    samples[ns].rss_kib = rss > 0 ? (uint32_t)rss : 0;
    samples[ns].live_kib = live > 0 ? (uint32_t)(live / 1024) : 0;
    if (rill_get && (last || samples[ns].ms >= rill_next)) {
      print_rill_stats(rill_get, samples[ns].ms, rss);
      rill_next = samples[ns].ms + opt_rill_every * 1000u;
    }
    ns++;
    if (last) break;
  }
  atomic_store_explicit(&stop, 1, memory_order_relaxed);
  for (unsigned t = 0; t < nthreads; t++) bench_join(tid[t]);
  double elapsed = bench_span_seconds(&span);
  pthread_barrier_destroy(&start_barrier);

  uint64_t ops = 0, requests = 0, check = 0, bled = 0, kept = 0, received = 0, overflow = 0;
  for (unsigned t = 0; t < nthreads; t++) {
    struct worker *w = &workers[t];
    ops += w->ops;
    requests += w->requests;
    check += w->check;
    bled += w->bled;
    kept += w->kept;
    received += w->received;
    overflow += w->overflow;
  }
  /* blocks still in mailboxes: freed here, not counted */
  for (unsigned t = 0; t < nthreads; t++) {
    struct mailbox *m = &mailboxes[t];
    for (size_t i = 0; i < m->n; i++) free(m->in[i].p);
  }
  bench_check_add(check);
  bench_live_note_peak(live_max);

  double D = (double)duration * 1000.0;
  double rss_warm = window_mean(samples, ns, 0.1 * D, 0.2 * D - 0.001, 1);
  double rss_end = window_mean(samples, ns, 0.9 * D, D + 1e9, 1);
  double live_warm = window_mean(samples, ns, 0.1 * D, 0.2 * D - 0.001, 0);
  double live_end = window_mean(samples, ns, 0.9 * D, D + 1e9, 0);
  double rss_drift = (rss_end - rss_warm) / rss_warm * 100.0;
  double live_drift = (live_end - live_warm) / live_warm * 100.0;
  uint32_t rss_max = 0;
  for (size_t i = 0; i < ns; i++)
    if (samples[i].rss_kib > rss_max) rss_max = samples[i].rss_kib;
  struct pct pm = percentiles(0), pf = percentiles(1);

  print_series("RSS_SAMPLES", samples, ns, 1);
  print_series("LIVE_SAMPLES", samples, ns, 0);
  printf("soak: %u workers, %.2f s: %" PRIu64 " requests (%.0f/s), %.3g malloc+free calls/s; "
         "RSS %.0f -> %.0f KiB (drift %+.2f%%), live %.0f -> %.0f KiB (%+.2f%%)\n",
         nthreads, elapsed, requests, requests / elapsed, ops / elapsed, rss_warm, rss_end,
         rss_drift, live_warm, live_end, live_drift);
  printf("soak: latency ns (p50 / p99 / p99.9 / max; clock pair %" PRIu64 " ns included): "
         "malloc %" PRIu64 " / %" PRIu64 " / %" PRIu64 " / %" PRIu64 ", free %" PRIu64 " / %" PRIu64
         " / %" PRIu64 " / %" PRIu64 "\n",
         overhead, pm.p50, pm.p99, pm.p999, pm.max, pf.p50, pf.p99, pf.p999, pf.max);

  bench_result_begin("soak", nthreads, "ops_per_s", (double)ops / elapsed, "ops/s");
  bench_kv_u64("ops", ops);
  bench_kv_dbl("elapsed_s", elapsed);
  bench_kv_u64("requests", requests);
  bench_kv_dbl("req_per_s", (double)requests / elapsed);
  bench_kv_dbl("rss_drift_pct", rss_drift);
  bench_kv_dbl("live_drift_pct", live_drift);
  bench_kv_dbl("rss_warm_kib", rss_warm);
  bench_kv_dbl("rss_end_kib", rss_end);
  bench_kv_u64("rss_max_kib", rss_max);
  bench_kv_u64("malloc_p50_ns", pm.p50);
  bench_kv_u64("malloc_p99_ns", pm.p99);
  bench_kv_u64("malloc_p999_ns", pm.p999);
  bench_kv_u64("malloc_max_ns", pm.max);
  bench_kv_u64("free_p50_ns", pf.p50);
  bench_kv_u64("free_p99_ns", pf.p99);
  bench_kv_u64("free_p999_ns", pf.p999);
  bench_kv_u64("free_max_ns", pf.max);
  bench_kv_u64("malloc_timed", pm.samples);
  bench_kv_u64("free_timed", pf.samples);
  bench_kv_u64("timer_overhead_ns", overhead);
  bench_kv_u64("bled", bled);
  bench_kv_u64("remote_freed", received);
  bench_kv_u64("kept", kept);
  bench_kv_u64("mailbox_full", overflow);
  bench_kv_u64("allocs_per_request", opt_allocs);
  bench_kv_u64("cache", opt_cache);
  bench_kv_u64("samples", ns);
  bench_kv_u64("interval_ms", opt_interval);
  bench_result_end();
  return 0;
}
