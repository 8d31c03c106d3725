/* test_badfree.c - proves free() and realloc() of pointers rill never returned (wild,
 * stack, interior, foreign mmap, static data) are caught: the process prints
 * "rill: free(): invalid pointer 0x..." (or realloc()) with that address and aborts. */
#include "rill_test.h"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>

static char static_data[256];
/* K_EVERY_CLASS: malloc(sweep_size) + sweep_delta */
static size_t sweep_size, sweep_delta;
static char sweep_name[96];

enum kind {
  K_WILD,
  K_STACK,
  K_SMALL_PLUS8,
  K_SMALL_PLUS16,
  K_MEDIUM_INTERIOR,
  K_LARGE_INTERIOR,
  K_HUGE_INTERIOR,
  K_LARGE_MERGED,
  K_LARGE_TAIL,
  K_FOREIGN_MMAP,
  K_STATIC,
  K_ARENA_GAP,
  K_ARENA_COVERED,
  K_OTHER_THREAD,
  K_COLOR,
  K_COLOR_REMOTE,
  K_DOUBLE_SMALL,
  K_DOUBLE_REMOTE,
  K_DOUBLE_LARGE,
  K_DOUBLE_HUGE,
  K_DOUBLE_CACHED,
  K_INTERIOR_CACHED,
  K_EVERY_CLASS, /* run by main for each size class, not in the kind x api loop */
  K_COUNT
};
static const char *const kind_name[] = {
    "wild pointer 0x1234560",
    "stack address",
    "malloc(64) + 8",
    "malloc(256) + 16 (16-aligned interior)",
    "malloc(5000) + 1024",
    "malloc(200 KiB) + 4096",
    "malloc(40 MiB) + 4096",
    "second of two freed 1 MiB blocks (its run merged into the first's)",
    "malloc(2 MiB) + 1 MiB after realloc to 512 KiB (a tail given back)",
    "page from a separate mmap",
    "address in the program's data",
    "malloc(16) + 512 MiB (rill's reserve, no span there)",
    "malloc(16) + 4 MiB (below the arena's covered bound, no span there)",
    "malloc(96) + 32 by a thread since exited (remote path)",
    "malloc(512)'s span start, in the colour before its first block",
    "malloc(256)'s span start by a thread since exited (colour, remote path)",
    "malloc(48) freed (double free, list head)",
    "malloc(96) of a live thread freed here (double free, remote path)",
    "malloc(200 KiB) freed (double free, run)",
    "malloc(40 MiB) freed (double free, huge)",
    "malloc(24 KiB) freed from a full span (double free, block cache)",
    "malloc(24 KiB) + 256 in a full span (interior, the block cache's path)",
    sweep_name,
};

enum api { A_FREE, A_REALLOC, A_RILL_FREE, A_RILL_REALLOC, A_FREE_SIZED, A_COUNT };
static const char *const api_name[] = {"free", "realloc", "rill_free", "rill_realloc",
                                       "free_sized"};
/* The function name rill must print for each entry point (free_sized may name itself). */
static const char *const api_msg[] = {"free", "realloc", "free", "realloc", "free"};
static const char *const api_msg_alt[] = {NULL, NULL, NULL, NULL, "free_sized"};

/* Allocates in another thread, which exits: the free that follows takes the
 * remote path (the span is not attached to the freeing thread's heap). */
static void *other_malloc(void *arg) {
  return malloc((size_t)(uintptr_t)arg);
}

/* Allocates two blocks of 96 bytes, hands the first back, and stays alive owning their
 * span, so that the frees of the first by another thread take the remote path. */
static int owner_ready[2];
static void *live_owner(void *arg) {
  (void)arg;
  void *p = malloc(96);
  keep(malloc(96));
  if (write(owner_ready[1], &p, sizeof p) != (ssize_t)sizeof p) _exit(5);
  for (;;) pause();
  return NULL;
}

/* Builds the bad pointer for a case; runs in the child. */
static void *bad_pointer(enum kind k, volatile char *stack_buf) {
  void *p;
  switch (k) {
  case K_WILD:
    return (void *)(uintptr_t)0x1234560;
  case K_STACK:
    return (void *)(stack_buf + 16);
  case K_SMALL_PLUS8:
    p = malloc(64);
    return p ? (char *)p + 8 : NULL;
  case K_SMALL_PLUS16:
    p = malloc(256);
    return p ? (char *)p + 16 : NULL;
  case K_MEDIUM_INTERIOR:
    p = malloc(5000);
    return p ? (char *)p + 1024 : NULL;
  case K_LARGE_INTERIOR:
    p = malloc(200 * KiB);
    return p ? (char *)p + 4096 : NULL;
  case K_HUGE_INTERIOR:
    p = malloc(40 * MiB);
    return p ? (char *)p + 4096 : NULL;
  case K_LARGE_MERGED: {
    void *a = malloc(1 * MiB);
    p = malloc(1 * MiB);
    free(a);
    free(p);
    return p;
  }
  case K_LARGE_TAIL:
    p = malloc(2 * MiB);
    if (!p || realloc(p, 512 * KiB) != p) return NULL;
    return (char *)p + 1 * MiB;
  case K_FOREIGN_MMAP:
    p = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : (char *)p + 4096;
  case K_STATIC:
    return static_data + 64;
  case K_ARENA_GAP: /* inside the reserved arena (4 GiB at least), far above what is in use */
    p = malloc(16);
    return p ? (char *)p + 512 * MiB : NULL;
  case K_ARENA_COVERED: /* head entries are written 8 MiB ahead of the spans in use: this
                         * one names meta[0], the entry with no blocks */
    p = malloc(16);
    return p ? (char *)p + 4 * MiB : NULL;
  case K_EVERY_CLASS:
    p = malloc(sweep_size);
    return p ? (char *)p + sweep_delta : NULL;
  case K_OTHER_THREAD: {
    pthread_t th;
    p = NULL;
    if (pthread_create(&th, NULL, other_malloc, (void *)(uintptr_t)96) || pthread_join(th, &p))
      return NULL;
    return p ? (char *)p + 32 : NULL;
  }
  case K_COLOR: /* the coloured classes' first block is 128 B into its span (span.c) */
    p = malloc(512);
    return p ? (void *)((uintptr_t)p & ~(uintptr_t)(T_SLOT_BYTES - 1)) : NULL;
  case K_COLOR_REMOTE: {
    pthread_t th;
    p = NULL;
    if (pthread_create(&th, NULL, other_malloc, (void *)(uintptr_t)256) || pthread_join(th, &p))
      return NULL;
    return p ? (void *)((uintptr_t)p & ~(uintptr_t)(T_SLOT_BYTES - 1)) : NULL;
  }
  case K_DOUBLE_SMALL:
    p = malloc(48);
    free(p);
    return p;
  case K_DOUBLE_REMOTE: {
    pthread_t th;
    p = NULL;
    if (pipe(owner_ready) || pthread_create(&th, NULL, live_owner, NULL) ||
        read(owner_ready[0], &p, sizeof p) != (ssize_t)sizeof p || !p)
      return NULL;
    free(p);
    return p;
  }
  case K_DOUBLE_LARGE:
    p = malloc(200 * KiB);
    free(p);
    return p;
  case K_DOUBLE_HUGE:
    p = malloc(40 * MiB);
    free(p);
    return p;
  case K_DOUBLE_CACHED: { /* the first of 8: its span (4 blocks) is full and let go, so
                           * its free goes to the thread's block cache (heap.c) */
    void *q[8];
    for (int i = 0; i < 8; i++) q[i] = malloc(24 * KiB);
    p = q[0];
    free(p);
    return p;
  }
  case K_INTERIOR_CACHED: { /* as above, but never freed: the block cache's test
                             * (cache_put) must reject it before it keeps it */
    char *q[8];
    for (int i = 0; i < 8; i++) q[i] = malloc(24 * KiB);
    return q[0] + 256;
  }
  default:
    return NULL;
  }
}

/* Child: report the bad pointer to the parent through fd, then hand it to the allocator. */
static void child(enum kind k, enum api a, int fd) {
  struct rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  volatile char stack_buf[64];
  memset((char *)stack_buf, 1, sizeof stack_buf);
  /* Keep the heap busy so a bad free lands among real blocks. */
  for (int i = 0; i < 100; i++) keep(malloc((size_t)(i * 37 % 900 + 1)));
  void *bad = bad_pointer(k, stack_buf);
  if (!bad) _exit(3);
  uintptr_t addr = (uintptr_t)bad;
  if (write(fd, &addr, sizeof addr) != (ssize_t)sizeof addr) _exit(4);
  close(fd);
  switch (a) {
  case A_FREE:
    free(bad);
    break;
  case A_REALLOC:
    keep(realloc(bad, 100));
    break;
  case A_RILL_FREE:
    rill_free(bad);
    break;
  case A_RILL_REALLOC:
    keep(rill_realloc(bad, 100));
    break;
  default:
    free_sized(bad, 64);
    break;
  }
  _exit(0); /* reached only when the bad pointer went unnoticed */
}

static void run_case(enum kind k, enum api a) {
  int err_pipe[2], addr_pipe[2];
  if (pipe(err_pipe) || pipe(addr_pipe)) DIE("pipe");
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) DIE("fork");
  if (pid == 0) {
    close(err_pipe[0]);
    close(addr_pipe[0]);
    dup2(err_pipe[1], 2);
    close(err_pipe[1]);
    child(k, a, addr_pipe[1]);
  }
  close(err_pipe[1]);
  close(addr_pipe[1]);
  uintptr_t addr = 0;
  ssize_t got = read(addr_pipe[0], &addr, sizeof addr);
  close(addr_pipe[0]);
  char out[8192];
  size_t len = 0;
  for (;;) {
    ssize_t r = read(err_pipe[0], out + len, sizeof out - 1 - len);
    if (r <= 0) break;
    len += (size_t)r;
    if (len == sizeof out - 1) break;
  }
  out[len] = 0;
  close(err_pipe[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  char ctx[200];
  snprintf(ctx, sizeof ctx, "%s() of %s", api_name[a], kind_name[k]);
  if (got != (ssize_t)sizeof addr) {
    FAIL("%s: child could not build the pointer (status %#x)", ctx, st);
    return;
  }
  bool ok = true;
  if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT) {
    if (WIFSIGNALED(st))
      FAIL("%s (%#lx): child died of signal %d (%s), want SIGABRT", ctx, (unsigned long)addr,
           WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
      FAIL("%s (%#lx): child exited with status %d instead of aborting", ctx, (unsigned long)addr,
           WEXITSTATUS(st));
    ok = false;
  }
  char want[64];
  snprintf(want, sizeof want, "rill: %s(): invalid pointer 0x", api_msg[a]);
  const char *m = strstr(out, want);
  if (!m && api_msg_alt[a]) {
    snprintf(want, sizeof want, "rill: %s(): invalid pointer 0x", api_msg_alt[a]);
    m = strstr(out, want);
  }
  if (!m) {
    FAIL("%s (%#lx): stderr lacks \"%s...\"; it was: \"%.300s\"", ctx, (unsigned long)addr, want,
         out);
    ok = false;
  } else {
    unsigned long long shown = strtoull(m + strlen(want), NULL, 16);
    if (shown != (unsigned long long)addr) {
      FAIL("%s: message shows address %#llx, the pointer was %#lx", ctx, shown,
           (unsigned long)addr);
      ok = false;
    }
  }
  printf("  %-58s %s\n", ctx, ok ? "ok" : "FAILED");
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  setvbuf(stdout, NULL, _IONBF, 0);
  /* Every size class up to 256 KiB (8, 16..128 step 16, then four per power
   * of two): an address 8 bytes into a block, and one 8 bytes short of the
   * next block, must both be refused (the exact-division test of free). */
  for (size_t sz = 8; sz <= 256 * KiB;) {
    size_t deltas[2] = {sz > 8 ? 8 : 4, sz > 16 ? sz - 8 : 0};
    for (int d = 0; d < 2 && deltas[d]; d++) {
      sweep_size = sz;
      sweep_delta = deltas[d];
      snprintf(sweep_name, sizeof sweep_name, "malloc(%zu) + %zu (every class)", sz, deltas[d]);
      run_case(K_EVERY_CLASS, A_FREE);
    }
    size_t step = sz < 128 ? (sz < 16 ? 8 : 16) : (size_t)1 << (63 - __builtin_clzl(sz) - 2);
    sz += step;
  }
  for (int k = 0; k < K_COUNT; k++)
    for (int a = 0; a < A_COUNT; a++) {
      if (k == K_EVERY_CLASS) continue;
      /* free_sized only with the simple small-block case, one is enough */
      if (a == A_FREE_SIZED && k != K_SMALL_PLUS8 && k != K_WILD) continue;
      /* realloc of a block just freed may get the block itself back from malloc
       * (glibc's own realloc does not catch every such call either): frees only */
      bool twice = k >= K_DOUBLE_SMALL && k <= K_DOUBLE_CACHED;
      if (twice && (a == A_REALLOC || a == A_RILL_REALLOC)) continue;
      run_case((enum kind)k, (enum api)a);
    }
  /* Sanity: valid frees in a child do not abort. */
  pid_t pid = fork();
  if (pid == 0) {
    void *p = malloc(100), *q = malloc(40 * MiB), *r = memalign(4096, 10);
    free(p);
    free(q);
    free(r);
    free(NULL);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "valid frees in a child: status %#x", st);
  return t_finish("test_badfree");
}
