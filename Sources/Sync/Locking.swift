/// The surface every lock in the toolkit shares, so generic code and the scoped helpers work
/// with any of them: ``Lock``, ``RecursiveLock``, ``ReadWriteLock`` (exclusive side) and
/// ``SpinLock``; later, conditions and condition locks.
///
/// Prefer the scoped forms, ``withLock(_:)`` and ``withLockIfAvailable(_:)``: the lock is
/// released however the body exits, including by throwing. Manual `lock()`/`unlock()` is
/// there for lock hand-over patterns the scoped forms cannot express.
///
/// ```swift
/// func transfer(_ amount: Int, using lock: some Locking) {
///     lock.withLock { balance -= amount }
/// }
/// ```
public protocol Locking: AnyObject, Sendable {
  /// Acquires the lock, blocking the calling thread until it is available.
  @available(*, noasync, message: "blocks the thread; use withLock for a short critical section")
  func lock()

  /// Releases the lock. The calling thread must hold it.
  func unlock()

  /// Acquires the lock if it is free right now; never blocks. Returns whether it did.
  func tryLock() -> Bool

  /// Acquires the lock, blocking until it is available or `deadline` (monotonic clock)
  /// passes. Returns whether it was acquired; a deadline in the past makes one attempt.
  @available(*, noasync, message: "blocks the thread")
  func lock(before deadline: MonotonicInstant) -> Bool
}

extension Locking {
  /// Acquires the lock, blocking at most `timeout` (monotonic clock). Returns whether it was
  /// acquired; a zero or negative timeout makes one attempt.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func lock(timeout: Duration) -> Bool {
    lock(before: .after(timeout))
  }

  /// Runs `body` holding the lock and returns its result. The lock is released when `body`
  /// returns or throws; the error type flows through (typed throws).
  ///
  /// Blocks until the lock is available. `body` must not release the lock itself: the
  /// scope's release is then reported as each lock's `unlock()` documents for an unlock by
  /// a thread that does not hold it (``Lock`` checks that only in checked mode). A
  /// ``ReadWriteLock``, whose readers are not tracked, is always checked before the release,
  /// so another thread's read lock is never dropped.
  @inlinable
  public func withLock<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
    lockForScope()
    defer { unlockForScope() }
    return try body()
  }

  /// Runs `body` holding the lock if it is free right now, and returns its result; returns
  /// nil without running `body` if the lock is busy. Never blocks.
  @inlinable
  public func withLockIfAvailable<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure)
    -> Result?
  {
    guard tryLock() else { return nil }
    defer { unlockForScope() }
    return try body()
  }

  /// Runs `body` holding the lock if it can be acquired before `deadline` (monotonic clock);
  /// returns nil without running `body` otherwise.
  @inlinable
  public func withLock<Result, Failure: Error>(
    before deadline: MonotonicInstant, _ body: () throws(Failure) -> Result
  ) throws(Failure) -> Result? {
    guard lockForScope(before: deadline) else { return nil }
    defer { unlockForScope() }
    return try body()
  }

  /// Runs `body` holding the lock if it can be acquired within `timeout` (monotonic clock);
  /// returns nil without running `body` otherwise. A zero or negative timeout makes one
  /// attempt.
  @inlinable
  public func withLock<Result, Failure: Error>(
    timeout: Duration, _ body: () throws(Failure) -> Result
  ) throws(Failure) -> Result? {
    try withLock(before: .after(timeout), body)
  }

  // `lock()` is noasync for direct calls; the scoped helpers may run in async code because
  // they hold the lock only for a synchronous body.
  @usableFromInline
  func lockForScope() {
    lock()
  }

  @usableFromInline
  func lockForScope(before deadline: MonotonicInstant) -> Bool {
    lock(before: deadline)
  }

  // Every lock but `ReadWriteLock` knows its holder, so a body that released the lock itself
  // is reported by the scope's `unlock()` as that lock documents (`Lock` in checked mode). A
  // read-write lock does not tag its readers: after such a body, the scope's release could
  // drop another thread's read lock.
  // The scope knows it took the write side, so it checks the writer before releasing. For a
  // concrete lock type the cast folds away when the generic code is specialized.
  @usableFromInline
  func unlockForScope() {
    if let readWriteLock = self as? ReadWriteLock {
      readWriteLock.releaseWriteScope()
    } else {
      unlock()
    }
  }
}
