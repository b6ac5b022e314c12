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

  /// Creates an unlocked condition lock whose condition is `condition`.
  public init(condition: Int = 0) {
    lockCore = FutexLock()
    waitCore = FutexCondition()
    value = .allocate(capacity: 1)
    value.initialize(to: UInt64(bitPattern: Int64(condition)))
  }

  deinit {
    lockCore.deallocate(typeName: "ConditionLock")
    waitCore.deallocate()
    value.deallocate()
  }

  /// The current condition. Exact while the calling thread holds the lock; otherwise a
  /// snapshot that may change at once.
  public var condition: Int {
    Int(Int64(bitPattern: UInt64.atomicLoad(at: value, ordering: .acquiring)))
  }

  /// Acquires the lock whatever the condition, blocking while another thread holds it.
  @available(*, noasync, message: "blocks the thread; use withLock for a short critical section")
  public func lock() {
    _ = lockCore.acquire(before: .distantFuture, spins: Lock.spinsBeforeSleeping, typeName: "ConditionLock")
  }

  /// Acquires the lock whatever the condition, giving up when `deadline` (monotonic clock)
  /// passes; returns whether it was acquired. The guide's `lock(before:)`.
  @available(*, noasync, message: "blocks the thread")
  public func lock(before deadline: MonotonicInstant) -> Bool {
    lockCore.acquire(before: deadline, spins: Lock.spinsBeforeSleeping, typeName: "ConditionLock")
  }

  /// Acquires the lock if it is free right now, whatever the condition; never blocks.
  public func tryLock() -> Bool {
    lockCore.tryAcquire()
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
    guard lockCore.acquire(before: deadline, spins: Lock.spinsBeforeSleeping, typeName: "ConditionLock") else {
      return false
    }
    while self.condition != condition {
      if !waitCore.wait(releasing: lockCore, before: deadline, typeName: "ConditionLock"),
        self.condition != condition
      {
        lockCore.release(checkOwner: false, typeName: "ConditionLock")
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
    guard lockCore.tryAcquire() else { return false }
    if self.condition == condition { return true }
    lockCore.release(checkOwner: false, typeName: "ConditionLock")
    return false
  }

  /// Releases the lock, leaving the condition unchanged. Stops the process if the calling
  /// thread does not hold it.
  public func unlock() {
    lockCore.release(checkOwner: true, typeName: "ConditionLock")
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
    lockCore.release(checkOwner: false, typeName: "ConditionLock")
  }

  /// Whether the calling thread holds the lock; meant for assertions.
  public var isHeldByCurrentThread: Bool {
    lockCore.isHeldByCurrentThread
  }
}
