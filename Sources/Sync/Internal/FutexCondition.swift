/// The wait/notify word pair behind ``Condition``, ``ConditionVariable``, ``ConditionLock``
/// and ``ThreadBarrier``: a sequence counter that waiters sleep on and a waiter count that
/// lets `signal`/`broadcast` skip the system call when nobody sleeps.
///
/// Protocol (the futex condition variable of Rust's std, plus a waiter count):
///
/// | step | waiter (holds the lock) | notifier |
/// |---|---|---|
/// | 1 | read `sequence` (relaxed; the lock orders it) | `sequence += 1` (full) |
/// | 2 | `waiters += 1` (full) | read `waiters` (after the full increment's fence); if > 0, futex wake |
/// | 3 | release the lock, `futex_wait(sequence, seen)` | |
/// | 4 | `waiters -= 1`, re-acquire the lock | |
///
/// Why no wake-up is lost: both sides do a full-ordered read-modify-write and then read the
/// other side's word (Dekker's pattern). Either the notifier sees `waiters > 0` and wakes,
/// or the waiter's increment came after the notifier's increment, in which case the
/// kernel's compare inside `futex_wait` sees the new `sequence` and returns at once. A
/// waiter that read `sequence` under the lock cannot miss a notification sent after it
/// released that lock. Spurious returns (signals, a bumped sequence from an unrelated
/// notify) are allowed: every caller re-checks its predicate.
///
/// Timed waits use `FUTEX_WAIT_BITSET`'s absolute CLOCK_MONOTONIC deadline, so a wall-clock
/// jump does not move them. A deadline that has already passed returns false at once
/// without releasing the lock.
///
/// The words live in their own 64-byte, 64-aligned block so their addresses never move and
/// they do not share a cache line with the lock word the notifier just released.
@usableFromInline
struct FutexCondition {
  @usableFromInline
  let sequence: UnsafeMutablePointer<UInt32>
  @usableFromInline
  let waiters: UnsafeMutablePointer<UInt32>
  /// The address of the lock word waits were paired with (0 until the first wait); used by
  /// ``ConditionVariable`` to report waiting with two different mutexes.
  @usableFromInline
  let boundLock: UnsafeMutablePointer<UInt64>

  init() {
    let block = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64)
    sequence = block.bindMemory(to: UInt32.self, capacity: 1)
    sequence.initialize(to: 0)
    waiters = (block + 4).bindMemory(to: UInt32.self, capacity: 1)
    waiters.initialize(to: 0)
    boundLock = (block + 8).bindMemory(to: UInt64.self, capacity: 1)
    boundLock.initialize(to: 0)
  }

  /// Frees the block. The owning object calls this from `deinit`; no thread can be waiting
  /// then, because every waiter holds a strong reference to the owner.
  func deallocate() {
    UnsafeMutableRawPointer(sequence).deallocate()
  }

  /// Releases `lock` (held by the caller), sleeps until notified or `deadline` passes, and
  /// re-acquires `lock`. Returns false only when the deadline passed; true for a
  /// notification or a spurious wake-up.
  ///
  /// Stops the process when the caller does not hold `lock`: the public waits check that on
  /// entry, but a predicate they re-test may have released the lock since, and another
  /// thread may hold it now; the release below would free that thread's lock. One load and
  /// a compare, on a path about to sleep.
  @usableFromInline
  func wait(releasing lock: FutexLock, before deadline: MonotonicInstant, typeName: String) -> Bool {
    if !lock.isHeldByCurrentThread {
      reportMisuse(typeName, "wait without holding the lock (a wait predicate must not release it)")
    }
    if deadline != .distantFuture, deadline.hasPassed { return false }
    // Read under the lock: any notify that follows our release bumps it past `seen`.
    let seen = UInt32.atomicLoad(at: sequence, ordering: .relaxed)
    // Full: the kernel's read of `sequence` inside `futex_wait` must come after this
    // increment is visible (the waiter's half of the store-buffering pair with `signal`). A
    // `.full` read-modify-write ends with a full fence (x86: the locked instruction; arm64:
    // `dmb ish`), which an acquire-release one alone (`ldaxr`/`stlxr`) would not give.
    _ = UInt32.atomicFetchAdd(1, at: waiters, ordering: .full)
    lock.release(checkOwner: false, typeName: typeName)
    let notified = Futex.wait(sequence, expected: seen, deadline: deadline)
    _ = UInt32.atomicFetchAdd(UInt32.max, at: waiters, ordering: .relaxed)
    // No spinning on re-acquisition: the notifier usually still holds the lock (it signals
    // under it), so spinning would only burn the time slice the notifier needs to release.
    _ = lock.acquire(before: .distantFuture, spinRounds: 0, typeName: typeName)
    return notified
  }

  /// Wakes one waiter, if any.
  @inlinable
  @inline(__always)
  func signal() {
    _ = UInt32.atomicFetchAdd(1, at: sequence, ordering: .full)
    // Relaxed suffices: a `.full` read-modify-write ends with a full fence (x86: the locked
    // instruction; arm64: `dmb ish` after the `stlxr`), so this load cannot be satisfied
    // before the increment is visible; a `.full` load would add a second fence for nothing.
    if UInt32.atomicLoad(at: waiters, ordering: .relaxed) != 0 {
      Futex.wake(sequence, count: 1)
    }
  }

  /// Wakes every waiter.
  @inlinable
  @inline(__always)
  func broadcast() {
    _ = UInt32.atomicFetchAdd(1, at: sequence, ordering: .full)
    // Relaxed suffices: a `.full` read-modify-write ends with a full fence (x86: the locked
    // instruction; arm64: `dmb ish` after the `stlxr`), so this load cannot be satisfied
    // before the increment is visible; a `.full` load would add a second fence for nothing.
    if UInt32.atomicLoad(at: waiters, ordering: .relaxed) != 0 {
      Futex.wake(sequence, count: Int32.max)
    }
  }
}
