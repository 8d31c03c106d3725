/* realloc: growing buffers, as a log, a string builder or a vector does. Each thread grows
 * `-b` buffers in turn by `-s` bytes from one step up to `-M`, writing at the old and the new
 * end of each step and checking the first byte survived each move, then frees them; `-r`
 * rounds. A lone buffer (`-b 1`) can grow in place; interleaved ones make the allocator
 * move or place them around each other. Reports run time. */
#include "bench.h"

#define MAX_BUFFERS 64

struct worker {
  _Alignas(BENCH_CACHE_LINE) unsigned id;
  uint64_t moves; /* steps at which realloc returned a new address */
  uint64_t steps;
};

static struct worker workers[BENCH_MAX_THREADS];
static pthread_barrier_t start_barrier;
static struct bench_span span = BENCH_SPAN_INIT;
static uint64_t opt_buffers = 1, opt_step = 64 * 1024, opt_max = 24 << 20, opt_rounds = 20;

static void *run(void *arg) {
  struct worker *w = arg;
  char *buf[MAX_BUFFERS];
  size_t len[MAX_BUFFERS];
  uint64_t check = 0;
  pthread_barrier_wait(&start_barrier);
  bench_span_begin(&span);
  for (uint64_t r = 0; r < opt_rounds; r++) {
    for (size_t b = 0; b < opt_buffers; b++) {
      len[b] = (size_t)opt_step;
      buf[b] = bench_xmalloc(len[b]);
      buf[b][0] = (char)(b + r);
      buf[b][len[b] - 1] = 1;
    }
    for (size_t n = 2 * (size_t)opt_step; n <= opt_max; n += (size_t)opt_step) {
      for (size_t b = 0; b < opt_buffers; b++) {
        char *q = realloc(buf[b], n);
        if (!q) bench_die("realloc(%zu) failed", n);
        if (q[0] != (char)(b + r)) bench_die("realloc lost the first byte of buffer %zu", b);
        w->moves += q != buf[b];
        w->steps++;
        check += (unsigned char)q[len[b] - 1]; /* the old end: written at the last step */
        q[n - 1] = 1;
        buf[b] = q;
        len[b] = n;
      }
    }
    for (size_t b = 0; b < opt_buffers; b++) free(buf[b]);
  }
  bench_span_end(&span);
  bench_check_add(check);
  return NULL;
}

int main(int argc, char **argv) {
  unsigned threads = 1;
  int c;
  while ((c = getopt(argc, argv, "t:b:s:M:r:h")) != -1) {
    switch (c) {
    case 't':
      threads = bench_parse_threads(optarg, 't');
      break;
    case 'b':
      opt_buffers = bench_parse_u64(optarg, 'b');
      break;
    case 's':
      opt_step = bench_parse_u64(optarg, 's');
      break;
    case 'M':
      opt_max = bench_parse_u64(optarg, 'M');
      break;
    case 'r':
      opt_rounds = bench_parse_u64(optarg, 'r');
      break;
    default:
      fprintf(stderr,
              "usage: realloc [-t threads] [-b buffers] [-s step] [-M max] [-r rounds]\n"
              "  -b  buffers grown in turn per thread (1, max %d)\n"
              "  -s  growth step in bytes (65536)   -M size they grow to (25165824)\n"
              "  -r  rounds of growing and freeing them (20)\n",
              MAX_BUFFERS);
      return 2;
    }
  }
  if (optind != argc || opt_buffers < 1 || opt_buffers > MAX_BUFFERS || opt_step < 1 ||
      opt_max < 2 * opt_step) {
    fprintf(stderr, "realloc: bad arguments (try -h)\n");
    return 2;
  }
  bench_barrier_init(&start_barrier, threads);
  pthread_t tid[BENCH_MAX_THREADS];
  for (unsigned i = 0; i < threads; i++) {
    workers[i].id = i;
    bench_spawn(&tid[i], run, &workers[i]);
  }
  uint64_t moves = 0, steps = 0;
  for (unsigned i = 0; i < threads; i++) {
    bench_join(tid[i]);
    moves += workers[i].moves;
    steps += workers[i].steps;
  }
  double elapsed = bench_span_seconds(&span);
  bench_live_note_peak((int64_t)(threads * opt_buffers * opt_max));
  bench_result_begin("realloc", threads, "time_s", elapsed, "s");
  bench_kv_u64("ops", steps); /* realloc calls */
  bench_kv_u64("steps", steps);
  bench_kv_u64("moves", moves);
  bench_kv_u64("buffers", opt_buffers);
  bench_kv_u64("step", opt_step);
  bench_kv_u64("max", opt_max);
  bench_kv_u64("rounds", opt_rounds);
  bench_result_end();
  return 0;
}
