/* test_threads.c - thousands of threads live at once, then joined. Joining them
 * fills the C library's cache of thread stacks past its bound, and it frees the
 * cached stacks' TLS blocks, through rill's free, while it holds the cache's
 * lock, which pthread_create takes too. rill once started its purger thread
 * from such a free and deadlocked (purger_start_slow). Also checks that every
 * thread's blocks stay intact, that the threads' heaps are given up, and that
 * a crowd of threads does not cost a span per thread and class: past a few
 * dozen threads, a thread's first blocks of a class are young blocks of a
 * shared heap (src/heap.c), each on cache lines of its own, and that the shared
 * heaps' spans a crowd left partly free serve the next thread's blocks.
 * usage: test_threads [threads]   (default 2000, 64 KiB stacks) */
#include "rill_test.h"

#include <pthread.h>
#include <sys/wait.h>

enum { BLOCKS = 64 };
static pthread_barrier_t all_up, go;

static void *worker(void *arg) {
  (void)arg;
  void *b[BLOCKS];
  size_t n[BLOCKS];
  for (unsigned i = 0; i < BLOCKS; i++) {
    n[i] = 16 + (size_t)i * 8; /* 16-520 B: one span of each of many classes */
    b[i] = T_malloc(n[i]);
    if (!b[i]) DIE("malloc(%zu) failed in a thread", n[i]);
    pat_fill(b[i], n[i], pat_seed(b[i], n[i]));
  }
  pthread_barrier_wait(&all_up); /* every thread live, with its blocks, at once */
  pthread_barrier_wait(&go);     /* main has counted the heaps */
  for (unsigned i = 0; i < BLOCKS; i++) {
    PAT_CHECK(b[i], n[i], pat_seed(b[i], n[i]), "thread's block %u", i);
    T_free(b[i]);
  }
  return NULL;
}

/* The fresh thread of `young_lines`: its first malloc(16)s, then more after them. */
enum { FIRST = 128, AFTER = 8 };
static void *fresh(void *arg) {
  void **p = arg;
  for (unsigned i = 0; i < FIRST + AFTER; i++) p[i] = T_malloc(16);
  return NULL;
}

/* With the crowd live: a fresh thread's first malloc(16)s (8 KiB of 64-byte
 * lines) each start a line of their own, so no two threads' young blocks share one (Hoard
 * sec. 5.3, active false sharing); the ones after come from its own span, 16 bytes apart. */
static void young_lines(void) {
  void *p[FIRST + AFTER] = {0};
  pthread_t th;
  if (pthread_create(&th, NULL, fresh, p)) DIE("pthread_create failed");
  pthread_join(th, NULL);
  unsigned shared = 0, apart = 0;
  for (unsigned i = 0; i < FIRST + AFTER; i++)
    if (!p[i]) DIE("malloc(16) #%u returned NULL", i);
  for (unsigned i = 0; i < FIRST; i++) {
    CHECK((uintptr_t)p[i] % 64 == 0 && T_usable(p[i]) >= 64,
          "young block #%u at %p (usable %zu) is not a line of its own", i, p[i],
          (size_t)T_usable(p[i]));
    for (unsigned k = 0; k < i; k++) shared += (uintptr_t)p[k] / 64 == (uintptr_t)p[i] / 64;
  }
  for (unsigned i = FIRST + 1; i < FIRST + AFTER; i++)
    apart += (uintptr_t)p[i] - (uintptr_t)p[i - 1] == 16;
  printf("young blocks: %u of %u share a line; %u of the %u after them 16 bytes apart\n", shared,
         FIRST, apart, AFTER - 1);
  CHECK(shared == 0, "%u young blocks share a cache line", shared);
  CHECK(apart == AFTER - 1, "after its young blocks, only %u of %u malloc(16)s were 16 apart",
        apart, AFTER - 1);
  for (unsigned i = 0; i < FIRST + AFTER; i++) T_free(p[i]);
}

/* A child forked with the crowd live has one thread: its new threads are not young, and take
 * spans of their own from their first block (the parent's records stay taken in the child). */
static void young_fork(void) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) DIE("fork failed");
  if (pid == 0) {
    void *p[FIRST + AFTER] = {0};
    pthread_t th;
    if (pthread_create(&th, NULL, fresh, p)) _exit(2);
    pthread_join(th, NULL);
    bool packed = (uintptr_t)p[1] - (uintptr_t)p[0] == 16 && T_usable(p[0]) == 16;
    _exit(packed ? 0 : 1);
  }
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) DIE("waitpid failed");
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
        "a forked child's fresh thread took young blocks (status %#x): the parent's crowd "
        "counted in the child",
        st);
}

/* `crowd_leftovers`: a crowd of young threads each keeps KEEP of its blocks and exits;
 * then one thread allocates NEED blocks of the young blocks' classes (multiples of 64 B). */
enum { LEFT_THREADS = 1000, KEEP = BLOCKS / 8, NEED = 40000 };
static void *kept[LEFT_THREADS][KEEP];
static void *leaver(void *arg) {
  unsigned id = (unsigned)(uintptr_t)arg;
  void *b[BLOCKS];
  for (unsigned i = 0; i < BLOCKS; i++)
    if (!(b[i] = T_malloc(64 * (1 + i % 8)))) DIE("malloc failed in a leaver");
  pthread_barrier_wait(&all_up); /* all live at once: they are young */
  for (unsigned i = 0; i < BLOCKS; i++) {
    if (i % 8 == i / 8) /* one block of each class */
      kept[id][i / 8] = b[i];
    else
      T_free(b[i]);
  }
  return NULL;
}

/* The shared heaps' partly free spans, left by a crowd that has gone, serve the next
 * thread's blocks of their classes: it adopts them as it adopts orphans, instead of
 * committing fresh spans while their free room stays resident (src/heap.c, shared_adopt). */
static void crowd_leftovers(pthread_attr_t *at) {
  pthread_t *t = T_malloc(sizeof(pthread_t) * LEFT_THREADS);
  if (!t || pthread_barrier_init(&all_up, NULL, LEFT_THREADS + 1)) DIE("set-up failed");
  for (unsigned i = 0; i < LEFT_THREADS; i++)
    if (pthread_create(&t[i], at, leaver, (void *)(uintptr_t)i)) DIE("pthread_create failed");
  pthread_barrier_wait(&all_up);
  for (unsigned i = 0; i < LEFT_THREADS; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&all_up);
  /* the crowd has gone: no young malloc on the last beat of the timed passes (a quarter of
   * the 1 s purge delay), so threads adopt the shared heaps' spans */
  usleep(700 * 1000);
  struct rill_stats s0, s1;
  rill_stats_get(&s0);
  void **p = T_malloc(sizeof(void *) * NEED);
  if (!p) DIE("malloc failed");
  size_t bytes = 0;
  for (unsigned i = 0; i < NEED; i++) {
    size_t n = 64 * (1 + i % 8);
    if (!(p[i] = T_malloc(n))) DIE("malloc(%zu) failed", n);
    memset(p[i], 1, n);
    bytes += n;
  }
  rill_stats_get(&s1);
  /* spans main took from the pool: the library before took 219 (of 894 left listed) */
  long long taken = (long long)s0.spans_free - (long long)s1.spans_free;
  printf("leftovers: %llu partly free spans after the crowd, %llu after %u mallocs (%.1f MiB); "
         "%lld spans taken from the pool\n",
         (unsigned long long)s0.spans_reusable, (unsigned long long)s1.spans_reusable, NEED,
         (double)bytes / (1 << 20), taken);
  CHECK(s0.spans_reusable >= 100, "the crowd left %llu partly free spans, not a crowd's",
        (unsigned long long)s0.spans_reusable);
  CHECK(taken * 10 <= (long long)s0.spans_reusable,
        "%lld spans taken from the pool for %.1f MiB of blocks, with %llu partly free spans "
        "listed by the crowd",
        taken, (double)bytes / (1 << 20), (unsigned long long)s0.spans_reusable);
  for (unsigned i = 0; i < NEED; i++) T_free(p[i]);
  T_free(p);
  for (unsigned i = 0; i < LEFT_THREADS; i++)
    for (unsigned k = 0; k < KEEP; k++) T_free(kept[i][k]);
  T_free(t);
}

/* For a hang with signals open. The purger-start deadlock blocked every
 * signal in the hung thread, so there only CTest's TIMEOUT (180 s) ends it. */
static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "FAIL test_threads: no progress in 120 s (a deadlock?)\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  _exit(1);
}

int main(int argc, char **argv) {
  unsigned nt = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 2000;
  if (nt < 2) DIE("usage: test_threads [threads >= 2]");
  signal(SIGALRM, on_alarm);
  alarm(120);
  pthread_t *t = T_malloc(sizeof(pthread_t) * nt);
  if (!t) DIE("malloc failed");
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setstacksize(&at, 64 << 10);
  for (int round = 0; round < 2; round++) {
    if (pthread_barrier_init(&all_up, NULL, nt + 1) || pthread_barrier_init(&go, NULL, nt + 1))
      DIE("pthread_barrier_init failed");
    for (unsigned i = 0; i < nt; i++) {
      int err = pthread_create(&t[i], &at, worker, NULL);
      if (err) DIE("pthread_create failed at thread %u of %u (error %d)", i, nt, err);
    }
    pthread_barrier_wait(&all_up);
    struct rill_stats s;
    rill_stats_get(&s);
    printf("round %d: %u threads live, %llu thread heaps\n", round, nt,
           (unsigned long long)s.threads);
    CHECK(s.threads >= nt, "round %d: %llu thread heaps for %u live threads", round,
          (unsigned long long)s.threads, nt);
    /* each thread holds blocks of 17 classes: a span of each per thread was 17 * nt; young
     * blocks share spans (about 19 KiB of them a thread, and the first few dozen threads
     * take spans of their own) */
    uint64_t spans = s.spans_hot + s.spans_reusable + s.spans_floating;
    printf("round %d: %llu spans in use, %.2f a thread\n", round, (unsigned long long)spans,
           (double)spans / nt);
    if (nt >= 1000)
      CHECK(spans < 3 * (uint64_t)nt, "round %d: %llu spans in use for %u threads of 64 blocks",
            round, (unsigned long long)spans, nt);
    /* past YOUNG_THREADS (32) live, a thread's first blocks are young and it takes no heap
     * record of its own: these threads' 64 blocks of 16-520 B never leave young blocks */
    unsigned long long young = stats_field(" young=");
    printf("round %d: %llu of them young\n", round, young);
    if (nt >= 1000)
      CHECK(young + 64 >= nt,
            "round %d: %llu of %u live threads young, want all but the first "
            "few dozen",
            round, young, nt);
    if (round == 0 && nt >= 1000) {
      young_lines();
      young_fork();
    }
    pthread_barrier_wait(&go);
    for (unsigned i = 0; i < nt; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&all_up);
    pthread_barrier_destroy(&go);
    rill_stats_get(&s);
    printf("round %d: all joined, %llu thread heaps\n", round, (unsigned long long)s.threads);
    CHECK(stats_field(" young=") == 0,
          "round %d: threads still young after every one was "
          "joined",
          round);
    /* main's, and the purger's if it has one */
    CHECK(s.threads <= 2, "round %d: %llu thread heaps after every thread was joined", round,
          (unsigned long long)s.threads);
  }
  if (nt >= 1000) crowd_leftovers(&at);
  pthread_attr_destroy(&at);
  T_free(t);
  return t_finish("test_threads");
}
