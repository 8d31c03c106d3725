/* syscall_hook.h - a test's own definition of the C library's `syscall`, which rill makes its
 * system calls with (src/arena.c, mlock.c): it takes that function's place in the process, makes
 * the call itself, and shows each call to the test (`syscall_seen`, if set). x86-64 only:
 * elsewhere SYSCALL_HOOK is 0, nothing is defined, and the test says what it could not see.
 * Include it in one test file, after the system headers. */
#ifndef RILL_SYSCALL_HOOK_H
#define RILL_SYSCALL_HOOK_H
#include <errno.h>
#include <stdarg.h>

/* n, its six arguments, and its result (-1 with errno set on failure) */
static void (*syscall_seen)(long n, const long *a, long r);

#if defined(__x86_64__)
#define SYSCALL_HOOK 1
long syscall(long n, ...) {
  va_list ap;
  va_start(ap, n);
  long a[6];
  for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
  va_end(ap);
  register long r10 __asm__("r10") = a[3], r8 __asm__("r8") = a[4], r9 __asm__("r9") = a[5];
  long r;
  __asm__ volatile("syscall"
                   : "=a"(r)
                   : "a"(n), "D"(a[0]), "S"(a[1]), "d"(a[2]), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  if (r < 0 && r > -4096) {
    errno = (int)-r;
    r = -1;
  }
  if (syscall_seen) syscall_seen(n, a, r);
  return r;
}
#else
#define SYSCALL_HOOK 0
#endif
#endif
