/* huge.c - objects too big for any span come straight from mmap and go back
 * with munmap on free (Streamflow §3.1.2). A sharded registry of their
 * addresses lets free tell a huge object from a wild pointer without ever
 * reading memory it does not own. */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

#define SHARDS 16

typedef struct huge {
  uintptr_t user; /* address handed out; 0 = empty, 1 = deleted */
  uintptr_t base; /* start of the mapping */
  size_t maplen;  /* length of the mapping */
  size_t size;    /* usable size */
} huge_t;

typedef struct shard {
  _Atomic int lock;
  size_t cap, count, dead;
  huge_t *tab;
} shard_t;

static shard_t shards[SHARDS];
static _Atomic uint64_t live_bytes;

static inline size_t hash(uintptr_t p) {
  return (size_t)((p >> 12) * 0x9E3779B97F4A7C15ull);
}
static inline shard_t *shard_of(uintptr_t p) {
  return &shards[(hash(p) >> 58) % SHARDS];
}

static huge_t *find(shard_t *s, uintptr_t p) {
  if (!s->cap) return NULL;
  for (size_t i = hash(p) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
    if (s->tab[i].user == p) return &s->tab[i];
    if (s->tab[i].user == 0) return NULL;
  }
}

static bool insert(shard_t *s, huge_t e);

/* Grows (or cleans) the table when it is 3/4 full of live and deleted rows. */
static bool grow(shard_t *s) {
  size_t ncap = s->cap ? (s->count * 4 >= s->cap ? s->cap * 2 : s->cap) : 256;
  huge_t *old = s->tab, *nt = os_map(ncap * sizeof(huge_t));
  size_t ocap = s->cap;
  if (!nt) return false;
  s->tab = nt;
  s->cap = ncap;
  s->count = s->dead = 0;
  for (size_t i = 0; i < ocap; i++)
    if (old[i].user > 1) insert(s, old[i]);
  if (old) os_unmap(old, ocap * sizeof(huge_t));
  return true;
}

static bool insert(shard_t *s, huge_t e) {
  if ((s->count + s->dead + 1) * 4 > s->cap * 3 && !grow(s)) return false;
  size_t i = hash(e.user) & (s->cap - 1);
  while (s->tab[i].user > 1) i = (i + 1) & (s->cap - 1);
  if (s->tab[i].user == 1) s->dead--;
  s->tab[i] = e;
  s->count++;
  return true;
}

static void erase(shard_t *s, huge_t *e) {
  e->user = 1;
  s->count--;
  s->dead++;
}

static bool registry_add(huge_t e) {
  shard_t *s = shard_of(e.user);
  spin_lock(&s->lock);
  bool ok = insert(s, e);
  spin_unlock(&s->lock);
  if (ok) atomic_fetch_add_explicit(&live_bytes, e.size, RLX);
  return ok;
}

/* Removes p's row and returns it, or returns false for an unknown address. */
static bool registry_take(uintptr_t p, huge_t *out) {
  shard_t *s = shard_of(p);
  spin_lock(&s->lock);
  huge_t *e = find(s, p);
  if (e) {
    *out = *e;
    erase(s, e);
  }
  spin_unlock(&s->lock);
  if (e) atomic_fetch_sub_explicit(&live_bytes, out->size, RLX);
  return e != NULL;
}

void *huge_alloc(size_t n, size_t align) {
  size_t pg = rill_arena.page;
  if (align < pg) align = pg;
  size_t len = (n + pg - 1) & ~(pg - 1);
  if (len < n || len + align < len) return NULL;
  size_t extra = align > pg ? align : 0;
  char *raw = mmap(NULL, len + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  uintptr_t base = (uintptr_t)raw, user = (base + align - 1) & ~(uintptr_t)(align - 1);
  if (extra) { /* trim to the aligned part */
    if (user > base) munmap(raw, user - base);
    uintptr_t end = base + len + extra;
    if (end > user + len) munmap((void *)(user + len), end - (user + len));
    base = user;
  }
  huge_t e = {user, base, len, len};
  if (!registry_add(e)) {
    munmap((void *)base, len);
    return NULL;
  }
  return (void *)user;
}

bool huge_free(void *p) {
  huge_t e;
  if (!registry_take((uintptr_t)p, &e)) return false;
  munmap((void *)e.base, e.maplen);
  return true;
}

size_t huge_usable(const void *p) {
  shard_t *s = shard_of((uintptr_t)p);
  spin_lock(&s->lock);
  huge_t *e = find(s, (uintptr_t)p);
  size_t n = e ? e->size : 0;
  spin_unlock(&s->lock);
  return n;
}

/* Grows or shrinks with mremap, which moves page tables instead of bytes.
 * A growth maps a quarter more than asked, so a buffer growing in small
 * steps asks the kernel once per quarter, not once per step (four buffers
 * growing in turn by 64 KiB to 24 MiB: 14 calls each instead of 368; the
 * calls also serialise threads on the process's mapping lock). The slack is
 * address space only until written. A size between half the mapping and
 * all of it stays where it is. */
bool huge_realloc(void *p, size_t n, void **out) {
  size_t pg = rill_arena.page, len = (n + pg - 1) & ~(pg - 1);
  shard_t *s = shard_of((uintptr_t)p);
  spin_lock(&s->lock);
  huge_t *f = find(s, (uintptr_t)p);
  bool keep = f && len >= n && len <= f->maplen && len >= f->maplen / 2 && f->base == f->user;
  if (keep) {
    atomic_fetch_add_explicit(&live_bytes, len - f->size, RLX); /* wraps to a subtraction */
    f->size = len;
  }
  spin_unlock(&s->lock);
  if (keep) {
    *out = p;
    return true;
  }
  huge_t e;
  if (!registry_take((uintptr_t)p, &e)) return false;
  *out = NULL;
  if (len < n) {
    registry_add(e); /* too large to round: the old block stays live */
    return true;
  }
  size_t map = len, slack = (len / 4 + pg - 1) & ~(pg - 1);
  if (len > e.maplen && len + slack > len) map = len + slack;
  void *q = mremap((void *)e.base, e.maplen, map, MREMAP_MAYMOVE);
  if (q == MAP_FAILED && map > len) q = mremap((void *)e.base, e.maplen, map = len, MREMAP_MAYMOVE);
  if (q == MAP_FAILED) {
    registry_add(e); /* the old block is untouched and still live */
  } else {
    huge_t ne = {(uintptr_t)q, (uintptr_t)q, map, len};
    if (registry_add(ne))
      *out = q;
    else
      munmap(q, map);
  }
  return true;
}

uint64_t huge_bytes(void) {
  return atomic_load_explicit(&live_bytes, RLX);
}

void huge_fork_prepare(void) {
  for (int i = 0; i < SHARDS; i++) fork_hold(&shards[i].lock);
}
