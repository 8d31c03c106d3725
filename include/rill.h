/* rill.h - public interface of rill, a scalable thread-local-heap malloc.
 * Programs that want rill without replacing the C allocator call the rill_
 * functions; everything else gets rill through the standard names. */
#ifndef RILL_H
#define RILL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RILL_VERSION_MAJOR 0
#define RILL_VERSION_MINOR 1

/* The C allocator, with glibc's semantics. */
void *rill_malloc(size_t size);
void rill_free(void *ptr);
void *rill_calloc(size_t count, size_t size);
void *rill_realloc(void *ptr, size_t size);
void *rill_reallocarray(void *ptr, size_t count, size_t size);
int rill_posix_memalign(void **out, size_t alignment, size_t size);
void *rill_aligned_alloc(size_t alignment, size_t size);
void *rill_memalign(size_t alignment, size_t size);
void *rill_valloc(size_t size);
void *rill_pvalloc(size_t size);
size_t rill_malloc_usable_size(const void *ptr);
void rill_free_sized(void *ptr, size_t size);
void rill_free_aligned_sized(void *ptr, size_t alignment, size_t size);

/* Gives the physical memory of empty spans back to the OS now, across every
 * thread's free spans that can be reached safely. With force, also drops the
 * calling thread's own cached empty spans. Returns bytes purged. */
size_t rill_collect(bool force);

/* Footprint statistics, summed on demand from per-thread counters. */
struct rill_stats {
  uint64_t remote_frees;    /* frees by a thread that did not own the span */
  uint64_t bytes_in_use;    /* live bytes, by size class (approximate) */
  uint64_t bytes_committed; /* arena bytes handed to spans, not purged */
  uint64_t bytes_reserved;  /* address space reserved */
  uint64_t bytes_purged;    /* bytes given back with madvise, ever */
  uint64_t huge_bytes;      /* bytes in live huge (mmap) objects */
  uint64_t spans_hot;       /* spans that are some thread's allocation span */
  uint64_t spans_floating;  /* full spans no heap tracks */
  uint64_t spans_reusable;  /* partly free spans waiting for reuse */
  uint64_t spans_free;      /* empty spans in the global pool */
  uint64_t threads;         /* live thread heaps */
};
void rill_stats_get(struct rill_stats *out);
/* Prints the statistics to file descriptor fd (2 = stderr). */
void rill_stats_print(int fd);

/* Where a footprint sits, class by class: a size class's spans, their blocks
 * handed out and free, and how much of them is in physical memory. Free
 * blocks in spans that are not empty serve only their class; this is where
 * a fragmented heap shows. Gathered on demand like rill_stats, plus one
 * mincore call per span for the resident bytes. */
struct rill_class_stats {
  uint64_t block_size;      /* the class's block size; 0 for the row of large objects */
  uint64_t spans;           /* spans of the class that are not empty (large: objects) */
  uint64_t blocks_in_use;   /* blocks handed out and not freed */
  uint64_t blocks_free;     /* blocks cut from the spans and freed since */
  uint64_t bytes_in_use;    /* blocks_in_use x block_size (large: their usable sizes) */
  uint64_t bytes_committed; /* the spans' bytes */
  uint64_t bytes_resident;  /* of those, in physical memory now */
};
/* Fills out[0..n) with a row per size class that has spans, smallest blocks
 * first, then one for large objects if any; returns the number of such
 * rows, which may be more than n (call with n = 0 to size the array). */
size_t rill_class_stats_get(struct rill_class_stats *out, size_t n);

#ifdef __cplusplus
}
#endif
#endif
