/* test_deepbind.c - proves a plugin opened with RTLD_DEEPBIND shares rill with the program
 * (src/deepbind.c): rill drops the flag, so the plugin's free is the program's, blocks cross
 * both ways, and the plugin's own blocks are rill's. Linked with libc alone and run with rill
 * preloaded, as PHP is when its extensions abort at start-up under a preloaded allocator.
 *   test_deepbind PLUGIN        the default: one allocator for both
 *   test_deepbind --keep PLUGIN run under RILL_DEEPBIND=keep: the plugin keeps the C
 *                               library's free (so the flag does bind it, and dropping it is
 *                               what the default run shows), and no block crosses
 *   test_deepbind --runpath NAME  NAME found through this program's DT_RUNPATH alone: rill's
 *                               dlopen must jump to the C library's, which reads its caller
 *                               from the return address, with and without RTLD_DEEPBIND
 * With --dlmopen first, each mode opens through dlmopen(LM_ID_BASE, ...) instead, and the
 * default mode also opens the plugin into a new namespace, whose C library is its own. */
#include "rill_test.h"

#include <dlfcn.h>

typedef void *(*fn_t)(void);

static void *sym(void *h, const char *name) {
  void *f = dlsym(h, name);
  if (!f) DIE("dlsym %s: %s", name, dlerror());
  return f;
}

static bool use_dlmopen;

/* Called from main, so the caller the C library reads is this program either way. */
static void *open_lib(const char *file, int mode) {
  return use_dlmopen ? dlmopen(LM_ID_BASE, file, mode) : dlopen(file, mode);
}

/* A new namespace loads a C library of its own, not rill: the plugin's free is that
 * library's, and rill's dlmopen passes the flag on there (its only effect is within the
 * namespace). */
static void new_namespace(const char *plugin, void *own_free) {
  void *h = dlmopen(LM_ID_NEWLM, plugin, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  CHECK(h != NULL, "dlmopen(LM_ID_NEWLM, RTLD_DEEPBIND): %s", dlerror());
  if (!h) return;
  void *ns_free = ((fn_t)sym(h, "plugin_free_fn"))();
  CHECK(ns_free != own_free, "a new namespace's plugin shares the program's free %p", own_free);
  void (*plugin_release)(void *) = (void (*)(void *))sym(h, "plugin_release");
  void *(*plugin_alloc)(size_t) = (void *(*)(size_t))sym(h, "plugin_alloc");
  plugin_release(plugin_alloc(1000)); /* its own allocator, both ways */
  dlclose(h);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--dlmopen")) {
    use_dlmopen = true;
    argv++;
    argc--;
  }
  const char *opener = use_dlmopen ? "dlmopen(LM_ID_BASE, " : "dlopen(";
  if (argc == 3 && !strcmp(argv[1], "--runpath")) {
    /* a bare name: only this program's run path holds it */
    for (int deep = 0; deep < 2; deep++) {
      void *h = open_lib(argv[2], RTLD_NOW | RTLD_LOCAL | (deep ? RTLD_DEEPBIND : 0));
      CHECK(h != NULL, "%s\"%s\"%s) through the program's run path: %s", opener, argv[2],
            deep ? ", RTLD_DEEPBIND" : "", dlerror());
      if (h) dlclose(h);
    }
    return t_finish("test_deepbind --runpath");
  }
  bool keep = argc == 3 && !strcmp(argv[1], "--keep");
  if (argc != 2 + keep)
    DIE("usage: test_deepbind [--dlmopen] [--keep] PLUGIN | [--dlmopen] --runpath NAME");
  const char *plugin = argv[1 + keep];
  void *h = open_lib(plugin, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!h) DIE("%s%s, RTLD_DEEPBIND): %s", opener, plugin, dlerror());
  void *plugin_free = ((fn_t)sym(h, "plugin_free_fn"))();
  void *(*plugin_alloc)(size_t) = (void *(*)(size_t))sym(h, "plugin_alloc");
  void (*plugin_release)(void *) = (void (*)(void *))sym(h, "plugin_release");
  void *own_free = (void *)&free;
  /* the C library's own, looked up in it alone (rill's comes first in the global scope) */
  void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  void *libc_free = libc ? dlsym(libc, "free") : NULL;
  if (!libc_free) DIE("the C library's free: %s", dlerror());
  printf("  program's free %p, plugin's %p, the C library's %p\n", own_free, plugin_free,
         libc_free);
  if (keep) {
    CHECK(plugin_free != own_free && plugin_free == libc_free,
          "RILL_DEEPBIND=keep: the plugin's free is %p, want the C library's %p", plugin_free,
          libc_free);
    return t_finish("test_deepbind --keep");
  }
  CHECK(own_free != libc_free, "the program's free is the C library's: run with rill preloaded");
  CHECK(plugin_free == own_free,
        "RTLD_DEEPBIND bound the plugin's free to %p, not the program's %p (rill's)", plugin_free,
        own_free);
  if (plugin_free != own_free) return t_finish("test_deepbind");
  /* blocks both ways, many sizes; a block freed by the wrong allocator aborts */
  for (size_t n = 1; n <= (size_t)1 << 22; n = n * 3 + 5) {
    unsigned char *p = plugin_alloc(n);
    CHECK(p != NULL, "the plugin's malloc(%zu) failed", n);
    if (!p) continue;
    CHECK(p[0] == 0x5a && p[n - 1] == 0x5a, "the plugin's block of %zu lost its bytes", n);
    CHECK(malloc_usable_size(p) >= n, "malloc_usable_size of the plugin's block of %zu", n);
    free(p);
    void *q = malloc(n);
    CHECK(q != NULL, "malloc(%zu) failed", n);
    plugin_release(q);
  }
  dlclose(h);
  if (use_dlmopen) new_namespace(plugin, own_free);
  return t_finish("test_deepbind");
}
