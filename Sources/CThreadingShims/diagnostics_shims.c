// Storage for the diagnostics switches (see include/tk_diagnostics_shims.h).
#include <stdatomic.h>

#include "tk_diagnostics_shims.h"

// Starts with only the undecided bit (Sync's `Diagnostics.undecidedBit`) set: the lock
// types' inlined check tests it together with the lock hooks' bits, in one instruction.
uint32_t tk_diagnostics_switches_word = 0x80000000u;
uint64_t tk_diagnostics_option_words[8] = {0};
__thread void *tk_lock_diagnostics_state_value __attribute__((tls_model("initial-exec"))) = 0;

uint64_t tk_lock_diagnostics_new_id(void) {
  // Relaxed: the counter only hands out distinct numbers. 64 bits do not wrap in the life
  // of a process, so an identity is never reused.
  static _Atomic uint64_t last = 0;
  return atomic_fetch_add_explicit(&last, 1, memory_order_relaxed) + 1;
}
__thread int64_t tk_lock_diagnostics_countdown_value __attribute__((tls_model("initial-exec"))) = 0;
__thread int64_t tk_lock_diagnostics_sampled_holds_value __attribute__((tls_model("initial-exec"))) = 0;
