#if canImport(Glibc)
  import Glibc
#endif

/// A lock that waits by polling: for critical sections of a few instructions only (the
/// guide's spin lock).
///
/// A waiting thread first spins with exponential `pause` backoff, then yields the processor
/// a bounded number of times, and finally sleeps on a futex like ``Lock``. It never
/// busy-waits without bound, so a preempted holder cannot make waiters burn a core.
///
/// **Fairness: a bounded wait.** Spinning alone is unfair: the thread that just released
/// (its cache hot) usually wins the next round. A waiter spins and yields a bounded number
/// of times, then sleeps; once it has slept about 1 ms it counts as starving, and from then
/// on every `unlock()` hands the lock directly to a starving waiter, and spinners stop
/// polling at once (the word cannot become free), until no waiter starves (``Lock``'s
/// rule). So the longest wait is the spin-and-yield phase, about 1 ms, and the critical
/// sections of the starving waiters ahead. The cost: while someone starves, each hand-over
/// is one wake-up and the spinners sleep.
///
/// **When not to use it:** when the critical section may block, allocate, take another lock
/// or run longer than roughly a microsecond; when threads outnumber cores (the holder may
/// be descheduled while others spin); when in doubt. ``Lock`` is nearly as fast
/// uncontended and far better behaved under contention on this kind of machine.
///
/// `unlock()` of an unlocked spin lock and re-locking on the holding thread always stop the
/// process with a message; unlocking from another thread does in checked mode (as
/// ``Lock``; see ``MisuseChecking``).
public final class SpinLock: Locking, @unchecked Sendable {
  // @unchecked: all state is in `core`, accessed through atomics and the futex.

  /// The lock's words, inside the object (one allocation per lock); first, so `core` finds
  /// them (see ``FutexLock/init(inside:)``). Never read or written through the property.
  private var words = FutexLock.Words()

  /// The futex lock on `words`.
  @inlinable
  var core: FutexLock { FutexLock(inside: self) }

  /// Whether `unlock()` verifies the calling thread holds the lock.
  public let isChecked: Bool

  /// Spin rounds (exponential pause bursts) before yielding, then yields before sleeping.
  @usableFromInline
  static let spinRounds = 12
  @usableFromInline
  static let yieldRounds = 8

  /// Who the lock is to the lock detectors and contention statistics of ``Diagnostics``
  /// (after `words`, which must stay the first stored property).
  @usableFromInline
  let identity: LockIdentity

  /// Creates an unlocked spin lock; `checked` turns on the owner check in `unlock()`. By
  /// default it follows the process's ``MisuseChecking/mode``. `name` is what diagnostics
  /// reports call it (lock-order cycles, deadlocks, contention statistics; see
  /// ``Diagnostics``); without one they use the creation site, `fileID:line`, which the
  /// defaults capture.
  public init(
    checked: Bool = MisuseChecking.isChecked, name: String? = nil, fileID: StaticString = #fileID, line: UInt = #line
  ) {
    isChecked = checked
    identity = LockIdentity(name: name, fileID: fileID, line: line)
    // The layout `core` relies on (checked in debug builds).
    assert(withUnsafeMutablePointer(to: &words) { UnsafeMutableRawPointer($0) } == core.base)
  }

  deinit {
    core.checkNotHeld(typeName: "SpinLock")
    LockDiagnostics.lockWillBeDestroyed(identity)
  }

  /// What diagnostics reports call the lock: the `name` given at creation, else its
  /// creation site (`"Module/File.swift:12"`).
  public var name: String { identity.label }

  /// Acquires the lock, spinning briefly, then yielding, then sleeping until it is free.
  @available(*, noasync, message: "blocks the thread; use withLock for a short critical section")
  @inlinable
  public func lock() {
    // Diagnostics off: one relaxed load, a test and a not-taken branch before the fast path.
    if LockDiagnostics.acquisitionHooksRun {
      _ = lockHooked(before: .distantFuture)
      return
    }
    if core.tryAcquire() { return }
    _ = lockSlow(before: .distantFuture)
  }

  /// Acquires the lock, giving up when `deadline` (monotonic clock) passes.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func lock(before deadline: MonotonicInstant) -> Bool {
    if LockDiagnostics.acquisitionHooksRun { return lockHooked(before: deadline) }
    if core.tryAcquire() { return true }
    return lockSlow(before: deadline)
  }

  // The outlined hooked operations (see `LockDiagnostics.hooksMayRun`): methods of the lock,
  // so the inlined call site passes `self` only.

  @usableFromInline
  @inline(never)
  func lockHooked(before deadline: MonotonicInstant) -> Bool {
    guard LockDiagnostics.diagnosesAcquisition else {
      if core.tryAcquire() { return true }
      return lockSlow(before: deadline)
    }
    return LockDiagnostics.acquire(
      identity, before: deadline, holder: { core.ownerTag }, tryAcquire: { core.tryAcquire() },
      acquire: { lockSlow(before: deadline) })
  }

  @usableFromInline
  @inline(never)
  func tryLockHooked() -> Bool {
    core.tryAcquireHooked(identity)
  }

  @usableFromInline
  @inline(never)
  func unlockHooked() {
    core.releaseHooked(identity, checkOwner: isChecked, typeName: "SpinLock")
  }

  @usableFromInline
  func lockSlow(before deadline: MonotonicInstant) -> Bool {
    for _ in 0..<SpinLock.yieldRounds {
      // Spin phase, inside acquire: bounded exponential pauses.
      if core.tryAcquire() { return true }
      if core.isHeldByCurrentThread {
        reportMisuse("SpinLock", "lock() by the thread that already holds it (self-deadlock)")
      }
      for round in 0..<SpinLock.spinRounds {
        if UInt32.atomicLoad(at: core.state, ordering: .relaxed) == 0, core.tryAcquire() { return true }
        Backoff.pause(round)
      }
      if deadline.hasPassed { return false }
      sched_yield()
    }
    return core.acquire(before: deadline, spins: 0, typeName: "SpinLock")
  }

  /// Releases the lock (see the type's doc for misuse).
  @inlinable
  public func unlock() {
    if LockDiagnostics.releaseHooksRun { return unlockHooked() }
    core.release(checkOwner: isChecked, typeName: "SpinLock")
  }

  /// Acquires the lock if it is free right now; never blocks.
  @inlinable
  public func tryLock() -> Bool {
    if LockDiagnostics.tryAcquisitionHooksRun { return tryLockHooked() }
    return core.tryAcquireFree()
  }
}
