import CThreadingShims

#if canImport(Glibc)
  import Glibc
#endif

/// A lock that lets many readers in at once, or one writer alone: the guide's read-write
/// lock (`pthread_rwlock_t`).
///
/// **Writers are not starved.** While a writer waits, new readers wait too (the guide's
/// rule), so a steady stream of readers cannot lock a writer out. That also means a thread
/// holding a read lock must not take it again for reading while a writer may be waiting:
/// read locks are not recursive.
///
/// **Misuse** stops the process with a message, never undefined behaviour: `unlock()` when no
/// lock is held, taking the write lock (or a read lock) while holding the write lock, and
/// unlocking the write lock from another thread. (A read lock is not tagged with its
/// thread, so one reader releasing on behalf of another is not detected.)
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
/// `pthread_rwlock_trywrlock` and `pthread_rwlock_unlock`, on a lock of kind
/// `PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP`.
public final class ReadWriteLock: Locking, @unchecked Sendable {
  // @unchecked: the pthread lock synchronizes itself; `writer` and `readers` are atomics.
  private let rwlock: UnsafeMutablePointer<pthread_rwlock_t>
  /// Thread tag of the write holder, 0 when none.
  private let writer = AtomicInteger<UInt64>(0)
  /// Number of read locks held.
  private let readers = AtomicInteger<Int>(0)

  /// Creates an unlocked, writer-preferring read-write lock.
  ///
  /// glibc's `pthread_rwlock_init` cannot fail for these attributes; if it ever reports an
  /// error the process stops with its errno rather than continue with no lock.
  public init() {
    rwlock = .allocate(capacity: 1)
    Self.check(tk_rwlock_init_prefer_writer(rwlock), "pthread_rwlock_init")
  }

  deinit {
    if writer.load(ordering: .relaxed) != 0 || readers.load(ordering: .relaxed) != 0 {
      reportMisuse("ReadWriteLock", "deinitialized while locked")
    }
    Self.check(pthread_rwlock_destroy(rwlock), "pthread_rwlock_destroy")
    rwlock.deallocate()
  }

  private static func check(_ result: Int32, _ call: String) {
    if result != 0 {
      fatalError("ReadWriteLock: \(SystemCallError(call: call, errno: result))")
    }
  }

  private func refuseIfWriter(_ operation: String) {
    if writer.load(ordering: .relaxed) == currentThreadTag() {
      reportMisuse("ReadWriteLock", "\(operation) by the thread that holds the write lock (self-deadlock)")
    }
  }

  /// Handles the result of an acquisition attempt; returns whether the lock was taken.
  private func acquired(_ result: Int32, _ call: String, exclusive: Bool) -> Bool {
    switch result {
    case 0:
      if exclusive {
        writer.store(currentThreadTag(), ordering: .relaxed)
      } else {
        readers.fetchAdd(1, ordering: .relaxed)
      }
      return true
    case EBUSY, ETIMEDOUT:
      return false
    case EDEADLK:
      reportMisuse("ReadWriteLock", "\(call) by the thread that holds the write lock (self-deadlock)")
    case EAGAIN:
      // The maximum number of read locks (about 2^31) is exceeded: a leak of read locks.
      reportMisuse("ReadWriteLock", "too many read locks held (\(call) returned EAGAIN); are read locks leaking?")
    default:
      fatalError("ReadWriteLock: \(SystemCallError(call: call, errno: result))")
    }
  }

  /// Takes a shared (read) lock, blocking while a writer holds or waits for the lock.
  @available(*, noasync, message: "blocks the thread; use withReadLock")
  public func readLock() {
    refuseIfWriter("readLock()")
    _ = acquired(pthread_rwlock_rdlock(rwlock), "pthread_rwlock_rdlock", exclusive: false)
  }

  /// Takes the exclusive (write) lock, blocking while anyone holds the lock.
  @available(*, noasync, message: "blocks the thread; use withWriteLock")
  public func writeLock() {
    refuseIfWriter("writeLock()")
    _ = acquired(pthread_rwlock_wrlock(rwlock), "pthread_rwlock_wrlock", exclusive: true)
  }

  /// Takes a read lock if possible right now; never blocks.
  public func tryReadLock() -> Bool {
    if writer.load(ordering: .relaxed) == currentThreadTag() { return false }
    return acquired(pthread_rwlock_tryrdlock(rwlock), "pthread_rwlock_tryrdlock", exclusive: false)
  }

  /// Takes the write lock if possible right now; never blocks.
  public func tryWriteLock() -> Bool {
    if writer.load(ordering: .relaxed) == currentThreadTag() { return false }
    return acquired(pthread_rwlock_trywrlock(rwlock), "pthread_rwlock_trywrlock", exclusive: true)
  }

  /// Takes a read lock, giving up when `deadline` (monotonic clock) passes; returns whether
  /// it was taken.
  @available(*, noasync, message: "blocks the thread")
  public func readLock(before deadline: MonotonicInstant) -> Bool {
    refuseIfWriter("readLock(before:)")
    if deadline == .distantFuture { readLock(); return true }
    var time = deadline.timespec
    return acquired(
      tk_rwlock_monotonic_rdlock(rwlock, &time), "pthread_rwlock_clockrdlock",
      exclusive: false)
  }

  /// Takes the write lock, giving up when `deadline` (monotonic clock) passes; returns
  /// whether it was taken.
  @available(*, noasync, message: "blocks the thread")
  public func writeLock(before deadline: MonotonicInstant) -> Bool {
    refuseIfWriter("writeLock(before:)")
    if deadline == .distantFuture { writeLock(); return true }
    var time = deadline.timespec
    return acquired(
      tk_rwlock_monotonic_wrlock(rwlock, &time), "pthread_rwlock_clockwrlock",
      exclusive: true)
  }

  /// Releases the lock the calling thread holds: the write lock if it holds that, otherwise
  /// one read lock. Stops the process if no lock is held, or if the write lock is held by
  /// another thread.
  public func unlock() {
    let me = currentThreadTag()
    let holder = writer.load(ordering: .relaxed)
    if holder == me {
      writer.store(0, ordering: .relaxed)
    } else if holder != 0 {
      reportMisuse("ReadWriteLock", "unlock() of the write lock from a thread that does not hold it")
    } else {
      // Claim one read lock; refuse if none is held.
      var current = readers.load(ordering: .relaxed)
      while true {
        if current <= 0 {
          reportMisuse("ReadWriteLock", "unlock() of a lock that is not locked")
        }
        let (exchanged, seen) = readers.compareExchange(expected: current, desired: current - 1, ordering: .relaxed)
        if exchanged { break }
        current = seen
      }
    }
    Self.check(pthread_rwlock_unlock(rwlock), "pthread_rwlock_unlock")
  }

  /// Runs `body` holding a read lock; releases it however `body` exits.
  public func withReadLock<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
    refuseIfWriter("withReadLock")
    _ = acquired(pthread_rwlock_rdlock(rwlock), "pthread_rwlock_rdlock", exclusive: false)
    defer { unlock() }
    return try body()
  }

  /// Runs `body` holding the write lock; releases it however `body` exits.
  public func withWriteLock<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
    refuseIfWriter("withWriteLock")
    _ = acquired(pthread_rwlock_wrlock(rwlock), "pthread_rwlock_wrlock", exclusive: true)
    defer { unlock() }
    return try body()
  }

  /// `Locking` conformance: takes the write lock.
  @available(*, noasync, message: "blocks the thread; use withWriteLock")
  public func lock() { writeLock() }

  /// `Locking` conformance: tries the write lock.
  public func tryLock() -> Bool { tryWriteLock() }

  /// `Locking` conformance: takes the write lock before `deadline`.
  @available(*, noasync, message: "blocks the thread")
  public func lock(before deadline: MonotonicInstant) -> Bool { writeLock(before: deadline) }

  /// Whether the calling thread holds the write lock.
  public var isWriteLockedByCurrentThread: Bool {
    writer.load(ordering: .relaxed) == currentThreadTag()
  }
}
