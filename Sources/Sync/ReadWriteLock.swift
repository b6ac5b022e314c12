/// A lock that lets many readers in at once, or one writer alone: the guide's read-write
/// lock (`pthread_rwlock_t`), on a Linux futex.
///
/// **Writers are not starved.** While a writer waits, new readers wait too (the guide's
/// rule), so a steady stream of readers cannot lock a writer out. That also means a thread
/// holding a read lock must not take it again for reading while a writer may be waiting:
/// read locks are not recursive (the second `readLock()` would wait behind the writer, which
/// waits behind the first).
///
/// **Cost.** Uncontended, a read lock is one compare-and-swap and its release one atomic
/// subtraction; the write lock is one compare-and-swap each way. A contended acquisition
/// spins briefly, then sleeps in the kernel.
///
/// **Misuse** stops the process with a message, never undefined behaviour: `unlock()` when no
/// lock is held, taking the write lock (or a read lock) while holding the write lock, and
/// unlocking the write lock from another thread. (A read lock is not tagged with its thread,
/// so one reader releasing on behalf of another is not detected.)
///
/// Timed acquisition uses the monotonic clock. The `Locking` surface (`lock()`,
/// `withLock`...) takes the *write* lock.
///
/// ```swift
/// let lock = ReadWriteLock()
/// var table: [String: Int] = [:]            // protected by `lock`
/// let hits = lock.withReadLock { table["a"] }
/// lock.withWriteLock { table["a", default: 0] += 1 }
/// ```
///
/// The corresponding C functions are `pthread_rwlock_rdlock`, `pthread_rwlock_wrlock`,
/// `pthread_rwlock_clockrdlock`, `pthread_rwlock_clockwrlock`, `pthread_rwlock_tryrdlock`,
/// `pthread_rwlock_trywrlock` and `pthread_rwlock_unlock` with the kind
/// `PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP`; `ReadWriteLock` replaces them with `futex`.
public final class ReadWriteLock: Locking, @unchecked Sendable {
  // @unchecked: all state is in three words accessed only through atomics and the futex.
  //
  // The algorithm is the writer-preferring futex read-write lock of Rust's standard library.
  // `state` holds, in its low 30 bits, the number of readers, or `writeLocked` (all ones)
  // while a writer holds it; bit 30 says readers sleep on `state`; bit 31 says writers
  // sleep on `writerNotify`, a counter bumped before each writer wake-up so a writer about to
  // sleep cannot miss it.
  //
  // | state                          | meaning                                     |
  // |--------------------------------|---------------------------------------------|
  // | 0                              | free                                        |
  // | n (1 ... maxReaders)           | n readers                                   |
  // | writeLocked                    | one writer                                  |
  // | + readersWaiting               | readers asleep on `state`                   |
  // | + writersWaiting               | writers asleep on `writerNotify`; new readers queue |
  //
  // Acquisitions use acquire ordering and releases release ordering on `state`, which is what
  // makes the protected data visible to the next holder (and tells ThreadSanitizer so).
  @usableFromInline
  static let mask: UInt32 = (1 << 30) - 1
  @usableFromInline
  static let writeLocked: UInt32 = mask
  @usableFromInline
  static let maxReaders: UInt32 = mask - 1
  @usableFromInline
  static let readersWaiting: UInt32 = 1 << 30
  @usableFromInline
  static let writersWaiting: UInt32 = 1 << 31

  @usableFromInline
  let state: UnsafeMutablePointer<UInt32>
  @usableFromInline
  let writerNotify: UnsafeMutablePointer<UInt32>
  /// Thread tag of the write holder, 0 when none. Written by the holder only (relaxed); it
  /// serves misuse checks and `unlock()`'s choice between read and write release.
  @usableFromInline
  let writer: UnsafeMutablePointer<UInt64>

  /// Creates an unlocked, writer-preferring read-write lock.
  public init() {
    let block = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64)
    state = block.bindMemory(to: UInt32.self, capacity: 1)
    state.initialize(to: 0)
    writerNotify = (block + 4).bindMemory(to: UInt32.self, capacity: 1)
    writerNotify.initialize(to: 0)
    writer = (block + 8).bindMemory(to: UInt64.self, capacity: 1)
    writer.initialize(to: 0)
  }

  deinit {
    if UInt32.atomicLoad(at: state, ordering: .relaxed) & Self.mask != 0 {
      reportMisuse("ReadWriteLock", "deinitialized while locked")
    }
    UnsafeMutableRawPointer(state).deallocate()
  }

  // MARK: State predicates

  @inlinable
  static func isUnlocked(_ state: UInt32) -> Bool { state & mask == 0 }

  @inlinable
  static func isWriteLocked(_ state: UInt32) -> Bool { state & mask == writeLocked }

  /// Free or read-locked, below the reader limit, and nobody queued (writers first).
  @inlinable
  static func isReadLockable(_ state: UInt32) -> Bool {
    state & mask < maxReaders && state & (readersWaiting | writersWaiting) == 0
  }

  @inlinable
  var writerTag: UInt64 { UInt64.atomicLoad(at: writer, ordering: .relaxed) }

  @usableFromInline
  func refuseIfWriter(_ operation: String) {
    if writerTag == currentThreadTag() {
      reportMisuse("ReadWriteLock", "\(operation) by the thread that holds the write lock (self-deadlock)")
    }
  }

  // MARK: Readers

  /// Takes a shared (read) lock, blocking while a writer holds or waits for the lock.
  /// Stops the process if the calling thread holds the write lock.
  @available(*, noasync, message: "blocks the thread; use withReadLock")
  @inlinable
  public func readLock() {
    if !tryReadLockFast() {
      _ = readLockSlow(before: .distantFuture)
    }
  }

  /// Takes a read lock if possible right now; never blocks. Fails while a writer holds the
  /// lock or waits for it.
  @inlinable
  public func tryReadLock() -> Bool {
    var current = UInt32.atomicLoad(at: state, ordering: .relaxed)
    while Self.isReadLockable(current) {
      let seen = UInt32.atomicCompareExchange(expected: current, desired: current + 1, at: state, ordering: .acquiring)
      if seen == current { return true }
      current = seen
    }
    return false
  }

  /// Takes a read lock, giving up when `deadline` (monotonic clock) passes; returns whether
  /// it was taken. A deadline in the past makes one attempt.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func readLock(before deadline: MonotonicInstant) -> Bool {
    tryReadLockFast() || readLockSlow(before: deadline)
  }

  /// Takes a read lock, waiting at most `timeout` (monotonic clock); returns whether it was
  /// taken. A zero or negative timeout makes one attempt.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func readLock(timeout: Duration) -> Bool {
    tryReadLockFast() || readLockSlow(before: .after(timeout))
  }

  @inlinable
  @inline(__always)
  func tryReadLockFast() -> Bool {
    let current = UInt32.atomicLoad(at: state, ordering: .relaxed)
    return Self.isReadLockable(current)
      && UInt32.atomicCompareAndSwap(expected: current, desired: current + 1, at: state, ordering: .acquiring)
  }

  @usableFromInline
  func readLockSlow(before deadline: MonotonicInstant) -> Bool {
    refuseIfWriter("readLock()")
    var current = spin()
    while true {
      if Self.isReadLockable(current) {
        let seen = UInt32.atomicCompareExchange(
          expected: current, desired: current + 1, at: state, ordering: .acquiring)
        if seen == current { return true }
        current = seen
        continue
      }
      if current & Self.mask == Self.maxReaders {
        reportMisuse("ReadWriteLock", "too many read locks held (\(Self.maxReaders)); are read locks leaking?")
      }
      // Announce a sleeping reader before sleeping, so the releasing side wakes us.
      if current & Self.readersWaiting == 0 {
        let seen = UInt32.atomicCompareExchange(
          expected: current, desired: current | Self.readersWaiting, at: state, ordering: .relaxed)
        if seen != current {
          current = seen
          continue
        }
      }
      if deadline != .distantFuture, deadline.hasPassed { return false }
      if !Futex.wait(state, expected: current | Self.readersWaiting, deadline: deadline) { return false }
      current = spin()
    }
  }

  // MARK: Writers

  /// Takes the exclusive (write) lock, blocking while anyone holds the lock. Stops the process
  /// if the calling thread already holds the write lock.
  @available(*, noasync, message: "blocks the thread; use withWriteLock")
  @inlinable
  public func writeLock() {
    if UInt32.atomicCompareAndSwap(expected: 0, desired: Self.writeLocked, at: state, ordering: .acquiring) {
      UInt64.atomicStore(currentThreadTag(), at: writer, ordering: .relaxed)
    } else {
      _ = writeLockSlow(before: .distantFuture)
    }
  }

  /// Takes the write lock if the lock is free right now; never blocks.
  @inlinable
  public func tryWriteLock() -> Bool {
    var current = UInt32.atomicLoad(at: state, ordering: .relaxed)
    while Self.isUnlocked(current) {
      let seen = UInt32.atomicCompareExchange(
        expected: current, desired: current | Self.writeLocked, at: state, ordering: .acquiring)
      if seen == current {
        UInt64.atomicStore(currentThreadTag(), at: writer, ordering: .relaxed)
        return true
      }
      current = seen
    }
    return false
  }

  /// Takes the write lock, giving up when `deadline` (monotonic clock) passes; returns
  /// whether it was taken. A deadline in the past makes one attempt.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func writeLock(before deadline: MonotonicInstant) -> Bool {
    if UInt32.atomicCompareAndSwap(expected: 0, desired: Self.writeLocked, at: state, ordering: .acquiring) {
      UInt64.atomicStore(currentThreadTag(), at: writer, ordering: .relaxed)
      return true
    }
    return writeLockSlow(before: deadline)
  }

  /// Takes the write lock, waiting at most `timeout` (monotonic clock); returns whether it
  /// was taken. A zero or negative timeout makes one attempt.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func writeLock(timeout: Duration) -> Bool {
    writeLock(before: .after(timeout))
  }

  @usableFromInline
  func writeLockSlow(before deadline: MonotonicInstant) -> Bool {
    refuseIfWriter("writeLock()")
    var current = spin()
    // Once this writer has slept, other writers may be asleep too: keep their bit when
    // taking the lock so the release wakes the next one.
    var otherWritersWaiting: UInt32 = 0
    while true {
      if Self.isUnlocked(current) {
        let seen = UInt32.atomicCompareExchange(
          expected: current, desired: current | Self.writeLocked | otherWritersWaiting, at: state,
          ordering: .acquiring)
        if seen == current {
          UInt64.atomicStore(currentThreadTag(), at: writer, ordering: .relaxed)
          return true
        }
        current = seen
        continue
      }
      if current & Self.writersWaiting == 0 {
        let seen = UInt32.atomicCompareExchange(
          expected: current, desired: current | Self.writersWaiting, at: state, ordering: .relaxed)
        if seen != current {
          current = seen
          continue
        }
      }
      otherWritersWaiting = Self.writersWaiting
      // Read the notification counter before re-checking the state: a release between the
      // two bumps the counter, and the futex then refuses to sleep.
      let sequence = UInt32.atomicLoad(at: writerNotify, ordering: .acquiring)
      current = UInt32.atomicLoad(at: state, ordering: .relaxed)
      if Self.isUnlocked(current) || current & Self.writersWaiting == 0 { continue }
      if deadline != .distantFuture, deadline.hasPassed { return false }
      if !Futex.wait(writerNotify, expected: sequence, deadline: deadline) { return false }
      current = spin()
    }
  }

  // MARK: Releasing

  /// Releases the lock the calling thread holds: the write lock if it holds that, otherwise
  /// one read lock. Stops the process if no lock is held, or if the write lock is held by
  /// another thread.
  @inlinable
  public func unlock() {
    if writerTag == currentThreadTag() {
      UInt64.atomicStore(0, at: writer, ordering: .relaxed)
      let previous = UInt32.atomicFetchAdd(0 &- Self.writeLocked, at: state, ordering: .releasing)
      let now = previous &- Self.writeLocked
      if now & (Self.readersWaiting | Self.writersWaiting) != 0 { wakeWriterOrReaders(now) }
    } else {
      let previous = UInt32.atomicFetchAdd(0 &- 1, at: state, ordering: .releasing)
      if previous & Self.mask == 0 || previous & Self.mask == Self.writeLocked {
        unlockMisuse(previous)
      }
      let now = previous &- 1
      if Self.isUnlocked(now), now & Self.writersWaiting != 0 { wakeWriterOrReaders(now) }
    }
  }

  @usableFromInline
  func unlockMisuse(_ previous: UInt32) -> Never {
    if previous & Self.mask == 0 {
      reportMisuse("ReadWriteLock", "unlock() of a lock that is not locked")
    }
    reportMisuse("ReadWriteLock", "unlock() of the write lock from a thread that does not hold it")
  }

  /// Called with the lock free and someone asleep: wakes one writer if any, else all readers.
  @usableFromInline
  func wakeWriterOrReaders(_ observed: UInt32) {
    var current = observed
    if current == Self.writersWaiting {
      let seen = UInt32.atomicCompareExchange(expected: current, desired: 0, at: state, ordering: .relaxed)
      if seen == current {
        wakeWriter()
        return
      }
      current = seen
    }
    if current == Self.readersWaiting | Self.writersWaiting {
      // Hand over to a writer first; the readers' bit stays for the writer's release.
      let seen = UInt32.atomicCompareExchange(
        expected: current, desired: Self.readersWaiting, at: state, ordering: .relaxed)
      if seen != current { return }  // someone took the lock; its release wakes the rest
      if wakeWriter() { return }
      // No writer was asleep (it timed out or is about to re-check): wake the readers.
      current = Self.readersWaiting
    }
    if current == Self.readersWaiting {
      if UInt32.atomicCompareAndSwap(expected: current, desired: 0, at: state, ordering: .relaxed) {
        Futex.wake(state, count: Int32.max)
      }
    }
  }

  /// Bumps the writers' counter and wakes one; returns whether a writer was asleep.
  @usableFromInline
  @discardableResult
  func wakeWriter() -> Bool {
    _ = UInt32.atomicFetchAdd(1, at: writerNotify, ordering: .releasing)
    return Futex.wake(writerNotify, count: 1) > 0
  }

  /// Spins briefly while the lock is held and nobody sleeps yet; returns the last state seen.
  @usableFromInline
  func spin() -> UInt32 {
    var current = UInt32.atomicLoad(at: state, ordering: .relaxed)
    var round = 0
    while round < 8 && current & Self.mask != 0 && current & (Self.readersWaiting | Self.writersWaiting) == 0 {
      Backoff.pause(round)
      round += 1
      current = UInt32.atomicLoad(at: state, ordering: .relaxed)
    }
    return current
  }

  // MARK: Scoped forms and Locking

  /// Runs `body` holding a read lock; releases it however `body` exits.
  @inlinable
  public func withReadLock<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
    if !tryReadLockFast() { _ = readLockSlow(before: .distantFuture) }
    defer { unlock() }
    return try body()
  }

  /// Runs `body` holding the write lock; releases it however `body` exits.
  @inlinable
  public func withWriteLock<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
    if UInt32.atomicCompareAndSwap(expected: 0, desired: Self.writeLocked, at: state, ordering: .acquiring) {
      UInt64.atomicStore(currentThreadTag(), at: writer, ordering: .relaxed)
    } else {
      _ = writeLockSlow(before: .distantFuture)
    }
    defer { unlock() }
    return try body()
  }

  /// `Locking` conformance: takes the write lock.
  @available(*, noasync, message: "blocks the thread; use withWriteLock")
  @inlinable
  public func lock() { writeLock() }

  /// `Locking` conformance: tries the write lock.
  @inlinable
  public func tryLock() -> Bool { tryWriteLock() }

  /// `Locking` conformance: takes the write lock before `deadline`.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func lock(before deadline: MonotonicInstant) -> Bool { writeLock(before: deadline) }

  /// Whether the calling thread holds the write lock.
  @inlinable
  public var isWriteLockedByCurrentThread: Bool {
    writerTag == currentThreadTag()
  }
}
