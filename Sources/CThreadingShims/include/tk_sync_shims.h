// Linux calls the Sync module needs that Swift cannot import directly: `syscall` is variadic,
// and the pause instruction has no Swift spelling. Every function returns the kernel's
// result unchanged, with a negative errno instead of setting `errno`, so Swift callers check
// one value.
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
  long r = syscall(SYS_futex, address, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, expected,
                   deadline, NULL, FUTEX_BITSET_MATCH_ANY);
  return r == 0 ? 0 : -errno;
}

/// Wakes at most `count` threads sleeping on `address`. Returns how many were woken, or
/// -errno.
static inline int tk_futex_wake(uint32_t *address, int count) {
  long r = syscall(SYS_futex, address, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, count, NULL, NULL, 0);
  return r >= 0 ? (int)r : -errno;
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


/// The calling thread's `pthread_t` as an integer, without a call: on x86-64 glibc keeps
/// the thread's own descriptor address at %fs:16, which is what `pthread_self()` returns.
/// Used as the owner tag of locks.
static inline uintptr_t tk_thread_self(void) {
#if defined(__x86_64__) && defined(__GLIBC__)
  uintptr_t self;
  __asm__("movq %%fs:16, %0" : "=r"(self));
  return self;
#else
  return (uintptr_t)pthread_self();
#endif
}

#endif
