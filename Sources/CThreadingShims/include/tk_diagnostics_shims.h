// The diagnostics switches (Sync's `Diagnostics`): one word in static (initialized) memory, so the check
// a toolkit path makes ("is this diagnostic on?") is one relaxed load inlined into Swift,
// with no lazy initializer in front of it (a fork racing a lazy initializer could leave it
// unfinished in the child).
#ifndef TK_DIAGNOSTICS_SHIMS_H
#define TK_DIAGNOSTICS_SHIMS_H

#include <stdint.h>

/// The switches word; at load time only its top bit (undecided) is set, everything is off. Defined once, in
/// diagnostics_shims.c. Read and written only through the functions below and Sync's
/// atomics.
extern uint32_t tk_diagnostics_switches_word;

/// The word's address, for Sync's atomic read-modify-writes.
static inline uint32_t *tk_diagnostics_switches(void) { return &tk_diagnostics_switches_word; }

/// One relaxed load of the word: what every diagnostics check costs.
static inline uint32_t tk_diagnostics_load_switches(void) {
  return __atomic_load_n(&tk_diagnostics_switches_word, __ATOMIC_RELAXED);
}

/// Numeric options of the diagnostics (Sync's `Diagnostics` gives each a slot: slot 0 is the
/// stall threshold in nanoseconds; see its `OptionSlot` for the others). Zero at
/// load time, meaning "the default". Accessed only through Sync's atomics.
extern uint64_t tk_diagnostics_option_words[16];

/// The address of option slot `index` (0...15).
static inline uint64_t *tk_diagnostics_option(int index) { return &tk_diagnostics_option_words[index]; }

/// The calling thread's lock-diagnostics state (Sync's `LockDiagnostics`: the locks it
/// holds, what it waits for), or NULL before its first diagnosed lock operation. An
/// initial-exec thread-local, so reading it is one thread-relative load; it is touched only
/// while a lock detector is on. Sync's pthread key releases the state at thread exit.
extern __thread void *tk_lock_diagnostics_state_value __attribute__((tls_model("initial-exec")));

/// Acquisitions left before the calling thread's next contention sample (Sync's
/// `LockDiagnostics`), and how many sampled holds it has not released: initial-exec
/// thread-locals, so the lock types' inlined check with contention statistics alone on is a
/// decrement and a compare, with no call.
extern __thread int64_t tk_lock_diagnostics_countdown_value __attribute__((tls_model("initial-exec")));
extern __thread int64_t tk_lock_diagnostics_sampled_holds_value __attribute__((tls_model("initial-exec")));

/// Counts one acquisition down; returns 1 when it is to be sampled (the countdown reached
/// zero; the sampler sets the next countdown), 0 otherwise.
static inline int tk_lock_diagnostics_count_down(void) { return --tk_lock_diagnostics_countdown_value <= 0; }

/// Sets the calling thread's countdown.
static inline void tk_lock_diagnostics_set_countdown(int64_t value) { tk_lock_diagnostics_countdown_value = value; }

/// The calling thread's unreleased sampled holds.
static inline int64_t tk_lock_diagnostics_sampled_holds(void) { return tk_lock_diagnostics_sampled_holds_value; }

/// Adds `delta` to the calling thread's unreleased sampled holds.
static inline void tk_lock_diagnostics_add_sampled_holds(int64_t delta) { tk_lock_diagnostics_sampled_holds_value += delta; }

/// A new diagnosed-lock identity: a process-wide counter's next value, never 0 and never
/// handed out twice, so a lock created at a destroyed lock's address is a new lock to the
/// detectors. Never fails.
uint64_t tk_lock_diagnostics_new_id(void);

/// Reads the calling thread's state pointer.
static inline void *tk_lock_diagnostics_state(void) { return tk_lock_diagnostics_state_value; }

/// Sets the calling thread's state pointer.
static inline void tk_lock_diagnostics_set_state(void *state) { tk_lock_diagnostics_state_value = state; }

/// The switches word's bits of the lock detectors and contention statistics (Sync's
/// `Diagnostics.lockTrackingMask`, the same value: two bits for each of kinds 1 to 4, lock
/// order to blocking in a task, and the contention bit), which the child of a fork clears.
#define TK_DIAGNOSTICS_LOCK_TRACKING_MASK 0x200003FCu

/// 1 in the child of a fork (set by a fork handler registered at load time), else 0.
extern int tk_diagnostics_in_forked_child_flag;

/// pthread_atfork's result for that handler (0: registered).
extern int tk_diagnostics_fork_handler_result;

/// pthread_atfork's result for that handler, read (written once, at load time).
static inline int tk_diagnostics_fork_handler_status(void) {
  return __atomic_load_n(&tk_diagnostics_fork_handler_result, __ATOMIC_RELAXED);
}

/// Enters the diagnostics watchdog's working section (`pthread_mutex_lock`'s result): the
/// watchdog holds it from each wake-up to its next sleep, and a fork waits for it in its
/// prepare handler, so no child is a copy of the watchdog in the middle of its work.
int tk_diagnostics_watchdog_work_begin(void);

/// Leaves the watchdog's working section (`pthread_mutex_unlock`'s result).
int tk_diagnostics_watchdog_work_end(void);

/// Whether this process is the child of a fork of a process that loaded the toolkit.
static inline int tk_diagnostics_in_forked_child(void) {
  return __atomic_load_n(&tk_diagnostics_in_forked_child_flag, __ATOMIC_RELAXED);
}

#endif
