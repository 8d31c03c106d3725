/* test_purger.c - proves the background purger gives the pages of freed
 * spans back while the program is idle: no allocator call runs after the
 * frees, yet RSS falls. Also: the thread starts only once the pool holds
 * pages or the program has grown 1 MiB, blocks every signal, and comes back
 * in a forked child.
 *
 *   test_purger            run with RILL_PURGE_THREAD=1 (CTest sets it)
 *   test_purger --auto     run with the default (auto): no purger while the
 *                          process has one thread, in the parent or in a
 *                          forked child; one, returning RSS, once a second
 *                          thread has allocated
 *   test_purger --large    run with RILL_PURGE_THREAD=1: only large blocks,
 *                          freed with no allocation after them
 *   test_purger --free-only  run with the default: main allocates alone, a
 *                          second thread frees it all and exits, and no
 *                          allocation follows: the exit starts the purger
 *   test_purger --buffers  run with the defaults: two threads free 512 MiB
 *                          of 16-64 KiB buffers and exit; RSS falls to 4
 *                          MiB over the start within the delay and 3 s
 *                          (the purger's passes take many batches of free
 *                          runs, and the runs' span entries go too)
 *   test_purger --small-burst  the same with 16-1024 B objects (pooled
 *                          spans, whose entries go back too); CTest runs it
 *                          with RILL_HUGEPAGES=0 and 1,
 *                          and built as test_purger_bigtls, whose 1 MiB of
 *                          static TLS does not fit the purger's usual stack
 *   test_purger --pool-burst  eight workers free 512 MiB of 16-1024 B objects
 *                          and stay alive, waiting; CTest runs it with
 *                          RILL_HUGEPAGES=0 and 1
 *   test_purger --control  run with RILL_PURGE_THREAD=0 and a second thread:
 *                          RSS must stay up while idle, which shows the other
 *                          runs measure the purger, not chance */
#include "rill_test.h"

#include <dirent.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

/* RSS without stdio: fopen would allocate, and the idle phase must not. */
static size_t rss_raw(void) {
  char buf[128];
  int fd = open("/proc/self/statm", O_RDONLY);
  if (fd < 0) DIE("cannot open /proc/self/statm");
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) DIE("cannot read /proc/self/statm");
  buf[n] = 0;
  const char *s = buf;
  while (*s && *s != ' ') s++;
  return (size_t)strtoul(s, NULL, 10) * page_size();
}

static void sleep_ms(unsigned ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

struct node {
  struct node *next;
};

/* Fills `bytes` with objects of lo..lo+span-1 bytes, touching them: a list. */
static struct node *fill_sized(size_t bytes, uint64_t seed, size_t lo, size_t span) {
  struct node *head = NULL;
  size_t got = 0;
  while (got < bytes) {
    size_t n = lo + (size_t)(rng_next(&seed) % span);
    struct node *o = keep(malloc(n));
    if (!o) DIE("malloc(%zu) failed after %zu bytes", n, got);
    memset(o, 0x5a, n);
    o->next = head;
    head = o;
    got += n;
  }
  return head;
}

/* Small objects, 16..1024 B. */
static struct node *fill(size_t bytes, uint64_t seed) {
  return fill_sized(bytes, seed, 16, 1009);
}

static void free_list(struct node *head) {
  while (head) {
    struct node *next = head->next;
    free(head);
    head = next;
  }
}

/* Fills `bytes` with small objects and frees them all. */
static void burst(size_t bytes, uint64_t seed) {
  free_list(fill(bytes, seed));
}

/* Waits idle, reading RSS, until it is under `limit` or `ms` pass. */
static size_t idle_until_below(size_t limit, unsigned ms) {
  size_t r = rss_raw();
  for (unsigned t = 0; t < ms && r >= limit; t += 50) {
    sleep_ms(50);
    r = rss_raw();
  }
  return r;
}

static void check_idle_return(const char *who, size_t base, size_t bytes) {
  burst(bytes, 12345);
  size_t after_free = rss_raw();
  size_t end = idle_until_below(base + bytes / 8 + debug_shadow_bytes(bytes), 6000);
  printf("%s: RSS %zu MiB at start, %zu MiB right after freeing %zu MiB, %zu MiB after idling\n",
         who, base / MiB, after_free / MiB, bytes / MiB, end / MiB);
  CHECK(end < base + bytes / 8 + debug_shadow_bytes(bytes),
        "%s: idle RSS stayed at %zu MiB (start %zu MiB, %zu MiB freed): the purger gave "
        "nothing back",
        who, end / MiB, base / MiB, bytes / MiB);
}

static void *one_malloc(void *arg) {
  free(keep(malloc(64)));
  return arg;
}

/* A second thread that allocates and exits: the process is multithreaded. */
static void second_thread(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, one_malloc, NULL) != 0) DIE("pthread_create failed");
  pthread_join(t, NULL);
}

/* Without a second thread, the default keeps the pages of a burst while idle
 * (as the control run does) and starts no thread. */
static void check_single_keeps(const char *who, size_t base, size_t bytes) {
  bool blocked;
  burst(bytes, 777);
  size_t end = idle_until_below(base + bytes / 8, 1500);
  printf("%s: RSS %zu MiB at start, %zu MiB after 1.5 s idle with one thread\n", who, base / MiB,
         end / MiB);
  CHECK(t_purger_threads(&blocked) == 0, "%s: a purger thread runs in a single-threaded process",
        who);
  CHECK(end >= base + bytes / 2, "%s: single-threaded idle RSS fell to %zu MiB with no purger", who,
        end / MiB);
}

/* Runs body in a forked child, whose failed checks make its exit status,
 * and checks that it passed. */
static void run_forked(void (*body)(size_t), size_t bytes) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) DIE("fork failed");
  if (pid == 0) {
    body(bytes);
    fflush(stdout);
    _exit(atomic_load(&t_failures) ? 1 : 0);
  }
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) DIE("waitpid failed");
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the forked child failed (status %d)", st);
}

/* Default mode, in a child: single-threaded again, so no purger until it
 * runs a second thread. */
static void auto_child(size_t bytes) {
  bool blocked;
  size_t cbase = rss_raw();
  check_single_keeps("auto, forked child", cbase, bytes / 2);
  rill_collect(true);
  second_thread();
  check_idle_return("auto, forked child after a second thread", cbase, bytes / 2);
  CHECK(t_purger_threads(&blocked) == 1, "auto: the forked child has no purger thread");
}

/* RILL_PURGE_THREAD=1, in a child: a purger of its own at once. */
static void parent_child(size_t bytes) {
  bool blocked;
  size_t cbase = rss_raw();
  check_idle_return("forked child", cbase, bytes / 2);
  CHECK(t_purger_threads(&blocked) == 1, "the forked child has no purger thread");
}

static int run_auto(size_t base, size_t bytes) {
  bool blocked;
  check_single_keeps("auto, one thread", base, bytes);
  rill_collect(true); /* back to the start for the next phase */
  second_thread();
  check_idle_return("auto, after a second thread", base, bytes);
  CHECK(t_purger_threads(&blocked) == 1, "auto: expected one rill-purger thread");
  CHECK(blocked, "the purger thread does not block every signal");

  run_forked(auto_child, bytes);
  return t_finish("test_purger --auto");
}

/* Large objects alone: the first frees that give memory back are of large runs, and no
 * allocation follows them. Frees never start the purger (purger_start_slow), so it must have
 * started while the blocks were allocated: the program grew past 1 MiB. */
static int run_large(size_t base, size_t bytes) {
  enum { N = 16 };
  static char *b[N];
  size_t each = bytes / N;
  for (unsigned i = 0; i < N; i++) {
    b[i] = keep(malloc(each));
    if (!b[i]) DIE("malloc(%zu) failed", each);
    memset(b[i], 0x5a, each);
  }
  for (unsigned i = 0; i < N; i++) free(b[i]);
  size_t after_free = rss_raw(), limit = base + bytes / 8 + debug_shadow_bytes(bytes);
  size_t end = idle_until_below(limit, 6000);
  printf("large: RSS %zu MiB at start, %zu MiB right after freeing %zu MiB of %zu MiB blocks, "
         "%zu MiB after idling\n",
         base / MiB, after_free / MiB, bytes / MiB, each / MiB, end / MiB);
  CHECK(end < limit, "large: idle RSS stayed at %zu MiB after %zu MiB of large blocks were freed",
        end / MiB, bytes / MiB);
  bool blocked;
  CHECK(t_purger_threads(&blocked) == 1, "large: expected one rill-purger thread");
  return t_finish("test_purger --large");
}

/* Default mode. Main fills `bytes` while it is the only thread (no purger is
 * wanted yet); a second thread's first rill call is a free, which makes the
 * purger wanted, and it frees everything and exits. No allocation follows,
 * and frees never start the purger (purger_start_slow), so the thread's exit
 * must. */
static void *free_all(void *list) {
  free_list(list);
  return NULL;
}

static int run_free_only(size_t base, size_t bytes) {
  struct node *handed = fill(bytes, 777);
  bool blocked;
  CHECK(t_purger_threads(&blocked) == 0, "free-only: a purger runs in a single-threaded process");
  pthread_t t;
  if (pthread_create(&t, NULL, free_all, handed) != 0) DIE("pthread_create failed");
  pthread_join(t, NULL);
  size_t after_free = rss_raw(), limit = base + bytes / 8 + debug_shadow_bytes(bytes);
  size_t end = idle_until_below(limit, 6000);
  printf("free-only: RSS %zu MiB at start, %zu MiB after another thread freed %zu MiB and "
         "exited, %zu MiB after idling\n",
         base / MiB, after_free / MiB, bytes / MiB, end / MiB);
  CHECK(end < limit, "free-only: idle RSS stayed at %zu MiB: no purger started", end / MiB);
  CHECK(t_purger_threads(&blocked) == 1, "free-only: expected one rill-purger thread");
  return t_finish("test_purger --free-only");
}

/* Default mode. Two threads each fill half of `bytes` with blocks of
 * lo..lo+span-1 bytes, free them and exit; nothing follows. RSS must fall
 * to within 1/keep_div of the burst over the start within the purge delay
 * (the default, 1 s) and 3 s of slack for a loaded host.
 * --buffers: 16-64 KiB buffers (the block cache's classes, whose spans are
 * runs of runs.c). A timed pass gave back one batch of runs per shard, a
 * quarter delay apart, so 512 MiB of such runs took 6 s to go, and 2 GiB a
 * minute; the purger's passes take many batches now. And the span entries
 * of the runs' inner slots go with them: 256 bytes per 16 KiB slot, 8 MiB
 * of the 512, stayed resident before (arena_entries_release).
 * --small-burst: 16-1024 B objects, whose spans go to the pool. With
 * RILL_HUGEPAGES=1 timed passes give back whole huge pages only, and a huge
 * page of pooled spans of several orders was whole to none of them: 512 MiB
 * stayed for good; the pass over 2 MiB regions across the maps gives them
 * back (regions_purge, pool.c). The pooled spans' entries, 256 bytes per
 * 16 KiB slot (1/64 of the burst), stayed too: 11-15 MiB were left, and
 * 1/32 allowed for them. Once the pool settles they go back where a page
 * of them covers a map word's slots or fewer (entries_release): 4-6 MiB
 * are left, and 1/64 is the bound there. */
struct burst_arg {
  size_t bytes, lo, span;
};

#ifdef BIG_TLS
/* test_purger_bigtls: a program with 1 MiB of static TLS, which the C library
 * carves out of every thread's stack; the purger's 64 KiB could not hold it,
 * and by default the program ran without a purger (purger.c) */
static __thread volatile char big_tls[1 << 20];
#endif

static void *burst_thread(void *arg) {
  struct burst_arg *a = arg;
#ifdef BIG_TLS
  big_tls[a->bytes % sizeof big_tls] = 1;
#endif
  free_list(fill_sized(a->bytes, (uintptr_t)arg + a->lo, a->lo, a->span));
  return NULL;
}

static int run_burst(const char *who, size_t base, size_t bytes, size_t lo, size_t span,
                     size_t keep_div) {
  pthread_t t[2];
  struct burst_arg a = {bytes / 2, lo, span};
  for (unsigned i = 0; i < 2; i++)
    if (pthread_create(&t[i], NULL, burst_thread, &a) != 0) DIE("pthread_create failed");
  for (unsigned i = 0; i < 2; i++) pthread_join(t[i], NULL);
  const char *d = getenv("RILL_PURGE_DELAY_MS");
  unsigned delay = d ? (unsigned)atoi(d) : 1000, wait = delay + 3000;
  size_t after_free = rss_raw(), limit = base + bytes / keep_div + debug_shadow_bytes(bytes);
  size_t end = idle_until_below(limit, wait);
  printf("%s: RSS %zu MiB at start, %zu MiB after two threads freed %zu MiB of %zu-%zu B "
         "blocks and exited, %zu KiB after %u ms idle at most\n",
         who, base / MiB, after_free / MiB, bytes / MiB, lo, lo + span - 1, end / 1024, wait);
  CHECK(after_free >= base + bytes / 2, "%s: the burst never was resident (%zu MiB)", who,
        after_free / MiB);
  CHECK(end < limit, "%s: idle RSS still %zu MiB %u ms after the threads freed %zu MiB", who,
        end / MiB, wait, bytes / MiB);
  bool blocked;
  CHECK(t_purger_threads(&blocked) == 1, "%s: no purger thread after two threads allocated", who);
  return t_finish(who);
}

/* --pool-burst: eight workers of a thread pool each fill and free a part of
 * `bytes` of 16-1024 B objects, then wait on a condition variable, alive,
 * while main idles. Their heaps stay, so the purger lends their hot spans
 * and sweeps their lists. With RILL_HUGEPAGES=1 the huge pages those share
 * with pooled spans stayed whole until the settle split them (pool.c,
 * settle_split): 43-55 MiB of 256 stayed (bench_idle -t 8 -k), 4.5-6.2 MiB
 * now, 3.2 without the option. RSS must fall under a 64th of the burst over
 * the start within the delay and three seconds. */
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cv = PTHREAD_COND_INITIALIZER;
static unsigned pool_done;
static bool pool_quit;

static void *pool_worker(void *arg) {
  struct burst_arg *a = arg;
  free_list(fill_sized(a->bytes, (uintptr_t)&pool_done + a->lo, a->lo, a->span));
  pthread_mutex_lock(&pool_mu);
  pool_done++;
  pthread_cond_broadcast(&pool_cv);
  while (!pool_quit) pthread_cond_wait(&pool_cv, &pool_mu);
  pthread_mutex_unlock(&pool_mu);
  return NULL;
}

static int run_pool_burst(const char *who, size_t base, size_t bytes) {
  enum { WORKERS = 8 };
  pthread_t t[WORKERS];
  struct burst_arg a = {bytes / WORKERS, 16, 1009};
  for (unsigned i = 0; i < WORKERS; i++)
    if (pthread_create(&t[i], NULL, pool_worker, &a) != 0) DIE("pthread_create failed");
  pthread_mutex_lock(&pool_mu);
  while (pool_done < WORKERS) pthread_cond_wait(&pool_cv, &pool_mu);
  pthread_mutex_unlock(&pool_mu);
  const char *d = getenv("RILL_PURGE_DELAY_MS");
  unsigned delay = d ? (unsigned)atoi(d) : 1000, wait = delay + 3000;
  const char *commit = getenv("RILL_COMMIT"); /* a decommitted stretch keeps its entries */
  bool entries_go = sysconf(_SC_PAGESIZE) <= 16384 && !(commit && !strcmp(commit, "demand"));
  size_t after_free = rss_raw();
  size_t limit = base + bytes / (entries_go ? 64 : 32) + debug_shadow_bytes(bytes);
  size_t end = idle_until_below(limit, wait);
  printf("%s: RSS %zu MiB at start, %zu MiB after %u live workers freed %zu MiB of 16-1024 B "
         "blocks, %zu KiB after %u ms idle at most\n",
         who, base / MiB, after_free / MiB, (unsigned)WORKERS, bytes / MiB, end / 1024, wait);
  CHECK(end < limit, "%s: idle RSS still %zu MiB %u ms after %u live workers freed %zu MiB", who,
        end / MiB, wait, (unsigned)WORKERS, bytes / MiB);
  pthread_mutex_lock(&pool_mu);
  pool_quit = true;
  pthread_cond_broadcast(&pool_cv);
  pthread_mutex_unlock(&pool_mu);
  for (unsigned i = 0; i < WORKERS; i++) pthread_join(t[i], NULL);
  return t_finish(who);
}

int main(int argc, char **argv) {
  bool control = argc > 1 && strcmp(argv[1], "--control") == 0;
  bool autom = argc > 1 && strcmp(argv[1], "--auto") == 0;
  const size_t bytes = 128 * MiB;
  bool blocked;

  free(keep(malloc(64))); /* rill is up; nothing pooled yet */
  size_t base = rss_raw();
  CHECK(t_purger_threads(&blocked) == 0,
        "a purger thread runs before the pool held pages or the program grew");
  if (autom) return run_auto(base, bytes);
  if (argc > 1 && strcmp(argv[1], "--free-only") == 0) return run_free_only(base, bytes);
  if (argc > 1 && strcmp(argv[1], "--large") == 0) return run_large(base, bytes);
  if (argc > 1 && strcmp(argv[1], "--buffers") == 0)
    return run_burst("test_purger --buffers", base, 4 * bytes, 16384, 49153, 128);
  if (argc > 1 && strcmp(argv[1], "--pool-burst") == 0)
    return run_pool_burst("test_purger --pool-burst", base, 4 * bytes);
  if (argc > 1 && strcmp(argv[1], "--small-burst") == 0) {
    const char *commit = getenv("RILL_COMMIT"); /* a decommitted stretch keeps its entries */
    bool entries_go = sysconf(_SC_PAGESIZE) <= 16384 && !(commit && !strcmp(commit, "demand"));
    return run_burst("test_purger --small-burst", base, 4 * bytes, 16, 1009, entries_go ? 64 : 32);
  }

  if (control) {
    second_thread(); /* RILL_PURGE_THREAD=0 holds even in a multithreaded process */
    burst(bytes, 12345);
    size_t end = idle_until_below(base + bytes / 8, 1500);
    printf("control: RSS %zu MiB at start, %zu MiB after 1.5 s idle without the purger\n",
           base / MiB, end / MiB);
    CHECK(end >= base + bytes / 2,
          "with RILL_PURGE_THREAD=0 idle RSS fell to %zu MiB: the purger run proves nothing",
          end / MiB);
    CHECK(t_purger_threads(&blocked) == 0, "a purger thread runs with RILL_PURGE_THREAD=0");
    return t_finish("test_purger --control");
  }

  check_idle_return("parent", base, bytes);
  CHECK(t_purger_threads(&blocked) == 1, "expected one rill-purger thread");
  CHECK(blocked, "the purger thread does not block every signal");

  /* a second burst after the purger went back to sleep is purged too */
  check_idle_return("parent, second burst", base, bytes);

  run_forked(parent_child, bytes);
  return t_finish("test_purger");
}
