/* prog.c - a program built against an installed rill (test/install.sh). Its
 * malloc and free, and the C library's own allocations, must all be rill's.
 * usage: prog VERSION   (the version the package files announce) */
#include <malloc.h>
#include <pthread.h>
#include <rill.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char *volatile keep; /* so the compiler keeps the malloc it could elide */

static int fail(const char *what) {
  fprintf(stderr, "prog: %s\n", what);
  return 1;
}

/* A second thread's blocks, some freed by main: in a static program the thread's heap
 * pointer is initial-exec TLS in the executable itself. */
static void *worker(void *arg) {
  (void)arg;
  void **v = malloc(100 * sizeof *v);
  if (!v) return NULL;
  for (int i = 0; i < 100; i++) v[i] = malloc((size_t)(i + 1) * 24);
  for (int i = 0; i < 100; i += 2) free(v[i]);
  return v;
}

int main(int argc, char **argv) {
  char ver[32];
  snprintf(ver, sizeof ver, "%d.%d", RILL_VERSION_MAJOR, RILL_VERSION_MINOR);
  if (argc < 2 || strcmp(ver, argv[1]) != 0) return fail("rill.h's version is not the package's");

  struct rill_stats before, during, after;
  size_t n = (size_t)64 << 20;
  rill_stats_get(&before);
  keep = malloc(n);
  if (!keep) return fail("malloc(64 MiB) failed");
  memset(keep, 1, 4096);
  rill_stats_get(&during);
  free(keep);
  rill_stats_get(&after);
  if (during.huge_bytes < before.huge_bytes + n) return fail("malloc is not rill's");
  if (after.huge_bytes >= during.huge_bytes) return fail("free is not rill's");

  /* strdup allocates inside the C library: were that glibc's malloc, rill's
   * free would stop the program with "invalid pointer". */
  char *s = strdup("rill");
  if (!s) return fail("strdup failed");
  free(s);

  /* A server's usual tuning call. rill's answers as glibc's does; had rill left it to
   * glibc, the fully static link would have failed (libc.a keeps mallopt beside its own
   * malloc, so the call drags that in and the two mallocs clash). */
  if (mallopt(M_ARENA_MAX, 2) != 1) return fail("mallopt(M_ARENA_MAX, 2) did not answer 1");

  pthread_t t;
  void **v = NULL;
  if (pthread_create(&t, NULL, worker, NULL) || pthread_join(t, (void **)&v) || !v)
    return fail("a second thread could not allocate");
  for (int i = 1; i < 100; i += 2) free(v[i]);
  free(v);
  pid_t child = fork();
  if (child < 0) return fail("fork failed");
  if (child == 0) {
    keep = malloc(1000);
    if (!keep) _exit(1);
    free(keep);
    _exit(0);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fail("a forked child could not allocate");
  printf("prog: rill %s, malloc and free are rill's\n", ver);
  return 0;
}
