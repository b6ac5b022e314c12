// libatomic_ops as a peer in the atomics rows: the two operations they measure, with
// fixed-width types (libatomic_ops spells its operations as macros, which Swift cannot see).
// Both inline into the Swift caller, as they would into a C program using the library.
#ifndef BENCH_CATOMICOPS_H
#define BENCH_CATOMICOPS_H

#include <atomic_ops.h>
#include <stdbool.h>
#include <stdint.h>

_Static_assert(sizeof(AO_t) == sizeof(uint64_t), "the benchmarks assume a 64-bit AO_t");

/// AO_compare_and_swap_full: stores `desired` if `*p == expected`; whether it did.
static inline bool bench_ao_compare_and_swap_full(volatile uint64_t *p, uint64_t expected, uint64_t desired) {
  return AO_compare_and_swap_full((volatile AO_t *)p, (AO_t)expected, (AO_t)desired);
}

/// AO_fetch_and_add_full: adds `value` to `*p`; the previous value.
static inline uint64_t bench_ao_fetch_add_full(volatile uint64_t *p, uint64_t value) {
  return (uint64_t)AO_fetch_and_add_full((volatile AO_t *)p, (AO_t)value);
}

#endif
