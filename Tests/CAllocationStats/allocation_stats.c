// Header-only: see include/allocation_stats.h.
