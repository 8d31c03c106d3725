/* arena.c - virtual memory: one large reserved arena of 16 KiB slots, its
 * span-metadata and head tables, the thin wrappers over mmap/madvise, and the locks'
 * futex waits. The bottom layer: it knows nothing of classes or heaps. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* Read by every free: a line of its own, away from anything written often. */
_Alignas(64) arena_t rill_arena;
_Alignas(64) _Atomic size_t rill_arena_top;
_Atomic size_t rill_grown;

static _Atomic int cover_lock; /* arena_cover and arena_grow; huge_start */
static _Atomic int gap_lock;   /* the gaps aligned takes leave (arena_take_aligned) */
static bool arena_cover(size_t end);
static bool arena_grow(size_t end);
/* Slots reserved now (arena_grow raises it under a limit). */
static size_t arena_slots(void) {
  return __atomic_load_n(&rill_arena.nslots, __ATOMIC_ACQUIRE);
}
#define MAX_TRACKERS 4
static struct {
  bool (*commit)(size_t slots);          /* words for slots up to this usable */
  void (*fit)(size_t slots, size_t old); /* words past slots (of old) given back */
} trackers[MAX_TRACKERS];
static unsigned ntrackers;
static size_t commit_end; /* slots whose tables are usable (os_commit_grow) */

/* The system calls themselves, not the C library's wrappers, for what
 * start-up does under its lock: a preloaded library that wraps mmap or
 * madvise and allocates in the wrapper (one that finds the real function
 * with dlsym) would wait for that lock (os_read_file, below, for files). */
static void *sys_map(void *want, size_t n, int prot, int flags) {
  long p = syscall(SYS_mmap, want, n, prot, flags, -1, 0L);
  return p == -1 ? MAP_FAILED : (void *)p;
}
static bool sys_advise(void *p, size_t n, int advice) {
  return syscall(SYS_madvise, p, n, advice) == 0;
}
static bool sys_protect(void *p, size_t n, int prot) {
  return syscall(SYS_mprotect, p, n, prot) == 0;
}

void *os_map(size_t n) {
  void *p = sys_map(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
  return p == MAP_FAILED ? NULL : p;
}

void os_unmap(void *p, size_t n) {
  (void)syscall(SYS_munmap, p, n);
  os_reserved_cut(p, n);
}

/* ---- commit on demand (RILL_COMMIT) --------------------------------------
 * Under strict overcommit (vm.overcommit_memory = 2) the kernel charges a
 * private writable mapping in full when it is made, MAP_NORESERVE or not. The
 * 1 TiB arena was refused, and the largest size granted (8 GiB, charged 8.3
 * GiB with its tables, of an 11.8 GiB commit limit on this project's machine)
 * went to a program that used a few pages, so the next process could hardly
 * start. In demand mode the arena and every table indexed by slot are
 * reserved without access, which is not charged, and made writable as they
 * are reached: the tables at each cover (cover_commit), the arena's pages as
 * slots are handed out (arena_commit). */
static int reserve_prot(void) {
  return rill_opt.commit_demand ? PROT_NONE : PROT_READ | PROT_WRITE;
}

/* Reservations stay out of core dumps until they are used. A core holds
 * every byte of every private mapping that was ever written, holes included,
 * and a crash handler that reads it from a pipe (systemd-coredump, apport)
 * gets each hole as zeros: with the 1 TiB arena and its 16 GiB of span
 * entries, a crash wrote 1.02 TiB and kept the process in the kernel until
 * it had. The parts in use are let back in as they are reached, a table's
 * by os_commit_grow and the arena's by arena_cover, so a core still holds
 * the heap and rill's records of it. */
static void *reserve_at(void *want, size_t n, int flags) {
  void *p = sys_map(want, n, reserve_prot(), MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | flags);
  if (p == MAP_FAILED) return NULL;
  sys_advise(p, n, MADV_DONTDUMP);
  os_reserved_add(p, n); /* mlockall locks it on fault (mlock.c) */
  return p;
}
void *os_reserve(size_t n) {
  return reserve_at(NULL, n, 0);
}

/* Pages a .. b of a table, usable: part of core dumps, and with
 * RILL_COMMIT=demand writable. */
static bool commit_pages(uintptr_t a, uintptr_t b) {
  if (b <= a) return true;
  if (rill_opt.commit_demand && !sys_protect((void *)a, b - a, PROT_READ | PROT_WRITE))
    return false;
  sys_advise((void *)a, b - a, MADV_DODUMP);
  return true;
}
/* Makes bytes from .. to of a table from os_reserve usable, by whole pages.
 * The call that covered .. from did so for its pages up to from's page end. */
bool os_commit_grow(void *tab, size_t from, size_t to) {
  if (to <= from) return true;
  uintptr_t pg = rill_arena.page, t = (uintptr_t)tab;
  uintptr_t a = (from ? t + from + pg - 1 : t) & ~(pg - 1), b = (t + to + pg - 1) & ~(pg - 1);
  return commit_pages(a, b);
}
/* The same for a table that grows down from `top` (page aligned: the span
 * entries): bytes top - to .. top - from. */
static bool os_commit_down(void *top, size_t from, size_t to) {
  if (to <= from) return true;
  uintptr_t pg = rill_arena.page, t = (uintptr_t)top;
  return commit_pages((t - to) & ~(pg - 1), (t - from) & ~(pg - 1));
}

/* Gives pages back; the range stays mapped and reads as zero afterwards.
 * False if the kernel refused: it does for locked pages (mlock, mlockall),
 * which then keep their contents, so the caller must not count the range
 * purged or zero (a calloc served from it returned the old bytes). */
bool os_purge(void *p, size_t n) {
  return sys_advise(p, n, MADV_DONTNEED);
}

/* Timed purging may use MADV_FREE: cheaper, but pages leave RSS only under
 * memory pressure, and their contents are no longer known to be zero. */
bool os_purge_lazy(void *p, size_t n) {
#ifdef MADV_FREE
  if (rill_opt.purge_free && sys_advise(p, n, MADV_FREE)) return true;
#endif
  return sys_advise(p, n, MADV_DONTNEED);
}

/* The span entries of slots first .. end - 1, inner slots of a free run
 * whose pages went back: the whole pages of them go back too, and read as
 * zero, as a never-used slot's entry does. No path reads an inner slot's
 * entry: lookups go through the head table, and a cut that makes one a
 * head writes what it needs (runs.c, free_head). What must outlive a span
 * at the slot, its tag count, is in `tags`. After a burst of big buffers
 * the entries were 1/64 of the peak, resident for good. A refusal (locked
 * pages) leaves them as they are. */
void arena_entries_release(size_t first, size_t end) {
  uintptr_t pg = rill_arena.page;
  uintptr_t a = ((uintptr_t)(span_of_index(end - 1)) + pg - 1) & ~(pg - 1);
  uintptr_t b = (uintptr_t)(span_of_index(first) + 1) & ~(pg - 1);
  if (b > a) sys_advise((void *)a, b - a, MADV_DONTNEED);
}

/* Reads the start of a file (/proc, /sys) into buf, NUL-terminated: the
 * bytes read, or -1. System calls of its own, not the C library's open and
 * read: a preloaded library that wraps those may allocate in its wrapper
 * (dlsym does, to find the real one), and this runs under rill's start-up
 * lock and, in the purger, under heap locks. */
long os_read_file(const char *path, char *buf, size_t cap) {
  long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  long got = syscall(SYS_read, (int)fd, buf, cap - 1);
  syscall(SYS_close, (int)fd);
  if (got < 0) return -1;
  buf[got] = 0;
  return got;
}

/* Sleeps while *w == v (a private futex); os_wake wakes one sleeper. */
void os_wait(_Atomic uint32_t *w, uint32_t v) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}
/* As os_wait, for ms milliseconds at most. */
void os_wait_ms(_Atomic uint32_t *w, uint32_t v, uint32_t ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, v, &ts, NULL, 0);
}
#if defined(RILL_RACE_WINDOWS) && defined(RILL_TSAN)
void race_nap(void) {
  static __thread uint32_t calls;
  static _Atomic uint32_t never; /* nobody wakes it: the wait times out */
  if (++calls % 256 == 0) os_wait_ms(&never, 0, 2);
}
#endif
void os_wake(_Atomic uint32_t *w) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* ---- the locks' waits (spin_lock) -----------------------------------------
 * 1 and up while this thread waits for a lock here, or under TSan is inside
 * any call (owner_enter): the lender leaves its heap alone (owner_busy). */
__thread _Atomic int rill_inside;

#define LOCK_SPINS  64 /* pauses: a holder on another CPU is about done */
#define LOCK_YIELDS 16 /* then yields: a holder preempted on this CPU runs */

_Atomic uint32_t rill_fork_sleepers;

/* Sleeps in a futex wait on w while it holds v. Counted inside rill first:
 * the lender reads the count after it has seen the thread asleep. */
static void lock_sleep(_Atomic int *w, int v) {
  atomic_fetch_add_explicit(&rill_inside, 1, memory_order_seq_cst);
  syscall(SYS_futex, (int *)w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
  atomic_fetch_sub_explicit(&rill_inside, 1, RLX);
}

/* spin_lock's wait, from `seen`, the word its first compare-and-swap met.
 * Once asleep, a thread takes the lock as LOCK_SLEEPERS: others may still
 * sleep on it, and its own unlock must wake the next (a futex mutex as in
 * Drepper's "Futexes Are Tricky", its third version). A lock a fork holds
 * is slept out on the fork's generation, which fork_locks_release moves
 * and wakes: the fork writes no lock word when it lets go, and a real-time
 * thread that preempted the forking one on its CPU must let it finish. */
void lock_wait(_Atomic int *l, int seen) {
  bool slept = false;
  for (unsigned tries = 0;; tries++) {
    if (seen == 0 || lock_stale(seen)) {
      int want = slept ? LOCK_SLEEPERS : 1;
      if (atomic_compare_exchange_strong_explicit(l, &seen, want, ACQ, RLX)) return;
      continue; /* seen is the word now */
    }
    if (fork_reentry(seen)) return;
    if (tries < LOCK_SPINS) {
      cpu_relax();
    } else if (tries < LOCK_SPINS + LOCK_YIELDS) {
      sched_yield();
    } else if (seen >= 2) {
      /* counted, then the generation read: fork_locks_release's order reversed */
      atomic_fetch_add_explicit(&rill_fork_sleepers, 1, memory_order_seq_cst);
      unsigned gen = atomic_load_explicit(&rill_fork_gen, memory_order_seq_cst);
      if (seen == LOCK_MARK(gen)) lock_sleep((_Atomic int *)&rill_fork_gen, (int)gen);
      atomic_fetch_sub_explicit(&rill_fork_sleepers, 1, RLX);
    } else if (seen == LOCK_SLEEPERS ||
               atomic_compare_exchange_strong_explicit(l, &seen, LOCK_SLEEPERS, RLX, RLX)) {
      lock_sleep(l, LOCK_SLEEPERS);
      slept = true;
    } else {
      continue; /* the word changed under the compare-and-swap: seen has it */
    }
    seen = atomic_load_explicit(l, RLX);
  }
}
/* One step of a wait for another thread that has no wake to give: yields at
 * first (tries 0-15), then naps 50 us, so that a real-time waiter lets the
 * thread it waits for run on its CPU, as lock_wait does. A nap, not a futex
 * wait: the lender takes a thread in a futex wait for idle (owner_busy). */
void os_pause(unsigned tries) {
  if (tries < LOCK_YIELDS) {
    sched_yield();
  } else {
    struct timespec ts = {0, 50000};
    syscall(SYS_nanosleep, &ts, NULL);
  }
}

/* Wakes every thread asleep on a fork's mark (fork_locks_release). */
void lock_fork_wake(void) {
  syscall(SYS_futex, (int *)&rill_fork_gen, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}
/* Wakes n of the threads asleep on lock l. */
void lock_wake(_Atomic int *l, int n) {
  syscall(SYS_futex, (int *)l, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* Reads /proc/self/task/<tid>/<name> into buf (NUL-terminated); false if it
 * cannot (no /proc, the thread is gone, out of descriptors). */
static bool task_file(int tid, const char *name, char *buf, size_t cap) {
  char path[64] = "/proc/self/task/", digits[12];
  size_t n = strlen(path), d = 0;
  for (unsigned v = (unsigned)tid; v || !d; v /= 10) digits[d++] = (char)('0' + v % 10);
  while (d) path[n++] = digits[--d];
  path[n++] = '/';
  strcpy(path + n, name); /* no stdio: this runs inside the allocator */
  return os_read_file(path, buf, cap) > 0;
}

/* Is thread `tid` of this process asleep in a futex or epoll wait? Those are
 * the waits of an idle thread (a condition variable, a join, an event loop),
 * and neither rill (whose fast paths make no system call) nor a signal
 * handler that interrupted rill may block there: none of the calls that
 * reach them is async-signal-safe. *switches gets its context switches,
 * so a caller that asks twice knows whether it ran in between. */
bool os_thread_waiting(int tid, uint64_t *switches) {
  char buf[2048];
  if (tid <= 0 || !task_file(tid, "status", buf, sizeof buf)) return false;
  const char *st = strstr(buf, "\nState:");
  const char *vol = strstr(buf, "\nvoluntary_ctxt_switches:");
  const char *inv = strstr(buf, "\nnonvoluntary_ctxt_switches:");
  if (!st || !vol || !inv) return false;
  st += strlen("\nState:");
  while (*st == ' ' || *st == '\t') st++;
  if (*st != 'S') return false; /* running, runnable, stopped or traced */
  *switches = strtoull(strchr(vol, ':') + 1, NULL, 10) + strtoull(strchr(inv, ':') + 1, NULL, 10);
  if (!task_file(tid, "syscall", buf, sizeof buf)) return false;
  char *end;
  long nr = strtol(buf, &end, 10); /* "running", or -1 when asleep outside a call */
  if (end == buf) return false;
  switch (nr) {
  case SYS_futex:
#ifdef SYS_futex_waitv
  case SYS_futex_waitv:
#endif
#ifdef SYS_epoll_wait
  case SYS_epoll_wait:
#endif
  case SYS_epoll_pwait:
#ifdef SYS_epoll_pwait2
  case SYS_epoll_pwait2:
#endif
    return true;
  default:
    return false;
  }
}

uint64_t os_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The CPU the caller runs on, mod n; 0 where the kernel cannot say. glibc
 * reads it from the rseq area: a load. */
unsigned os_cpu(unsigned n) {
  int c = sched_getcpu();
  return c >= 0 ? (unsigned)c % n : 0;
}

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* ---- huge pages (RILL_HUGEPAGES=1; Streamflow §3.2 superpages) ----------
 * The arena is advised MADV_NOHUGEPAGE, whatever the kernel's mode ("always"
 * would back a thread's first 16 KiB span with 2 MiB). With RILL_HUGEPAGES=1,
 * once the program has taken HUGE_START bytes of the arena into use, the
 * arena from its top up is advised MADV_HUGEPAGE in one call (huge_from), and
 * any 2 MiB below that a later cut reaches (the rest of a runs shard's
 * wilderness, reserved before) is advised as it is cut; a bit per 2 MiB
 * records those. Going by address alone (the arena past its first 32 MiB,
 * before 2026-11-30) let small programs balloon: eight threads that each
 * held a 300 KB block had eight wildernesses 32 MiB apart, and each thread's
 * blocks past the line filled huge pages, 16.5 MiB of blocks in 32 MiB.
 * Purging and decommitting ask arena_huge whether a range may hold huge
 * pages; a range never advised is purged page by page. */
static _Atomic uint64_t *huge_bits; /* one bit per 2 MiB from huge_origin */
static uintptr_t huge_origin;
static _Atomic uintptr_t huge_from; /* advised from here up; 0 = not yet */

static void huge_setup(uintptr_t base, size_t max) {
  if (!rill_opt.hugepages) return;
  huge_origin = base & ~(uintptr_t)(HUGE_PAGE - 1);
  size_t regions = (base + max - huge_origin) / HUGE_PAGE + 1;
  huge_bits = os_map((regions + 63) / 64 * sizeof(uint64_t));
}

/* Arena bytes [from, from + len) from base, as a new stretch: never in
 * transparent huge pages, unless the program has grown (huge_from). */
static void arena_advise(uintptr_t base, size_t from, size_t len) {
  sys_advise((void *)(base + from), len, MADV_NOHUGEPAGE);
  if (atomic_load_explicit(&huge_from, RLX)) sys_advise((void *)(base + from), len, MADV_HUGEPAGE);
}

/* Once: the arena from the 2 MiB that holds its top up, under cover_lock so
 * that a stretch arena_grow adds meanwhile is advised too. */
static void huge_start(void) {
  spin_lock(&cover_lock);
  if (!atomic_load_explicit(&huge_from, RLX)) {
    uintptr_t top = rill_arena.base + (atomic_load_explicit(&rill_arena_top, RLX) << SLOT_SHIFT);
    uintptr_t a = top & ~(uintptr_t)(HUGE_PAGE - 1), end = rill_arena.base + rill_arena.size;
    if (a < rill_arena.base) a = rill_arena.base;
    if (end > a) sys_advise((void *)a, end - a, MADV_HUGEPAGE);
    atomic_store_explicit(&huge_from, a, RLX);
  }
  spin_unlock(&cover_lock);
}

/* Slots [first, first + slots) were cut: advises the 2 MiB regions they touch
 * below huge_from that no one advised before, contiguous ones in one call.
 * With RILL_COMMIT each such region is first made writable whole: a fault
 * while part of it is still without access cannot take a huge page. */
static void huge_advise(size_t first, size_t slots) {
  if (!huge_bits || atomic_load_explicit(&rill_grown, RLX) << SLOT_SHIFT < HUGE_START) return;
  if (!atomic_load_explicit(&huge_from, RLX)) huge_start();
  uintptr_t lo = rill_arena.base + (first << SLOT_SHIFT), from = atomic_load(&huge_from);
  size_t r = (lo - huge_origin) / HUGE_PAGE;
  size_t end = (lo + (slots << SLOT_SHIFT) - 1 - huge_origin) / HUGE_PAGE;
  size_t run = 0; /* regions this call took, ending at r - 1 */
  for (; r <= end + 1; r++) {
    uint64_t bit = (uint64_t)1 << (r % 64);
    bool took = r <= end && !(atomic_load_explicit(&huge_bits[r / 64], RLX) & bit) &&
                !(atomic_fetch_or_explicit(&huge_bits[r / 64], bit, RLX) & bit);
    if (took) {
      run++;
      continue;
    }
    if (!run) continue;
    uintptr_t a = huge_origin + (r - run) * HUGE_PAGE, b = a + run * HUGE_PAGE;
    run = 0;
    if (rill_opt.commit_demand) {
      uintptr_t top = rill_arena.base + (arena_slots() << SLOT_SHIFT);
      uintptr_t ca = a < rill_arena.base ? rill_arena.base : a, cb = b < top ? b : top;
      if (cb > ca)
        (void)arena_commit((ca - rill_arena.base) >> SLOT_SHIFT, (cb - ca) >> SLOT_SHIFT);
    }
    if (a < from) sys_advise((void *)a, (b < from ? b : from) - a, MADV_HUGEPAGE);
  }
}

bool arena_huge(uintptr_t lo, uintptr_t hi) {
  if (!huge_bits || hi <= lo) return false;
  uintptr_t from = atomic_load_explicit(&huge_from, RLX);
  if (from && hi > from) return true;
  for (size_t r = (lo - huge_origin) / HUGE_PAGE; r <= (hi - 1 - huge_origin) / HUGE_PAGE; r++)
    if (atomic_load_explicit(&huge_bits[r / 64], RLX) & ((uint64_t)1 << (r % 64))) return true;
  return false;
}

/* Where an arena that may grow (arena_grow) asks to go: somewhere in
 * [1 TiB, 8 TiB), on a 2 MiB boundary, chosen at random (the kernel's own choice is
 * random too). The kernel maps new ranges top down from just below the
 * stack, and a PIE program and its brk heap sit near 85 TiB, so the space
 * above such an arena stays free for it to grow into; the kernel's choice
 * sits right below a mapping, with no room above. 0 (no hint) where user
 * space is smaller (39-bit aarch64 kernels); the kernel ignores a hint it
 * cannot honour anyway. */
static uintptr_t arena_hint(void) {
  if (sizeof(void *) < 8) return 0;
  uint64_t r = 0;
  if (syscall(SYS_getrandom, &r, sizeof r, 1 /* GRND_NONBLOCK */) != (long)sizeof r) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    r = ((uint64_t)(uintptr_t)&r ^ (uint64_t)ts.tv_nsec) * 0x9E3779B97F4A7C15ull;
  }
  const uint64_t lo = (uint64_t)1 << 40, span = (uint64_t)7 << 40;
  return (uintptr_t)((lo + r % span) & ~(uint64_t)(HUGE_PAGE - 1));
}

/* Reserves `size` bytes of arena with the head table HEADS_GAP below it and
 * the span entries right under the head table (they grow down from it: see
 * span_of_index): one mapping of all three, trimmed to tables of `slots`
 * entries, its base on a 2 MiB boundary; or, where the address-space limit
 * (ulimit -v) will not take the gap, the arena alone, slot aligned, and
 * then both tables as one mapping at their place below it, if nothing is
 * mapped there. At `hint` if the kernel agrees. 0 if neither works. */
static uintptr_t arena_reserve(size_t size, size_t slots, uintptr_t hint) {
  size_t heads_bytes = slots * sizeof(span_t *), meta_bytes = slots * sizeof(span_t);
  size_t below = meta_bytes + HEADS_GAP, all = below + size + HUGE_PAGE;
  char *raw = reserve_at(hint ? (void *)(hint - below) : NULL, all, 0);
  if (raw) {
    uintptr_t base = ((uintptr_t)raw + below + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
    uintptr_t lo = base - below, heads = base - HEADS_GAP, end = (uintptr_t)raw + all;
    if (lo > (uintptr_t)raw) os_unmap(raw, lo - (uintptr_t)raw);
    os_unmap((void *)(heads + heads_bytes), HEADS_GAP - heads_bytes);
    if (end > base + size) os_unmap((void *)(base + size), end - (base + size));
    return base;
  }
  raw = reserve_at(hint ? (void *)(hint - SLOT_SIZE) : NULL, size + SLOT_SIZE, 0);
  if (!raw) return 0;
  uintptr_t base = ((uintptr_t)raw + SLOT_SIZE - 1) & ~(uintptr_t)(SLOT_SIZE - 1);
  if (base > (uintptr_t)raw) os_unmap(raw, base - (uintptr_t)raw);
  if (base < (uintptr_t)raw + SLOT_SIZE)
    os_unmap((void *)(base + size), (uintptr_t)raw + SLOT_SIZE - base);
  void *want = (void *)(base - below);
  void *t = reserve_at(want, meta_bytes + heads_bytes, MAP_FIXED_NOREPLACE);
  if (t == want) return base;
  if (t) os_unmap(t, meta_bytes + heads_bytes); /* a kernel that took it as a hint */
  os_unmap((void *)base, size);
  return 0;
}

/* Reads the page size and CPU count, once, before the arena is sized. */
void arena_setup(void) {
  long pg = sysconf(_SC_PAGESIZE);
  rill_arena.page = pg > 0 ? (size_t)pg : 4096;
  /* the system call itself: the C library's wrapper sits in 64 KiB of its
   * text that nothing else a small program runs touches (and the kernel
   * maps such text in whole 64 KiB windows); it returns the bytes written */
  cpu_set_t set;
  unsigned ncpu = 1;
  memset(&set, 0, sizeof set);
  if (syscall(SYS_sched_getaffinity, 0, sizeof set, &set) > 0) ncpu = (unsigned)CPU_COUNT(&set);
  if (ncpu < 1) ncpu = 1;
  rill_arena.stripes = ncpu > MAX_STRIPES ? MAX_STRIPES : ncpu;
  unsigned mo = 0;
  while ((SLOT_SIZE << mo) < rill_arena.page) mo++;
  rill_arena.min_order = mo;
}

/* Reserves an arena of `size` bytes with its tables (scalloc §3.2: one mmap
 * of a large range, paged in on demand). Spans are handed out from the
 * bottom up, so the part in use and its page tables stay dense however
 * sparse the live objects are. rill_init tries 1 TiB and halves until the
 * kernel agrees (39-bit aarch64 kernels, strict overcommit, an address-space
 * limit), down to ARENA_MIN. The tables are reserved for `max` bytes (at
 * least `size`): the arena may grow to that in place (arena_grow). */
bool arena_init(size_t size, size_t max) {
  if (max < size) max = size;
  size_t nslots = size >> SLOT_SHIFT, maxslots = max >> SLOT_SHIFT;
  size_t meta_bytes = maxslots * sizeof(span_t), heads_bytes = maxslots * sizeof(span_t *);
  size_t tags_bytes = maxslots * sizeof(uint16_t);
  _Atomic uint16_t *tags = os_reserve(tags_bytes);
  uintptr_t base = tags ? arena_reserve(size, maxslots, max > size ? arena_hint() : 0) : 0;
  if (!base) {
    if (tags) os_unmap((void *)tags, tags_bytes);
    return false;
  }
  span_t **heads = (span_t **)(base - HEADS_GAP);
  span_t *meta = (span_t *)(void *)heads - 1; /* slot 0's entry; slot i's at meta - i */
  /* Small spans must not be inflated by transparent huge pages; with
   * RILL_HUGEPAGES=1 a program asks for them once it has grown (huge_advise),
   * so small programs do not balloon. */
  arena_advise(base, 0, size);
  huge_setup(base, max);
  sys_advise((char *)heads - meta_bytes, meta_bytes, MADV_NOHUGEPAGE);
  sys_advise(heads, heads_bytes, MADV_NOHUGEPAGE);
  rill_arena.base = base;
  rill_arena.size = size;
  rill_arena.meta = meta;
  rill_arena.heads = heads;
  rill_arena.tags = tags;
  __atomic_store_n(&rill_arena.nslots, nslots, __ATOMIC_RELAXED);
  rill_arena.max_slots = maxslots;
  rill_arena.bound = 0;
#if RILL_DEBUG
  rill_dbg = os_reserve(maxslots * sizeof(dbg_span_t));
  if (!rill_dbg) {
    arena_release();
    return false;
  }
#endif
  /* The first span-sized run stays unused: meta[0] is the entry with no
   * blocks that span_lookup gives for an address no span covers, and
   * every span stays page aligned, since all are 2^min_order slots or
   * more. */
  atomic_store_explicit(&rill_arena_top, (size_t)1 << rill_arena.min_order, RLX);
  if (arena_cover((size_t)1 << rill_arena.min_order)) return true;
  arena_release();
  return false;
}

/* Undoes arena_init, before anything was handed out (start-up only: the
 * layers above could not fit their tables beside an arena of this size). */
void arena_release(void) {
  size_t n = rill_arena.max_slots;
  os_unmap(span_of_index(n - 1), n * sizeof(span_t) + n * sizeof(span_t *));
  os_unmap((void *)rill_arena.tags, n * sizeof(uint16_t));
  os_unmap((void *)rill_arena.base, rill_arena.size);
#if RILL_DEBUG
  if (rill_dbg) os_unmap(rill_dbg, n * sizeof(dbg_span_t));
  rill_dbg = NULL;
#endif
  rill_arena.base = rill_arena.size = rill_arena.nslots = rill_arena.max_slots = 0;
  rill_arena.bound = 0;
  rill_arena.meta = NULL;
  ntrackers = 0;
  commit_end = 0;
  rill_arena.heads = NULL;
  rill_arena.tags = NULL;
}

/* Head entries of slots no span covers hold meta[0] rather than NULL, so
 * free's fast path needs no null test: it tests the bound instead of the
 * arena's size, and every entry below the bound is a span. The entries are
 * written a page of the table (512 slots, 8 MiB of arena) at a time, ahead
 * of the slots arena_take hands out, before the bound that admits them is
 * published (release); a taker whose slots are already below the bound it
 * reads (acquire) sees them written, and writes its own entries after. */
#define COVER_STEP ((size_t)4096 / sizeof(span_t *))

/* The tables usable (os_commit_grow) for slots up to `to`, doubling what
 * is usable (by 256 MiB of arena at most), so that covers rarely make system
 * calls; the span entries, the biggest table, are 1/64 of the arena they
 * cover. The arena's own pages are committed by whoever hands slots out
 * (arena_commit), since a runs shard takes 32 MiB at a time and cuts it as
 * needed. */
#define COMMIT_STEP_MAX (((size_t)256 << 20) >> SLOT_SHIFT)
static bool cover_commit(size_t to) {
  size_t from = commit_end;
  if (to <= from) return true;
  size_t want = from + (from < COMMIT_STEP_MAX ? from : COMMIT_STEP_MAX);
  if (want < to) want = to;
  want = (want + COVER_STEP - 1) & ~(COVER_STEP - 1);
  if (want > arena_slots()) want = arena_slots();
  if (!os_commit_down(span_of_index(0) + 1, from * sizeof(span_t), want * sizeof(span_t)) ||
      !os_commit_grow(rill_arena.heads, from * sizeof(span_t *), want * sizeof(span_t *)) ||
      !os_commit_grow((void *)rill_arena.tags, from * sizeof(uint16_t), want * sizeof(uint16_t)))
    return false;
#if RILL_DEBUG
  if (!os_commit_grow(rill_dbg, from * sizeof(dbg_span_t), want * sizeof(dbg_span_t))) return false;
#endif
  for (unsigned i = 0; i < ntrackers; i++)
    if (!trackers[i].commit(want)) return false;
  commit_end = want;
  return true;
}

/* A layer above whose tables are indexed by slot has them made usable
 * (os_commit_grow) as far as the arena's own tables, now and at each cover,
 * and gives back their words past a lowered limit (arena_fit). False if the
 * kernel refuses the first commit. */
bool arena_track(bool (*commit)(size_t slots), void (*fit)(size_t slots, size_t old)) {
  spin_lock(&cover_lock);
  bool ok = ntrackers < MAX_TRACKERS && commit(commit_end);
  if (ok) {
    trackers[ntrackers].commit = commit;
    trackers[ntrackers++].fit = fit;
  }
  spin_unlock(&cover_lock);
  return ok;
}

/* Unmaps the whole pages of table bytes [from, to): what arena_fit gives
 * back of a table; the pages at either end may hold other words. */
void os_give_back(void *tab, size_t from, size_t to) {
  uintptr_t pg = rill_arena.page, t = (uintptr_t)tab;
  uintptr_t a = (t + from + pg - 1) & ~(pg - 1), b = (t + to) & ~(pg - 1);
  if (b > a) os_unmap((void *)a, b - a);
}

/* False when the kernel refuses to commit the memory (RILL_COMMIT under
 * strict overcommit): the bound stays, and the caller's slots are not handed
 * out. */
static bool arena_cover(size_t end) {
  if (end <= arena_bound_slots()) return true;
  spin_lock(&cover_lock);
  size_t from = rill_arena.bound >> SLOT_SHIFT;
  /* a take that read nslots before arena_fit cut it: grow again or refuse */
  bool ok = arena_grow(end);
  if (ok && end > from) {
    size_t to = (end + COVER_STEP - 1) & ~(COVER_STEP - 1);
    if (to > arena_slots()) to = arena_slots();
    ok = cover_commit(to);
    if (ok) {
      /* the arena's own pages join core dumps a cover step at a time, in
       * whole huge pages, so the edge never splits one (RILL_HUGEPAGES) */
      uintptr_t a = (rill_arena.base + (from << SLOT_SHIFT)) & ~(HUGE_PAGE - 1);
      uintptr_t b = (rill_arena.base + (to << SLOT_SHIFT) + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
      uintptr_t top = rill_arena.base + rill_arena.size;
      if (a < rill_arena.base) a = rill_arena.base;
      sys_advise((void *)a, (b < top ? b : top) - a, MADV_DODUMP);
      for (size_t i = from; i < to; i++)
        __atomic_store_n(&rill_arena.heads[i], span_of_index(0), __ATOMIC_RELAXED);
      __atomic_store_n(&rill_arena.bound, to << SLOT_SHIFT, __ATOMIC_RELEASE);
    }
  }
  spin_unlock(&cover_lock);
  return ok;
}

/* RILL_COMMIT: slots first .. first + n - 1, handed out already, writable.
 * False if the kernel refuses. */
bool arena_commit(size_t first, size_t n) {
  return os_commit_grow((void *)(rill_arena.base + (first << SLOT_SHIFT)), 0, n << SLOT_SHIFT);
}

/* RILL_COMMIT: gives slots first .. first + n - 1 back with their commit
 * charge. Strict overcommit charges a writable private mapping whatever
 * madvise did to its pages, so the range is mapped anew without access;
 * arena_commit makes it writable (and zero) again. The new mapping is
 * advised as arena_init advised the arena, so it merges with its
 * neighbours again once writable, and no transparent huge page fills it
 * unasked. With RILL_HUGEPAGES=1 the arena's huge-page part is left alone:
 * a stretch that covered part of a huge page would split it (timed purging
 * never does). False if not done: that, or the kernel refused (the memory
 * map's limit), and the range is then as it was. */
bool arena_decommit(size_t first, size_t n) {
  uintptr_t p = rill_arena.base + (first << SLOT_SHIFT);
  size_t len = n << SLOT_SHIFT;
  if (arena_huge(p, p + len)) return false;
  if (sys_map((void *)p, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE) ==
      MAP_FAILED)
    return false;
  sys_advise((void *)p, len, MADV_NOHUGEPAGE);
  return true;
}

/* fork: the child must not inherit the lock held by a thread that is gone. */
void arena_fork_prepare(void) {
  fork_hold(&cover_lock);
  fork_hold(&gap_lock);
}

/* The arena, full, reserves more address space right above its end, so
 * that slots up to `end` exist: what `end` needs, in whole largest spans,
 * never past the tables' max_slots. Only under an address-space limit,
 * where the arena starts at half the limit (rill_init): it grows until the
 * limit stops it, as other allocators' heaps do, instead of failing small
 * blocks at half of it. It grows by 32 MiB, not by a share of its size:
 * what it reserves and does not use is address space the program's thread
 * stacks and mappings cannot have (a quarter at a time left 141 MiB unused
 * over 800 MiB of 100,000-byte blocks under a 1 GiB limit, room for 17
 * stacks), and a 32 MiB step costs one mmap per 8,192 page faults. An arena
 * at the kernel's own address usually has a mapping right above it, and
 * one at arena_hint has room. Under cover_lock. */
#define GROW_UNIT ((size_t)1 << MAX_ORDER) /* slots in a largest span, 32 MiB */
/* The largest step that may still fit under the limit: a refused step is
 * halved down to what the take needs, so the arena ends within a span of
 * the limit, not within 32 MiB of it (1,000-byte blocks under 768 MiB left
 * 11 MiB of it unmapped; test_aslimit checks the fill's share). Each
 * refusal halves it for good and each granted step doubles it back, so a
 * spent arena costs one refused mmap per take, as before. Under
 * cover_lock. */
static size_t grow_cap = GROW_UNIT;

/* One step of `step` slots above the arena's end: true if it is the
 * arena's now. */
static bool grow_step(size_t have, size_t step);

static bool arena_grow(size_t end) {
  size_t have = rill_arena.nslots, max = rill_arena.max_slots;
  if (end <= have) return true;
  if (end > max) return false;
  size_t unit = limit_unit(max << SLOT_SHIFT) >> SLOT_SHIFT; /* the tables' reach: the limit */
  size_t need = end - have, step = (need + unit - 1) / unit * unit;
  if (step > grow_cap) step = grow_cap > need ? grow_cap : need;
  if (step > max - have) step = max - have;
  for (;;) {
    if (grow_step(have, step)) {
      if (step >= grow_cap && grow_cap < GROW_UNIT) grow_cap *= 2;
      return true;
    }
    if (step <= need) return false;
    step = step / 2 > need ? step / 2 : need;
    if (step < grow_cap) grow_cap = step;
  }
}

static bool grow_step(size_t have, size_t step) {
  void *want = (void *)(rill_arena.base + (have << SLOT_SHIFT));
  size_t len = step << SLOT_SHIFT;
  /* without access first: under mlockall(MCL_FUTURE) a writable mapping
   * is locked and faulted in whole (the reservation problem of mlock.c
   * again), one without access is not; unlocked, it can take its access
   * without being populated, then lock its pages as they are touched */
  bool locked = os_future_locked();
  void *p = sys_map(want, len, locked ? PROT_NONE : reserve_prot(),
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE);
  if (p == want) {
    if (locked) {
      (void)syscall(SYS_munlock, p, len);
      if (reserve_prot() != PROT_NONE) sys_protect(p, len, reserve_prot());
      /* under mlockall's stand-in, arena_grown locks each take instead */
      if (!os_locks_on_use()) (void)syscall(SYS_mlock2, p, len, 1 /* MLOCK_ONFAULT */);
    }
    sys_advise(p, len, MADV_DONTDUMP); /* as reserve_at: arena_cover lets it in */
    arena_advise(rill_arena.base, have << SLOT_SHIFT, len);
    os_reserved_grow(want, len);
    __atomic_store_n(&rill_arena.size, rill_arena.size + len, __ATOMIC_RELAXED);
    __atomic_store_n(&rill_arena.nslots, have + step, __ATOMIC_RELEASE);
    return true;
  }
  if (p != MAP_FAILED) (void)syscall(SYS_munmap, p, len); /* a kernel that took a hint */
  return false;
}

/* The program lowered its address-space limit (setrlimit, prlimit: limits.c)
 * to `limit` bytes. The arena's unused top (above the slots handed out and
 * covered) goes back, and so do the span entries and head entries past what
 * the limit could hold, so the limit governs what the program maps next, as
 * it would under an allocator that maps as it goes: with the 1 TiB arena and
 * 16 GiB of entries still reserved, a Python program that set RLIMIT_AS to 2
 * GiB could start no thread and map no file, while its small objects went
 * on past the limit. The arena grows back in place as it needs
 * (arena_grow), up to the limit. Under cover_lock, which every take past
 * the covered bound passes (arena_cover), so no take is cut off. */
void arena_fit(size_t limit) {
  if (!atomic_load_explicit(&rill_ready, ACQ) || !rill_arena.base) return;
  spin_lock(&cover_lock);
  size_t top = atomic_load_explicit(&rill_arena_top, RLX), have = rill_arena.nslots;
  size_t keep = arena_bound_slots(), unit = limit_unit(limit) >> SLOT_SHIFT;
  if (top > keep && top <= have) keep = top;
  keep = (keep + unit - 1) / unit * unit;
  if (keep < have) {
    os_unmap((void *)(rill_arena.base + (keep << SLOT_SHIFT)), (have - keep) << SLOT_SHIFT);
    __atomic_store_n(&rill_arena.size, keep << SLOT_SHIFT, __ATOMIC_RELAXED);
    __atomic_store_n(&rill_arena.nslots, keep, __ATOMIC_RELEASE);
  }
  size_t max = rill_arena.max_slots, fit = (limit >> SLOT_SHIFT) / unit * unit;
  if (fit < keep) fit = keep;
  if (fit < max) {
    os_unmap(span_of_index(max - 1), (max - fit) * sizeof(span_t));
    os_unmap(&rill_arena.heads[fit], (max - fit) * sizeof(span_t *));
    os_give_back((void *)rill_arena.tags, fit * sizeof(uint16_t), max * sizeof(uint16_t));
#if RILL_DEBUG
    os_unmap(&rill_dbg[fit], (max - fit) * sizeof(dbg_span_t));
#endif
    if (commit_end > fit) commit_end = fit;
    for (unsigned i = 0; i < ntrackers; i++) trackers[i].fit(fit, max);
    rill_arena.max_slots = fit;
  }
  spin_unlock(&cover_lock);
}

/* Slots up to `end` reserved: at once, or by growing the arena. */
static bool arena_room(size_t end) {
  if (end <= arena_slots()) return true;
  if (rill_arena.max_slots <= arena_slots()) return false;
  spin_lock(&cover_lock);
  bool ok = arena_grow(end);
  spin_unlock(&cover_lock);
  return ok;
}

/* ---- what is in use, for mlockall (mlock.c) ----------------------------
 * The arena's top runs ahead of the slots in use: each runs shard takes up
 * to 32 MiB at a time for its wilderness. mlockall under a finite
 * RLIMIT_MEMLOCK counts and locks only the slots in use, so the shards
 * report their wildernesses here (arena_hole), and arena_grown locks what
 * is cut from a wilderness or a heap's chunk once mlockall asked for it. */
#define GAPS 8
static struct { _Atomic size_t lo, hi; } holes[RUN_SHARDS + GAPS]; /* then the gaps' */

void arena_hole(unsigned k, size_t lo, size_t hi) {
  atomic_store_explicit(&holes[k].lo, lo, RLX);
  atomic_store_explicit(&holes[k].hi, hi, RLX);
}

bool arena_grown(size_t first, size_t slots) {
  if (!os_reserved_use((void *)(rill_arena.base + (first << SLOT_SHIFT)), slots << SLOT_SHIFT))
    return false;
  atomic_fetch_add_explicit(&rill_grown, slots, RLX);
  huge_advise(first, slots);
  return true;
}

/* fn for each stretch of the arena's slots handed out and not in a
 * shard's wilderness, as addresses, lowest first. Read without the shards'
 * locks: a cut after mlockall set use_locked locks itself (arena_grown),
 * but one that races with the walk itself may be left unlocked, as memory a
 * thread maps during the kernel's own mlockall may be. */
void arena_each_used(void (*fn)(uintptr_t lo, uintptr_t hi, size_t *sum), size_t *sum) {
  if (!rill_arena.base) return;
  size_t top = atomic_load_explicit(&rill_arena_top, RLX), lo[RUN_SHARDS + GAPS],
         hi[RUN_SHARDS + GAPS];
  if (top > arena_bound_slots()) top = arena_bound_slots();
  unsigned n = 0;
  for (unsigned k = 0; k < RUN_SHARDS + GAPS; k++) { /* sorted by lo as they are read */
    size_t a = atomic_load_explicit(&holes[k].lo, RLX), b = atomic_load_explicit(&holes[k].hi, RLX);
    if (b <= a) continue;
    unsigned j = n++;
    for (; j && lo[j - 1] > a; j--) lo[j] = lo[j - 1], hi[j] = hi[j - 1];
    lo[j] = a, hi[j] = b;
  }
  size_t at = (size_t)1 << rill_arena.min_order; /* the first slot a span may have */
  for (unsigned j = 0; j <= n && at < top; j++) {
    size_t end = j < n && lo[j] < top ? lo[j] : top;
    if (end > at)
      fn(rill_arena.base + (at << SLOT_SHIFT), rill_arena.base + (end << SLOT_SHIFT), sum);
    if (j < n && hi[j] > at) at = hi[j];
  }
}

/* ---- 2 MiB-aligned takes (RILL_HUGEPAGES) -------------------------------
 * A runs shard's wilderness (32 MiB) starts on a 2 MiB boundary. Taken where
 * the top happened to be, behind a heap's 256 KiB chunk, each began and
 * ended inside a huge page that a heap's small spans or the next shard
 * shared, which neither the runs' purge nor the pool's (regions_purge)
 * could then give back whole: two threads that freed 256 MiB of 16-64 KiB
 * buffers and exited kept 26 MiB, a huge page every 32 MiB. The slots
 * skipped below such a take make a gap that the next takes of the size of
 * a heap's chunk use first, in the huge page their neighbours share.
 * A gap is a hole to arena_each_used; the slots it lends count as grown
 * only when their taker grows them (arena_grown), so the skip starts no
 * huge page early. */
static _Atomic unsigned gaps_open; /* gaps with slots, read without the lock */

static size_t gap_take(size_t n) {
  size_t first = 0;
  spin_lock(&gap_lock);
  for (unsigned k = RUN_SHARDS; k < RUN_SHARDS + GAPS && !first; k++) {
    size_t lo = atomic_load_explicit(&holes[k].lo, RLX),
           hi = atomic_load_explicit(&holes[k].hi, RLX);
    if (hi - lo < n) continue;
    first = lo;
    atomic_store_explicit(&holes[k].lo, lo + n, RLX);
    if (lo + n == hi) atomic_fetch_sub_explicit(&gaps_open, 1, RLX);
  }
  spin_unlock(&gap_lock);
  return first;
}

/* Slots [lo, hi) skipped: a gap, if one is free (else they stay unused). */
static void gap_add(size_t lo, size_t hi) {
  spin_lock(&gap_lock);
  for (unsigned k = RUN_SHARDS; k < RUN_SHARDS + GAPS; k++)
    if (atomic_load_explicit(&holes[k].lo, RLX) == atomic_load_explicit(&holes[k].hi, RLX)) {
      atomic_store_explicit(&holes[k].lo, lo, RLX);
      atomic_store_explicit(&holes[k].hi, hi, RLX);
      atomic_fetch_add_explicit(&gaps_open, 1, RLX);
      break;
    }
  spin_unlock(&gap_lock);
}

/* n never-used slots from the top of the arena, the first on a 2 MiB
 * boundary (n a multiple of 2 MiB keeps the top on one); 0 if there is no
 * room. */
size_t arena_take_aligned(size_t n) {
  size_t hs = HUGE_PAGE >> SLOT_SHIFT, on = arena_huge_first() % hs;
  size_t top = atomic_load_explicit(&rill_arena_top, RLX), first;
  do {
    first = top + (on + hs - top % hs) % hs;
    if (first + n > rill_arena.max_slots) return 0;
  } while (!atomic_compare_exchange_weak_explicit(&rill_arena_top, &top, first + n, RLX, RLX));
  if (!arena_room(first + n) || !arena_cover(first + n)) {
    arena_untake(top, first + n - top);
    return 0;
  }
  if (first > top) gap_add(top, first);
  return first;
}

/* The first slot that starts a 2 MiB page: the arena's base is only slot
 * aligned. */
size_t arena_huge_first(void) {
  uintptr_t base = rill_arena.base;
  return (((base + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1)) - base) >> SLOT_SHIFT;
}

/* Takes n never-used slots, from a gap left by an aligned take if one has
 * room, else from the top of the arena: the first one's index, or 0 once
 * the address space is exhausted (slot 0 is never a span). */
size_t arena_take(size_t n) {
  if (__builtin_expect(atomic_load_explicit(&gaps_open, RLX) != 0, 0)) {
    size_t first = gap_take(n);
    if (first) return first;
  }
  size_t first = atomic_fetch_add_explicit(&rill_arena_top, n, RLX);
  if (arena_room(first + n) && arena_cover(first + n)) return first;
  arena_untake(first, n);
  return 0;
}

/* Slots first .. first + n - 1, just taken and not used (the kernel or a
 * limit refused them), go back to the arena's top unless others took
 * slots since; then they stay unused. */
void arena_untake(size_t first, size_t n) {
  size_t end = first + n;
  atomic_compare_exchange_strong_explicit(&rill_arena_top, &end, first, RLX, RLX);
}

/* Takes the n never-used slots from `end` on if `end` is the top of the
 * arena: a large run that ends there grows in place. */
bool arena_extend(size_t end, size_t n) {
  size_t top = end;
  if (end + n > rill_arena.max_slots ||
      !atomic_compare_exchange_strong_explicit(&rill_arena_top, &top, end + n, RLX, RLX))
    return false;
  if (arena_room(end + n) && arena_cover(end + n)) return true;
  top = end + n;
  atomic_compare_exchange_strong_explicit(&rill_arena_top, &top, end, RLX, RLX);
  return false;
}

/* Makes never-used slots first .. first + 2^order - 1 one empty span. */
span_t *arena_span(size_t first, unsigned order) {
  size_t n = (size_t)1 << order;
  span_t *sp = span_of_index(first);
  /* relaxed atomic stores: a large run's release may read a neighbouring
   * head at the same time (runs.c) */
  for (size_t i = 0; i < n; i++)
    __atomic_store_n(&rill_arena.heads[first + i], sp, __ATOMIC_RELAXED);
  sp->start = rill_arena.base + (first << SLOT_SHIFT);
  sp->order = (uint8_t)order;
  span_set_nslots(sp, n);
  __atomic_store_n(&sp->run, 0, __ATOMIC_RELAXED); /* rill_stats_get reads it */
  SPAN_SET(sp, fresh, 1);
  atomic_store_explicit(&sp->xf, XF_MAKE(ST_FREE, 0, 0), RLX);
  return sp;
}
