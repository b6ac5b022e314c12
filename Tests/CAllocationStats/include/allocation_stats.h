#ifndef ALLOCATION_STATS_H
#define ALLOCATION_STATS_H

#include <malloc.h>
#include <stddef.h>

/// Bytes currently allocated by malloc in every arena (glibc's `mallinfo2().uordblks`), for
/// tests that prove a path allocates nothing.
static inline size_t tk_test_allocated_bytes(void) { return mallinfo2().uordblks; }

#endif
