/* deny_syscalls.c - runs a program under a seccomp filter that refuses some system calls,
 * as sandboxes do (container runtimes, browsers' renderers, microVM monitors), so that
 * sandbox.sh can check rill's behaviour when the kernel will not purge, remap or report.
 *   deny_syscalls RULE[,RULE...] PROGRAM ARGS...
 * RULE is NAME (every call) or NAME:N (calls whose third argument is N, e.g. madvise's
 * advice), optionally followed by =ERRNO (default EPERM): "madvise:8=22" refuses
 * MADV_FREE with EINVAL, as a kernel older than 4.5 does. x86-64 only; other machines
 * exit 77 (ctest: skipped). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
static const struct {
  const char *name;
  int nr;
} calls[] = {{"madvise", SYS_madvise},   {"mremap", SYS_mremap},
             {"mincore", SYS_mincore},   {"clone", SYS_clone},
             {"clone3", SYS_clone3},     {"mlock2", SYS_mlock2},
             {"mprotect", SYS_mprotect}, {"sched_getaffinity", SYS_sched_getaffinity}};

static int call_nr(const char *name) {
  for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
    if (strcmp(calls[i].name, name) == 0) return calls[i].nr;
  fprintf(stderr, "deny_syscalls: unknown system call '%s'\n", name);
  exit(2);
}

#define MAX_INSNS 200
static struct sock_filter prog[MAX_INSNS];
static unsigned short len;

static void emit(struct sock_filter f) {
  if (len == MAX_INSNS) {
    fprintf(stderr, "deny_syscalls: too many rules\n");
    exit(2);
  }
  prog[len++] = f;
}

/* One rule: NAME[:ARG][=ERRNO]. */
static void rule(char *r) {
  long err = EPERM, arg = -1;
  char *eq = strchr(r, '='), *colon = strchr(r, ':');
  if (eq) *eq = 0, err = strtol(eq + 1, NULL, 10);
  if (colon) *colon = 0, arg = strtol(colon + 1, NULL, 10);
  unsigned ret = SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA);
  emit((struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)));
  if (arg < 0) {
    emit((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)call_nr(r), 0, 1));
  } else {
    emit((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)call_nr(r), 0, 3));
    emit((struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                      offsetof(struct seccomp_data, args[2])));
    emit((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)arg, 0, 1));
  }
  emit((struct sock_filter)BPF_STMT(BPF_RET | BPF_K, ret));
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s NAME[:ARG][=ERRNO][,...] PROGRAM ARGS...\n", argv[0]);
    return 2;
  }
  emit((struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)));
  emit((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0));
  emit((struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  for (char *r = strtok(argv[1], ","); r; r = strtok(NULL, ",")) rule(r);
  emit((struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  struct sock_fprog fprog = {.len = len, .filter = prog};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
      prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog)) {
    printf("deny_syscalls: not run: the kernel refused the filter (%s)\n", strerror(errno));
    return 77;
  }
  execvp(argv[2], argv + 2);
  fprintf(stderr, "deny_syscalls: cannot run %s: %s\n", argv[2], strerror(errno));
  return 127;
}
#else
int main(void) {
  printf("deny_syscalls: not run: x86-64 only\n");
  return 77;
}
#endif
