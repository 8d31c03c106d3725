/* limits.c - setrlimit and prlimit: a program that lowers its own address-space
 * or data limit gets back the address space rill reserved and has not used
 * (arena_fit), so the limit governs its later mappings as it would under glibc. */
#define _GNU_SOURCE
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

#ifndef RILL_NO_OVERRIDE
/* Before the call, so that no mapping of the program's meets the lowered
 * limit with rill's reservation still counted; a call the kernel then refuses
 * has only cost the reservation, which grows back as needed. */
static void fit_for(int resource, rlim_t cur) {
  if ((resource == RLIMIT_AS || resource == RLIMIT_DATA) && cur != RLIM_INFINITY) {
    arena_fit((size_t)cur);
    heap_fit((size_t)cur);
  }
}

/* The C library's types: its resource is an enum, and the 64 names take
 * struct rlimit64, the same as struct rlimit on a 64-bit system. */
typedef __rlimit_resource_t res_t;
_Static_assert(sizeof(struct rlimit) == sizeof(struct rlimit64), "one layout");

static int set_limit(res_t resource, const struct rlimit *rl) {
  if (rl) fit_for((int)resource, rl->rlim_cur);
  return (int)syscall(SYS_prlimit64, 0, (int)resource, rl, NULL);
}
static int set_limit64(res_t resource, const struct rlimit64 *rl) {
  return set_limit(resource, (const struct rlimit *)(const void *)rl);
}

static int pr_limit(pid_t pid, res_t resource, const struct rlimit *rl, struct rlimit *old) {
  if (rl && (pid == 0 || pid == getpid())) fit_for((int)resource, rl->rlim_cur);
  return (int)syscall(SYS_prlimit64, pid, (int)resource, rl, old);
}
static int pr_limit64(pid_t pid, res_t resource, const struct rlimit64 *rl, struct rlimit64 *old) {
  return pr_limit(pid, resource, (const struct rlimit *)(const void *)rl,
                  (struct rlimit *)(void *)old);
}

EXPORT int setrlimit(res_t resource, const struct rlimit *rl) __attribute__((alias("set_limit")));
EXPORT int setrlimit64(res_t resource, const struct rlimit64 *rl)
    __attribute__((alias("set_limit64")));
EXPORT int prlimit(pid_t pid, res_t resource, const struct rlimit *rl, struct rlimit *old)
    __attribute__((alias("pr_limit")));
EXPORT int prlimit64(pid_t pid, res_t resource, const struct rlimit64 *rl, struct rlimit64 *old)
    __attribute__((alias("pr_limit64")));
#endif
