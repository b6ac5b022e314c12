#ifndef ALLOCATION_STATS_H
#define ALLOCATION_STATS_H

#include <malloc.h>
#include <stddef.h>

/// Bytes currently allocated by malloc in every arena (glibc's `mallinfo2().uordblks`), for
/// tests that prove a path allocates nothing.
static inline size_t tk_test_allocated_bytes(void) { return mallinfo2().uordblks; }

/// The usable size of the heap block at `pointer` (glibc's `malloc_usable_size`): what one
/// allocation of an object costs, for tests that count allocations by bytes.
static inline size_t tk_test_usable_size(void *pointer) { return malloc_usable_size(pointer); }

#endif
