/* fork: what a fork costs a small program under the allocator. The parent's threads hold a
 * working set of blocks of many sizes, most of the rest freed (so the allocator's pool and
 * tables are in use); the main thread then forks -n times, each child allocates and frees a
 * few blocks (a pre-forked worker's first request, LKmalloc sec. 3's servers) and exits, and
 * the parent waits for it. Reports microseconds per fork, exit and wait: the page tables and
 * memory-map entries the kernel copies, the allocator's fork handlers, and the pages both
 * processes then copy on write. Shells, build tools and pre-forking servers pay it per
 * process they start. */
#include "bench.h"

#include <sys/resource.h>
#include <sys/wait.h>

static pthread_barrier_t ready, done;
static uint64_t opt_blocks = 4000;

static size_t block_size(uint64_t i, int round, unsigned id) {
  return 8 + (size_t)((i * 97 + (uint64_t)round * 13 + id * 7) % 6000);
}

/* A working set of blocks of 8 B - 6 KiB, of which a seventh stays live. */
static void **working_set(unsigned id, int64_t *live) {
  void **v = bench_xmalloc(opt_blocks * sizeof *v);
  for (int round = 0; round < 4; round++) {
    for (uint64_t i = 0; i < opt_blocks; i++) {
      v[i] = bench_xmalloc(block_size(i, round, id));
      *(char *)v[i] = 1;
    }
    for (uint64_t i = 0; i < opt_blocks; i++)
      if (i % 7 || round < 3) {
        free(v[i]);
        v[i] = NULL;
      } else
        *live += (int64_t)block_size(i, round, id);
  }
  return v;
}

static void drop(void **v) {
  for (uint64_t i = 0; i < opt_blocks; i++) free(v[i]);
  free(v);
}

/* The other threads: their working sets live through the forks, as a server's do. */
static void *idle_thread(void *arg) {
  int64_t live = 0;
  void **v = working_set((unsigned)(uintptr_t)arg, &live);
  pthread_barrier_wait(&ready);
  pthread_barrier_wait(&done);
  drop(v);
  return NULL;
}

int main(int argc, char **argv) {
  unsigned threads = 1;
  uint64_t forks = 2000;
  int c;
  while ((c = getopt(argc, argv, "t:n:b:h")) != -1) {
    switch (c) {
    case 't':
      threads = bench_parse_threads(optarg, 't');
      break;
    case 'n':
      forks = bench_parse_u64(optarg, 'n');
      break;
    case 'b':
      opt_blocks = bench_parse_u64(optarg, 'b');
      break;
    default:
      fprintf(stderr, "usage: fork [-t threads] [-n forks] [-b blocks]\n"
                      "  -t  threads holding a working set while main forks (1)\n"
                      "  -n  forks, each child allocating a little and exiting (2000)\n"
                      "  -b  blocks of 8 B - 6 KiB per thread, 4 rounds, a seventh kept (4000)\n");
      return 2;
    }
  }
  if (optind != argc || forks < 1 || opt_blocks < 1) {
    fprintf(stderr, "fork: bad arguments (try -h)\n");
    return 2;
  }
  pthread_barrier_init(&ready, NULL, threads);
  pthread_barrier_init(&done, NULL, threads);
  pthread_t *th = bench_xmalloc(threads * sizeof *th);
  for (unsigned i = 1; i < threads; i++)
    if (pthread_create(&th[i], NULL, idle_thread, (void *)(uintptr_t)i))
      bench_die("pthread_create failed");
  int64_t live = 0;
  void **mine = working_set(0, &live);
  pthread_barrier_wait(&ready);
  bench_live_note_peak(live * (int64_t)threads);

  /* what the kernel copies at each fork: the parent's anonymous pages' page
   * tables (VmPTE) and its mappings; read before the forks, stdio allowed */
  long anon_kib = bench_status_kib("RssAnon:"), pte_kib = bench_status_kib("VmPTE:");
  long mappings = bench_maps_kib(true);
  struct rusage self0, kids0, self1, kids1;
  getrusage(RUSAGE_SELF, &self0);
  getrusage(RUSAGE_CHILDREN, &kids0);
  double t0 = bench_now();
  for (uint64_t k = 0; k < forks; k++) {
    pid_t pid = fork();
    if (pid < 0) bench_die("fork failed");
    if (pid == 0) {
      void *p[16];
      for (int i = 0; i < 16; i++) {
        p[i] = malloc(16 + (size_t)i * 100);
        if (!p[i]) _exit(3);
        *(char *)p[i] = (char)i;
      }
      for (int i = 0; i < 16; i++) free(p[i]);
      _exit(0);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
      bench_die("a child failed");
  }
  double elapsed = bench_now() - t0;
  getrusage(RUSAGE_SELF, &self1);
  getrusage(RUSAGE_CHILDREN, &kids1);

  pthread_barrier_wait(&done);
  for (unsigned i = 1; i < threads; i++) pthread_join(th[i], NULL);
  drop(mine);
  free(th);
  bench_result_begin("fork", threads, "us_per_fork", elapsed * 1e6 / (double)forks, "us");
  bench_kv_u64("forks", forks);
  bench_kv_dbl("elapsed_s", elapsed);
  bench_kv_u64("blocks", opt_blocks);
  /* minor faults a fork in the parent (its pages written after the fork,
   * copied on write) and in each child */
  bench_kv_dbl("parent_faults", (double)(self1.ru_minflt - self0.ru_minflt) / (double)forks);
  bench_kv_dbl("child_faults", (double)(kids1.ru_minflt - kids0.ru_minflt) / (double)forks);
  bench_kv_u64("rss_anon_kib", (uint64_t)anon_kib);
  bench_kv_u64("vm_pte_kib", (uint64_t)pte_kib);
  bench_kv_u64("mappings", (uint64_t)mappings);
  bench_result_end();
  return 0;
}
