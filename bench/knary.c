/* knary: threads build a k-ary tree of given depth and fan-out with a little work per node,
 * taking subtrees from a shared counter, then free what they built; reports run time.
 * Reproduces Knary from Streamflow (ISMM'06) sec. 4.2.2. */
#include "bench.h"

struct knode {
  uint64_t value;
  uint64_t nchild;
  struct knode *child[];
};

struct worker {
  _Alignas(BENCH_CACHE_LINE) unsigned id;
};

static struct worker workers[BENCH_MAX_THREADS];
static pthread_barrier_t barrier;
static uint64_t opt_depth = 9, opt_fanout = 5, opt_work = 20, opt_reps = 3;
static unsigned split_level;  /* levels built by the main thread */
static struct knode ***tasks; /* slots the workers fill with subtrees */
static uint64_t *task_seed;   /* seed of each subtree's root */
static unsigned *owner;       /* which worker built each subtree */
static size_t ntasks;
static _Atomic size_t next_task;
static _Atomic int64_t node_count;

static struct knode *new_node(unsigned nchild, uint64_t seed) {
  struct knode *n = bench_xmalloc(sizeof *n + opt_fanout * sizeof(struct knode *));
  uint64_t v = seed;
  for (uint64_t i = 0; i < opt_work; i++) v = v * 6364136223846793005u + 1442695040888963407u;
  n->value = v;
  n->nchild = nchild;
  for (unsigned j = 0; j < opt_fanout; j++) n->child[j] = NULL;
  return n;
}

/* a subtree whose root lies `depth` levels above the leaves (depth >= 1) */
static struct knode *build(unsigned depth, uint64_t seed, int64_t *count) {
  unsigned nchild = depth > 1 ? (unsigned)opt_fanout : 0;
  struct knode *n = new_node(nchild, seed);
  (*count)++;
  for (unsigned j = 0; j < nchild; j++) n->child[j] = build(depth - 1, seed * 31 + j, count);
  return n;
}

static uint64_t walk_and_free(struct knode *n) {
  uint64_t sum = n->value & 0xff;
  for (unsigned j = 0; j < n->nchild; j++) sum += walk_and_free(n->child[j]);
  free(n);
  return sum;
}

/* main thread: the top `split_level` levels, registering the child slots of
 * the lowest of them as tasks */
static struct knode *build_top(unsigned level, uint64_t seed, size_t *next) {
  struct knode *n = new_node((unsigned)opt_fanout, seed);
  for (unsigned j = 0; j < opt_fanout; j++) {
    if (level + 1 == split_level) {
      task_seed[*next] = seed * 31 + j;
      tasks[(*next)++] = &n->child[j];
    } else
      n->child[j] = build_top(level + 1, seed * 31 + j, next);
  }
  return n;
}

static void free_top(struct knode *n, unsigned level) {
  if (level + 1 < split_level)
    for (unsigned j = 0; j < opt_fanout; j++) free_top(n->child[j], level + 1);
  free(n);
}

static void *run(void *arg) {
  struct worker *w = arg;
  uint64_t check = 0;
  for (uint64_t rep = 0; rep < opt_reps; rep++) {
    pthread_barrier_wait(&barrier); /* top levels are ready */
    int64_t count = 0;
    for (;;) {
      size_t i = atomic_fetch_add_explicit(&next_task, 1, memory_order_relaxed);
      if (i >= ntasks) break;
      *tasks[i] = build((unsigned)opt_depth - split_level, task_seed[i], &count);
      owner[i] = w->id;
    }
    atomic_fetch_add_explicit(&node_count, count, memory_order_relaxed);
    pthread_barrier_wait(&barrier); /* the whole tree exists */
    for (size_t i = 0; i < ntasks; i++)
      if (owner[i] == w->id) check += walk_and_free(*tasks[i]);
    pthread_barrier_wait(&barrier); /* the subtrees are gone */
  }
  bench_check_add(check);
  return NULL;
}

static void usage(void) {
  fprintf(stderr, "usage: knary [-t threads] [-d depth] [-k fanout] [-w work] [-r reps]\n"
                  "  -d  tree depth in levels (9)   -k children per inner node (5)\n"
                  "  -w  work per node, in multiply-add steps (20)\n"
                  "  -r  times the tree is built and freed (3)\n");
  exit(2);
}

int main(int argc, char **argv) {
  unsigned threads = 1;
  int c;
  while ((c = getopt(argc, argv, "t:d:k:w:r:h")) != -1) {
    switch (c) {
    case 't':
      threads = bench_parse_threads(optarg, 't');
      break;
    case 'd':
      opt_depth = bench_parse_u64(optarg, 'd');
      break;
    case 'k':
      opt_fanout = bench_parse_u64(optarg, 'k');
      break;
    case 'w':
      opt_work = bench_parse_u64(optarg, 'w');
      break;
    case 'r':
      opt_reps = bench_parse_u64(optarg, 'r');
      break;
    default:
      usage();
    }
  }
  if (optind != argc || opt_depth < 2 || opt_depth > 40 || opt_fanout < 2 || opt_fanout > 64)
    usage();

  /* split where there are at least 4 subtrees per thread, keeping >= 1 level
   * for the workers */
  split_level = 1;
  ntasks = (size_t)opt_fanout;
  while (ntasks < 4u * threads && split_level + 1 < opt_depth) {
    split_level++;
    ntasks *= (size_t)opt_fanout;
  }
  tasks = bench_xmalloc(ntasks * sizeof *tasks);
  task_seed = bench_xmalloc(ntasks * sizeof *task_seed);
  owner = bench_xmalloc(ntasks * sizeof *owner);

  pthread_t tid[BENCH_MAX_THREADS];
  bench_barrier_init(&barrier, threads + 1);
  for (unsigned i = 0; i < threads; i++) {
    workers[i].id = i;
    bench_spawn(&tid[i], run, &workers[i]);
  }
  double t0 = bench_now();
  uint64_t top_nodes = 0;
  for (uint64_t rep = 0; rep < opt_reps; rep++) {
    size_t next = 0;
    struct knode *root = build_top(0, rep, &next);
    atomic_store_explicit(&next_task, 0, memory_order_relaxed);
    pthread_barrier_wait(&barrier);
    pthread_barrier_wait(&barrier);
    pthread_barrier_wait(&barrier);
    free_top(root, 0);
    top_nodes += (ntasks - 1) / (opt_fanout - 1);
  }
  double elapsed = bench_now() - t0;
  for (unsigned i = 0; i < threads; i++) bench_join(tid[i]);
  pthread_barrier_destroy(&barrier);
  free(owner);
  free(task_seed);
  free(tasks);

  uint64_t nodes = (uint64_t)atomic_load(&node_count) + top_nodes;
  uint64_t node_size = sizeof(struct knode) + opt_fanout * sizeof(struct knode *);
  bench_live_note_peak((int64_t)(nodes / opt_reps * node_size));
  bench_result_begin("knary", threads, "time_s", elapsed, "s");
  bench_kv_u64("ops", 2 * nodes);
  bench_kv_u64("nodes_per_tree", nodes / opt_reps);
  bench_kv_u64("depth", opt_depth);
  bench_kv_u64("fanout", opt_fanout);
  bench_kv_u64("work", opt_work);
  bench_kv_u64("reps", opt_reps);
  bench_result_end();
  return 0;
}
