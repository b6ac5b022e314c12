// Storage for the diagnostics switches (see include/tk_diagnostics_shims.h).
#include <pthread.h>
#include <stdatomic.h>

#include "tk_diagnostics_shims.h"

// Starts with only the undecided bit (Sync's `Diagnostics.undecidedBit`) set: the lock
// types' inlined check tests it together with the lock hooks' bits, in one instruction.
uint32_t tk_diagnostics_switches_word = 0x80000000u;
uint64_t tk_diagnostics_option_words[16] = {0};
__thread void *tk_lock_diagnostics_state_value __attribute__((tls_model("initial-exec"))) = 0;

uint64_t tk_lock_diagnostics_new_id(void) {
  // Relaxed: the counter only hands out distinct numbers. 64 bits do not wrap in the life
  // of a process, so an identity is never reused.
  static _Atomic uint64_t last = 0;
  return atomic_fetch_add_explicit(&last, 1, memory_order_relaxed) + 1;
}
__thread int64_t tk_lock_diagnostics_countdown_value __attribute__((tls_model("initial-exec"))) = 0;
__thread int64_t tk_lock_diagnostics_sampled_holds_value __attribute__((tls_model("initial-exec"))) = 0;

int tk_diagnostics_in_forked_child_flag = 0;
int tk_diagnostics_fork_handler_result = 0;

// Runs in the child of a fork, before fork() returns there, with only the forking thread
// alive: the lock detectors' internal locks may have been copied while another thread held
// them, so the child switches off everything that would take them (the lock kinds' bits and
// contention statistics: TK_DIAGNOSTICS_LOCK_TRACKING_MASK) and remembers that it is a child,
// so that neither the environment nor an API call turns them on again.
static void tk_diagnostics_forget_in_child(void) {
  __atomic_store_n(&tk_diagnostics_in_forked_child_flag, 1, __ATOMIC_RELAXED);
  __atomic_fetch_and(&tk_diagnostics_switches_word, ~TK_DIAGNOSTICS_LOCK_TRACKING_MASK, __ATOMIC_RELAXED);
}

// Registered at load time, before any thread can fork or switch a detector on; the result is
// checked by Sync's `Diagnostics` before it switches a lock detector on.
__attribute__((constructor)) static void tk_diagnostics_register_fork_handler(void) {
  tk_diagnostics_fork_handler_result = pthread_atfork(NULL, NULL, tk_diagnostics_forget_in_child);
}
