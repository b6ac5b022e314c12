/// A condition with its own lock: the guide's `NSCondition` (Listings 4-3 and 4-4).
///
/// A `Condition` is a lock (it conforms to ``Locking``) plus a place to wait for a change
/// of state that the lock protects. The pattern is always the same: take the lock, test
/// your predicate, `wait` while it is false, act, unlock. `wait` releases the lock while it
/// sleeps and re-acquires it before returning, so the predicate is re-tested with the lock
/// held. Waits may return without a signal (spurious wake-ups), which is why the predicate
/// forms ``wait(until:)->()`` loop for you.
///
/// ```swift
/// let condition = Condition()
/// var work = 0                        // protected by `condition`
///
/// // consumer (Listing 4-3)
/// condition.withLock {
///     condition.wait(until: { work > 0 })
///     work -= 1
/// }
///
/// // producer (Listing 4-4): change the state and signal while holding the lock
/// condition.withLock {
///     work += 1
///     condition.signal()
/// }
/// ```
///
/// **Timed waits** (``wait(before:)``, ``wait(timeout:)`` and the predicate forms with a
/// deadline) are measured on the monotonic clock: changing the wall clock does not make
/// them return early or late. A deadline that has passed, or a zero or negative timeout,
/// returns `false` at once, without releasing the lock.
///
/// **Misuse** stops the process with a message: waiting without holding the lock (also a
/// predicate of ``wait(until:)->()`` that releases it and returns `false`), unlocking a lock
/// that is not held (the lock behaves like a checked ``Lock``), and deinitializing a
/// condition while it is locked. A condition cannot be signalled after it is destroyed:
/// every caller holds a strong reference to it.
///
/// **Diagnostics.** A condition is a diagnosed lock: the lock detectors of ``Diagnostics``
/// (lock order, the deadlock watchdog, a lock held past a run-loop callback) and its
/// contention statistics watch it while they are on; while they are off, each operation
/// pays one relaxed load and a branch.
///
/// Built on a futex sequence word and a futex lock (no pthread objects); the C functions it
/// replaces are `pthread_cond_wait`, `pthread_cond_clockwait`, `pthread_cond_signal` and
/// `pthread_cond_broadcast` over a `pthread_mutex_t`.
public final class Condition: Locking, @unchecked Sendable {
  // @unchecked: all state is in `lockCore` and `waitCore`, reached only through atomics and
  // futexes.
  @usableFromInline
  let lockCore: FutexLock
  @usableFromInline
  let waitCore: FutexCondition
  /// Who the condition is to the lock detectors and contention statistics.
  @usableFromInline
  let identity: LockIdentity

  /// Creates an unlocked condition. `name` is what diagnostics reports call it (lock-order
  /// cycles, deadlocks, contention statistics; see ``Diagnostics``); without one they use
  /// the creation site, `fileID:line`, which the defaults capture.
  public init(name: String? = nil, fileID: StaticString = #fileID, line: UInt = #line) {
    lockCore = FutexLock()
    waitCore = FutexCondition()
    identity = LockIdentity(name: name, fileID: fileID, line: line)
  }

  deinit {
    lockCore.deallocate(typeName: "Condition")
    waitCore.deallocate()
    LockDiagnostics.lockWillBeDestroyed(identity)
  }

  /// What diagnostics reports call the condition: the `name` given at creation, else its
  /// creation site (`"Module/File.swift:12"`).
  public var name: String { identity.label }

  /// Acquires the condition's lock, blocking until it is available. Stops the process if
  /// the calling thread already holds it (self-deadlock).
  @available(*, noasync, message: "blocks the thread; use withLock for a short critical section")
  @inlinable
  public func lock() {
    if LockDiagnostics.diagnosesAcquisition {
      _ = lockCore.acquireDiagnosed(
        identity, before: .distantFuture, spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "Condition")
      return
    }
    _ = lockCore.acquire(before: .distantFuture, spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "Condition")
  }

  /// Releases the condition's lock. Stops the process if the calling thread does not hold
  /// it.
  @inlinable
  public func unlock() {
    if LockDiagnostics.diagnosesRelease {
      lockCore.releaseDiagnosed(identity, checkOwner: true, typeName: "Condition")
      return
    }
    lockCore.release(checkOwner: true, typeName: "Condition")
  }

  /// Acquires the lock if it is free right now; never blocks. Returns whether it did.
  @inlinable
  public func tryLock() -> Bool {
    if LockDiagnostics.tracksHeldLocks { return lockCore.tryAcquireDiagnosed(identity) }
    return lockCore.tryAcquireFree()
  }

  /// Acquires the lock, blocking until it is available or `deadline` (monotonic clock)
  /// passes; returns whether it was acquired.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func lock(before deadline: MonotonicInstant) -> Bool {
    if LockDiagnostics.diagnosesAcquisition {
      return lockCore.acquireDiagnosed(
        identity, before: deadline, spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "Condition")
    }
    return lockCore.acquire(before: deadline, spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "Condition")
  }

  /// Whether the calling thread holds the condition's lock; meant for assertions.
  @inlinable
  public var isHeldByCurrentThread: Bool {
    lockCore.isHeldByCurrentThread
  }

  /// Releases the lock, blocks until signalled, and re-acquires the lock before returning.
  ///
  /// May return without a signal (spurious wake-up): re-test your predicate in a loop, or
  /// use ``wait(until:)->()``. Stops the process if the calling thread does not hold
  /// the lock. The C function is `pthread_cond_wait`.
  @available(*, noasync, message: "blocks the thread")
  public func wait() {
    checkHeld()
    _ = waitReleasingLock(before: .distantFuture)
  }

  /// Releases the lock, blocks until signalled or `deadline` (monotonic clock) passes, and
  /// re-acquires the lock. Returns `false` when the deadline passed (never before it), `true`
  /// when woken, which may be spuriously. A passed deadline returns `false` at once without
  /// releasing the lock. Stops the process if the calling thread does not hold the lock.
  /// The C function is `pthread_cond_clockwait` with `CLOCK_MONOTONIC`.
  @available(*, noasync, message: "blocks the thread")
  public func wait(before deadline: MonotonicInstant) -> Bool {
    checkHeld()
    return waitReleasingLock(before: deadline)
  }

  /// Deprecated spelling of ``wait(before:)`` (`NSCondition.wait(until:)`'s): in this
  /// toolkit `until:` names a predicate and a deadline is `before:` (see ``MonotonicInstant``).
  @available(*, deprecated, renamed: "wait(before:)")
  @available(*, noasync, message: "blocks the thread")
  public func wait(until deadline: MonotonicInstant) -> Bool {
    wait(before: deadline)
  }

  /// Waits at most `timeout` (monotonic clock); see ``wait(before:)``. A zero or negative
  /// timeout returns `false` at once.
  @available(*, noasync, message: "blocks the thread")
  public func wait(timeout: Duration) -> Bool {
    wait(before: .after(timeout))
  }

  /// Waits until `predicate` is true, re-testing it after every wake-up with the lock held.
  /// Returns at once, without releasing the lock, if it is already true. An error thrown by
  /// `predicate` propagates with the lock still held.
  ///
  /// ```swift
  /// condition.withLock {
  ///     condition.wait(until: { !queue.isEmpty })
  ///     item = queue.removeFirst()
  /// }
  /// ```
  @available(*, noasync, message: "blocks the thread")
  public func wait<Failure: Error>(until predicate: () throws(Failure) -> Bool) throws(Failure) {
    checkHeld()
    while try !predicate() {
      _ = waitReleasingLock(before: .distantFuture)
    }
  }

  /// Waits until `predicate` is true or `deadline` (monotonic clock) passes, re-testing it
  /// after every wake-up with the lock held. Returns the predicate's last value: `false`
  /// means the deadline passed with the predicate still false.
  @available(*, noasync, message: "blocks the thread")
  public func wait<Failure: Error>(
    until predicate: () throws(Failure) -> Bool, before deadline: MonotonicInstant
  ) throws(Failure) -> Bool {
    checkHeld()
    while try !predicate() {
      if !waitReleasingLock(before: deadline) {
        return try predicate()
      }
    }
    return true
  }

  /// Waits until `predicate` is true or `timeout` (monotonic clock) has elapsed; see
  /// ``wait(until:before:)``.
  @available(*, noasync, message: "blocks the thread")
  public func wait<Failure: Error>(
    until predicate: () throws(Failure) -> Bool, timeout: Duration
  ) throws(Failure) -> Bool {
    try wait(until: predicate, before: .after(timeout))
  }

  /// Wakes one thread waiting on this condition, if any. Call it while holding the lock,
  /// after changing the state the waiters test, so the change and the wake-up cannot be
  /// separated. The C function is `pthread_cond_signal`.
  @inlinable
  public func signal() {
    waitCore.signal()
  }

  /// Wakes every thread waiting on this condition. The C function is
  /// `pthread_cond_broadcast`.
  @inlinable
  public func broadcast() {
    waitCore.broadcast()
  }

  /// One wait of the futex condition (marked as a condition wait for the deadlock watchdog
  /// while the lock detectors are on).
  @inline(__always)
  func waitReleasingLock(before deadline: MonotonicInstant) -> Bool {
    if LockDiagnostics.tracksHeldLocks {
      return LockDiagnostics.conditionWait(identity, before: deadline) {
        waitCore.wait(releasing: lockCore, before: deadline, typeName: "Condition")
      }
    }
    return waitCore.wait(releasing: lockCore, before: deadline, typeName: "Condition")
  }

  @inline(__always)
  func checkHeld() {
    if !lockCore.isHeldByCurrentThread {
      reportMisuse("Condition", "wait without holding the condition's lock")
    }
  }
}
