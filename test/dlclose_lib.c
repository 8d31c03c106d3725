/* dlclose_lib.c - a plugin linked with -lrill that test_dlclose.c opens with dlopen and
 * closes again: it allocates through rill_malloc, so librill.so.0 comes in with it, starts
 * its purger and gives the calling thread a heap. */
#include <rill.h>
#include <string.h>

int plugin_work(int n);
int plugin_work(int n) {
  int sum = 0;
  void *keep[256];
  for (int i = 0; i < n; i++) {
    char *p = rill_malloc((size_t)(i % 4000) + 16);
    if (!p) return -1;
    memset(p, 1, 16);
    sum += p[7];
    keep[i % 256] = p;
    if (i % 256 == 255)
      for (int k = 0; k < 256; k++) rill_free(keep[k]);
  }
  for (int k = 0; k < n % 256; k++) rill_free(keep[k]);
  return sum;
}
