/* fork_lib.c - a library whose constructor registers fork handlers that allocate, for
 * test_fork.c. Linked into the test as a needed library, its constructor runs before that of
 * a preloaded librill (the loader initialises preloaded objects after the program's own
 * dependencies), so its handlers come before rill's in glibc's list: its prepare handler runs
 * after rill's, and its parent and child handlers before rill's, all while rill holds its
 * locks. Registered only with FORK_LIB_HANDLERS=1 in the environment. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static void *held;
static int prepared, parented, childed;

static void lib_prepare(void) {
  held = malloc(3 << 20); /* a huge block */
  if (held) memset(held, 1, 4096);
  for (int i = 0; i < 200; i++) free(malloc(100000 + (size_t)i * 512)); /* runs */
  for (int i = 0; i < 4000; i++) free(malloc((size_t)(i % 1000) + 1));  /* spans */
  prepared++;
}
static void lib_parent(void) {
  free(held);
  free(malloc(7 << 20));
  parented++;
}
static void lib_child(void) {
  free(held);
  char *p = malloc(5 << 20);
  if (p) memset(p, 3, 4096);
  free(p);
  childed++;
}

__attribute__((constructor)) static void lib_register(void) {
  const char *on = getenv("FORK_LIB_HANDLERS");
  if (on && on[0] == '1') pthread_atfork(lib_prepare, lib_parent, lib_child);
}

/* How often each handler ran in this process. */
void fork_lib_counts(int *prepare, int *parent, int *child) {
  *prepare = prepared;
  *parent = parented;
  *child = childed;
}
