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
