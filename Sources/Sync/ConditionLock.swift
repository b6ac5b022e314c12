/// A lock that carries an integer condition: the guide's `NSConditionLock`.
///
/// Any thread may take the lock with ``lock()`` regardless of the condition, or wait until
/// the condition has a particular value with ``lock(whenCondition:)``; it releases with
/// ``unlock()`` (condition unchanged) or ``unlock(withCondition:)`` (sets the condition and
/// wakes the threads waiting for a value). The forms mix freely: a thread that took the lock
/// with `lock()` may release it with `unlock(withCondition:)`, and the other way round. The
/// producer/consumer pattern of the guide:
///
/// ```swift
/// let noData = 0, hasData = 1
/// let queueLock = ConditionLock(condition: noData)
///
/// // producer
/// queueLock.lock()
/// queue.append(item)
/// queueLock.unlock(withCondition: hasData)
///
/// // consumer
/// queueLock.lock(whenCondition: hasData)
/// let item = queue.removeFirst()
/// queueLock.unlock(withCondition: queue.isEmpty ? noData : hasData)
/// ```
///
/// Deadline forms (``lock(before:)``, ``lock(whenCondition:before:)``) give up when the
/// deadline passes on the monotonic clock; a passed deadline makes one attempt and never
/// blocks. ``tryLock()`` and ``tryLock(whenCondition:)`` never block.
///
/// **Misuse** stops the process with a message: unlocking a lock the calling thread does
/// not hold, taking it again on the thread that holds it (self-deadlock), and deinitializing
/// it while locked.
///
/// **Diagnostics.** A condition lock is a diagnosed lock, like ``Condition``: the lock
/// detectors and contention statistics of ``Diagnostics`` watch it while they are on.
///
/// Built on a futex lock and a futex sequence word; the guide's Cocoa class is implemented
/// with `pthread_mutex_t` and `pthread_cond_t`.
public final class ConditionLock: Locking, @unchecked Sendable {
  // @unchecked: the lock word and the wait words are atomics; `value` is written only by
  // the holder, with atomic stores so that `condition` may be read by anyone.
  @usableFromInline
  let lockCore: FutexLock
  @usableFromInline
  let waitCore: FutexCondition
  @usableFromInline
  let value: UnsafeMutablePointer<UInt64>
  /// Who the lock is to the lock detectors and contention statistics of ``Diagnostics``.
  let identity: LockIdentity

  /// Creates an unlocked condition lock whose condition is `condition`. `name` is what
  /// diagnostics reports call it (see ``Diagnostics``); without one they use the creation
  /// site, `fileID:line`, which the defaults capture.
  public init(condition: Int = 0, name: String? = nil, fileID: StaticString = #fileID, line: UInt = #line) {
    lockCore = FutexLock()
    waitCore = FutexCondition()
    value = .allocate(capacity: 1)
    value.initialize(to: UInt64(bitPattern: Int64(condition)))
    identity = LockIdentity(name: name, fileID: fileID, line: line)
  }

  deinit {
    lockCore.deallocate(typeName: "ConditionLock")
    waitCore.deallocate()
    value.deallocate()
    LockDiagnostics.lockWillBeDestroyed(identity)
  }

  /// What diagnostics reports call the lock: the `name` given at creation, else its
  /// creation site (`"Module/File.swift:12"`).
  public var name: String { identity.label }

  /// Acquires the lock core, through the diagnostics hooks when they are on.
  @inline(__always)
  private func acquire(before deadline: MonotonicInstant) -> Bool {
    if LockDiagnostics.diagnosesAcquisition {
      return lockCore.acquireDiagnosed(
        identity, before: deadline, spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "ConditionLock")
    }
    return lockCore.acquire(before: deadline, spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "ConditionLock")
  }

  /// One non-blocking attempt, through the diagnostics hooks when they are on.
  @inline(__always)
  private func attempt() -> Bool {
    LockDiagnostics.tracksHeldLocks ? lockCore.tryAcquireDiagnosed(identity) : lockCore.tryAcquireFree()
  }

  /// Releases the lock core, through the diagnostics hooks when they are on.
  @inline(__always)
  private func release(checkOwner: Bool) {
    if LockDiagnostics.diagnosesRelease {
      lockCore.releaseDiagnosed(identity, checkOwner: checkOwner, typeName: "ConditionLock")
    } else {
      lockCore.release(checkOwner: checkOwner, typeName: "ConditionLock")
    }
  }

  /// One wait of the futex condition (marked as a condition wait for the deadlock watchdog
  /// while the lock detectors are on).
  @inline(__always)
  private func waitReleasingLock(before deadline: MonotonicInstant) -> Bool {
    if LockDiagnostics.tracksHeldLocks {
      return LockDiagnostics.conditionWait(identity, before: deadline) {
        waitCore.wait(releasing: lockCore, before: deadline, typeName: "ConditionLock")
      }
    }
    return waitCore.wait(releasing: lockCore, before: deadline, typeName: "ConditionLock")
  }

  /// The current condition. Exact while the calling thread holds the lock; otherwise a
  /// snapshot that may change at once.
  public var condition: Int {
    Int(Int64(bitPattern: UInt64.atomicLoad(at: value, ordering: .acquiring)))
  }

  /// Acquires the lock whatever the condition, blocking while another thread holds it.
  @available(*, noasync, message: "blocks the thread; use withLock for a short critical section")
  public func lock() {
    _ = acquire(before: .distantFuture)
  }

  /// Acquires the lock whatever the condition, giving up when `deadline` (monotonic clock)
  /// passes; returns whether it was acquired. The guide's `lock(before:)`.
  @available(*, noasync, message: "blocks the thread")
  public func lock(before deadline: MonotonicInstant) -> Bool {
    acquire(before: deadline)
  }

  /// Acquires the lock if it is free right now, whatever the condition; never blocks.
  public func tryLock() -> Bool {
    attempt()
  }

  /// Acquires the lock once the condition equals `condition`, blocking until then.
  @available(*, noasync, message: "blocks the thread")
  public func lock(whenCondition condition: Int) {
    _ = lock(whenCondition: condition, before: .distantFuture)
  }

  /// Acquires the lock once the condition equals `condition`, giving up when `deadline`
  /// (monotonic clock) passes. Returns whether it holds the lock (with the condition equal
  /// to `condition`); on `false` the lock is not held. A passed deadline makes one attempt.
  @available(*, noasync, message: "blocks the thread")
  public func lock(whenCondition condition: Int, before deadline: MonotonicInstant) -> Bool {
    guard acquire(before: deadline) else {
      return false
    }
    while self.condition != condition {
      if !waitReleasingLock(before: deadline), self.condition != condition {
        release(checkOwner: false)
        return false
      }
    }
    return true
  }

  /// Acquires the lock once the condition equals `condition`, waiting at most `timeout`
  /// (monotonic clock); see ``lock(whenCondition:before:)``.
  @available(*, noasync, message: "blocks the thread")
  public func lock(whenCondition condition: Int, timeout: Duration) -> Bool {
    lock(whenCondition: condition, before: .after(timeout))
  }

  /// Acquires the lock if it is free right now and the condition equals `condition`; never
  /// blocks. Returns whether it did.
  public func tryLock(whenCondition condition: Int) -> Bool {
    guard attempt() else { return false }
    if self.condition == condition { return true }
    release(checkOwner: false)
    return false
  }

  /// Releases the lock, leaving the condition unchanged. Stops the process if the calling
  /// thread does not hold it.
  public func unlock() {
    release(checkOwner: true)
  }

  /// Sets the condition to `condition`, releases the lock, and wakes the threads waiting
  /// in ``lock(whenCondition:)`` so they can re-test it. Stops the process if the calling
  /// thread does not hold the lock.
  public func unlock(withCondition condition: Int) {
    if !lockCore.isHeldByCurrentThread {
      lockCore.releaseMisuse(typeName: "ConditionLock")
    }
    UInt64.atomicStore(UInt64(bitPattern: Int64(condition)), at: value, ordering: .releasing)
    // Broadcast, not signal: waiters wait for different values, and the one woken by a
    // signal might not be the one whose value was set. Waking under the lock keeps a waiter
    // from missing the change between its test and its sleep.
    waitCore.broadcast()
    release(checkOwner: false)
  }

  /// Whether the calling thread holds the lock; meant for assertions.
  public var isHeldByCurrentThread: Bool {
    lockCore.isHeldByCurrentThread
  }
}
