/* idle: a server's burst then silence. Threads fill -b bytes with small objects (16..1024 B),
 * touch them and free them all; then the program makes no allocator call for -w seconds while
 * it samples RSS. The metric is RSS at the end of the wait: what an idle server keeps of its
 * burst (LKmalloc sec. 4, stability over days; the purge delay of the "give memory back" issue). */
#include "bench.h"

struct node {
  struct node *next;
};

struct worker {
  _Alignas(BENCH_CACHE_LINE) unsigned id;
  uint64_t check;
};

static struct worker workers[BENCH_MAX_THREADS];
static uint64_t opt_bytes = 256ull << 20, opt_seed = 1;
static double opt_wait = 3.0;
static unsigned nthreads = 1;

static void *run(void *arg) {
  struct worker *w = arg;
  struct bench_rng r;
  bench_rng_seed(&r, opt_seed, w->id);
  struct node *head = NULL;
  uint64_t got = 0, target = opt_bytes / nthreads, check = 0;
  while (got < target) {
    size_t n = bench_rng_range(&r, 16, 1024);
    struct node *o = bench_xmalloc(n);
    memset(o, (int)(n & 0xff), n);
    o->next = head;
    head = o;
    got += n;
  }
  while (head) {
    struct node *next = head->next;
    check += (unsigned char)((char *)head)[sizeof *head];
    free(head);
    head = next;
  }
  w->check = check;
  return NULL;
}

static void usage(void) {
  fprintf(stderr, "usage: idle [-t threads] [-b bytes] [-w seconds] [-S seed]\n"
                  "  -b  bytes of small objects to allocate and free (256M)\n"
                  "  -w  idle seconds after the frees, no allocator calls (3)\n");
  exit(2);
}

int main(int argc, char **argv) {
  int c;
  while ((c = getopt(argc, argv, "t:b:w:S:h")) != -1) {
    switch (c) {
    case 't':
      nthreads = bench_parse_threads(optarg, 't');
      break;
    case 'b':
      opt_bytes = bench_parse_u64(optarg, 'b');
      break;
    case 'w':
      opt_wait = bench_parse_double(optarg, 'w');
      break;
    case 'S':
      opt_seed = bench_parse_u64(optarg, 'S');
      break;
    default:
      usage();
    }
  }
  if (optind != argc || opt_bytes < 1) usage();

  long base = bench_rss_kib();
  pthread_t tid[BENCH_MAX_THREADS];
  for (unsigned i = 0; i < nthreads; i++) {
    workers[i].id = i;
    bench_spawn(&tid[i], run, &workers[i]);
  }
  for (unsigned i = 0; i < nthreads; i++) bench_join(tid[i]);
  long freed = bench_rss_kib();

  /* silence: only sleeps and raw reads of /proc, so nothing wakes the allocator */
  long at_half = -1, at_1s = -1, end = freed;
  double t0 = bench_now(), t;
  while ((t = bench_now() - t0) < opt_wait) {
    bench_sleep(0.05);
    end = bench_rss_kib();
    if (at_half < 0 && bench_now() - t0 >= 0.5) at_half = end;
    if (at_1s < 0 && bench_now() - t0 >= 1.0) at_1s = end;
  }
  uint64_t check = 0;
  for (unsigned i = 0; i < nthreads; i++) check += workers[i].check;
  bench_check_add(check);

  bench_result_begin("idle", nthreads, "idle_rss_mib", (double)end / 1024.0, "MiB");
  bench_kv_u64("bytes", opt_bytes);
  bench_kv_dbl("wait_s", opt_wait);
  bench_kv_u64("rss_base_kib", (uint64_t)base);
  bench_kv_u64("rss_after_free_kib", (uint64_t)freed);
  bench_kv_u64("rss_half_s_kib", (uint64_t)(at_half < 0 ? end : at_half));
  bench_kv_u64("rss_1s_kib", (uint64_t)(at_1s < 0 ? end : at_1s));
  bench_kv_u64("rss_end_kib", (uint64_t)end);
  bench_result_end();
  return 0;
}
