// Out-of-line part of the Sync module's shims (see include/tk_sync_shims.h): the per-thread
// lock-owner identity.
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "tk_sync_shims.h"

__thread uint64_t tk_thread_identity_value __attribute__((tls_model("initial-exec"))) = 0;

// The last identity handed out. Relaxed: the counter only has to hand out distinct
// numbers; nothing is published with it.
static _Atomic uint64_t tk_thread_identity_last = 0;

uint64_t tk_thread_identity_reserve(void) {
  uint64_t identity = atomic_fetch_add_explicit(&tk_thread_identity_last, 1, memory_order_relaxed) + 1;
  if (identity >= TK_THREAD_IDENTITY_LIMIT) {
    // Lock words keep the owner's identity in 48 bits: a larger one would alias another
    // thread's. Unreachable in practice; stop clearly rather than break a lock.
    static const char message[] =
        "Sync: more than 2^48 thread identities were handed out in this process; lock owners would be ambiguous\n";
    (void)write(2, message, sizeof message - 1);
    abort();
  }
  return identity;
}

uint64_t tk_thread_identity_assign(void) {
  uint64_t identity = tk_thread_identity_reserve();
  tk_thread_identity_value = identity;
  return identity;
}

void tk_thread_identity_adopt(uint64_t identity) {
  if (tk_thread_identity_value == 0) tk_thread_identity_value = identity;
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

// ---- Priority-inheritance futexes (PriorityInheritanceLock) ----

__thread int32_t tk_cached_thread_id_value __attribute__((tls_model("initial-exec"))) = 0;

static pthread_once_t tk_cached_thread_id_once = PTHREAD_ONCE_INIT;
static _Atomic int tk_cached_thread_id_usable = 0;

static void tk_cached_thread_id_forget_in_child(void) { tk_cached_thread_id_value = 0; }

static void tk_cached_thread_id_register(void) {
  // Without the fork handler a child would keep its parent's id: then nothing is cached.
  // Release/acquire: a thread that sees 1 also sees the handler registered.
  if (pthread_atfork(NULL, NULL, tk_cached_thread_id_forget_in_child) == 0) {
    atomic_store_explicit(&tk_cached_thread_id_usable, 1, memory_order_release);
  }
}

int32_t tk_cached_thread_id_assign(void) {
  int saved = errno;
  int32_t id = (int32_t)syscall(SYS_gettid);  // gettid cannot fail
  (void)pthread_once(&tk_cached_thread_id_once, tk_cached_thread_id_register);
  if (atomic_load_explicit(&tk_cached_thread_id_usable, memory_order_acquire)) {
    tk_cached_thread_id_value = id;
  }
  errno = saved;
  return id;
}

__thread int64_t tk_pi_held_count_value __attribute__((tls_model("initial-exec"))) = 0;
__thread int32_t tk_pi_held_registered_value __attribute__((tls_model("initial-exec"))) = 0;

static pthread_once_t tk_pi_held_once = PTHREAD_ONCE_INIT;
static pthread_key_t tk_pi_held_key;
static int tk_pi_held_key_error = 0;
// Set once before any lock exists; read by ending threads.
static _Atomic(void (*)(int64_t)) tk_pi_held_report = NULL;

// The key's destructor: runs as a registered thread ends, before the kernel releases what
// it still holds (which would hand a priority-inheritance lock to a waiter silently).
static void tk_pi_held_thread_ended(void *unused) {
  (void)unused;
  int64_t count = tk_pi_held_count_value;
  void (*report)(int64_t) = atomic_load_explicit(&tk_pi_held_report, memory_order_acquire);
  if (count != 0 && report != NULL) report(count);
}

static void tk_pi_held_make_key(void) {
  tk_pi_held_key_error = pthread_key_create(&tk_pi_held_key, tk_pi_held_thread_ended);
}

int tk_pi_held_prepare(void (*report)(int64_t)) {
  int once = pthread_once(&tk_pi_held_once, tk_pi_held_make_key);
  if (once != 0) return once;
  if (tk_pi_held_key_error != 0) return tk_pi_held_key_error;
  atomic_store_explicit(&tk_pi_held_report, report, memory_order_release);
  return 0;
}

int tk_pi_held_register(void) {
  int once = pthread_once(&tk_pi_held_once, tk_pi_held_make_key);
  if (once != 0) return once;
  if (tk_pi_held_key_error != 0) return tk_pi_held_key_error;
  // Any non-NULL value: the destructor runs only for threads that set one.
  int error = pthread_setspecific(tk_pi_held_key, (void *)1);
  if (error == 0) tk_pi_held_registered_value = 1;
  return error;
}

#ifndef FUTEX_LOCK_PI2
#define FUTEX_LOCK_PI2 13
#endif

int tk_futex_lock_pi2(uint32_t *word, const struct timespec *deadline) {
  int saved = errno;
  long r = syscall(SYS_futex, word, FUTEX_LOCK_PI2 | FUTEX_PRIVATE_FLAG, 0, deadline, NULL, 0);
  int error = r == 0 ? 0 : errno;
  errno = saved;
  return -error;
}

int tk_futex_lock_pi(uint32_t *word, int64_t timeout_ns) {
  int saved = errno;
  struct timespec deadline;
  struct timespec *limit = NULL;
  if (timeout_ns >= 0) {
    if (clock_gettime(CLOCK_REALTIME, &deadline) != 0) {
      int error = errno;
      errno = saved;
      return -error;
    }
    int64_t nanoseconds = (int64_t)deadline.tv_nsec + timeout_ns % 1000000000LL;
    deadline.tv_sec += (time_t)(timeout_ns / 1000000000LL + nanoseconds / 1000000000LL);
    deadline.tv_nsec = (long)(nanoseconds % 1000000000LL);
    limit = &deadline;
  }
  long r = syscall(SYS_futex, word, FUTEX_LOCK_PI | FUTEX_PRIVATE_FLAG, 0, limit, NULL, 0);
  int error = r == 0 ? 0 : errno;
  errno = saved;
  return -error;
}

int tk_futex_unlock_pi(uint32_t *word) {
  int saved = errno;
  long r = syscall(SYS_futex, word, FUTEX_UNLOCK_PI | FUTEX_PRIVATE_FLAG, 0, NULL, NULL, 0);
  int error = r == 0 ? 0 : errno;
  errno = saved;
  return -error;
}

// ---- Process-shared futexes (SharedMemoryCondition) ----

int tk_futex_wait_shared(uint32_t *address, uint32_t expected, const struct timespec *deadline) {
  int saved = errno;
  long r = syscall(SYS_futex, address, FUTEX_WAIT_BITSET, expected, deadline, NULL, FUTEX_BITSET_MATCH_ANY);
  int error = r == 0 ? 0 : errno;
  errno = saved;
  return -error;
}

int tk_futex_wake_shared(uint32_t *address, int count) {
  int saved = errno;
  long r = syscall(SYS_futex, address, FUTEX_WAKE, count, NULL, NULL, 0);
  int result = r >= 0 ? (int)r : -errno;
  errno = saved;
  return result;
}

// ---- Robust process-shared mutexes (SharedMemoryLock) ----

// glibc declares it only for _GNU_SOURCE; this is its prototype (glibc 2.30+).
extern int pthread_mutex_clocklock(pthread_mutex_t *mutex, clockid_t clock, const struct timespec *deadline);

int tk_mutex_lock_monotonic(pthread_mutex_t *mutex, const struct timespec *deadline) {
  return pthread_mutex_clocklock(mutex, CLOCK_MONOTONIC, deadline);
}
