/* mleak: creates and destroys threads many thousands of times, each allocating and freeing a
 * little and leaving a few objects for later threads to free; RSS at start, middle and end
 * shows memory leaked per thread. Follows LKmalloc (ISMM'98) sec. 4 (requirements 6 and 8). */
#include "bench.h"

/* Each of -r rounds starts -t threads and joins them. A thread allocates -n objects (8..1024 B,
 * and one in 64 of 1..64 KiB) into a small working set, freeing a random one after each
 * allocation once the set holds 32; when it is done it frees what it holds except -p percent,
 * which it swaps into random slots of a global hand-off table of -h slots; whatever a swap
 * displaces (left by an earlier thread, usually one that has exited) it frees. The live set is
 * bounded by the table, so RSS should stay flat however many threads come and go. The result is
 * RSS after the last round over RSS after the middle one (1.00 = no growth). */

#define SET 32

struct worker {
  _Alignas(BENCH_CACHE_LINE) unsigned id;
  uint64_t seq; /* thread number since the start */
  uint64_t check;
};

struct slot {
  _Atomic(char *) p; /* the object's size is stored in its first 4 bytes */
};

static struct worker workers[BENCH_MAX_THREADS];
static struct slot *table;
static uint64_t opt_rounds = 10000, opt_allocs = 200, opt_pass = 5, opt_slots = 4096, opt_seed = 1;
static double opt_limit = 0;

static char *make(struct bench_rng *r, uint32_t *size) {
  size_t sz = bench_rng_below(r, 64) == 0 ? bench_rng_range(r, 1025, 64 << 10)
                                          : bench_rng_range(r, 8, 1024);
  char *p = bench_xmalloc(sz);
  memcpy(p, &(uint32_t){(uint32_t)sz}, 4);
  for (size_t off = 4096; off < sz; off += 4096) p[off] = (char)off;
  p[sz - 1] = (char)sz;
  *size = (uint32_t)sz;
  bench_live_shared((int64_t)sz); /* a few hundred per thread: exact is affordable */
  return p;
}

static uint64_t drop(char *p) {
  uint32_t sz;
  memcpy(&sz, p, 4);
  uint64_t c = (unsigned char)p[sz - 1];
  free(p);
  bench_live_shared(-(int64_t)sz);
  return c;
}

static void *run(void *arg) {
  struct worker *w = arg;
  struct bench_rng rng;
  bench_rng_seed(&rng, opt_seed, w->seq);
  char *set[SET];
  uint32_t size[SET];
  unsigned n = 0;
  uint64_t check = 0;
  for (uint64_t i = 0; i < opt_allocs; i++) {
    if (n == SET) {
      unsigned j = bench_rng_below(&rng, SET);
      check += drop(set[j]);
      set[j] = set[--n];
      size[j] = size[n];
    }
    set[n] = make(&rng, &size[n]);
    n++;
  }
  uint64_t keep = (opt_allocs * opt_pass + 99) / 100;
  for (unsigned j = 0; j < n; j++) {
    if (j < keep) {
      uint32_t s = bench_rng_below(&rng, (uint32_t)opt_slots);
      char *old = atomic_exchange_explicit(&table[s].p, set[j], memory_order_acq_rel);
      if (old != NULL) check += drop(old);
    } else {
      check += drop(set[j]);
    }
  }
  w->check += check;
  return NULL;
}

static void usage(void) {
  fprintf(stderr,
          "usage: mleak [-t threads] [-r rounds] [-n allocs] [-p percent] [-h slots] [-S seed]\n"
          "             [-L limit]\n"
          "  -t  threads started (and joined) per round (2)   -r  rounds (10000)\n"
          "  -n  allocations per thread (200)\n"
          "  -p  percent of a thread's last objects left for later threads (5)\n"
          "  -h  slots of the hand-off table (4096)\n"
          "  -L  exit with status 3 if the RSS growth exceeds this factor (0: never)\n");
  exit(2);
}

int main(int argc, char **argv) {
  unsigned threads = 2;
  int c;
  while ((c = getopt(argc, argv, "t:r:n:p:h:S:L:")) != -1) {
    switch (c) {
    case 't':
      threads = bench_parse_threads(optarg, 't');
      break;
    case 'r':
      opt_rounds = bench_parse_u64(optarg, 'r');
      break;
    case 'n':
      opt_allocs = bench_parse_u64(optarg, 'n');
      break;
    case 'p':
      opt_pass = bench_parse_u64(optarg, 'p');
      break;
    case 'h':
      opt_slots = bench_parse_u64(optarg, 'h');
      break;
    case 'S':
      opt_seed = bench_parse_u64(optarg, 'S');
      break;
    case 'L':
      opt_limit = bench_parse_double(optarg, 'L');
      break;
    default:
      usage();
    }
  }
  if (optind != argc || opt_rounds < 2 || opt_allocs < 1 || opt_pass > 100 || opt_slots < 1 ||
      opt_slots > (1u << 24))
    usage();

  table = bench_xmalloc((size_t)opt_slots * sizeof *table);
  for (size_t i = 0; i < opt_slots; i++) atomic_init(&table[i].p, NULL);
  long rss_base = bench_rss_kib(), rss_first = 0, rss_mid = 0, rss_last = 0;
  printf("mleak: %u threads per round, %" PRIu64 " rounds; RSS at start: %ld KiB\n", threads,
         opt_rounds, rss_base);

  double t0 = bench_now();
  pthread_t tid[BENCH_MAX_THREADS];
  uint64_t seq = 0;
  uint64_t report = opt_rounds >= 10 ? opt_rounds / 10 : 1;
  for (uint64_t r = 0; r < opt_rounds; r++) {
    for (unsigned i = 0; i < threads; i++) {
      workers[i].id = i;
      workers[i].seq = seq++;
      bench_spawn(&tid[i], run, &workers[i]);
    }
    for (unsigned i = 0; i < threads; i++) bench_join(tid[i]);
    if (r == 0 || r + 1 == opt_rounds / 2 || r + 1 == opt_rounds || (r + 1) % report == 0) {
      long rss = bench_rss_kib();
      if (r == 0) rss_first = rss;
      if (r + 1 == opt_rounds / 2) rss_mid = rss;
      if (r + 1 == opt_rounds) rss_last = rss;
      printf("round %" PRIu64 " threads %" PRIu64 " rss_kib %ld live_kib %" PRId64 "\n", r + 1, seq,
             rss, atomic_load_explicit(&bench_live_now, memory_order_relaxed) / 1024);
      fflush(stdout);
    }
  }
  double elapsed = bench_now() - t0;

  uint64_t check = 0;
  for (size_t i = 0; i < opt_slots; i++) {
    char *p = atomic_load_explicit(&table[i].p, memory_order_relaxed);
    if (p != NULL) check += drop(p);
  }
  for (unsigned i = 0; i < threads; i++) check += workers[i].check;
  bench_check_add(check);
  free(table);

  double growth = rss_mid > 0 ? (double)rss_last / (double)rss_mid : NAN;
  bench_result_begin("mleak", threads, "rss_growth", growth, "x");
  bench_kv_u64("ops", 2 * opt_allocs * seq);
  bench_kv_dbl("elapsed_s", elapsed);
  bench_kv_u64("rounds", opt_rounds);
  bench_kv_u64("threads_created", seq);
  bench_kv_dbl("threads_per_s", (double)seq / elapsed);
  bench_kv_u64("rss_base_kib", (uint64_t)rss_base);
  bench_kv_u64("rss_first_kib", (uint64_t)rss_first);
  bench_kv_u64("rss_mid_kib", (uint64_t)rss_mid);
  bench_kv_u64("rss_last_kib", (uint64_t)rss_last);
  bench_result_end();
  if (opt_limit > 0 && !(growth <= opt_limit)) {
    fprintf(stderr, "mleak: RSS grew by %.3fx, more than the limit %.3fx\n", growth, opt_limit);
    return 3;
  }
  return 0;
}
