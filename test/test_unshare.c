/* test_unshare.c - proves a program that ran threads and joined them is single-threaded
 * again for unshare(CLONE_NEWUSER), which the kernel refuses to a process of several
 * threads, although rill's purger thread started meanwhile: rill ends its purger for the
 * call, and starts it again at a later slow path. With --setns, the same for setns into a
 * user namespace (a child's, made for the purpose). Run with RILL_PURGE_THREAD=1. Where
 * this machine makes no user namespaces at all, or a process of one thread cannot enter
 * one, it says so and is reported skipped. */
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

/* A child that makes a user namespace and stays in it until its pipe closes: the
 * namespace setns enters. Its pid, or 0 where it cannot make one. */
static pid_t holder_start(int *keep) {
  int ready[2], hold[2];
  if (pipe2(ready, O_CLOEXEC) || pipe2(hold, O_CLOEXEC)) DIE("pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) DIE("fork: %s", strerror(errno));
  if (pid == 0) {
    close(ready[0]);
    close(hold[1]);
    char ok = unshare(CLONE_NEWUSER) == 0;
    if (write(ready[1], &ok, 1) != 1) _exit(1);
    char c;
    while (read(hold[0], &c, 1) > 0) continue; /* until the parent closes its end */
    _exit(0);
  }
  close(ready[1]);
  close(hold[0]);
  *keep = hold[1];
  char ok = 0;
  if (read(ready[0], &ok, 1) != 1) ok = 0;
  close(ready[0]);
  return ok ? pid : 0;
}

/* setns into pid's user namespace; -1 with errno on failure. */
static int enter_userns(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int r = setns(fd, CLONE_NEWUSER);
  int e = errno;
  close(fd);
  errno = e;
  return r;
}

/* Whether a process of one thread may do it here: tried in a forked child. */
static bool single_thread_can(bool by_setns, pid_t holder) {
  pid_t pid = fork();
  if (pid < 0) DIE("fork: %s", strerror(errno));
  if (pid == 0) _exit((by_setns ? enter_userns(holder) : unshare(CLONE_NEWUSER)) == 0 ? 0 : 1);
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) DIE("waitpid: %s", strerror(errno));
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(int argc, char **argv) {
  bool by_setns = argc > 1 && strcmp(argv[1], "--setns") == 0;
  const char *call = by_setns ? "setns(CLONE_NEWUSER)" : "unshare(CLONE_NEWUSER)";
  int keep = -1;
  pid_t holder = by_setns ? holder_start(&keep) : 0;
  if ((by_setns && !holder) || !single_thread_can(by_setns, holder)) {
    printf("  a process of one thread cannot %s here: not run\n",
           by_setns ? "enter a user namespace" : "make a user namespace");
    return 77;
  }

  pthread_t t;
  if (pthread_create(&t, NULL, churn, NULL) || pthread_join(t, NULL)) DIE("thread failed");
  CHECK(purger_becomes(true), "no purger thread after a second thread allocated (run with "
                              "RILL_PURGE_THREAD=1)");
  unsigned before = tasks();
  printf("  threads after the join: %u (this one and the purger)\n", before);
  CHECK(before == 2, "%u threads after the join, want this one and the purger", before);
  int r = by_setns ? enter_userns(holder) : unshare(CLONE_NEWUSER);
  CHECK(r == 0, "%s with only rill's purger beside: %s", call, r ? strerror(errno) : "ok");
  CHECK(purger_becomes(false), "the purger thread is still there after %s", call);
  if (holder) {
    close(keep);
    waitpid(holder, NULL, 0);
  }

  /* it comes back once the program allocates again */
  if (pthread_create(&t, NULL, churn, NULL) || pthread_join(t, NULL)) DIE("thread failed");
  free(malloc(100));
  CHECK(purger_becomes(true), "the purger did not start again after %s", call);
  return t_finish("test_unshare");
}
