/* fuzz_ops.c - libFuzzer target: interprets its input as a sequence of malloc, free,
 * realloc, aligned, calloc and sized-free operations on a set of slots, calling rill_*
 * directly, and aborts the moment any live object's contents, alignment or size are wrong. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NSLOTS    32
#define DENSE_MAX ((size_t)64 << 10)

struct slot {
  unsigned char *p;
  size_t n;
  uint64_t seed;
  size_t align;
  int aligned_alloc_block;
};

/* FUZZ_OPS_TRACE=file appends every rill call as a line of C, so a failure that depends on
 * the history of a whole fuzzing session can be replayed as one straight-line program
 * (the header line declares s[], the slots, and u(), a usable-size probe). */
static FILE *trace;
static struct slot *trace_base;
#define TR(...)                                                                                    \
  do {                                                                                             \
    if (trace) fprintf(trace, __VA_ARGS__);                                                        \
  } while (0)
#define IDX(s) ((int)((s)-trace_base))

static void trace_open(void) {
  static int done;
  if (done) return;
  done = 1;
  const char *path = getenv("FUZZ_OPS_TRACE");
  if (!path || !*path) return;
  trace = fopen(path, "w");
  if (!trace) return;
  setvbuf(trace, NULL, _IOLBF, 0);
  TR("#include \"rill.h\"\nstatic void *s[%d];\n"
     "static void u(void *p) { if (p) (void)rill_malloc_usable_size(p); }\n"
     "int main(void) {\n",
     NSLOTS);
}

/* The pattern helpers are the target's own bookkeeping: coverage feedback from their loops
 * would only slow libFuzzer down, so they are not instrumented. */
#if defined(__clang__)
#define NO_COVERAGE __attribute__((no_sanitize("coverage")))
#else
#define NO_COVERAGE
#endif

NO_COVERAGE static uint64_t word(uint64_t seed, size_t k) {
  uint64_t x = seed + (uint64_t)k * 0x9E3779B97F4A7C15ull;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  return x;
}

NO_COVERAGE static unsigned char byte_at(uint64_t seed, size_t i) {
  return (unsigned char)(word(seed, i / 8) >> (8 * (i % 8)));
}

/* Writes, or checks, the pattern bytes [from, to): byte i is byte i%8 of word(seed, i/8). */
NO_COVERAGE static void put_span(unsigned char *p, size_t from, size_t to, uint64_t seed) {
  size_t i = from;
  for (; i < to && i % 8; i++) p[i] = byte_at(seed, i);
  for (; i + 8 <= to; i += 8) {
    uint64_t w = word(seed, i / 8);
    memcpy(p + i, &w, 8);
  }
  for (; i < to; i++) p[i] = byte_at(seed, i);
}

NO_COVERAGE static size_t bad_in_span(const unsigned char *p, size_t from, size_t to,
                                      uint64_t seed) {
  size_t i = from;
  for (; i < to && i % 8; i++)
    if (p[i] != byte_at(seed, i)) return i;
  for (; i + 8 <= to; i += 8) {
    uint64_t w = word(seed, i / 8), v;
    memcpy(&v, p + i, 8);
    if (v != w) break;
  }
  for (; i < to; i++)
    if (p[i] != byte_at(seed, i)) return i;
  return SIZE_MAX;
}

/* The pattern covers all of an object up to 64 KiB; bigger ones in their first and last
 * 4 KiB and in 64 bytes of every 4 KiB page between (every 64 KiB for huge objects, so
 * that most of their pages are never touched). Regions are visited in order. */
#define FOR_REGION(n, FROM, TO, BODY)                                                              \
  do {                                                                                             \
    if ((n) <= DENSE_MAX) {                                                                        \
      size_t FROM = 0, TO = (n);                                                                   \
      BODY;                                                                                        \
    } else {                                                                                       \
      size_t stride_ = (n) > ((size_t)8 << 20) ? ((size_t)1 << 20) : 4096;                         \
      {                                                                                            \
        size_t FROM = 0, TO = 4096;                                                                \
        BODY;                                                                                      \
      }                                                                                            \
      for (size_t FROM = stride_; FROM + 64 <= (n)-4096; FROM += stride_) {                        \
        size_t TO = FROM + 64;                                                                     \
        BODY;                                                                                      \
      }                                                                                            \
      {                                                                                            \
        size_t FROM = (n)-4096, TO = (n);                                                          \
        BODY;                                                                                      \
      }                                                                                            \
    }                                                                                              \
  } while (0)

static void fill_range(unsigned char *p, size_t n, uint64_t seed) {
  FOR_REGION(n, from, to, put_span(p, from, to, seed));
}

__attribute__((noreturn)) static void die(const char *what, const struct slot *s, size_t i) {
  fprintf(stderr, "fuzz_ops: %s: object %p size %zu align %zu, offset/value %zu\n", what,
          (void *)s->p, s->n, s->align, i);
  abort();
}

/* Checks bytes [0, limit) of the pattern laid for size `n` with `seed`. */
static void check_range(const struct slot *s, size_t n, size_t limit, uint64_t seed) {
  FOR_REGION(n, from, to, {
    size_t end_ = to < limit ? to : limit;
    if (from < end_) {
      size_t bad = bad_in_span(s->p, from, end_, seed);
      if (bad != SIZE_MAX) die("contents corrupted", s, bad);
    }
  });
}

static void check(const struct slot *s) {
  if (s->p) check_range(s, s->n, s->n, s->seed);
}

static void after_alloc(struct slot *s, void *p, size_t n, size_t align, uint64_t seed) {
  s->p = p;
  s->n = n;
  s->align = align;
  s->seed = seed;
  size_t want = n >= 16 ? 16 : 8;
  if (align > want) want = align;
  if ((uintptr_t)p % want) die("misaligned", s, 0);
  if (rill_malloc_usable_size(p) < n) die("usable size below request", s, 0);
  fill_range(s->p, n, seed);
}

static void release(struct slot *s, int sized) {
  if (!s->p) return;
  check(s);
  if (sized && s->aligned_alloc_block) {
    TR("rill_free_aligned_sized(s[%d], %zu, %zu);\n", IDX(s), s->align, s->n);
    rill_free_aligned_sized(s->p, s->align, s->n);
  } else if (sized && !s->align) {
    TR("rill_free_sized(s[%d], %zu);\n", IDX(s), s->n);
    rill_free_sized(s->p, s->n);
  } else {
    TR("rill_free(s[%d]);\n", IDX(s));
    rill_free(s->p);
  }
  memset(s, 0, sizeof *s);
}

/* Three bytes: the top 3 bits of the first pick a range, the next two a value in it. Huge
 * sizes (just over 32 MiB) only come from op 7, a few times per input. */
static size_t decode_size(const uint8_t **d, const uint8_t *end, int *huge_budget) {
  if (*d + 3 > end) return 0;
  unsigned cls = (*d)[0] >> 5;
  size_t v = ((size_t)(*d)[1] << 8) | (*d)[2];
  *d += 3;
  switch (cls) {
  case 0:
    return v % 17;
  case 1:
    return v % 129;
  case 2:
    return v % 1025;
  case 3:
    return v % 8193;
  case 4:
    return v; /* up to 64 KiB */
  case 5:
    return (v * 5) % (260 * 1024); /* around the largest class, 256 KiB */
  case 6:
    return v * 16 + (*d)[-3] % 16; /* up to 1 MiB */
  default:
    if (huge_budget && *huge_budget > 0) {
      --*huge_budget;
      return ((size_t)32 << 20) + v * 16; /* huge: just over 32 MiB */
    }
    return v * 4; /* up to 256 KiB */
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static struct slot slots[NSLOTS]; /* static: the trace refers to it */
  memset(slots, 0, sizeof slots);
  trace_open();
  trace_base = slots;
  const uint8_t *d = data, *end = data + size;
  uint64_t seed = 1;
  int huge_budget = 2;
  while (d + 2 <= end) {
    unsigned op = d[0] & 7;
    struct slot *s = &slots[d[1] % NSLOTS];
    d += 2;
    seed++;
    switch (op) {
    case 0:
    case 7: { /* malloc (7: also allows huge sizes) */
      size_t n = decode_size(&d, end, op == 7 ? &huge_budget : NULL);
      release(s, 0);
      TR("s[%d] = rill_malloc(%zu); u(s[%d]);\n", IDX(s), n, IDX(s));
      void *p = rill_malloc(n);
      if (!p) die("malloc returned NULL", s, n);
      after_alloc(s, p, n, 0, seed);
      break;
    }
    case 1:
      release(s, 0);
      break;
    case 2: { /* realloc, keeping the common prefix */
      size_t n = decode_size(&d, end, NULL);
      if (!s->p) {
        TR("s[%d] = rill_realloc(0, %zu); u(s[%d]);\n", IDX(s), n, IDX(s));
        void *p = rill_realloc(NULL, n);
        if (!p) die("realloc(NULL) returned NULL", s, n);
        after_alloc(s, p, n, 0, seed);
        break;
      }
      check(s);
      size_t old_n = s->n;
      uint64_t old_seed = s->seed;
      TR("s[%d] = rill_realloc(s[%d], %zu); u(s[%d]);\n", IDX(s), IDX(s), n, IDX(s));
      void *p = rill_realloc(s->p, n);
      if (n == 0 && !p) { /* glibc semantics: freed */
        memset(s, 0, sizeof *s);
        break;
      }
      if (!p) die("realloc returned NULL", s, n);
      s->p = p;
      s->align = 0;
      s->aligned_alloc_block = 0;
      /* The surviving prefix keeps the old pattern (old layout, limited to the new size). */
      struct slot tmp = *s;
      size_t keep_n = old_n < n ? old_n : n;
      check_range(&tmp, old_n, keep_n, old_seed);
      after_alloc(s, p, n, 0, seed);
      break;
    }
    case 3: { /* aligned: posix_memalign, aligned_alloc, memalign */
      if (d >= end) break;
      unsigned how = (d[0] & 3) % 3;
      size_t align = (size_t)8 << ((d[0] >> 2) % 17); /* 8 B .. 512 KiB */
      d++;
      size_t n = decode_size(&d, end, NULL);
      release(s, 0);
      void *p = NULL;
      if (how == 0)
        TR("rill_posix_memalign(&s[%d], %zu, %zu); u(s[%d]);\n", IDX(s), align, n, IDX(s));
      else
        TR("s[%d] = rill_%s(%zu, %zu); u(s[%d]);\n", IDX(s),
           how == 1 ? "aligned_alloc" : "memalign", align, n, IDX(s));
      if (how == 0) {
        if (rill_posix_memalign(&p, align, n)) p = NULL;
      } else if (how == 1) {
        p = rill_aligned_alloc(align, n);
      } else {
        p = rill_memalign(align, n);
      }
      if (!p) die("aligned allocation returned NULL", s, align);
      after_alloc(s, p, n, align, seed);
      s->aligned_alloc_block = how == 1;
      break;
    }
    case 4: { /* calloc must hand out zeroed memory */
      size_t n = decode_size(&d, end, NULL);
      release(s, 0);
      size_t count = n > 8 && (n % 8) == 0 ? 8 : 1;
      TR("s[%d] = rill_calloc(%zu, %zu); u(s[%d]);\n", IDX(s), count, n / count, IDX(s));
      unsigned char *p = rill_calloc(count, n / count);
      if (!p) die("calloc returned NULL", s, n);
      s->p = p;
      s->n = n;
      FOR_REGION(n, from, to, {
        for (size_t i = from; i < to; i++)
          if (p[i]) die("calloc memory not zero", s, i);
      });
      after_alloc(s, p, n, 0, seed);
      break;
    }
    case 5: /* check everything, then rewrite one object's whole usable area */
      for (int i = 0; i < NSLOTS; i++) check(&slots[i]);
      if (s->p) {
        TR("u(s[%d]);\n", IDX(s));
        size_t u = rill_malloc_usable_size(s->p);
        if (u <= DENSE_MAX) {
          memset(s->p, 0xEE, u);
          fill_range(s->p, s->n, s->seed);
        }
      }
      break;
    case 6:
      release(s, 1);
      break;
    }
  }
  for (int i = 0; i < NSLOTS; i++) release(&slots[i], i & 1);
  return 0;
}
