#ifndef BENCHMARK_ALLOCATION_STATS_H
#define BENCHMARK_ALLOCATION_STATS_H

#include <malloc.h>
#include <stddef.h>

/// Bytes currently allocated by malloc in every arena (glibc's `mallinfo2().uordblks`), for
/// rows that count bytes allocated per operation.
static inline size_t bench_allocated_bytes(void) { return mallinfo2().uordblks; }

#endif
