/* mlock.c - mlockall with a reserved arena: the reservations (arena.c's
 * os_reserve) are locked as their pages are faulted in, never populated
 * whole, while the program's own mappings are locked and populated as the
 * kernel would do. Keeps the list of reserved ranges this needs. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

/* Reserved ranges: written at start-up only, under the init lock (os_reserve
 * adds, os_unmap cuts what start-up gives back); read by mlockall after. */
#define RESERVED_MAX 24
static struct { uintptr_t lo, hi; } reserved[RESERVED_MAX];
static unsigned nreserved;

void os_reserved_add(void *p, size_t n) {
  if (nreserved == RESERVED_MAX) return; /* start-up makes about eight */
  reserved[nreserved].lo = (uintptr_t)p;
  reserved[nreserved].hi = (uintptr_t)p + n;
  nreserved++;
}

/* The arena grew in place (arena_grow): the range ending at `end` now ends
 * n bytes further. Under cover_lock; a concurrent mlockall reads `hi` with
 * an atomic load and sees the range before or after. */
void os_reserved_grow(void *end, size_t n) {
  for (unsigned i = 0; i < nreserved; i++)
    if (reserved[i].hi == (uintptr_t)end) {
      __atomic_store_n(&reserved[i].hi, (uintptr_t)end + n, __ATOMIC_RELAXED);
      return;
    }
  os_reserved_add(end, n);
}

/* Takes [p, p + n) out of every reserved range; a range it splits keeps its
 * low part in place and its high part at the end (or, with no room, the low
 * part only: that range's high part is then populated like the program's). */
void os_reserved_cut(void *p, size_t n) {
  uintptr_t a = (uintptr_t)p, b = a + n;
  for (unsigned i = 0; i < nreserved; i++) {
    uintptr_t lo = reserved[i].lo, hi = reserved[i].hi;
    if (b <= lo || a >= hi) continue;
    if (a <= lo && b >= hi) {
      reserved[i--] = reserved[--nreserved];
      continue;
    }
    if (a <= lo) {
      reserved[i].lo = b;
    } else {
      reserved[i].hi = a;
      if (b < hi && nreserved < RESERVED_MAX)
        reserved[nreserved].lo = b, reserved[nreserved++].hi = hi;
    }
  }
}

/* Whether mlockall(MCL_FUTURE) is in effect, as far as rill's mlockall and
 * munlockall saw: the arena's growth (arena_grow) must not be populated
 * whole by it. */
static _Atomic bool future_locked;
bool os_future_locked(void) {
  return atomic_load_explicit(&future_locked, RLX);
}

/* The rest replaces the C library's mlockall; builds that keep only the
 * rill_ names leave it alone. */
#ifndef RILL_NO_OVERRIDE

/* mlock for [lo, hi) less every reserved range in it. */
static void lock_outside_reserved(uintptr_t lo, uintptr_t hi) {
  while (lo < hi) {
    uintptr_t cut = hi, resume = hi; /* the lowest reserved range reaching past lo */
    for (unsigned i = 0; i < nreserved; i++) {
      uintptr_t rhi = __atomic_load_n(&reserved[i].hi, __ATOMIC_RELAXED);
      if (rhi > lo && reserved[i].lo < cut)
        cut = reserved[i].lo > lo ? reserved[i].lo : lo, resume = rhi;
    }
    if (cut > lo) mlock((void *)lo, cut - lo); /* errors ignored, as the kernel's populate does */
    lo = resume;
  }
}

/* A hexadecimal number at line[*k], up to the character `stop`. */
static uintptr_t hex_until(const char *line, size_t *k, size_t end, char stop) {
  uintptr_t v = 0;
  for (; *k < end && line[*k] != stop; ++*k) {
    char c = line[*k];
    v = v * 16 + (uintptr_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
  }
  return v;
}

/* Locks and populates every accessible mapping that is not a reservation,
 * reading /proc/self/maps in pieces (no allocation). A line longer than the
 * buffer (a path near PATH_MAX) is skipped whole, never read from its
 * middle. */
static void lock_program_mappings(void) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[4096];
  size_t have = 0;
  bool skipping = false;
  for (;;) {
    ssize_t got = read(fd, buf + have, sizeof buf - have);
    if (got <= 0) break;
    have += (size_t)got;
    size_t start = 0;
    for (size_t i = 0; i < have; i++) {
      if (buf[i] != '\n') continue;
      if (!skipping) { /* "lo-hi perms offset dev inode path" */
        size_t k = start;
        uintptr_t lo = hex_until(buf, &k, i, '-');
        k++;
        uintptr_t hi = hex_until(buf, &k, i, ' ');
        bool access = k + 3 < i && (buf[k + 1] != '-' || buf[k + 2] != '-' || buf[k + 3] != '-');
        if (access && lo < hi) lock_outside_reserved(lo, hi);
      }
      skipping = false;
      start = i + 1;
    }
    memmove(buf, buf + start, have - start);
    have -= start;
    if (have == sizeof buf) { /* no line end in a full buffer */
      have = 0;
      skipping = true;
    }
  }
  close(fd);
}

static int sys_mlockall(int flags) {
  return (int)syscall(SYS_mlockall, flags);
}

/* mlockall(MCL_CURRENT) locks every mapping and faults all of it in: for
 * rill, the whole reserved arena (1 TiB) and its tables, which ends in the
 * OOM killer. Here the current mappings are locked on fault (MCL_ONFAULT:
 * what is resident is locked now, the rest as it is touched), then the
 * program's own mappings are locked and populated, as the kernel would;
 * MCL_FUTURE is applied last, on its own, since it changes only mappings
 * made afterwards. rill starts first, so that its reservation is made
 * before MCL_FUTURE would have it populated. A finite RLIMIT_MEMLOCK
 * without CAP_IPC_LOCK refuses MCL_CURRENT when the address space is
 * larger than the limit, reservations included: that stays the kernel's
 * answer (ENOMEM). */
static int lock_all(int flags) {
  if (flags & (MCL_CURRENT | MCL_FUTURE)) (void)rill_init();
  int r;
  if (!(flags & MCL_CURRENT) || (flags & MCL_ONFAULT)) {
    r = sys_mlockall(flags);
  } else if ((r = sys_mlockall(MCL_CURRENT | MCL_ONFAULT)) != 0) {
    if (errno != EINVAL) return r;
    r = sys_mlockall(flags); /* a kernel before 4.4, without MCL_ONFAULT */
  } else {
    lock_program_mappings();
    r = flags & MCL_FUTURE ? sys_mlockall(flags & ~MCL_CURRENT) : 0;
  }
  if (r == 0 && (flags & MCL_FUTURE)) atomic_store_explicit(&future_locked, true, RLX);
  return r;
}

/* munlockall ends MCL_FUTURE too. */
static int unlock_all(void) {
  int r = (int)syscall(SYS_munlockall);
  if (r == 0) atomic_store_explicit(&future_locked, false, RLX);
  return r;
}

int mlockall(int flags) __attribute__((alias("lock_all"), visibility("default")));
int munlockall(void) __attribute__((alias("unlock_all"), visibility("default")));
#endif
