// Linux calls the Sync module needs that Swift cannot import directly: `syscall` is variadic,
// and the pause instruction has no Swift spelling. Every function returns the kernel's
// result unchanged, with a negative errno instead of setting `errno`, so Swift callers check
// one value. The futex calls leave `errno` as they found it, as glibc's pthread calls do:
// C code that reads errno after one of the toolkit's lock or wait calls must not see a
// timeout or a retry of ours.
#ifndef TK_SYNC_SHIMS_H
#define TK_SYNC_SHIMS_H

#include <errno.h>
#include <pthread.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/// Sleeps while `*address == expected`, until woken or until the absolute CLOCK_MONOTONIC
/// `deadline` (NULL waits forever). Process-private futex. Returns 0 when woken (possibly
/// spuriously), or -EAGAIN (the value differed), -EINTR, -ETIMEDOUT, or another -errno.
static inline int tk_futex_wait(uint32_t *address, uint32_t expected,
                                const struct timespec *deadline) {
  // FUTEX_WAIT_BITSET takes an absolute timeout measured on CLOCK_MONOTONIC (unlike
  // FUTEX_WAIT, whose timeout is relative), so a wall-clock jump never moves it.
  int saved = errno;
  long r = syscall(SYS_futex, address, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, expected,
                   deadline, NULL, FUTEX_BITSET_MATCH_ANY);
  int error = r == 0 ? 0 : errno;
  errno = saved;
  return -error;
}

/// Wakes at most `count` threads sleeping on `address`. Returns how many were woken, or
/// -errno.
static inline int tk_futex_wake(uint32_t *address, int count) {
  int saved = errno;
  long r = syscall(SYS_futex, address, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, count, NULL, NULL, 0);
  int result = r >= 0 ? (int)r : -errno;
  errno = saved;
  return result;
}

/// The calling thread's kernel thread id.
static inline int32_t tk_gettid(void) { return (int32_t)syscall(SYS_gettid); }

/// A spin-wait hint (`pause` on x86, `yield` on ARM).
static inline void tk_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}

/// Reads CLOCK_MONOTONIC as nanoseconds. Returns -errno on failure (never expected).
static inline int64_t tk_monotonic_now_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return -(int64_t)errno;
  return (int64_t)ts.tv_sec * 1000000000LL + (int64_t)ts.tv_nsec;
}

/// The calling thread's identity for lock ownership: a number from a process-wide counter,
/// assigned on the thread's first call and never given to another thread of the process
/// (unlike `pthread_t`, which glibc reuses for a thread created after one has ended). Never
/// 0, so 0 can mean "no owner", and always below `TK_THREAD_IDENTITY_LIMIT` (2^48), so a
/// lock word holds it beside its state bits. Kept in an initial-exec thread-local, so after
/// the first call it costs one thread-relative load and a predicted branch.
extern __thread uint64_t tk_thread_identity_value __attribute__((tls_model("initial-exec")));

/// Identities stay below this (48 bits: at a million new threads a second, nine years of
/// them). The counter stops the process with a message rather than hand out a larger one.
#define TK_THREAD_IDENTITY_LIMIT (1ULL << 48)

/// The `synchronized` side table's storage: 64 zero-initialized 64-byte buckets in static
/// memory (no lazy initialization a fork could interrupt). Never fails.
void *tk_synchronized_table(void);

/// Returns 1 to exactly one caller in the process (the one that registers the table's fork
/// handlers), 0 to every other. Never fails.
int tk_synchronized_claim_fork_registration(void);

/// Assigns the calling thread its identity (the slow path of `tk_thread_identity`).
uint64_t tk_thread_identity_assign(void);

/// A fresh identity from the same counter, for a thread about to be created: its creator
/// learns it before the thread runs (the deadlock watchdog's join edges), and the new thread
/// takes it with `tk_thread_identity_adopt` as its first step. Never 0; never fails.
uint64_t tk_thread_identity_reserve(void);

/// Makes `identity` (from `tk_thread_identity_reserve`) the calling thread's identity, if it
/// has none yet. Never fails.
void tk_thread_identity_adopt(uint64_t identity);

/// The calling thread's identity (see `tk_thread_identity_value`).
static inline uint64_t tk_thread_identity(void) {
  uint64_t identity = tk_thread_identity_value;
  if (__builtin_expect(identity != 0, 1)) return identity;
  return tk_thread_identity_assign();
}

// ---- Priority-inheritance futexes (PriorityInheritanceLock) ----

/// How many priority-inheritance locks the calling thread holds (acquisitions minus
/// releases), and whether the thread is registered for the check at its end (1), or not yet
/// (0). Initial-exec thread-locals: one load and one add per acquisition.
extern __thread int64_t tk_pi_held_count_value __attribute__((tls_model("initial-exec")));
extern __thread int32_t tk_pi_held_registered_value __attribute__((tls_model("initial-exec")));

/// Creates the process's thread-end check once (a `pthread_key_t` whose destructor calls
/// `report` with the ending thread's count when it is not 0) and sets `report`. Returns 0 or
/// the `pthread_key_create` error. Idempotent.
int tk_pi_held_prepare(void (*report)(int64_t));

/// Registers the calling thread for the check at its end (the slow path of
/// `tk_pi_held_acquired`). Returns 0 or the `pthread_key_create`/`pthread_setspecific` error.
int tk_pi_held_register(void);

/// Counts an acquisition by the calling thread; registers the thread on its first. Returns
/// 0, or the registration's error.
static inline int tk_pi_held_acquired(void) {
  tk_pi_held_count_value += 1;
  if (__builtin_expect(tk_pi_held_registered_value != 0, 1)) return 0;
  return tk_pi_held_register();
}

/// Counts a release by the calling thread.
static inline void tk_pi_held_released(void) {
  tk_pi_held_count_value -= 1;
}

/// The calling thread's kernel thread id, cached in an initial-exec thread-local after the
/// first call (one load afterwards). A fork handler clears the forking thread's cache in the
/// child, whose only thread has a new id. Never 0.
extern __thread int32_t tk_cached_thread_id_value __attribute__((tls_model("initial-exec")));

/// Fills the cache (the slow path of `tk_cached_thread_id`).
int32_t tk_cached_thread_id_assign(void);

/// See `tk_cached_thread_id_value`.
static inline int32_t tk_cached_thread_id(void) {
  int32_t id = tk_cached_thread_id_value;
  if (__builtin_expect(id != 0, 1)) return id;
  return tk_cached_thread_id_assign();
}

/// FUTEX_LOCK_PI2 (Linux 5.14+, absolute CLOCK_MONOTONIC `deadline`, NULL waits forever) on a
/// process-private PI futex word. Returns 0 once the caller owns the word (the kernel wrote
/// its thread id), or -ETIMEDOUT, -EDEADLK (the caller owns it already), -EINTR, -EAGAIN,
/// -ESRCH, -ENOSYS (an older kernel) or another -errno.
int tk_futex_lock_pi2(uint32_t *word, const struct timespec *deadline);

/// FUTEX_LOCK_PI on a process-private PI futex word, for kernels without FUTEX_LOCK_PI2: its
/// timeout is absolute on CLOCK_REALTIME, so this takes a relative `timeout_ns` (negative:
/// wait forever) and adds it to the wall clock read just before the call. Results as
/// `tk_futex_lock_pi2`.
int tk_futex_lock_pi(uint32_t *word, int64_t timeout_ns);

/// FUTEX_UNLOCK_PI: hands the word to the highest-priority waiter (or clears it). Returns 0
/// or -errno (-EPERM: the caller does not own the word).
int tk_futex_unlock_pi(uint32_t *word);

// ---- Process-shared futexes (SharedMemoryCondition) ----

/// As `tk_futex_wait`, on a futex word other processes may share (no FUTEX_PRIVATE_FLAG: the
/// kernel keys the wait by the word's physical page, so every mapping of it meets).
int tk_futex_wait_shared(uint32_t *address, uint32_t expected, const struct timespec *deadline);

/// As `tk_futex_wake`, on a futex word other processes may share.
int tk_futex_wake_shared(uint32_t *address, int count);

// ---- Robust process-shared mutexes (SharedMemoryLock) ----

/// `pthread_mutex_clocklock(mutex, CLOCK_MONOTONIC, deadline)` (glibc 2.30+, declared by
/// glibc only for _GNU_SOURCE). Returns its result: 0 or an error number.
int tk_mutex_lock_monotonic(pthread_mutex_t *mutex, const struct timespec *deadline);

#endif
