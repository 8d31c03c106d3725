/* mstress: rounds of short-lived threads that allocate a mix of sizes and leave a share of their
 * objects to threads of the next round, which free them; RSS after every round shows whether
 * memory of exited threads is reused. Follows LKmalloc (ISMM'98) sec. 4 (requirements 6, 8). */
#include "bench.h"

/* Round r runs -t threads at once. Thread i first frees slice i of the pool that round r-1
 * filled (objects whose allocating threads have exited), then performs -n random replacements
 * in a working set of -l objects (free a random one, allocate a new one), then hands -p percent
 * of its working set to slice i of this round's pool and frees the rest, and exits. Sizes: 60%
 * 8..64 B, 25% 65 B..1 KiB, 12% 1..16 KiB, 3% 16..256 KiB; every page of an object is written.
 * The main thread joins the round and records RSS. The live set is the same in every round, so
 * RSS should level off; the result is the largest RSS in the second half of the rounds over the
 * largest in the first half (1.00 = no growth). */

struct obj {
  char *p;
  uint32_t size;
};

struct worker {
  _Alignas(BENCH_CACHE_LINE) unsigned id;
  unsigned round;
  uint64_t check;
  int64_t bytes_left; /* bytes this thread put into the pool */
};

static struct worker workers[BENCH_MAX_THREADS];
static struct obj *pool[2]; /* by round parity; slice i belongs to thread i */
static size_t slice;        /* objects per thread in the pool */
static uint64_t opt_rounds = 20, opt_steps = 50000, opt_live = 2000, opt_pass = 10, opt_seed = 1;
static double opt_limit = 0;

static size_t pick_size(struct bench_rng *r) {
  uint32_t k = bench_rng_below(r, 100);
  if (k < 60) return bench_rng_range(r, 8, 64);
  if (k < 85) return bench_rng_range(r, 65, 1024);
  if (k < 97) return bench_rng_range(r, 1025, 16 << 10);
  return bench_rng_range(r, (16 << 10) + 1, 256 << 10);
}

static struct obj make(struct bench_rng *r) {
  size_t size = pick_size(r);
  char *p = bench_xmalloc(size);
  for (size_t off = 0; off < size; off += 4096) p[off] = (char)off;
  p[size - 1] = (char)size;
  return (struct obj){p, (uint32_t)size};
}

static void *run(void *arg) {
  struct worker *w = arg;
  struct bench_rng rng;
  bench_rng_seed(&rng, opt_seed, (uint64_t)w->round * BENCH_MAX_THREADS + w->id);
  uint64_t check = 0;
  int64_t freed_from_pool = 0;

  struct obj *old = pool[(w->round + 1) & 1] + w->id * slice;
  for (size_t i = 0; i < slice; i++) {
    if (old[i].p == NULL) continue;
    check += (unsigned char)old[i].p[old[i].size - 1];
    freed_from_pool += old[i].size;
    free(old[i].p);
    old[i].p = NULL;
  }

  struct obj *set = bench_xmalloc((size_t)opt_live * sizeof *set);
  int64_t live = 0;
  for (size_t i = 0; i < opt_live; i++) {
    set[i] = make(&rng);
    live += set[i].size;
  }
  int64_t reported = live;
  bench_live_shared(reported);
  for (uint64_t s = 0; s < opt_steps; s++) {
    uint32_t i = bench_rng_below(&rng, (uint32_t)opt_live);
    check += (unsigned char)set[i].p[set[i].size - 1];
    live -= set[i].size;
    free(set[i].p);
    set[i] = make(&rng);
    live += set[i].size;
  }
  struct obj *mine = pool[w->round & 1] + w->id * slice;
  int64_t passed = 0;
  for (size_t i = 0; i < opt_live; i++) {
    if (i < slice) {
      mine[i] = set[i];
      passed += set[i].size;
    } else {
      check += (unsigned char)set[i].p[0];
      free(set[i].p);
    }
  }
  free(set);
  /* net effect of this thread: the part it passed stays live, the old pool slice is gone */
  bench_live_shared(passed - freed_from_pool - reported);
  w->check += check;
  return NULL;
}

static void usage(void) {
  fprintf(stderr,
          "usage: mstress [-t threads] [-r rounds] [-n steps] [-l live] [-p percent] [-S seed]\n"
          "               [-L limit]\n"
          "  -t  threads per round (4)            -r  rounds (20)\n"
          "  -n  random replacements per thread and round (50000)\n"
          "  -l  objects each thread holds (2000)\n"
          "  -p  percent of them left for the next round to free (10)\n"
          "  -L  exit with status 3 if the RSS growth exceeds this factor (0: never)\n");
  exit(2);
}

int main(int argc, char **argv) {
  unsigned threads = 4;
  int c;
  while ((c = getopt(argc, argv, "t:r:n:l:p:S:L:h")) != -1) {
    switch (c) {
    case 't':
      threads = bench_parse_threads(optarg, 't');
      break;
    case 'r':
      opt_rounds = bench_parse_u64(optarg, 'r');
      break;
    case 'n':
      opt_steps = bench_parse_u64(optarg, 'n');
      break;
    case 'l':
      opt_live = bench_parse_u64(optarg, 'l');
      break;
    case 'p':
      opt_pass = bench_parse_u64(optarg, 'p');
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
  if (optind != argc || opt_rounds < 2 || opt_rounds > 1000000 || opt_live < 1 ||
      opt_live > (1u << 24) || opt_pass > 100)
    usage();

  slice = (size_t)(opt_live * opt_pass / 100);
  for (int k = 0; k < 2; k++) {
    size_t n = (slice ? slice : 1) * threads;
    pool[k] = bench_xmalloc(n * sizeof *pool[k]);
    memset(pool[k], 0, n * sizeof *pool[k]);
  }
  long *rss = bench_xmalloc((size_t)opt_rounds * sizeof *rss);
  printf("mstress: %u threads per round, %" PRIu64 " rounds; RSS before the first: %ld KiB\n",
         threads, opt_rounds, bench_rss_kib());

  double t0 = bench_now();
  pthread_t tid[BENCH_MAX_THREADS];
  for (unsigned r = 0; r < opt_rounds; r++) {
    for (unsigned i = 0; i < threads; i++) {
      workers[i].id = i;
      workers[i].round = r;
      bench_spawn(&tid[i], run, &workers[i]);
    }
    for (unsigned i = 0; i < threads; i++) bench_join(tid[i]);
    rss[r] = bench_rss_kib();
    printf("round %u rss_kib %ld live_kib %" PRId64 "\n", r + 1, rss[r],
           atomic_load_explicit(&bench_live_now, memory_order_relaxed) / 1024);
    fflush(stdout);
  }
  double elapsed = bench_now() - t0;

  /* the last round's pool */
  uint64_t check = 0;
  for (size_t i = 0; i < slice * threads; i++) {
    struct obj *o = &pool[(opt_rounds - 1) & 1][i];
    if (o->p == NULL) continue;
    check += (unsigned char)o->p[o->size - 1];
    free(o->p);
  }
  for (unsigned i = 0; i < threads; i++) check += workers[i].check;
  bench_check_add(check);

  size_t half = (size_t)opt_rounds / 2;
  long max1 = 0, max2 = 0;
  for (size_t r = 0; r < opt_rounds; r++) {
    if (r < half && rss[r] > max1) max1 = rss[r];
    if (r >= half && rss[r] > max2) max2 = rss[r];
  }
  double growth = max1 > 0 ? (double)max2 / (double)max1 : NAN;

  bench_result_begin("mstress", threads, "rss_growth", growth, "x");
  bench_kv_u64("ops", 2 * (opt_live + opt_steps) * threads * opt_rounds);
  bench_kv_dbl("elapsed_s", elapsed);
  bench_kv_u64("rounds", opt_rounds);
  bench_kv_u64("rss_first_kib", (uint64_t)rss[0]);
  bench_kv_u64("rss_mid_kib", (uint64_t)rss[half - 1]);
  bench_kv_u64("rss_last_kib", (uint64_t)rss[opt_rounds - 1]);
  bench_kv_u64("rss_max_first_half_kib", (uint64_t)max1);
  bench_kv_u64("rss_max_second_half_kib", (uint64_t)max2);
  bench_result_end();
  free(rss);
  if (opt_limit > 0 && !(growth <= opt_limit)) {
    fprintf(stderr, "mstress: RSS grew by %.3fx, more than the limit %.3fx\n", growth, opt_limit);
    return 3;
  }
  return 0;
}
