/// A lock the holding thread may acquire again: the guide's `NSRecursiveLock` and
/// `PTHREAD_MUTEX_RECURSIVE`.
///
/// Each `lock()` (or successful `tryLock()`/`lock(before:)`) by the holder adds one level;
/// each `unlock()` removes one; the lock is free again when the levels reach zero. Useful
/// for recursive functions that take the lock on every call. Unlocking more often than
/// locking, or unlocking from a thread that does not hold it, always stops the process with
/// a message (the owner check is needed for recursion anyway, so it is never off).
///
/// **Fairness:** the same bounded wait as ``Lock``: once a waiter has slept about 1 ms, the
/// final `unlock()` hands the lock to a starving waiter instead of letting others barge in.
/// Re-acquiring by the holder is never delayed by it.
///
/// ```swift
/// let lock = RecursiveLock()
/// func countDown(_ value: Int) {
///     lock.withLock {
///         if value > 0 { countDown(value - 1) }   // re-acquires without deadlock
///     }
/// }
/// countDown(5)
/// ```
public final class RecursiveLock: Locking, @unchecked Sendable {
  // @unchecked: the lock word is atomic; `depth` is touched only by the holder.

  /// The lock's words, inside the object (one allocation per lock); first, so `core` finds
  /// them (see ``FutexLock/init(inside:)``). Never read or written through the property.
  private var words = FutexLock.Words()

  /// The futex lock on `words`.
  @inlinable
  var core: FutexLock { FutexLock(inside: self) }

  /// Who the lock is to the lock detectors and contention statistics of ``Diagnostics``
  /// (after `words`, which must stay the first stored property).
  @usableFromInline
  let identity: LockIdentity

  /// What diagnostics reports call the lock: the `name` given at creation, else its
  /// creation site.
  public var name: String { identity.label }

  /// Creates an unlocked recursive lock. `name` is what diagnostics reports call it; without
  /// one they use the creation site, `fileID:line`, which the defaults capture.
  public init(name: String? = nil, fileID: StaticString = #fileID, line: UInt = #line) {
    identity = LockIdentity(name: name, fileID: fileID, line: line)
    // The layout `core` relies on (checked in debug builds).
    assert(withUnsafeMutablePointer(to: &words) { UnsafeMutableRawPointer($0) } == core.base)
  }

  deinit {
    core.checkNotHeld(typeName: "RecursiveLock")
    LockDiagnostics.lockWillBeDestroyed(identity)
  }

  /// Acquires the lock, or adds a level if the calling thread already holds it. Blocks
  /// while another thread holds it.
  @available(*, noasync, message: "blocks the thread; use withLock for a short critical section")
  @inlinable
  public func lock() {
    // The outermost acquisition of a free lock first, the common case: one compare-and-swap,
    // which fails on a lock this thread holds (its word is not 0), so no re-entry is missed.
    // Only the outermost acquisition and the last release reach the diagnostics hooks: a
    // re-entry is not an order.
    let hooked = LockDiagnostics.acquisitionHooksRun
    if !hooked, core.tryAcquire() {
      core.depth.pointee = 1
      return
    }
    if core.isHeldByCurrentThread {
      core.depth.pointee += 1
      return
    }
    if hooked {
      _ = acquireHooked(before: .distantFuture)
    } else {
      _ = core.acquireSlow(
        before: .distantFuture, spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "RecursiveLock")
    }
    core.depth.pointee = 1
  }

  /// Acquires the lock or adds a level, blocking until `deadline` (monotonic clock);
  /// returns whether it succeeded.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func lock(before deadline: MonotonicInstant) -> Bool {
    if core.isHeldByCurrentThread {
      core.depth.pointee += 1
      return true
    }
    let acquired =
      LockDiagnostics.acquisitionHooksRun
      ? acquireHooked(before: deadline)
      : core.acquire(before: deadline, spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "RecursiveLock")
    guard acquired else { return false }
    core.depth.pointee = 1
    return true
  }

  /// Acquires the lock or adds a level if that is possible right now; never blocks.
  @inlinable
  public func tryLock() -> Bool {
    if core.isHeldByCurrentThread {
      core.depth.pointee += 1
      return true
    }
    guard LockDiagnostics.tryAcquisitionHooksRun ? tryAcquireHooked() : core.tryAcquireFree() else {
      return false
    }
    core.depth.pointee = 1
    return true
  }

  /// Removes one level; releases the lock when none remain. Stops the process if the
  /// calling thread does not hold it (including unlocking more often than locking).
  @inlinable
  public func unlock() {
    guard core.isHeldByCurrentThread else {
      if UInt64.atomicLoad(at: core.word, ordering: .relaxed) & FutexLock.lockBits == 0 {
        reportMisuse("RecursiveLock", "unlock() of a lock that is not locked (more unlocks than locks?)")
      }
      reportMisuse("RecursiveLock", "unlock() from a thread that does not hold the lock")
    }
    let remaining = core.depth.pointee - 1
    core.depth.pointee = remaining
    if remaining == 0 {
      if LockDiagnostics.releaseHooksRun {
        releaseHooked()
      } else {
        core.release(checkOwner: false, typeName: "RecursiveLock")
      }
    }
  }

  // The outlined hooked operations of the outermost acquisition and the last release (see
  // `LockDiagnostics.hooksMayRun`): methods of the lock, so the inlined call site passes
  // `self` only.

  @usableFromInline
  @inline(never)
  func acquireHooked(before deadline: MonotonicInstant) -> Bool {
    core.acquireHooked(identity, before: deadline, spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "RecursiveLock")
  }

  @usableFromInline
  @inline(never)
  func tryAcquireHooked() -> Bool {
    core.tryAcquireHooked(identity)
  }

  @usableFromInline
  @inline(never)
  func releaseHooked() {
    core.releaseHooked(identity, checkOwner: false, typeName: "RecursiveLock")
  }

  /// How many levels the calling thread holds (0 when it does not hold the lock).
  public var levelsHeldByCurrentThread: Int {
    core.isHeldByCurrentThread ? core.depth.pointee : 0
  }

  /// Whether the calling thread holds the lock.
  @inlinable
  public var isHeldByCurrentThread: Bool {
    core.isHeldByCurrentThread
  }
}

/// The former name of ``RecursiveLock``.
@available(*, deprecated, renamed: "RecursiveLock")
public typealias RecursiveMutex = RecursiveLock
