/* idle: a server's burst then silence. Threads fill -b bytes with objects of -m..-M bytes
 * (16..1024), touch them and free them all; then the program makes no allocator call for -w seconds
 * while it samples RSS. The metric is RSS at the end of the wait: what an idle server keeps of its
 * burst (LKmalloc sec. 4, stability over days; the purge delay of the "give memory back" issue).
 * By default the threads exit before the wait; with -k they stay, blocked, as a thread pool's
 * workers wait for the next request, so what each thread's heap holds counts too. With -f the
 * main thread forks every few ms through the wait (the child exits at once) and reports how
 * long fork() took in the parent: a fork waits for what the allocator's fork handler locks,
 * such as a purge pass in flight, and copies the page tables of what is still resident. */
#include "bench.h"

#include <sys/wait.h>

struct node {
  struct node *next;
};

struct worker {
  _Alignas(BENCH_CACHE_LINE) unsigned id;
  uint64_t check;
};

static struct worker workers[BENCH_MAX_THREADS];
static uint64_t opt_bytes = 256ull << 20, opt_seed = 1, opt_min = 16, opt_max = 1024;
static double opt_wait = 3.0, opt_fork_ms = 0;
static unsigned nthreads = 1;
static bool opt_keep;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cond = PTHREAD_COND_INITIALIZER;
static unsigned pool_done; /* -k: workers that have freed their burst */
static bool pool_quit;     /* -k: the wait is over */

static void *run(void *arg) {
  struct worker *w = arg;
  struct bench_rng r;
  bench_rng_seed(&r, opt_seed, w->id);
  struct node *head = NULL;
  uint64_t got = 0, target = opt_bytes / nthreads, check = 0;
  while (got < target) {
    size_t n = bench_rng_range(&r, (size_t)opt_min, (size_t)opt_max);
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
  if (opt_keep) { /* a pool worker between requests: alive, blocked, making no calls */
    pthread_mutex_lock(&pool_lock);
    pool_done++;
    pthread_cond_broadcast(&pool_cond);
    while (!pool_quit) pthread_cond_wait(&pool_cond, &pool_lock);
    pthread_mutex_unlock(&pool_lock);
  }
  return NULL;
}

static void usage(void) {
  fprintf(stderr,
          "usage: idle [-t threads] [-b bytes] [-m min] [-M max] [-w seconds] [-k] [-S seed]\n"
          "  -b  bytes of objects to allocate and free (256M)\n"
          "  -m/-M  object size range in bytes, inclusive (16..1024)\n"
          "  -w  idle seconds after the frees, no allocator calls (3)\n"
          "  -k  the threads stay alive and blocked through the wait (a thread pool)\n"
          "  -f  fork every this many ms through the wait and time each fork (off)\n");
  exit(2);
}

int main(int argc, char **argv) {
  int c;
  while ((c = getopt(argc, argv, "t:b:m:M:w:kf:S:h")) != -1) {
    switch (c) {
    case 't':
      nthreads = bench_parse_threads(optarg, 't');
      break;
    case 'b':
      opt_bytes = bench_parse_u64(optarg, 'b');
      break;
    case 'm':
      opt_min = bench_parse_u64(optarg, 'm');
      break;
    case 'M':
      opt_max = bench_parse_u64(optarg, 'M');
      break;
    case 'w':
      opt_wait = bench_parse_double(optarg, 'w');
      break;
    case 'k':
      opt_keep = true;
      break;
    case 'f':
      opt_fork_ms = bench_parse_double(optarg, 'f');
      break;
    case 'S':
      opt_seed = bench_parse_u64(optarg, 'S');
      break;
    default:
      usage();
    }
  }
  if (optind != argc || opt_bytes < 1 || opt_min < sizeof(struct node) || opt_max < opt_min)
    usage();

  long base = bench_rss_kib();
  pthread_t tid[BENCH_MAX_THREADS];
  for (unsigned i = 0; i < nthreads; i++) {
    workers[i].id = i;
    bench_spawn(&tid[i], run, &workers[i]);
  }
  if (opt_keep) {
    pthread_mutex_lock(&pool_lock);
    while (pool_done < nthreads) pthread_cond_wait(&pool_cond, &pool_lock);
    pthread_mutex_unlock(&pool_lock);
  } else {
    for (unsigned i = 0; i < nthreads; i++) bench_join(tid[i]);
  }
  long freed = bench_rss_kib();

  /* silence: only sleeps and raw reads of /proc, so nothing wakes the allocator
   * (with -f, forks too: the point is what they wait for) */
  long at_half = -1, at_1s = -1, end = freed;
  double t0 = bench_now(), t, fork_sum = 0, fork_max = 0;
  uint64_t forks = 0;
  while ((t = bench_now() - t0) < opt_wait) {
    if (opt_fork_ms > 0) {
      double a = bench_now();
      pid_t p = fork();
      if (p == 0) _exit(0);
      double d = bench_now() - a;
      if (p < 0) {
        perror("idle: fork");
        exit(1);
      }
      waitpid(p, NULL, 0);
      fork_sum += d;
      fork_max = d > fork_max ? d : fork_max;
      forks++;
      bench_sleep(opt_fork_ms / 1000.0);
    } else {
      bench_sleep(0.05);
    }
    end = bench_rss_kib();
    if (at_half < 0 && bench_now() - t0 >= 0.5) at_half = end;
    if (at_1s < 0 && bench_now() - t0 >= 1.0) at_1s = end;
  }
  if (opt_keep) {
    pthread_mutex_lock(&pool_lock);
    pool_quit = true;
    pthread_cond_broadcast(&pool_cond);
    pthread_mutex_unlock(&pool_lock);
    for (unsigned i = 0; i < nthreads; i++) bench_join(tid[i]);
  }
  uint64_t check = 0;
  for (unsigned i = 0; i < nthreads; i++) check += workers[i].check;
  bench_check_add(check);

  bench_result_begin(opt_keep ? "idle-pool" : "idle", nthreads, "idle_rss_mib",
                     (double)end / 1024.0, "MiB");
  bench_kv_u64("bytes", opt_bytes);
  bench_kv_u64("min", opt_min);
  bench_kv_u64("max", opt_max);
  bench_kv_dbl("wait_s", opt_wait);
  bench_kv_u64("rss_base_kib", (uint64_t)base);
  bench_kv_u64("rss_after_free_kib", (uint64_t)freed);
  bench_kv_u64("rss_half_s_kib", (uint64_t)(at_half < 0 ? end : at_half));
  bench_kv_u64("rss_1s_kib", (uint64_t)(at_1s < 0 ? end : at_1s));
  bench_kv_u64("rss_end_kib", (uint64_t)end);
  if (forks) {
    bench_kv_u64("forks", forks);
    bench_kv_dbl("fork_mean_ms", fork_sum / (double)forks * 1000.0);
    bench_kv_dbl("fork_max_ms", fork_max * 1000.0);
  }
  bench_result_end();
  return 0;
}
