/* launch: not a benchmark but the driver's measuring tool: runs one benchmark and reports its
 * wait4 resource usage, so that its peak RSS is its own (the RSS that the papers' memory figures
 * plot: Hoard sec. 5.4, scalloc sec. 7). */

/* Linux carries a process's RSS high-water mark across exec, so ru_maxrss of a child forked
 * by the Python driver would include the driver's own RSS. Forked from this small process, the
 * benchmark's ru_maxrss is its own.
 *
 * usage: launch -o REPORT [-p PRELOAD] -- PROGRAM [ARGS...]
 * PRELOAD goes into LD_PRELOAD of the benchmark only, not of this process. REPORT receives one
 * line of key=value pairs; the exit status is the program's, or 128+signal if a signal ended it. */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* wait4 */
#endif
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double seconds(struct timeval tv) {
  return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  const char *report = NULL, *preload = NULL;
  int c;
  while ((c = getopt(argc, argv, "+o:p:")) != -1) {
    switch (c) {
    case 'o':
      report = optarg;
      break;
    case 'p':
      preload = optarg;
      break;
    default:
      goto usage;
    }
  }
  if (report == NULL || optind >= argc) goto usage;

  FILE *out = fopen(report, "w");
  if (out == NULL) {
    fprintf(stderr, "launch: %s: %s\n", report, strerror(errno));
    return 125;
  }
  double t0 = now();
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "launch: fork: %s\n", strerror(errno));
    return 125;
  }
  if (pid == 0) {
    if (preload != NULL && setenv("LD_PRELOAD", preload, 1) != 0) _exit(126);
    execv(argv[optind], &argv[optind]);
    fprintf(stderr, "launch: %s: %s\n", argv[optind], strerror(errno));
    _exit(127);
  }
  int status;
  struct rusage ru;
  while (wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) {
      fprintf(stderr, "launch: wait4: %s\n", strerror(errno));
      return 125;
    }
  }
  double wall = now() - t0;
  int code = 0, sig = 0;
  if (WIFEXITED(status))
    code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    sig = WTERMSIG(status);
  fprintf(out,
          "exit=%d signal=%d wall_s=%.6f user_s=%.6f sys_s=%.6f maxrss_kib=%ld minflt=%ld "
          "majflt=%ld nvcsw=%ld nivcsw=%ld\n",
          code, sig, wall, seconds(ru.ru_utime), seconds(ru.ru_stime), ru.ru_maxrss, ru.ru_minflt,
          ru.ru_majflt, ru.ru_nvcsw, ru.ru_nivcsw);
  if (fclose(out) != 0) return 125;
  return sig ? 128 + sig : code;

usage:
  fprintf(stderr, "usage: launch -o REPORT [-p PRELOAD] -- PROGRAM [ARGS...]\n");
  return 125;
}
