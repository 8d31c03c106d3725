/* test_fork.c - proves fork works when other fork handlers allocate. glibc runs prepare
 * handlers last registered first, and parent and child handlers first registered first, and
 * rill's own hold every rill lock from its prepare until its parent or child handler. Run
 * with librill preloaded, in two modes:
 *   --main  handlers registered in main before its first malloc (rill's constructor
 *           registered first, so these run outside rill's locks);
 *   --lib   handlers from fork_lib.c's constructor, which ran before rill's: they run while
 *           rill holds its locks, which the forking thread re-enters.
 *   --nested  no handlers of its own: forks nest three generations deep, each process
 *           forking three children while its threads allocate and short threads come
 *           and go, so every child's locks were held across the fork that made it and
 *           must serve it and its own forks.
 * The handlers allocate huge blocks, runs and small blocks; three threads allocate all the
 * while; each child allocates and exits. A hang is a failure (alarm). */
#include "rill_test.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#define FORKS 40

void fork_lib_counts(int *prepare, int *parent, int *child);

static void *held;
static int prepared, parented, childed;
static void main_prepare(void) {
  held = malloc(3 << 20);
  for (int i = 0; i < 200; i++) free(malloc(100000 + (size_t)i * 512));
  prepared++;
}
static void main_parent(void) {
  free(held);
  free(malloc(7 << 20));
  parented++;
}
static void main_child(void) {
  free(held);
  free(malloc(5 << 20));
  childed++;
}

static atomic_bool stop;
static void *churn(void *arg) {
  size_t k = (size_t)arg;
  while (!atomic_load(&stop)) {
    void *p = malloc((k++ * 7919) % 300000 + 1);
    if (!p) DIE("malloc failed in a churning thread");
    free(p);
  }
  return NULL;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "test_fork: no progress in 60 s: fork deadlocked\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  _exit(1);
}

/* A crowd of short threads, 40 at a time until `stop`: once 32 threads are live, rill
 * makes a new thread young (its first blocks come from the shared heaps, one per thread in
 * turn). Each hands its blocks to the crowd's thread, which frees them, so forks meet
 * shared heaps used, in use and about to be used for the first time. */
#define CROWD 40
static pthread_barrier_t crowd_met;
static void *young_one(void *arg) {
  void **out = arg;
  for (int i = 0; i < 8; i++) out[i] = malloc(16 + (size_t)i * 40);
  pthread_barrier_wait(&crowd_met); /* alive until all have started */
  return NULL;
}
static void *crowd(void *arg) {
  (void)arg;
  void *got[CROWD][8];
  pthread_barrier_init(&crowd_met, NULL, CROWD);
  while (!atomic_load(&stop)) {
    pthread_t y[CROWD];
    for (int k = 0; k < CROWD; k++)
      if (pthread_create(&y[k], NULL, young_one, got[k])) DIE("pthread_create failed");
    for (int k = 0; k < CROWD; k++) {
      pthread_join(y[k], NULL);
      for (int i = 0; i < 8; i++) {
        if (!got[k][i]) return (void *)1;
        free(got[k][i]);
      }
    }
  }
  return NULL;
}

/* One generation of --nested: threads allocating small blocks, runs and huge blocks (every
 * kind of lock rill holds across fork) while this process forks three children, each of
 * which does the same one generation down and trims; returns the number of failures. */
static int generation(int depth) {
  atomic_store(&stop, false);
  pthread_t t[3];
  for (size_t i = 0; i < 2; i++)
    if (pthread_create(&t[i], NULL, churn, (void *)(i + 1))) return 1;
  if (pthread_create(&t[2], NULL, crowd, NULL)) return 1;
  int bad = 0;
  for (int k = 0; k < 3 && depth > 0; k++) {
    pid_t pid = fork();
    if (pid < 0) return bad + 1;
    if (pid == 0) {
      alarm(60);
      void *big = malloc(48 << 20), *run = malloc(300000);
      if (!big || !run) _exit(2);
      memset(big, 3, 4096);
      free(big);
      free(run);
      malloc_trim(0);
      _exit(generation(depth - 1) ? 3 : 0);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) bad++;
  }
  atomic_store(&stop, true);
  void *crowd_failed = NULL;
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  pthread_join(t[2], &crowd_failed);
  malloc_trim(0);
  return bad + (crowd_failed != NULL);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--nested")) {
    signal(SIGALRM, on_alarm);
    alarm(60);
    CHECK(dlsym(RTLD_DEFAULT, "rill_stats_get") != NULL,
          "rill is not in this process: run with librill preloaded");
    int bad = generation(3);
    CHECK(bad == 0,
          "%d of the 3 generations' forks failed: a child did not allocate, fork "
          "and exit",
          bad);
    printf("  forks three generations deep, three children each, under allocating threads\n");
    return t_finish("test_fork --nested");
  }
  bool in_main = argc > 1 && !strcmp(argv[1], "--main");
  if (!in_main && !(argc > 1 && !strcmp(argv[1], "--lib")))
    DIE("usage: test_fork --main | --lib | --nested   (with librill preloaded)");
  /* first, before anything allocates */
  if (in_main) pthread_atfork(main_prepare, main_parent, main_child);
  signal(SIGALRM, on_alarm);
  alarm(60);
  CHECK(dlsym(RTLD_DEFAULT, "rill_stats_get") != NULL,
        "rill is not in this process: run with librill preloaded");

  pthread_t t[3];
  for (size_t i = 0; i < 3; i++)
    if (pthread_create(&t[i], NULL, churn, (void *)(i + 1))) DIE("pthread_create failed");
  for (int i = 0; i < FORKS; i++) {
    pid_t pid = fork();
    if (pid < 0) DIE("fork: %s", strerror(errno));
    if (pid == 0) {
      char *p = malloc(64 << 20);
      if (!p) _exit(2);
      memset(p, 2, 4096);
      free(p);
      for (int j = 0; j < 1000; j++) free(malloc((size_t)j * 100 + 1));
      _exit(0);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) DIE("waitpid: %s", strerror(errno));
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d of fork %d did not allocate and exit",
          (int)pid, i);
  }
  atomic_store(&stop, true);
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);

  int pr = prepared, pa = parented, ch = childed;
  if (!in_main) fork_lib_counts(&pr, &pa, &ch);
  CHECK(pr == FORKS && pa == FORKS, "%s handlers ran %d prepare and %d parent times, want %d",
        in_main ? "main's" : "fork_lib's", pr, pa, FORKS);
  CHECK(ch == 0, "a child handler's count reached the parent (%d)", ch);
  printf("  %d forks with %s handlers allocating under three churning threads\n", FORKS,
         in_main ? "main's" : "a library's");
  return t_finish(in_main ? "test_fork --main" : "test_fork --lib");
}
