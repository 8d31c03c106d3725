/* test_dlclose.c - proves a plugin that links librill and is closed again leaves rill loaded:
 * rill's purger thread and its thread-exit destructor live in the library's code, and memory
 * it handed out may outlive the plugin, so dlclose must not unmap it (-z nodelete). Linked
 * with libc alone; run with RILL_PURGE_THREAD=1 and a short delay so the purger wakes after
 * the close. Before, the process died of SIGSEGV in the purger or in a thread's exit. */
#include "rill_test.h"

#include <dlfcn.h>
#include <pthread.h>

static int (*work)(int);
static pthread_barrier_t used, closed;

/* Uses rill through the plugin, then outlives the dlclose: its exit runs rill's destructor. */
static void *user(void *arg) {
  (void)arg;
  if (work(20000) != 20000) FAIL("the plugin's allocations failed in a thread");
  pthread_barrier_wait(&used);
  pthread_barrier_wait(&closed);
  return NULL;
}

int main(int argc, char **argv) {
  const char *plugin = argc > 1 ? argv[1] : "./libdlclose_lib.so";
  void *h = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
  if (!h) DIE("dlopen %s: %s", plugin, dlerror());
  work = (int (*)(int))dlsym(h, "plugin_work");
  if (!work) DIE("dlsym plugin_work: %s", dlerror());
  CHECK(work(50000) == 50000, "the plugin's allocations failed");

  pthread_t t;
  pthread_barrier_init(&used, NULL, 2);
  pthread_barrier_init(&closed, NULL, 2);
  if (pthread_create(&t, NULL, user, NULL)) DIE("pthread_create failed");
  pthread_barrier_wait(&used);
  bool blocked;
  int purgers = 0;
  for (int i = 0; i < 200 && (purgers = t_purger_threads(&blocked)) == 0; i++) usleep(10000);
  printf("  purger threads before dlclose: %d\n", purgers);
  CHECK(purgers == 1, "no purger thread after the plugin's threads allocated (run with "
                      "RILL_PURGE_THREAD=1)");

  if (dlclose(h)) DIE("dlclose: %s", dlerror());
  void *still = dlopen("librill.so.0", RTLD_NOW | RTLD_NOLOAD);
  CHECK(still != NULL, "librill.so.0 was unloaded by dlclose of the plugin that needed it");
  if (still) dlclose(still);

  pthread_barrier_wait(&closed); /* the thread with a rill heap exits now */
  if (pthread_join(t, NULL)) DIE("pthread_join failed");
  usleep(300000); /* several purge delays: the purger wakes in the library's code */
  /* the plugin again, in a fresh thread: rill, still loaded, serves it as before */
  h = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
  if (!h) DIE("dlopen again: %s", dlerror());
  work = (int (*)(int))dlsym(h, "plugin_work");
  if (!work) DIE("dlsym plugin_work again: %s", dlerror());
  if (pthread_create(&t, NULL, user, NULL)) DIE("pthread_create failed");
  pthread_barrier_wait(&used);
  pthread_barrier_wait(&closed);
  if (pthread_join(t, NULL)) DIE("pthread_join failed");
  if (dlclose(h)) DIE("dlclose again: %s", dlerror());
  usleep(300000);
  printf("  alive after dlclose, a thread exit and the purge delay\n");
  return t_finish("test_dlclose");
}
