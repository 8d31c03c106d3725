/* fuzz_main.c - standalone driver for fuzz_ops.c where libFuzzer is not used: replays
 * every file given (or every file in a given directory), then runs seeded random inputs,
 * so the fuzz target's checks also run in a plain build. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "fuzz_main: cannot open %s\n", path);
    return 1;
  }
  static uint8_t buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  LLVMFuzzerTestOneInput(buf, n);
  return 0;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_path(const char *path, int *files) {
  struct stat st;
  if (stat(path, &st)) {
    fprintf(stderr, "fuzz_main: no such file %s\n", path);
    return 1;
  }
  if (!S_ISDIR(st.st_mode)) {
    (*files)++;
    return run_file(path);
  }
  DIR *dir = opendir(path);
  if (!dir) return 1;
  /* Sorted, so that a replay is the same sequence of inputs everywhere. */
  char **names = NULL;
  size_t n = 0, cap = 0;
  for (struct dirent *e; (e = readdir(dir));) {
    if (e->d_name[0] == '.') continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      char **grown = realloc(names, cap * sizeof *names);
      if (!grown) break;
      names = grown;
    }
    names[n] = strdup(e->d_name);
    if (names[n]) n++;
  }
  closedir(dir);
  qsort(names, n, sizeof *names, cmp_names);
  int rc = 0;
  for (size_t i = 0; i < n; i++) {
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/%s", path, names[i]);
    rc |= run_path(sub, files);
    free(names[i]);
  }
  free(names);
  return rc;
}

int main(int argc, char **argv) {
  long random_runs = 0;
  uint64_t seed = 1;
  int rc = 0, files = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--random") && i + 1 < argc)
      random_runs = strtol(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
      seed = strtoull(argv[++i], NULL, 0);
    else
      rc |= run_path(argv[i], &files);
  }
  static uint8_t buf[4096];
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (long r = 0; r < random_runs; r++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    size_t n = (size_t)(x % sizeof buf);
    for (size_t i = 0; i < n; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      buf[i] = (uint8_t)(x >> 24);
    }
    LLVMFuzzerTestOneInput(buf, n);
  }
  printf("fuzz_main: %d corpus file(s), %ld random input(s): no failure\n", files, random_runs);
  return rc;
}
