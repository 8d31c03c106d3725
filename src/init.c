/* init.c - start-up on first use, environment options, the thread-exit hook,
 * fork handlers and fatal error messages. Nothing here may allocate through
 * malloc or touch stdio: it all runs inside the allocator. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sys/auxv.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

options_t rill_opt;
int rill_stats_fd = 2;
_Atomic int rill_ready;
static _Atomic int init_lock;
static _Atomic int key_state; /* 0 none, 1 being created, 2 ready */
static pthread_key_t exit_key;

/* ---- messages without stdio --------------------------------------------- */
void rill_fmt_hex(char *out, uintptr_t v) {
  char tmp[17];
  int n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v);
  out[0] = '0';
  out[1] = 'x';
  for (int i = 0; i < n; i++) out[2 + i] = tmp[n - 1 - i];
  out[2 + n] = 0;
}

void rill_fmt_dec(char *out, uint64_t v) {
  char tmp[24];
  int n = 0;
  do tmp[n++] = (char)('0' + v % 10);
  while ((v /= 10) != 0);
  for (int i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
  out[n] = 0;
}

/* One line to stderr, with the system call itself: warnings are printed
 * under the start-up lock, where a preloaded wrapper of write that allocates
 * would wait for that lock (see os_read_file), and where a thread with a
 * cancellation pending must not stop (write is a cancellation point). */
void rill_message(const char *a, const char *b) {
  char buf[512];
  size_t n = 0;
  for (const char *s = "rill: "; *s && n < sizeof buf - 2; s++) buf[n++] = *s;
  for (const char *s = a; s && *s && n < sizeof buf - 2; s++) buf[n++] = *s;
  for (const char *s = b; s && *s && n < sizeof buf - 2; s++) buf[n++] = *s;
  buf[n++] = '\n';
  (void)syscall(SYS_write, 2, buf, n);
}

/* An address rill never handed out reached free or realloc: say so and stop,
 * as glibc does, before anything is corrupted. */
void rill_invalid(const char *fn, const void *p) {
  char hex[24], msg[64];
  rill_fmt_hex(hex, (uintptr_t)p);
  size_t n = 0;
  for (const char *s = fn; *s && n < 40; s++) msg[n++] = *s;
  for (const char *s = "(): invalid pointer "; *s; s++) msg[n++] = *s;
  msg[n] = 0;
  rill_message(msg, hex);
  abort();
}

/* ---- options ------------------------------------------------------------ */
/* A program run setuid, setgid or with file capabilities (AT_SECURE) takes
 * no options from an environment that whoever started it chose, and prints
 * no warnings about them: glibc ignores its malloc tunables there too. */
static bool opt_secure;
static const char *opt_env(const char *name) {
  return opt_secure ? NULL : getenv(name);
}

/* Reads a boolean RILL_* variable; anything else than the accepted spellings
 * draws one warning line naming them, and the default stands. */
static bool opt_bool(const char *name, bool dflt) {
  const char *v = opt_env(name);
  if (!v) return dflt;
  static const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off"};
  for (unsigned i = 0; i < 4; i++) {
    if (!strcasecmp(v, yes[i])) return true;
    if (!strcasecmp(v, no[i])) return false;
  }
  rill_message(name, dflt ? ": unrecognised value, accepted: 1/0, true/false, yes/no, on/off; "
                            "using the default (1)"
                          : ": unrecognised value, accepted: 1/0, true/false, yes/no, on/off; "
                            "using the default (0)");
  return dflt;
}

/* Joins n strings into msg (cap bytes, always terminated). */
static void msg_join(char *msg, size_t cap, const char *const *parts, unsigned n) {
  size_t k = 0;
  for (unsigned i = 0; i < n; i++)
    for (const char *c = parts[i]; *c && k < cap - 1; c++) msg[k++] = *c;
  msg[k] = 0;
}

/* Reads a whole number within [lo, hi]; otherwise warns and keeps dflt. */
static uint32_t opt_uint(const char *name, uint32_t dflt, uint32_t lo, uint32_t hi) {
  const char *v = opt_env(name);
  if (!v) return dflt;
  uint64_t n = 0;
  const char *s = v;
  while (*s >= '0' && *s <= '9' && n <= hi) n = n * 10 + (uint64_t)(*s++ - '0');
  if (s != v && !*s && n >= lo && n <= hi) return (uint32_t)n;
  char lo_s[24], hi_s[24], d_s[24], msg[160];
  rill_fmt_dec(lo_s, lo);
  rill_fmt_dec(hi_s, hi);
  rill_fmt_dec(d_s, dflt);
  const char *parts[] = {": unrecognised value, accepted: a whole number from ",
                         lo_s,
                         " to ",
                         hi_s,
                         "; using the default (",
                         d_s,
                         ")"};
  msg_join(msg, sizeof msg, parts, 7);
  rill_message(name, msg);
  return dflt;
}

/* Reads one of a list of words; otherwise warns and keeps choice 0. */
static unsigned opt_word(const char *name, const char *const *words, unsigned n, const char *msg) {
  const char *v = opt_env(name);
  if (!v) return 0;
  for (unsigned i = 0; i < n; i++)
    if (!strcasecmp(v, words[i])) return i;
  rill_message(name, msg);
  return 0;
}

/* Every option rill_init reads, for the look at misspelt names below: one
 * left out would be reported as a misspelling of its nearest neighbour. */
static const char *const opt_names[] = {
    "RILL_SHOW_STATS", "RILL_HUGEPAGES", "RILL_PURGE_THREAD", "RILL_PURGE_DELAY_MS",
    "RILL_PURGE",      "RILL_COMMIT",    "RILL_DEEPBIND",     "RILL_REMOTE_BATCH"};
#define OPT_NAME_MAX 40

/* Edits (insertions, deletions, substitutions) that turn a[0..na) into b. */
static unsigned edits(const char *a, size_t na, const char *b) {
  size_t nb = strlen(b);
  unsigned row[OPT_NAME_MAX + 1];
  for (size_t j = 0; j <= nb; j++) row[j] = (unsigned)j;
  for (size_t i = 1; i <= na; i++) {
    unsigned diag = row[0];
    row[0] = (unsigned)i;
    for (size_t j = 1; j <= nb; j++) {
      unsigned up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[nb];
}

/* A RILL_* variable that is no option but lies within two edits of one, or
 * is the start of one, four letters past RILL_ or more (RILL_PURGE_DELAY
 * for RILL_PURGE_DELAY_MS), is most likely a misspelling, and its setting
 * would be lost without a word: one line names the option meant. Other
 * RILL_* names draw nothing, so a program's own variables that share the
 * prefix are left alone. */
static void opt_misspelt(void) {
  for (char **e = environ; e && *e; e++) {
    const char *v = *e, *eq = strchr(v, '=');
    size_t n = eq ? (size_t)(eq - v) : strlen(v);
    if (strncmp(v, "RILL_", 5) != 0 || n >= OPT_NAME_MAX) continue;
    const char *meant = NULL;
    unsigned best = 3;
    bool known = false;
    for (unsigned i = 0; i < sizeof opt_names / sizeof *opt_names && !known; i++) {
      const char *k = opt_names[i];
      known = strlen(k) == n && strncmp(v, k, n) == 0;
      unsigned d = n >= 9 && strncmp(v, k, n) == 0 ? 1 : edits(v, n, k);
      if (d < best) best = d, meant = k;
    }
    if (known || !meant) continue;
    char name[OPT_NAME_MAX], msg[96];
    memcpy(name, v, n);
    name[n] = 0;
    const char *parts[] = {": not an option, ignored; did you mean ", meant, "?"};
    msg_join(msg, sizeof msg, parts, 3);
    rill_message(name, msg);
  }
}

/* A number from /proc/sys, or dflt if it cannot be read. */
static long sysctl_num(const char *path, long dflt) {
  char buf[24];
  long n = os_read_file(path, buf, sizeof buf);
  if (n <= 0 || buf[0] < '0' || buf[0] > '9') return dflt;
  long v = 0;
  for (long i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; i++) v = v * 10 + (buf[i] - '0');
  return v;
}
/* Strict overcommit (vm.overcommit_memory = 2) charges every writable
 * mapping in full, so RILL_COMMIT=auto then commits on demand (arena.c). */
static bool overcommit_strict(void) {
  return sysctl_num("/proc/sys/vm/overcommit_memory", 0) == 2;
}

/* ---- thread exit and fork ----------------------------------------------- */
/* A key destructor: the exiting thread holds no lock of the C library here,
 * so it may start the purger, as malloc's slow path does (purger_start_slow)
 * and a free may not. A thread that only freed (a consumer of what a
 * single-threaded start allocated) is the last rill call some programs make
 * before they idle; its spans have just gone to the pool. */
static void thread_exit(void *v) {
  heap_thread_done(v);
  purger_poll();
}

_Atomic uintptr_t rill_forker;
_Atomic unsigned rill_fork_gen;

static void fork_prepare(void) {
  atomic_store_explicit(&rill_forker, (uintptr_t)&rill_tls, RLX);
#if RILL_VARIANT != 0
  variant_fork_prepare();
#endif
  fork_hold(&init_lock);
  heap_fork_prepare();
  huge_fork_prepare();
  pool_fork_prepare();
  arena_fork_prepare();
}
/* Both let go of every lock fork_prepare holds at once (fork_locks_release,
 * internal.h): no lock's page is written, so neither process copies it. */
static void fork_parent(void) {
  fork_locks_release();
#if RILL_VARIANT != 0
  variant_fork_release();
#endif
  atomic_store_explicit(&rill_forker, 0, RLX);
}
static void fork_child(void) {
  heap_fork_child();
  purger_fork_child();
  STORE_NEW(&rill_fork_sleepers, 0u); /* the parent's sleepers are not here */
  fork_locks_release();
#if RILL_VARIANT != 0
  variant_fork_release();
#endif
  atomic_store_explicit(&rill_forker, 0, RLX);
}

/* The fork handlers, registered once: at load (rill_load), or at the first
 * thread's registration if something allocated before the library's
 * constructor ran. glibc runs prepare handlers last registered first, so
 * registering before the program's own handlers (which it may register in
 * main before it first allocates) lets ours take rill's locks after theirs
 * have allocated, and release them before their child and parent handlers
 * run. Handlers registered earlier still (a library constructor that ran
 * first) may allocate in between: the forking thread re-enters the locks it
 * holds (LOCK_MARK, internal.h). The flag is set before the call, which may
 * itself allocate. */
static _Atomic int fork_registered;
static void fork_register(void) {
  int expect = 0;
  if (atomic_compare_exchange_strong(&fork_registered, &expect, 1))
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}
__attribute__((constructor)) static void rill_load(void) {
  fork_register();
}

/* The largest power of two below n (n > 1). */
static size_t pow2_below(size_t n) {
  return (size_t)1 << (63 - __builtin_clzll(n - 1));
}

/* The arena and the tables of the layers above it that grow with it: the
 * largest size whose every part the kernel takes. */
static bool reserve(void) {
  /* Under an address-space limit (ulimit -v), or a data limit (ulimit -d,
   * which counts private writable mappings since Linux 4.7), the arena takes
   * at most half of it and the heap table a 128th (HEAPS_SHARE): the rest is the
   * program's, for its thread stacks, its libraries and its other mappings. */
  size_t limit = SIZE_MAX;
  const int which[] = {RLIMIT_AS, RLIMIT_DATA};
  for (unsigned i = 0; i < 2; i++) {
    struct rlimit rl;
    if (getrlimit(which[i], &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < limit)
      limit = (size_t)rl.rlim_cur;
  }
  arena_setup(); /* the page size, which RILL_COMMIT's commits round to */
  if (!heap_module_init(limit / HEAPS_SHARE)) return false;
  /* Half the limit in whole largest spans, then the powers of two below it
   * (1 TiB and down without a limit). Powers of two alone gave a 3 GiB
   * limit a 1 GiB arena, and a 3.8 GiB one too: a program under ulimit -v
   * ran out of small blocks at a quarter of its limit, where glibc's went
   * on to the limit. */
  /* Under a limit of a few dozen MiB (a sandbox's, a judge's): a quarter, in
   * whole 2 MiB steps, since the arena grows as it needs and the program's
   * libraries and stacks need the rest. With a 64 MiB arena at least, a
   * program under a 64 MiB limit could allocate nothing, where glibc and
   * jemalloc run under 32 MiB; with half of a 16 MiB limit, ls could not
   * map its locale files. */
  size_t unit = limit_unit(limit), want = unit < LARGE_MAX ? limit / 4 : limit / 2;
  size_t size = want < ARENA_MAX ? want & ~(unit - 1) : ARENA_MAX;
  if (size < ARENA_MIN) size = ARENA_MIN;
  /* under a limit the arena may grow past its half as the program needs
   * (arena_grow): its tables are reserved for the whole limit, 1.6% of it */
  size_t max = limit == SIZE_MAX ? 0 : (limit < ARENA_MAX ? limit : ARENA_MAX) & ~(unit - 1);
  for (; size >= ARENA_MIN; size = pow2_below(size)) {
    if (!arena_init(size, max)) continue;
    if (pool_init()) {
      if (runs_init()) return true;
      pool_release();
    }
    arena_release();
  }
  return false;
}

/* Global start-up, once: the arena and the heap table. The pthread key
 * comes later, in rill_thread_register, once this thread has a heap, and so
 * do the fork handlers if the constructor has not run: pthread_atfork may
 * itself call malloc. */
bool rill_init(void) {
  static bool failed; /* under init_lock: a process that cannot get an arena says so once */
  spin_lock(&init_lock);
  bool ok = atomic_load_explicit(&rill_ready, RLX), report = false;
  if (!ok && !failed) {
    opt_secure = getauxval(AT_SECURE) != 0;
    if (!opt_secure) opt_misspelt();
    /* off words, on words, then "classes" (a line per size class too) */
    static const char *const show[] = {"0",    "false", "no", "off",    "1",
                                       "true", "yes",   "on", "classes"};
    unsigned sh = opt_word("RILL_SHOW_STATS", show, 9,
                           ": unrecognised value, accepted: 1/0, true/false, yes/no, on/off, "
                           "classes; using the default (0)");
    rill_opt.show_stats = sh < 4 ? SHOW_NONE : sh < 8 ? SHOW_TOTALS : SHOW_CLASSES;
    rill_opt.hugepages = opt_bool("RILL_HUGEPAGES", false);
    rill_opt.remote_batch = opt_bool("RILL_REMOTE_BATCH", false);
    /* "auto", then pairs of off and on words: odd indices are off */
    static const char *const purger[] = {"auto", "0",   "1",   "false", "true",
                                         "no",   "yes", "off", "on"};
    unsigned pt = opt_word("RILL_PURGE_THREAD", purger, 9,
                           ": unrecognised value, accepted: auto, 1/0, true/false, yes/no, "
                           "on/off; using the default (auto)");
    purger_init(pt == 0 ? PURGE_THREAD_AUTO : pt % 2 ? PURGE_THREAD_OFF : PURGE_THREAD_ON);
    rill_opt.purge_delay = opt_uint("RILL_PURGE_DELAY_MS", 1000, 0, 3600000);
    static const char *const advice[] = {"dontneed", "free"};
    rill_opt.purge_free = opt_word("RILL_PURGE", advice, 2,
                                   ": unrecognised value, accepted: dontneed, free; "
                                   "using the default (dontneed)") == 1;
    static const char *const commit[] = {"auto", "demand"};
    rill_opt.commit_demand = opt_word("RILL_COMMIT", commit, 2,
                                      ": unrecognised value, accepted: auto, demand; "
                                      "using the default (auto)") == 1 ||
                             overcommit_strict();
    static const char *const deepbind[] = {"strip", "keep"};
    rill_opt.deepbind_keep = opt_word("RILL_DEEPBIND", deepbind, 2,
                                      ": unrecognised value, accepted: strip, keep; "
                                      "using the default (strip)") == 1;
    /* each decommitted stretch can cost two mappings: stretches are kept to
     * a quarter of the kernel's limit in mappings (pool.c, runs.c) */
    rill_opt.gone_max = (uint32_t)(sysctl_num("/proc/sys/vm/max_map_count", 65530) / 8);
    ok = reserve();
    if (ok) span_module_init();
    if (ok) atomic_store_explicit(&rill_ready, 1, REL);
    failed = report = !ok;
  }
  spin_unlock(&init_lock);
  if (report)
    rill_message("cannot reserve address space for the arena (4 MiB at least)",
                 "; allocations fail with ENOMEM");
  return ok;
}

void rill_thread_register(heap_t *h) {
  int expect = 0;
  if (atomic_compare_exchange_strong(&key_state, &expect, 1)) {
    pthread_key_create(&exit_key, thread_exit);
    atomic_store_explicit(&key_state, 2, REL);
    fork_register();
    if (rill_opt.show_stats) {
      /* programs such as sort close stderr before exit: keep our own copy */
      rill_stats_fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
      if (rill_stats_fd < 0) rill_stats_fd = 2;
      atexit(rill_stats_at_exit);
    }
  }
  for (unsigned i = 0; atomic_load_explicit(&key_state, ACQ) != 2; i++) os_pause(i);
  pthread_setspecific(exit_key, h);
}
