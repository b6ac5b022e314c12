// Out-of-line part of the Sync module's shims (see include/tk_sync_shims.h): the per-thread
// lock-owner identity.
#include <stdatomic.h>
#include <stdint.h>

#include "tk_sync_shims.h"

__thread uint64_t tk_thread_identity_value __attribute__((tls_model("initial-exec"))) = 0;

uint64_t tk_thread_identity_assign(void) {
  // Relaxed: the counter only has to hand out distinct numbers; nothing is published with
  // it. 64 bits do not wrap in the life of a process.
  static _Atomic uint64_t last = 0;
  uint64_t identity = atomic_fetch_add_explicit(&last, 1, memory_order_relaxed) + 1;
  tk_thread_identity_value = identity;
  return identity;
}

// The `synchronized` side table: 64 buckets of 64 bytes, zero-initialized at load time (all
// zero is every bucket's initial state: an unlocked lock and empty lists). Static storage,
// not a lazily initialized Swift global: a fork that raced a lazy initializer would leave it
// "in progress" forever in the child, and the child's first `synchronized` would hang.
static _Alignas(64) unsigned char tk_synchronized_buckets[64 * 64];

void *tk_synchronized_table(void) { return tk_synchronized_buckets; }

int tk_synchronized_claim_fork_registration(void) {
  // Relaxed is enough: only one caller may win, and what the winner registers
  // (pthread_atfork's list) is protected by glibc's own lock.
  static _Atomic int claimed = 0;
  if (atomic_load_explicit(&claimed, memory_order_relaxed)) return 0;
  return atomic_exchange_explicit(&claimed, 1, memory_order_relaxed) == 0;
}
