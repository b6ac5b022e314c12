/// A value that only one thread at a time may touch, with its lock beside it: the toolkit's
/// `Synchronization.Mutex<Value>` (and SwiftNIO's `NIOLockedValueBox`).
///
/// The state you protect lives in the same heap block as the lock word, on the same cache
/// line when the value is small (up to 40 bytes), so handing the lock to another core moves
/// one cache line instead of two. Under contention between cores that is the larger part of
/// the cost: measured in `cost-tables` (`mutex.contended-*`), a counter in a `LockedValue`
/// is about twice as fast as the same counter beside a separate ``Mutex``.
///
/// The lock is the same futex lock as ``Mutex`` (inlined uncontended path, bounded spinning,
/// then sleeping in the kernel; not fair), always scoped: the value is reachable only inside
/// ``withLock(_:)`` and ``withLockIfAvailable(_:)``, so it can be neither touched unlocked
/// nor left locked.
///
/// **Misuse** stops the process with a message: calling `withLock` again on the thread that
/// is inside it (a certain self-deadlock), or releasing the last reference while locked.
///
/// ```swift
/// let hits = LockedValue([String: Int]())
/// hits.withLock { $0["index.html", default: 0] += 1 }
/// let snapshot = hits.withLock { $0 }
///
/// // A non-blocking attempt: nil when another thread holds it.
/// if let count = hits.withLockIfAvailable({ $0.count }) { print(count) }
/// ```
///
/// `Sendable` whatever `Value` is: values go in and out only as `sending` (disconnected)
/// values, as with `Synchronization.Mutex`.
public final class LockedValue<Value>: @unchecked Sendable {
  // @unchecked: `value` is touched only by the thread holding `core`; values cross
  // threads only as `sending` values.
  @usableFromInline
  let core: FutexLock
  /// Inside the heap block that starts with `core`'s words.
  @usableFromInline
  let value: UnsafeMutablePointer<Value>

  /// Creates the lock, unlocked, protecting `initialValue`.
  public init(_ initialValue: consuming sending Value) {
    let alignment = max(8, MemoryLayout<Value>.alignment)
    let offset = (FutexLock.wordsSize + alignment - 1) / alignment * alignment
    let block = UnsafeMutableRawPointer.allocate(
      byteCount: max(64, offset + MemoryLayout<Value>.size), alignment: max(64, alignment))
    core = FutexLock(wordsAt: block)
    value = (block + offset).bindMemory(to: Value.self, capacity: 1)
    value.initialize(to: initialValue)
  }

  deinit {
    core.checkNotHeld(typeName: "LockedValue")
    value.deinitialize(count: 1)
    UnsafeMutableRawPointer(core.state).deallocate()  // the block starts with the lock words
  }

  /// Runs `body` with exclusive access to the value and returns its result; the lock is
  /// released however `body` exits. Blocks while another thread holds the lock.
  ///
  /// Stops the process if the calling thread is already inside `withLock` or
  /// `withLockIfAvailable` on this lock.
  @inlinable
  public func withLock<Result, Failure: Error>(
    _ body: (inout sending Value) throws(Failure) -> sending Result
  ) throws(Failure) -> sending Result {
    _ = core.acquire(before: .distantFuture, spins: Mutex.spinsBeforeSleeping, typeName: "LockedValue")
    defer { core.release(checkOwner: false, typeName: "LockedValue") }
    return try body(&value.pointee)
  }

  /// Runs `body` with exclusive access to the value if the lock is free right now, and
  /// returns its result; returns nil at once, without running `body`, when another thread
  /// (or the calling thread) holds it. Never blocks.
  @inlinable
  public func withLockIfAvailable<Result, Failure: Error>(
    _ body: (inout sending Value) throws(Failure) -> sending Result
  ) throws(Failure) -> sending Result? {
    guard core.tryAcquire() else { return nil }
    defer { core.release(checkOwner: false, typeName: "LockedValue") }
    return try body(&value.pointee)
  }
}
