// Header-only: see include/benchmark_allocation_stats.h.
