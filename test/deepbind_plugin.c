/* deepbind_plugin.c - a plugin test_deepbind opens with RTLD_DEEPBIND: it links the C library
 * alone, so under deep binding its malloc and free are the C library's unless rill drops the
 * flag. It reports which free it was bound to and trades blocks with the program. */
#include <stdlib.h>
#include <string.h>

void *plugin_free_fn(void);
void *plugin_alloc(size_t n);
void plugin_release(void *p);

/* The free this plugin calls, as its own relocations resolved it. */
void *plugin_free_fn(void) {
  return (void *)&free;
}

/* A block from the plugin's malloc, filled, for the program to free. */
void *plugin_alloc(size_t n) {
  void *p = malloc(n);
  if (p) memset(p, 0x5a, n);
  return p;
}

/* Frees a block the program allocated. */
void plugin_release(void *p) {
  free(p);
}
