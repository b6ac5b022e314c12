/// A condition variable paired with a ``Lock`` you already have: the POSIX form of the
/// guide's Listings 4-5 and 4-6 (`pthread_cond_t` with a `pthread_mutex_t`).
///
/// Use it when the state is already protected by a `Lock`, or when several conditions
/// share one mutex (a bounded queue's "not empty" and "not full"). Wait with the mutex held;
/// `wait` releases it while sleeping and re-acquires it before returning. Waits may return
/// without a signal (spurious wake-ups): loop on your predicate, or use the predicate forms.
///
/// ```swift
/// let mutex = Lock()
/// let ready = ConditionVariable()
/// var isReady = false                 // protected by `mutex`
///
/// // waiter (Listing 4-5)
/// mutex.withLock {
///     ready.wait(mutex, until: { isReady })
/// }
///
/// // signaller (Listing 4-6)
/// mutex.withLock {
///     isReady = true
///     ready.signal()
/// }
/// ```
///
/// **Timed waits** use the monotonic clock; a passed deadline or a zero or negative
/// timeout returns `false` at once without releasing the mutex.
///
/// **Misuse** stops the process with a message: waiting with a mutex the calling thread
/// does not hold (also a predicate of `wait(_:until:)` that releases it and returns
/// `false`), and waiting with a different mutex than earlier waits used (a condition
/// variable pairs with one mutex for its whole life; the guide: "a condition always pairs
/// with the same mutex"). A condition variable cannot be signalled after it is destroyed:
/// every caller holds a strong reference to it.
///
/// **Diagnostics.** While a lock detector of ``Diagnostics`` is on, a wait is a condition
/// wait on its mutex, as a ``Condition``'s: the deadlock watchdog lists the waiting thread
/// with the mutex released, and ``Diagnostics/Kind/blockingInTask`` reports a wait inside a
/// task that outlasts its threshold.
///
/// Built on a futex sequence word; the C functions it replaces are `pthread_cond_wait`,
/// `pthread_cond_clockwait`, `pthread_cond_signal` and `pthread_cond_broadcast`.
public final class ConditionVariable: @unchecked Sendable {
  // @unchecked: all state is in `core`, reached only through atomics and futexes.
  @usableFromInline
  let core: FutexCondition

  /// Creates a condition variable; it pairs with the mutex of its first wait.
  public init() {
    core = FutexCondition()
  }

  deinit {
    core.deallocate()
  }

  /// Releases `mutex`, blocks until signalled, and re-acquires `mutex` before returning.
  /// May return spuriously. Stops the process if the calling thread does not hold `mutex`,
  /// or if `mutex` is not the one this condition variable pairs with. The C function is
  /// `pthread_cond_wait`.
  @available(*, noasync, message: "blocks the thread")
  public func wait(_ mutex: Lock) {
    check(mutex)
    _ = waitReleasing(mutex, before: .distantFuture)
  }

  /// Releases `mutex`, blocks until signalled or `deadline` (monotonic clock) passes, and
  /// re-acquires `mutex`. Returns `false` when the deadline passed (never before it), `true`
  /// when woken, possibly spuriously. A passed deadline returns `false` at once without
  /// releasing `mutex`. Misuse as for ``wait(_:)``. The C function is
  /// `pthread_cond_clockwait` with `CLOCK_MONOTONIC`.
  @available(*, noasync, message: "blocks the thread")
  public func wait(_ mutex: Lock, before deadline: MonotonicInstant) -> Bool {
    check(mutex)
    return waitReleasing(mutex, before: deadline)
  }

  /// Waits at most `timeout` (monotonic clock); see ``wait(_:before:)``. A zero or negative
  /// timeout returns `false` at once.
  @available(*, noasync, message: "blocks the thread")
  public func wait(_ mutex: Lock, timeout: Duration) -> Bool {
    wait(mutex, before: .after(timeout))
  }

  /// Waits until `predicate` is true, re-testing it with `mutex` held after every wake-up.
  /// Returns at once if it is already true. An error thrown by `predicate` propagates with
  /// `mutex` still held. Misuse as for ``wait(_:)``.
  @available(*, noasync, message: "blocks the thread")
  public func wait<Failure: Error>(_ mutex: Lock, until predicate: () throws(Failure) -> Bool) throws(Failure) {
    check(mutex)
    while try !predicate() {
      _ = waitReleasing(mutex, before: .distantFuture)
    }
  }

  /// Waits until `predicate` is true or `deadline` (monotonic clock) passes; returns the
  /// predicate's last value (`false`: the deadline passed with it still false).
  @available(*, noasync, message: "blocks the thread")
  public func wait<Failure: Error>(
    _ mutex: Lock, until predicate: () throws(Failure) -> Bool, before deadline: MonotonicInstant
  ) throws(Failure) -> Bool {
    check(mutex)
    while try !predicate() {
      if !waitReleasing(mutex, before: deadline) {
        return try predicate()
      }
    }
    return true
  }

  /// Waits until `predicate` is true or `timeout` has elapsed; see
  /// ``wait(_:until:before:)``.
  @available(*, noasync, message: "blocks the thread")
  public func wait<Failure: Error>(
    _ mutex: Lock, until predicate: () throws(Failure) -> Bool, timeout: Duration
  ) throws(Failure) -> Bool {
    try wait(mutex, until: predicate, before: .after(timeout))
  }

  /// Wakes one waiting thread, if any. Call it holding the mutex, after changing the state
  /// the waiters test. The C function is `pthread_cond_signal`.
  @inlinable
  public func signal() {
    core.signal()
  }

  /// Wakes every waiting thread. The C function is `pthread_cond_broadcast`.
  @inlinable
  public func broadcast() {
    core.broadcast()
  }

  /// One wait of the futex condition, marked as a condition wait on `mutex` while the lock
  /// detectors are on (as a ``Condition``'s wait): the deadlock watchdog lists the thread
  /// with `mutex` released, and ``Diagnostics/Kind/blockingInTask`` watches the wait when
  /// it runs inside a task. Off, one relaxed load on a path about to sleep.
  @inline(__always)
  func waitReleasing(_ mutex: Lock, before deadline: MonotonicInstant) -> Bool {
    if LockDiagnostics.tracksHeldLocks {
      return LockDiagnostics.conditionWait(mutex.identity, before: deadline) {
        core.wait(releasing: mutex.core, before: deadline, typeName: "Lock")
      }
    }
    return core.wait(releasing: mutex.core, before: deadline, typeName: "Lock")
  }

  func check(_ mutex: Lock) {
    if !mutex.isHeldByCurrentThread {
      reportMisuse("ConditionVariable", "wait with a mutex the calling thread does not hold")
    }
    let address = UInt64(UInt(bitPattern: mutex.core.base))
    let bound = UInt64.atomicLoad(at: core.boundLock, ordering: .relaxed)
    if bound == address { return }
    if bound == 0,
      UInt64.atomicCompareAndSwap(expected: 0, desired: address, at: core.boundLock, ordering: .relaxed)
    {
      return
    }
    if UInt64.atomicLoad(at: core.boundLock, ordering: .relaxed) != address {
      reportMisuse(
        "ConditionVariable",
        "wait with a different mutex than earlier waits (a condition variable pairs with one mutex)")
    }
  }
}
