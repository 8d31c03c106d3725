/* test_unshare.c - proves a program that ran threads and joined them is single-threaded
 * again for unshare(CLONE_NEWUSER), which the kernel refuses to a process of several
 * threads, although rill's purger thread started meanwhile: rill ends its purger for the
 * call, and starts it again at a later slow path. Run with RILL_PURGE_THREAD=1. Where this
 * machine makes no user namespaces at all (a forked child of one thread is refused too), it
 * says so and is reported skipped. */
#include "rill_test.h"

#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>

static void *churn(void *arg) {
  (void)arg;
  static void *v[4096];
  for (int round = 0; round < 8; round++) {
    for (int i = 0; i < 4096; i++)
      if (!(v[i] = malloc(4000))) DIE("malloc failed");
    for (int i = 0; i < 4096; i++) free(v[i]);
  }
  return NULL;
}

/* Waits up to two seconds for the purger thread to be there (want) or gone. */
static bool purger_becomes(bool want) {
  bool blocked;
  for (int i = 0; i < 200; i++) {
    if ((t_purger_threads(&blocked) > 0) == want) return true;
    usleep(10000);
  }
  return false;
}

static unsigned tasks(void) {
  unsigned n = 0;
  DIR *d = opendir("/proc/self/task");
  if (!d) DIE("cannot list /proc/self/task");
  for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

int main(void) {
  pid_t pid = fork();
  if (pid < 0) DIE("fork: %s", strerror(errno));
  if (pid == 0) _exit(unshare(CLONE_NEWUSER) == 0 ? 0 : 1);
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) DIE("waitpid: %s", strerror(errno));
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    printf("  a process of one thread cannot make a user namespace here: not run\n");
    return 77;
  }

  pthread_t t;
  if (pthread_create(&t, NULL, churn, NULL) || pthread_join(t, NULL)) DIE("thread failed");
  CHECK(purger_becomes(true), "no purger thread after a second thread allocated (run with "
                              "RILL_PURGE_THREAD=1)");
  unsigned before = tasks();
  printf("  threads after the join: %u (this one and the purger)\n", before);
  CHECK(before == 2, "%u threads after the join, want this one and the purger", before);
  int r = unshare(CLONE_NEWUSER);
  CHECK(r == 0, "unshare(CLONE_NEWUSER) with only rill's purger beside: %s",
        r ? strerror(errno) : "ok");
  CHECK(purger_becomes(false), "the purger thread is still there after unshare");

  /* it comes back once the program allocates again */
  if (pthread_create(&t, NULL, churn, NULL) || pthread_join(t, NULL)) DIE("thread failed");
  free(malloc(100));
  CHECK(purger_becomes(true), "the purger did not start again after unshare");
  return t_finish("test_unshare");
}
