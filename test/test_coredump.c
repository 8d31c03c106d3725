/* test_coredump.c - proves a crash's core dump holds what the program uses, not the address
 * space rill reserves: after the heap grew through small blocks in four threads, runs and
 * huge blocks, the anonymous memory a core would include (mappings of /proc/self/smaps
 * without the "dd" flag) stays under 1 GiB, yet every block lies in included memory. Where
 * the kernel writes cores to a file in the working directory, a forked child that aborts
 * leaves one that small, holding a string the child kept on the heap. */
#include "rill_test.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define NTHREADS     4
#define NSMALL       5000 /* blocks of 16-1024 B per thread */
#define NRUNS        40   /* blocks of 100 KiB (runs) */
#define NHUGE        3    /* blocks of 8 MiB */
#define INCLUDED_MAX ((size_t)1 << 30)

static const char marker[] = "rill-core-marker:7f3a9c";

struct map {
  uintptr_t lo, hi;
  bool anon, dumped;
};
static struct map maps[4096];
static size_t nmaps;

/* Reads /proc/self/smaps: each mapping's range, whether it is anonymous (no path), and
 * whether a core includes it (no "dd" in VmFlags). */
static void read_maps(void) {
  char *buf = t_read_smaps();
  nmaps = 0;
  for (char *line = buf; line && *line;) {
    char *next = strchr(line, '\n');
    if (next) *next++ = 0;
    unsigned long lo, hi;
    int path_at = 0;
    if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &path_at) == 2 && path_at > 0) {
      if (nmaps == sizeof maps / sizeof maps[0]) DIE("more than %zu mappings", nmaps);
      maps[nmaps++] = (struct map){lo, hi, line[path_at] == 0, true};
    } else if (!strncmp(line, "VmFlags:", 8) && nmaps) {
      for (char *f = strtok(line + 8, " "); f; f = strtok(NULL, " "))
        if (!strcmp(f, "dd")) maps[nmaps - 1].dumped = false;
    }
    line = next;
  }
  if (!nmaps) DIE("no mappings read from /proc/self/smaps");
}

/* Would a core include the byte at p? */
static bool dumped(const void *p) {
  uintptr_t a = (uintptr_t)p;
  for (size_t i = 0; i < nmaps; i++)
    if (a >= maps[i].lo && a < maps[i].hi) return maps[i].dumped;
  return false;
}

static void *small_blocks(void *arg) {
  void **v = arg;
  for (int i = 0; i < NSMALL; i++) {
    v[i] = malloc(16 + (size_t)(i * 37) % 1009);
    if (!v[i]) DIE("malloc failed");
    memset(v[i], i, 16);
  }
  return NULL;
}

/* The child: its heap grows as the parent's did, it keeps the marker in a block, and it
 * aborts with a core. */
static void crash_child(void) {
  struct rlimit unlimited = {RLIM_INFINITY, RLIM_INFINITY};
  if (setrlimit(RLIMIT_CORE, &unlimited)) _exit(3);
  char *keep = malloc(sizeof marker);
  if (!keep) _exit(4);
  memcpy(keep, marker, sizeof marker);
  for (int i = 0; i < 1000; i++) free(malloc(100 * KiB));
  void *huge = malloc(8 * MiB);
  if (huge) memset(huge, 1, 4096);
  signal(SIGABRT, SIG_DFL);
  abort();
}

/* The kernel writes a core into the working directory when core_pattern is a plain name
 * (no pipe to a handler, no directory, no % field but a final %p): the case checked here.
 * The file name for process `pid` goes to name; false in every other case. */
static bool core_to_cwd(char *name, size_t cap, pid_t pid) {
  char pat[256] = {0};
  int fd = open("/proc/sys/kernel/core_pattern", O_RDONLY);
  if (fd < 0) return false;
  ssize_t n = read(fd, pat, sizeof pat - 1);
  close(fd);
  if (n <= 0) return false;
  pat[strcspn(pat, "\n")] = 0;
  if (!pat[0] || strchr(pat, '|') || strchr(pat, '/')) return false;
  char *pct = strchr(pat, '%');
  if (pct && strcmp(pct, "%p") != 0) return false;
  if (pct) *pct = 0;
  bool uses_pid = false;
  fd = open("/proc/sys/kernel/core_uses_pid", O_RDONLY);
  if (fd >= 0) {
    char c = '0';
    uses_pid = read(fd, &c, 1) == 1 && c == '1';
    close(fd);
  }
  if (pct)
    snprintf(name, cap, "%s%d", pat, (int)pid);
  else if (uses_pid)
    snprintf(name, cap, "%s.%d", pat, (int)pid);
  else
    snprintf(name, cap, "%s", pat);
  return true;
}

/* Is the marker anywhere in the file? Read through: a core is mostly holes. */
static bool file_holds(const char *path, const char *what) {
  static char chunk[1 << 20];
  size_t want = strlen(what), carry = 0;
  int fd = open(path, O_RDONLY);
  if (fd < 0) return false;
  bool found = false;
  ssize_t got;
  while (!found && (got = read(fd, chunk + carry, sizeof chunk - carry)) > 0) {
    size_t have = carry + (size_t)got;
    found = memmem(chunk, have, what, want) != NULL;
    carry = want - 1 < have ? want - 1 : have;
    memmove(chunk, chunk + have - carry, carry);
  }
  close(fd);
  return found;
}

static void real_core(void) {
  char name[300], path[600];
  if (!core_to_cwd(name, sizeof name, 0)) {
    printf("  no core file to read (core_pattern sends cores to a handler or a directory); "
           "the mappings above are the check\n");
    return;
  }
  const char *tmp = getenv("TMPDIR");
  char dir[256];
  snprintf(dir, sizeof dir, "%s/rill-core-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) DIE("mkdtemp: %s", strerror(errno));
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) DIE("fork: %s", strerror(errno));
  if (pid == 0) {
    if (chdir(dir)) _exit(2);
    crash_child();
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) DIE("waitpid: %s", strerror(errno));
  core_to_cwd(name, sizeof name, pid);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  struct stat st;
  if (!WIFSIGNALED(status) || !WCOREDUMP(status)) {
    printf("  no core file to read (%s); the mappings above are the check\n",
           WIFSIGNALED(status) ? "the kernel wrote none: a core size limit"
                               : "the child did not abort");
  } else if (stat(path, &st)) {
    FAIL("the child dumped core, but %s is not there: %s", path, strerror(errno));
  } else {
    bool found = file_holds(path, marker);
    printf("  a real core: %lld bytes, with the string the child kept on its heap: %s\n",
           (long long)st.st_size, found ? "yes" : "no");
    CHECK((size_t)st.st_size < INCLUDED_MAX, "the core is %lld bytes; want under %zu",
          (long long)st.st_size, INCLUDED_MAX);
    CHECK(found, "the core does not hold the string the child kept on its heap");
  }
  unlink(path);
  rmdir(dir);
}

int main(void) {
  static void *small[NTHREADS][NSMALL];
  pthread_t t[NTHREADS];
  for (int i = 0; i < NTHREADS; i++)
    if (pthread_create(&t[i], NULL, small_blocks, small[i])) DIE("pthread_create failed");
  for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  void *runs[NRUNS], *huge[NHUGE];
  for (int i = 0; i < NRUNS; i++)
    if (!(runs[i] = malloc(100 * KiB))) DIE("malloc(100 KiB) failed");
  for (int i = 0; i < NHUGE; i++)
    if (!(huge[i] = malloc(8 * MiB))) DIE("malloc(8 MiB) failed");

  read_maps();
  size_t included = 0, left_out = 0;
  for (size_t i = 0; i < nmaps; i++)
    if (maps[i].anon) *(maps[i].dumped ? &included : &left_out) += maps[i].hi - maps[i].lo;
  printf("  anonymous memory a core includes: %zu MiB; left out: %zu MiB\n", included / MiB,
         left_out / MiB);
  CHECK(included < INCLUDED_MAX,
        "a core would include %zu MiB of anonymous mappings: the reserved arena is in it",
        included / MiB);
  size_t missing = 0;
  for (int i = 0; i < NTHREADS; i++)
    for (int j = 0; j < NSMALL; j++) missing += !dumped(small[i][j]);
  for (int i = 0; i < NRUNS; i++)
    missing += !dumped(runs[i]) + !dumped((char *)runs[i] + 100 * KiB - 1);
  for (int i = 0; i < NHUGE; i++)
    missing += !dumped(huge[i]) + !dumped((char *)huge[i] + 8 * MiB - 1);
  CHECK(missing == 0, "%zu blocks (or block ends) lie in memory a core leaves out", missing);

  real_core();

  for (int i = 0; i < NTHREADS; i++)
    for (int j = 0; j < NSMALL; j++) free(small[i][j]);
  for (int i = 0; i < NRUNS; i++) free(runs[i]);
  for (int i = 0; i < NHUGE; i++) free(huge[i]);
  return t_finish("test_coredump");
}
