/* xmalloc-style producer-consumer: t producers pass random-size objects in batches to t
 * consumers that free them; reports throughput and peak live bytes, for peak RSS / peak live
 * (blowup, Hoard (ASPLOS'00) sec. 2.2); workload after scalloc (OOPSLA'15) sec. 7.3. */
#include "bench.h"

struct batch {
  struct batch *next;
  size_t count;
  int64_t bytes;
  char *obj[];
};

/* A bounded multi-producer queue in front of each consumer. */
struct consumer {
  _Alignas(BENCH_CACHE_LINE) pthread_mutex_t lock;
  pthread_cond_t not_empty, not_full;
  struct batch *head, *tail;
  size_t count;
  unsigned producers_done;
  uint64_t check;
};

struct producer {
  _Alignas(BENCH_CACHE_LINE) unsigned id;
  uint64_t objects;
};

static struct consumer consumers[BENCH_MAX_THREADS];
static struct producer producers[BENCH_MAX_THREADS];
static unsigned nthreads = 1;
static pthread_barrier_t start_barrier;
static struct bench_span span = BENCH_SPAN_INIT;
static uint64_t opt_min = 16, opt_max = 512, opt_batch = 64, opt_queue = 16, opt_seed = 1;

static void push(struct consumer *c, struct batch *b) {
  pthread_mutex_lock(&c->lock);
  while (c->count >= opt_queue) pthread_cond_wait(&c->not_full, &c->lock);
  b->next = NULL;
  if (c->tail != NULL)
    c->tail->next = b;
  else
    c->head = b;
  c->tail = b;
  c->count++;
  pthread_cond_signal(&c->not_empty);
  pthread_mutex_unlock(&c->lock);
}

static void producer_finished(struct consumer *c) {
  pthread_mutex_lock(&c->lock);
  c->producers_done++;
  pthread_cond_signal(&c->not_empty);
  pthread_mutex_unlock(&c->lock);
}

/* Returns NULL once every producer has finished and the queue is empty. */
static struct batch *pop(struct consumer *c) {
  pthread_mutex_lock(&c->lock);
  while (c->count == 0 && c->producers_done < nthreads) pthread_cond_wait(&c->not_empty, &c->lock);
  struct batch *b = c->head;
  if (b != NULL) {
    c->head = b->next;
    if (c->head == NULL) c->tail = NULL;
    c->count--;
    pthread_cond_broadcast(&c->not_full);
  }
  pthread_mutex_unlock(&c->lock);
  return b;
}

static void *produce(void *arg) {
  struct producer *p = arg;
  struct bench_rng rng;
  bench_rng_seed(&rng, opt_seed, p->id);
  unsigned target = p->id;
  uint64_t left = p->objects;
  pthread_barrier_wait(&start_barrier);
  bench_span_begin(&span);
  while (left > 0) {
    size_t n = left < opt_batch ? (size_t)left : (size_t)opt_batch;
    struct batch *b = bench_xmalloc(sizeof *b + n * sizeof(char *));
    b->count = n;
    b->bytes = (int64_t)(sizeof *b + n * sizeof(char *));
    for (size_t i = 0; i < n; i++) {
      size_t sz = bench_rng_range(&rng, (size_t)opt_min, (size_t)opt_max);
      char *o = bench_xmalloc(sz);
      o[0] = (char)sz;
      o[sz - 1] = (char)i;
      b->obj[i] = o;
      b->bytes += (int64_t)sz;
    }
    bench_live_shared(b->bytes);
    push(&consumers[target], b);
    target = target + 1 == nthreads ? 0 : target + 1;
    left -= n;
  }
  for (unsigned t = 0; t < nthreads; t++) producer_finished(&consumers[t]);
  bench_span_end(&span);
  return NULL;
}

static void *consume(void *arg) {
  struct consumer *c = arg;
  uint64_t check = 0;
  pthread_barrier_wait(&start_barrier);
  bench_span_begin(&span);
  struct batch *b;
  while ((b = pop(c)) != NULL) {
    for (size_t i = 0; i < b->count; i++) {
      check += (unsigned char)b->obj[i][0];
      free(b->obj[i]);
    }
    bench_live_shared(-b->bytes);
    free(b);
  }
  c->check = check;
  bench_span_end(&span);
  return NULL;
}

static void usage(void) {
  fprintf(
      stderr,
      "usage: xmalloc [-t pairs] [-n objects] [-m min] [-M max] [-b batch] [-q depth] [-S seed]\n"
      "  -t  producers, and as many consumers (1)\n"
      "  -n  objects each producer allocates (1000000)\n"
      "  -m/-M  object size range, inclusive (16..512)\n"
      "  -b  objects per batch handed over (64)   -q batches queued per consumer (16)\n");
  exit(2);
}

int main(int argc, char **argv) {
  uint64_t objects = 1000000;
  int c;
  while ((c = getopt(argc, argv, "t:n:m:M:b:q:S:h")) != -1) {
    switch (c) {
    case 't':
      nthreads = bench_parse_threads(optarg, 't');
      break;
    case 'n':
      objects = bench_parse_u64(optarg, 'n');
      break;
    case 'm':
      opt_min = bench_parse_u64(optarg, 'm');
      break;
    case 'M':
      opt_max = bench_parse_u64(optarg, 'M');
      break;
    case 'b':
      opt_batch = bench_parse_u64(optarg, 'b');
      break;
    case 'q':
      opt_queue = bench_parse_u64(optarg, 'q');
      break;
    case 'S':
      opt_seed = bench_parse_u64(optarg, 'S');
      break;
    default:
      usage();
    }
  }
  if (optind != argc || opt_min < 1 || opt_max < opt_min || opt_batch < 1 ||
      opt_batch > (1u << 20) || opt_queue < 1 || 2 * nthreads > BENCH_MAX_THREADS)
    usage();

  pthread_t ptid[BENCH_MAX_THREADS], ctid[BENCH_MAX_THREADS];
  bench_barrier_init(&start_barrier, 2 * nthreads + 1);
  for (unsigned t = 0; t < nthreads; t++) {
    struct consumer *cs = &consumers[t];
    pthread_mutex_init(&cs->lock, NULL);
    pthread_cond_init(&cs->not_empty, NULL);
    pthread_cond_init(&cs->not_full, NULL);
    bench_spawn(&ctid[t], consume, cs);
    producers[t].id = t;
    producers[t].objects = objects;
    bench_spawn(&ptid[t], produce, &producers[t]);
  }
  pthread_barrier_wait(&start_barrier);
  uint64_t check = 0;
  for (unsigned t = 0; t < nthreads; t++) bench_join(ptid[t]);
  for (unsigned t = 0; t < nthreads; t++) {
    bench_join(ctid[t]);
    check += consumers[t].check;
  }
  double elapsed = bench_span_seconds(&span);
  bench_check_add(check);
  for (unsigned t = 0; t < nthreads; t++) {
    pthread_cond_destroy(&consumers[t].not_full);
    pthread_cond_destroy(&consumers[t].not_empty);
    pthread_mutex_destroy(&consumers[t].lock);
  }
  pthread_barrier_destroy(&start_barrier);

  uint64_t batches = nthreads * ((objects + opt_batch - 1) / opt_batch);
  uint64_t ops = 2 * (nthreads * objects + batches);
  bench_result_begin("xmalloc", nthreads, "ops_per_s", (double)ops / elapsed, "ops/s");
  bench_kv_u64("ops", ops);
  bench_kv_dbl("elapsed_s", elapsed);
  bench_kv_u64("producers", nthreads);
  bench_kv_u64("consumers", nthreads);
  bench_kv_u64("objects", objects);
  bench_kv_u64("min", opt_min);
  bench_kv_u64("max", opt_max);
  bench_kv_u64("batch", opt_batch);
  bench_kv_u64("queue", opt_queue);
  bench_result_end();
  return 0;
}
