/* consume: one producer allocates a block of objects per consumer per iteration while the
 * consumers concurrently free the blocks they receive (all frees remote); reports run time.
 * Reproduces Consume from Streamflow (ISMM'06) sec. 4.2.2. */
#include "bench.h"

/* A bounded queue of blocks from the producer to one consumer. Blocks hold
 * thousands of objects, so a mutex per hand-over costs nothing measurable. */
struct consumer {
  _Alignas(BENCH_CACHE_LINE) pthread_mutex_t lock;
  pthread_cond_t not_empty, not_full;
  char ***ring;
  size_t head, count;
  uint64_t check;
};

static struct consumer consumers[BENCH_MAX_THREADS];
static size_t opt_queue = 2;
static uint64_t opt_objects = 6000, opt_size = 16;

static void push(struct consumer *c, char **block) {
  pthread_mutex_lock(&c->lock);
  while (c->count == opt_queue) pthread_cond_wait(&c->not_full, &c->lock);
  c->ring[(c->head + c->count) % opt_queue] = block;
  c->count++;
  pthread_cond_signal(&c->not_empty);
  pthread_mutex_unlock(&c->lock);
}

static char **pop(struct consumer *c) {
  pthread_mutex_lock(&c->lock);
  while (c->count == 0) pthread_cond_wait(&c->not_empty, &c->lock);
  char **block = c->ring[c->head];
  c->head = (c->head + 1) % opt_queue;
  c->count--;
  pthread_cond_signal(&c->not_full);
  pthread_mutex_unlock(&c->lock);
  return block;
}

static void *consume(void *arg) {
  struct consumer *c = arg;
  uint64_t check = 0;
  int64_t block_bytes = (int64_t)(opt_objects * opt_size + opt_objects * sizeof(char *));
  for (;;) {
    char **block = pop(c);
    if (block == NULL) break;
    for (size_t i = 0; i < opt_objects; i++) {
      check += (unsigned char)block[i][0];
      free(block[i]);
    }
    free(block);
    bench_live_shared(-block_bytes);
  }
  c->check = check;
  return NULL;
}

static void usage(void) {
  fprintf(stderr,
          "usage: consume [-t consumers] [-i iterations] [-n objects] [-s size] [-q depth]\n"
          "  -t  consumer threads (1); one more thread produces\n"
          "  -i  iterations (1000); each gives every consumer one block\n"
          "  -n  objects per block (6000)   -s object size (16)\n"
          "  -q  blocks in flight per consumer (2)\n");
  exit(2);
}

int main(int argc, char **argv) {
  unsigned threads = 1;
  uint64_t iterations = 1000;
  int c;
  while ((c = getopt(argc, argv, "t:i:n:s:q:h")) != -1) {
    switch (c) {
    case 't':
      threads = bench_parse_threads(optarg, 't');
      break;
    case 'i':
      iterations = bench_parse_u64(optarg, 'i');
      break;
    case 'n':
      opt_objects = bench_parse_u64(optarg, 'n');
      break;
    case 's':
      opt_size = bench_parse_u64(optarg, 's');
      break;
    case 'q':
      opt_queue = (size_t)bench_parse_u64(optarg, 'q');
      break;
    default:
      usage();
    }
  }
  if (optind != argc || opt_objects < 1 || opt_size < 1 || opt_queue < 1 || opt_queue > 1024)
    usage();

  pthread_t tid[BENCH_MAX_THREADS];
  for (unsigned t = 0; t < threads; t++) {
    struct consumer *cs = &consumers[t];
    pthread_mutex_init(&cs->lock, NULL);
    pthread_cond_init(&cs->not_empty, NULL);
    pthread_cond_init(&cs->not_full, NULL);
    cs->ring = bench_xmalloc(opt_queue * sizeof *cs->ring);
  }

  double t0 = bench_now();
  for (unsigned t = 0; t < threads; t++) bench_spawn(&tid[t], consume, &consumers[t]);

  /* the main thread is the producer */
  int64_t block_bytes = (int64_t)(opt_objects * opt_size + opt_objects * sizeof(char *));
  for (uint64_t it = 0; it < iterations; it++) {
    for (unsigned t = 0; t < threads; t++) {
      char **block = bench_xmalloc(opt_objects * sizeof *block);
      for (size_t i = 0; i < opt_objects; i++) {
        char *p = bench_xmalloc(opt_size);
        p[0] = (char)i;
        block[i] = p;
      }
      bench_live_shared(block_bytes);
      push(&consumers[t], block);
    }
  }
  for (unsigned t = 0; t < threads; t++) push(&consumers[t], NULL);
  uint64_t check = 0;
  for (unsigned t = 0; t < threads; t++) {
    bench_join(tid[t]);
    check += consumers[t].check;
  }
  double elapsed = bench_now() - t0;
  bench_check_add(check);

  for (unsigned t = 0; t < threads; t++) {
    struct consumer *cs = &consumers[t];
    free(cs->ring);
    pthread_cond_destroy(&cs->not_full);
    pthread_cond_destroy(&cs->not_empty);
    pthread_mutex_destroy(&cs->lock);
  }

  bench_result_begin("consume", threads, "time_s", elapsed, "s");
  bench_kv_u64("ops", 2 * iterations * threads * (opt_objects + 1));
  bench_kv_u64("iterations", iterations);
  bench_kv_u64("objects", opt_objects);
  bench_kv_u64("size", opt_size);
  bench_kv_u64("queue", opt_queue);
  bench_result_end();
  return 0;
}
