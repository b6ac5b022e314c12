// Storage for the diagnostics switches (see include/tk_diagnostics_shims.h).
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

// Held by the watchdog thread while it works (between its sleeps) and by a forking thread
// from the fork's prepare handler until the fork is done. The watchdog's work uses the Swift
// runtime, whose metadata and conformance caches take locks the first time a type or
// conformance is used; a fork that copied the watchdog inside one would leave that lock held
// in the child for ever, and the child's own first use of a type there would hang. So a fork
// waits for the watchdog to be asleep, where it holds nothing.
static pthread_mutex_t tk_diagnostics_watchdog_gate = PTHREAD_MUTEX_INITIALIZER;

int tk_diagnostics_watchdog_work_begin(void) { return pthread_mutex_lock(&tk_diagnostics_watchdog_gate); }

int tk_diagnostics_watchdog_work_end(void) { return pthread_mutex_unlock(&tk_diagnostics_watchdog_gate); }

// A fork handler cannot report an error to the caller of fork(): a failure (impossible for a
// default mutex that is initialized and, for the unlock, held by the caller) stops the process
// with a message rather than letting a fork copy the watchdog mid-work.
static void tk_diagnostics_gate_or_abort(int result, const char *message) {
  if (result != 0) {
    static const char prefix[] = "threading-toolkit diagnostics: ";
    (void)!write(2, prefix, sizeof prefix - 1);
    (void)!write(2, message, strlen(message));
    (void)!write(2, "\n", 1);
    abort();
  }
}

static void tk_diagnostics_before_fork(void) {
  tk_diagnostics_gate_or_abort(
      pthread_mutex_lock(&tk_diagnostics_watchdog_gate), "fork: pthread_mutex_lock of the watchdog gate failed");
}

static void tk_diagnostics_after_fork_in_parent(void) {
  tk_diagnostics_gate_or_abort(
      pthread_mutex_unlock(&tk_diagnostics_watchdog_gate), "fork: pthread_mutex_unlock of the watchdog gate failed");
}

// Runs in the child of a fork, before fork() returns there, with only the forking thread
// alive: the lock detectors' internal locks may have been copied while another thread held
// them, so the child switches off everything that would take them (the lock kinds' bits and
// contention statistics: TK_DIAGNOSTICS_LOCK_TRACKING_MASK) and remembers that it is a child,
// so that neither the environment nor an API call turns them on again. The watchdog gate,
// held by this thread since the prepare handler, is made anew (the child has no watchdog).
static void tk_diagnostics_forget_in_child(void) {
  __atomic_store_n(&tk_diagnostics_in_forked_child_flag, 1, __ATOMIC_RELAXED);
  __atomic_fetch_and(&tk_diagnostics_switches_word, ~TK_DIAGNOSTICS_LOCK_TRACKING_MASK, __ATOMIC_RELAXED);
  tk_diagnostics_gate_or_abort(
      pthread_mutex_init(&tk_diagnostics_watchdog_gate, NULL), "fork: pthread_mutex_init of the watchdog gate failed");
}

// Registered at load time, before any thread can fork or switch a detector on; the result is
// checked by Sync's `Diagnostics` before it switches a lock detector on (the watchdog's kinds
// are lock detectors, so it never runs without these handlers).
__attribute__((constructor)) static void tk_diagnostics_register_fork_handler(void) {
  tk_diagnostics_fork_handler_result =
      pthread_atfork(tk_diagnostics_before_fork, tk_diagnostics_after_fork_in_parent, tk_diagnostics_forget_in_child);
}
