/* realtime: a real-time thread beside normal ones on one CPU, as an audio or control loop
 * runs beside a program's workers. Every period the SCHED_FIFO thread wakes, allocates a
 * burst of blocks, touches and frees them; t normal threads pinned to the same CPU allocate
 * and free batches of blocks meanwhile, so the real-time thread often preempts one inside
 * the allocator. An allocator whose waiter for a lock only spins or yields never lets the
 * preempted holder run (a real-time thread yields to no lower priority), and the burst waits
 * for the kernel's real-time throttling, about a second. Reports the longest burst, and its
 * percentiles: the predictable latency LKmalloc sec. 3 asks of a server's allocator. Needs
 * the right to SCHED_FIFO (root, CAP_SYS_NICE or RLIMIT_RTPRIO); without it the thread runs
 * at normal priority and the RESULT line says rt=0. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>

#include "bench.h"

static uint64_t opt_period_us = 1000, opt_burst = 32, opt_batch = 2000, opt_min = 16,
                opt_max = 16384, opt_seed = 1;
static double opt_seconds = 3.0;
static atomic_bool stop;
static uint64_t *lat_ns; /* one per burst */
static size_t nlat, cap_lat;
static bool rt_ok;

static void pin_cpu0(void) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(0, &s);
  int rc = pthread_setaffinity_np(pthread_self(), sizeof s, &s);
  if (rc != 0) bench_die("pthread_setaffinity_np: %s", strerror(rc));
}

/* k random blocks into v, each touched, then all freed; returns their first bytes' sum. */
static uint64_t round_trip(struct bench_rng *rng, char **v, uint64_t k) {
  uint64_t check = 0;
  for (uint64_t i = 0; i < k; i++) {
    size_t n = bench_rng_range(rng, opt_min, opt_max);
    v[i] = bench_xmalloc(n);
    v[i][0] = (char)n;
  }
  for (uint64_t i = 0; i < k; i++) {
    check += (unsigned char)v[i][0];
    free(v[i]);
  }
  return check;
}

/* A normal thread: batches of random blocks, allocated, touched and freed. */
static void *worker(void *arg) {
  pin_cpu0();
  struct bench_rng rng;
  bench_rng_seed(&rng, opt_seed, (uint64_t)(uintptr_t)arg);
  char **v = bench_xmalloc(opt_batch * sizeof *v);
  uint64_t check = 0;
  while (!atomic_load_explicit(&stop, memory_order_relaxed))
    check += round_trip(&rng, v, opt_batch);
  free(v);
  bench_check_add(check);
  return NULL;
}

static void *realtime(void *arg) {
  (void)arg;
  pin_cpu0();
  struct sched_param p = {.sched_priority = 1};
  rt_ok = pthread_setschedparam(pthread_self(), SCHED_FIFO, &p) == 0;
  struct bench_rng rng;
  bench_rng_seed(&rng, opt_seed, 999);
  char **v = bench_xmalloc(opt_burst * sizeof *v);
  uint64_t check = 0;
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  while (!atomic_load_explicit(&stop, memory_order_relaxed) && nlat < cap_lat) {
    next.tv_nsec += (long)(opt_period_us * 1000);
    while (next.tv_nsec >= 1000000000L) {
      next.tv_nsec -= 1000000000L;
      next.tv_sec++;
    }
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    uint64_t t0 = bench_now_ns();
    check += round_trip(&rng, v, opt_burst);
    lat_ns[nlat++] = bench_now_ns() - t0;
    /* a burst that ran past its period: the next starts from now, not in a catch-up rush */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec > next.tv_sec || (now.tv_sec == next.tv_sec && now.tv_nsec > next.tv_nsec))
      next = now;
  }
  free(v);
  bench_check_add(check);
  return NULL;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}
static double pct_us(double q) {
  if (!nlat) return 0.0;
  size_t i = (size_t)(q * (double)(nlat - 1) + 0.5);
  return (double)lat_ns[i] / 1e3;
}

int main(int argc, char **argv) {
  unsigned threads = 2;
  int c;
  while ((c = getopt(argc, argv, "t:d:p:b:n:m:M:S:h")) != -1) {
    switch (c) {
    case 't':
      threads = bench_parse_threads(optarg, 't');
      break;
    case 'd':
      opt_seconds = bench_parse_double(optarg, 'd');
      break;
    case 'p':
      opt_period_us = bench_parse_u64(optarg, 'p');
      break;
    case 'b':
      opt_burst = bench_parse_u64(optarg, 'b');
      break;
    case 'n':
      opt_batch = bench_parse_u64(optarg, 'n');
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
      fprintf(stderr,
              "usage: realtime [-t normal threads (2)] [-d seconds (3)] [-p period us (1000)]\n"
              "  [-b burst blocks (32)] [-n worker batch (2000)] [-m/-M sizes (16, 16384)]\n");
      return 2;
    }
  }
  if (optind != argc || opt_period_us < 1 || opt_burst < 1 || opt_batch < 1 || opt_min < 1 ||
      opt_max < opt_min || opt_seconds <= 0) {
    fprintf(stderr, "realtime: bad arguments (try -h)\n");
    return 2;
  }
  cap_lat = (size_t)(opt_seconds * 1e6 / (double)opt_period_us) + 1;
  lat_ns = bench_xmalloc(cap_lat * sizeof *lat_ns);

  pthread_t w[BENCH_MAX_THREADS], r;
  for (unsigned i = 0; i < threads; i++) bench_spawn(&w[i], worker, (void *)(uintptr_t)i);
  bench_spawn(&r, realtime, NULL);
  bench_sleep(opt_seconds);
  atomic_store(&stop, true);
  bench_join(r);
  for (unsigned i = 0; i < threads; i++) bench_join(w[i]);

  qsort(lat_ns, nlat, sizeof *lat_ns, cmp_u64);
  size_t over_ms = 0;
  for (size_t i = 0; i < nlat; i++) over_ms += lat_ns[i] > 1000000;
  double max_us = nlat ? (double)lat_ns[nlat - 1] / 1e3 : 0.0;
  bench_result_begin("realtime", threads, "max_us", max_us, "us");
  bench_kv_u64("rt", rt_ok);
  bench_kv_u64("bursts", nlat);
  bench_kv_u64("over_1ms", over_ms);
  bench_kv_dbl("p50_us", pct_us(0.50));
  bench_kv_dbl("p99_us", pct_us(0.99));
  bench_kv_dbl("p999_us", pct_us(0.999));
  bench_kv_u64("period_us", opt_period_us);
  bench_kv_u64("burst", opt_burst);
  bench_result_end();
  free(lat_ns);
  return 0;
}
