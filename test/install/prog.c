/* prog.c - a program built against an installed rill (test/install.sh). Its
 * malloc and free, and the C library's own allocations, must all be rill's.
 * usage: prog VERSION   (the version the package files announce) */
#include <rill.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *volatile keep; /* so the compiler keeps the malloc it could elide */

static int fail(const char *what) {
  fprintf(stderr, "prog: %s\n", what);
  return 1;
}

int main(int argc, char **argv) {
  char ver[32];
  snprintf(ver, sizeof ver, "%d.%d", RILL_VERSION_MAJOR, RILL_VERSION_MINOR);
  if (argc < 2 || strcmp(ver, argv[1]) != 0) return fail("rill.h's version is not the package's");

  struct rill_stats before, during, after;
  size_t n = (size_t)64 << 20;
  rill_stats_get(&before);
  keep = malloc(n);
  if (!keep) return fail("malloc(64 MiB) failed");
  memset(keep, 1, 4096);
  rill_stats_get(&during);
  free(keep);
  rill_stats_get(&after);
  if (during.huge_bytes < before.huge_bytes + n) return fail("malloc is not rill's");
  if (after.huge_bytes >= during.huge_bytes) return fail("free is not rill's");

  /* strdup allocates inside the C library: were that glibc's malloc, rill's
   * free would stop the program with "invalid pointer". */
  char *s = strdup("rill");
  if (!s) return fail("strdup failed");
  free(s);
  printf("prog: rill %s, malloc and free are rill's\n", ver);
  return 0;
}
