/* mlock.c - mlockall with a reserved arena: the reservations (arena.c's
 * os_reserve) are locked as their pages are faulted in, never populated
 * whole, while the program's own mappings are locked and populated as the
 * kernel would do; under a finite RLIMIT_MEMLOCK, only the arena's slots in
 * use are counted and locked (lock_used). Keeps the list of reserved ranges
 * this needs. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
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

/* Set while mlockall's stand-in for a finite RLIMIT_MEMLOCK (lock_used) is
 * in effect with MCL_FUTURE: the reservations are not locked whole, so
 * each part taken into use is locked on fault as it is taken. */
static _Atomic bool use_locked;

static long sys_mlock2(uintptr_t p, size_t n) {
  return syscall(SYS_mlock2, p, n, 1 /* MLOCK_ONFAULT */);
}

/* Bytes [p, p + n) of the arena are taken into use (arena_grown). False if
 * they had to be locked (use_locked) and RLIMIT_MEMLOCK refused: the caller
 * fails with ENOMEM, as glibc's mapping would. */
bool os_reserved_use(void *p, size_t n) {
  return !atomic_load_explicit(&use_locked, RLX) || !n || sys_mlock2((uintptr_t)p, n) == 0;
}

/* Whether the stand-in locks the arena's slots one take at a time
 * (arena_grow must then not lock a whole growth step: the limit would count
 * all of it). */
bool os_locks_on_use(void) {
  return atomic_load_explicit(&use_locked, RLX);
}

/* The rest replaces the C library's mlockall; builds that keep only the
 * rill_ names leave it alone. */
#ifndef RILL_NO_OVERRIDE

/* fn for each stretch of [lo, hi) that no reserved range holds, lowest
 * first: what mlockall counts and locks as the program's own. */
static void outside_each(uintptr_t lo, uintptr_t hi, void (*fn)(uintptr_t, uintptr_t, void *),
                         void *arg) {
  while (lo < hi) {
    uintptr_t cut = hi, resume = hi; /* the lowest reserved range reaching past lo */
    for (unsigned i = 0; i < nreserved; i++) {
      uintptr_t rhi = __atomic_load_n(&reserved[i].hi, __ATOMIC_RELAXED);
      if (rhi > lo && reserved[i].lo < cut)
        cut = reserved[i].lo > lo ? reserved[i].lo : lo, resume = rhi;
    }
    if (cut > lo) fn(lo, cut, arg);
    lo = resume;
  }
}

static void add_len(uintptr_t lo, uintptr_t hi, void *sum) {
  *(size_t *)sum += hi - lo;
}

/* mlock, or with *onfault mlock2(MLOCK_ONFAULT); errors ignored, as the
 * kernel's populate does. */
static void lock_piece(uintptr_t lo, uintptr_t hi, void *onfault) {
  if (*(const bool *)onfault)
    (void)sys_mlock2(lo, hi - lo);
  else
    (void)mlock((void *)lo, hi - lo);
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

/* Every mapping's lo, hi and whether it is accessible, to fn, reading
 * /proc/self/maps in pieces (no allocation). A line longer than the buffer
 * (a path near PATH_MAX) is skipped whole, never read from its middle.
 * False if the file cannot be read. */
static bool maps_each(void (*fn)(uintptr_t lo, uintptr_t hi, bool access, void *arg), void *arg) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
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
        if (lo < hi) fn(lo, hi, access, arg);
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
  return true;
}

/* Locks and populates (or with `onfault`, locks on fault) every accessible
 * mapping that is not a reservation. */
static void lock_one(uintptr_t lo, uintptr_t hi, bool access, void *onfault) {
  if (access) outside_each(lo, hi, lock_piece, onfault);
}
static void lock_program_mappings(bool onfault) {
  (void)maps_each(lock_one, &onfault);
}

/* The address space the kernel would count against RLIMIT_MEMLOCK, less
 * rill's reservations (lock_used adds the arena's slots in use). */
static void count_one(uintptr_t lo, uintptr_t hi, bool access, void *sum) {
  (void)access; /* the kernel counts mappings without access too */
  outside_each(lo, hi, add_len, sum);
}

/* The arena's slots in use (arena_each_used): counted, or locked on fault. */
static void count_used(uintptr_t lo, uintptr_t hi, size_t *sum) {
  *sum += hi - lo;
}
static void lock_used_part(uintptr_t lo, uintptr_t hi, size_t *sum) {
  (void)sum;
  (void)sys_mlock2(lo, hi - lo); /* errors ignored, as the kernel's populate does */
}

static int sys_mlockall(int flags) {
  return (int)syscall(SYS_mlockall, flags);
}

/* A finite RLIMIT_MEMLOCK without CAP_IPC_LOCK: the kernel refuses
 * MCL_CURRENT when the whole address space is larger than the limit, and
 * for rill that counts the reservations, about 1 TiB. So a small program
 * that locked itself under the default 8 MiB limit with glibc got ENOMEM
 * (test_mlock --limit). Here the kernel's test is made with the arena
 * counted as far as its slots are in use (not the runs' wildernesses), and
 * the other reservations (rill's tables) not at all; if it passes, those
 * slots are locked on fault, the program's own mappings locked and
 * populated, and with MCL_FUTURE the arena's slots are locked as they come
 * into use (arena_grown). The tables stay unlocked: they hold rill's
 * records, never the program's bytes. */
static int lock_used(int flags) {
  struct rlimit rl; /* prlimit64's layout on a 64-bit system */
  size_t sum = 0;
  if (syscall(SYS_prlimit64, 0, RLIMIT_MEMLOCK, NULL, &rl) != 0 || !maps_each(count_one, &sum))
    return -1;
  arena_each_used(count_used, &sum);
  if (rl.rlim_cur != RLIM_INFINITY && sum > rl.rlim_cur) {
    errno = ENOMEM;
    return -1;
  }
  if (flags & MCL_FUTURE) {
    if (sys_mlockall(flags & ~MCL_CURRENT) != 0) return -1; /* no size test for it alone */
    atomic_store_explicit(&use_locked, true, RLX);
  }
  arena_each_used(lock_used_part, NULL);
  lock_program_mappings(flags & MCL_ONFAULT);
  return 0;
}

/* mlockall(MCL_CURRENT) locks every mapping and faults all of it in: for
 * rill, the whole reserved arena (1 TiB) and its tables, which ends in the
 * OOM killer. Here the current mappings are locked on fault (MCL_ONFAULT:
 * what is resident is locked now, the rest as it is touched), then the
 * program's own mappings are locked and populated, as the kernel would;
 * MCL_FUTURE is applied last, on its own, since it changes only mappings
 * made afterwards. rill starts first, so that its reservation is made
 * before MCL_FUTURE would have it populated. Under a finite
 * RLIMIT_MEMLOCK the kernel refuses, and lock_used stands in. */
static int lock_all(int flags) {
  if (flags & (MCL_CURRENT | MCL_FUTURE)) (void)rill_init();
  int r;
  if (!(flags & MCL_CURRENT)) {
    r = sys_mlockall(flags);
  } else if ((r = sys_mlockall(MCL_CURRENT | MCL_ONFAULT)) != 0) {
    if (errno == ENOMEM)
      r = lock_used(flags);
    else if (errno == EINVAL && !(flags & MCL_ONFAULT))
      r = sys_mlockall(flags); /* a kernel before 4.4, without MCL_ONFAULT */
  } else if (flags & MCL_ONFAULT) {
    r = flags & MCL_FUTURE ? sys_mlockall(flags & ~MCL_CURRENT) : 0;
  } else {
    lock_program_mappings(false);
    r = flags & MCL_FUTURE ? sys_mlockall(flags & ~MCL_CURRENT) : 0;
  }
  if (r == 0 && (flags & MCL_FUTURE)) atomic_store_explicit(&future_locked, true, RLX);
  return r;
}

/* munlockall ends MCL_FUTURE too. */
static int unlock_all(void) {
  int r = (int)syscall(SYS_munlockall);
  if (r == 0) atomic_store_explicit(&future_locked, false, RLX);
  if (r == 0) atomic_store_explicit(&use_locked, false, RLX);
  return r;
}

int mlockall(int flags) __attribute__((alias("lock_all"), visibility("default")));
int munlockall(void) __attribute__((alias("unlock_all"), visibility("default")));
#endif
