/* locality: access time of 16-32 B nodes in lists (allocation order) and trees (out of
 * allocation order) allocated after the free lists were scrambled; measures the layout's
 * spatial locality. Reproduces the spatial-locality experiment of scalloc (OOPSLA'15) sec. 7.6. */
#include "bench.h"

#define STRUCT_DEPTH 10                          /* tree depth */
#define STRUCT_NODES ((1u << STRUCT_DEPTH) - 1u) /* nodes per list and per tree */

struct node {
  struct node *a, *b; /* list: a = next; tree: a = left, b = right */
};

struct worker {
  _Alignas(BENCH_CACHE_LINE) unsigned id;
};

static struct worker workers[BENCH_MAX_THREADS];
static pthread_barrier_t barrier;
static struct bench_span build_span = BENCH_SPAN_INIT, walk_span = BENCH_SPAN_INIT;
static uint64_t opt_objects = 1000000, opt_lists = 50, opt_passes = 10, opt_churn = 100;
static uint64_t opt_min = 16, opt_max = 32, opt_seed = 1;

static struct node *new_node(struct bench_rng *rng, struct bench_live *live) {
  size_t sz = bench_rng_range(rng, (size_t)opt_min, (size_t)opt_max);
  struct node *n = bench_xmalloc(sz);
  n->a = n->b = NULL;
  bench_live_add(live, (int64_t)sz);
  return n;
}

static struct node *build_tree(unsigned depth, struct bench_rng *rng, struct bench_live *live) {
  if (depth == 0) return NULL;
  struct node *n = new_node(rng, live);
  n->a = build_tree(depth - 1, rng, live);
  n->b = build_tree(depth - 1, rng, live);
  return n;
}

static struct node *build_list(struct bench_rng *rng, struct bench_live *live) {
  struct node *head = NULL, *tail = NULL;
  for (unsigned i = 0; i < STRUCT_NODES; i++) {
    struct node *n = new_node(rng, live);
    if (tail != NULL)
      tail->a = n;
    else
      head = n;
    tail = n;
  }
  return head;
}

/* depth-first, right child first: the reverse of the allocation order */
static uint64_t walk_tree(const struct node *n) {
  if (n == NULL) return 0;
  return 1 + walk_tree(n->b) + walk_tree(n->a);
}

static uint64_t walk_list(const struct node *n) {
  uint64_t count = 0;
  for (; n != NULL; n = n->a) count++;
  return count;
}

static void free_tree(struct node *n) {
  if (n == NULL) return;
  free_tree(n->a);
  free_tree(n->b);
  free(n);
}

static void free_list(struct node *n) {
  while (n != NULL) {
    struct node *next = n->a;
    free(n);
    n = next;
  }
}

/* structure k is a list when the running share of lists falls behind the
 * requested percentage: lists and trees interleave evenly, no randomness */
static int is_list(size_t k) {
  return (k + 1) * opt_lists / 100 > k * opt_lists / 100;
}

static void *run(void *arg) {
  struct worker *w = arg;
  struct bench_rng rng;
  bench_rng_seed(&rng, opt_seed, w->id);
  struct bench_live live = {0};
  size_t nstruct = (size_t)((opt_objects + STRUCT_NODES - 1) / STRUCT_NODES);
  struct node **root = bench_xmalloc(nstruct * sizeof *root);

  /* scramble the free lists: allocate, then free in random order */
  size_t nchurn = (size_t)(opt_objects * opt_churn / 100);
  if (nchurn > 0) {
    void **tmp = bench_xmalloc(nchurn * sizeof *tmp);
    for (size_t i = 0; i < nchurn; i++) {
      size_t sz = bench_rng_range(&rng, (size_t)opt_min, (size_t)opt_max);
      char *p = bench_xmalloc(sz);
      p[0] = 1;
      tmp[i] = p;
    }
    for (size_t i = nchurn - 1; i > 0; i--) {
      size_t j = bench_rng_below(&rng, (uint32_t)(i + 1));
      void *t = tmp[i];
      tmp[i] = tmp[j];
      tmp[j] = t;
    }
    for (size_t i = 0; i < nchurn; i++) free(tmp[i]);
    free(tmp);
  }

  pthread_barrier_wait(&barrier); /* build */
  bench_span_begin(&build_span);
  for (size_t k = 0; k < nstruct; k++)
    root[k] = is_list(k) ? build_list(&rng, &live) : build_tree(STRUCT_DEPTH, &rng, &live);
  bench_span_end(&build_span);
  pthread_barrier_wait(&barrier); /* traverse */
  bench_span_begin(&walk_span);
  uint64_t visited = 0;
  for (uint64_t p = 0; p < opt_passes; p++)
    for (size_t k = 0; k < nstruct; k++)
      visited += is_list(k) ? walk_list(root[k]) : walk_tree(root[k]);
  bench_span_end(&walk_span);
  for (size_t k = 0; k < nstruct; k++) {
    if (is_list(k))
      free_list(root[k]);
    else
      free_tree(root[k]);
  }
  free(root);
  bench_live_done(&live);
  bench_check_add(visited);
  return NULL;
}

static void usage(void) {
  fprintf(stderr, "usage: locality [-t threads] [-n objects] [-l percent] [-p passes] [-f percent] "
                  "[-m min] [-M max] [-S seed]\n"
                  "  -n  nodes per thread (1000000), in lists and trees of 1023 nodes\n"
                  "  -l  share of nodes in lists, in percent; the rest are in trees (50)\n"
                  "  -p  traversals of every structure (10)\n"
                  "  -f  nodes allocated and freed in random order first, in percent of -n (100)\n"
                  "  -m/-M  node size range, inclusive (16..32)\n");
  exit(2);
}

int main(int argc, char **argv) {
  unsigned threads = 1;
  int c;
  while ((c = getopt(argc, argv, "t:n:l:p:f:m:M:S:h")) != -1) {
    switch (c) {
    case 't':
      threads = bench_parse_threads(optarg, 't');
      break;
    case 'n':
      opt_objects = bench_parse_u64(optarg, 'n');
      break;
    case 'l':
      opt_lists = bench_parse_u64(optarg, 'l');
      break;
    case 'p':
      opt_passes = bench_parse_u64(optarg, 'p');
      break;
    case 'f':
      opt_churn = bench_parse_u64(optarg, 'f');
      break;
    case 'm':
      opt_min = bench_parse_u64(optarg, 'm');
      break;
    case 'M':
      opt_max = bench_parse_u64(optarg, 'M');
      break;
    case 'S':
      opt_seed = bench_parse_u64(optarg, 'S');
      break;
    default:
      usage();
    }
  }
  if (optind != argc || opt_lists > 100 || opt_churn > 1000 || opt_objects < 1 ||
      opt_objects > (1u << 30) || opt_min < sizeof(struct node) || opt_max < opt_min)
    usage();

  pthread_t tid[BENCH_MAX_THREADS];
  bench_barrier_init(&barrier, threads + 1);
  for (unsigned i = 0; i < threads; i++) {
    workers[i].id = i;
    bench_spawn(&tid[i], run, &workers[i]);
  }
  pthread_barrier_wait(&barrier);
  pthread_barrier_wait(&barrier);
  for (unsigned i = 0; i < threads; i++) bench_join(tid[i]);
  pthread_barrier_destroy(&barrier);

  size_t nstruct = (size_t)((opt_objects + STRUCT_NODES - 1) / STRUCT_NODES);
  bench_result_begin("locality", threads, "access_time_s", bench_span_seconds(&walk_span), "s");
  bench_kv_dbl("alloc_time_s", bench_span_seconds(&build_span));
  bench_kv_u64("ops", 2 * threads * (nstruct * STRUCT_NODES + opt_objects * opt_churn / 100));
  bench_kv_u64("nodes", nstruct * STRUCT_NODES);
  bench_kv_u64("list_percent", opt_lists);
  bench_kv_u64("passes", opt_passes);
  bench_kv_u64("churn_percent", opt_churn);
  bench_result_end();
  return 0;
}
