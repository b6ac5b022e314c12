#if canImport(Glibc)
  import Glibc
#endif

/// A lock in memory shared between processes that survives the death of its holder: when
/// the holding thread or its process dies, the next locker is told, and decides whether the
/// data the lock protects can be trusted before the lock works normally again.
///
/// The lock lives inside memory you share (a ``SharedMemoryRegion``, or any `MAP_SHARED`
/// mapping of a file or a `memfd`): ``byteCount`` bytes at an address aligned to
/// ``alignment``. One process creates it with ``initialize(at:)``; every process (the
/// creator included) uses it through a `SharedMemoryLock` value made with
/// ``init(existingAt:)``. The value is only an address: copy it freely; it does not own the
/// memory, which must stay mapped while the value is used.
///
/// **Acquiring** returns an ``Acquisition`` you must look at:
/// - ``Acquisition/acquired``: the lock is yours, the data consistent.
/// - ``Acquisition/previousOwnerDied``: the lock is yours, but its previous holder died
///   holding it and may have left the data half-updated. Repair or check the data, then call
///   ``markConsistent()``; then ``unlock()`` as usual. If you unlock without
///   ``markConsistent()`` (the data cannot be repaired), the lock becomes permanently
///   unusable: every later acquisition, in every process, throws
///   ``SharedMemoryLockError/notRecoverable``.
///
/// **What happens on each failure:**
/// - *The holder dies* (its process is killed, crashes or exits, or the holding thread ends
///   without unlocking): the kernel marks the lock and wakes one waiter, whose acquisition
///   returns ``Acquisition/previousOwnerDied``.
/// - *The next owner dies too before marking the lock consistent*: the one after it gets
///   ``Acquisition/previousOwnerDied`` again.
/// - *The next owner unlocks without ``markConsistent()``*: the lock is unusable for good
///   (``SharedMemoryLockError/notRecoverable`` from then on); re-create the shared state.
/// - *The memory is unmapped, in the holding process, while held*: do not do this. glibc
///   links the locks a thread holds through the locks' own memory, so the thread's later
///   lock or unlock of another robust lock may crash, and if it dies the kernel cannot mark
///   the lock; other processes then wait for it forever (use ``lock(timeout:)``). Unmapping
///   in a process that holds nothing there is harmless.
/// - *A waiter dies* (killed while blocked in ``lock()``): nothing happens to the lock; the
///   kernel forgets the waiter.
///
/// **Blocking**: ``lock()`` blocks until the lock is free; ``lock(before:)`` and
/// ``lock(timeout:)`` give up at a deadline on the monotonic clock and return `nil`;
/// ``tryLock()`` never blocks.
///
/// **Misuse** stops the process with a message: `lock()` by the holding thread (the lock is
/// error-checking, so this is reported instead of hanging), ``unlock()`` by a thread that
/// does not hold it, ``markConsistent()`` when there is nothing to mark, and using memory
/// that does not hold an initialized lock. ``initialize(at:)`` leaves a mark in the lock's
/// last 8 bytes that every operation checks: zero-filled memory (a fresh region whose
/// `initialize(at:)` was forgotten) is a valid default mutex to glibc, neither robust nor
/// process-shared nor error-checking, on which relocking would hang and any unlock pass.
///
/// Ownership is per *thread*, as for every pthread mutex: the thread that acquired the lock
/// must release it.
///
/// ```swift
/// // The shared memory: counter at offset 0, the lock at offset 64.
/// let region = try SharedMemoryRegion(sharedAnonymousByteCount: 128)   // before fork()
/// let counter = region.address.bindMemory(to: Int.self, capacity: 1)
/// let lock = try SharedMemoryLock.initialize(at: region.address + 64)
///
/// // In any process that maps the region:
/// switch try lock.lock() {
/// case .acquired: break
/// case .previousOwnerDied:
///     counter.pointee = recount()        // repair what the dead holder may have left
///     lock.markConsistent()
/// }
/// counter.pointee += 1
/// lock.unlock()
/// ```
///
/// The corresponding C object is a `pthread_mutex_t` with `PTHREAD_PROCESS_SHARED`,
/// `PTHREAD_MUTEX_ROBUST` and `PTHREAD_MUTEX_ERRORCHECK`; the calls are
/// `pthread_mutex_lock`, `pthread_mutex_trylock`, `pthread_mutex_clocklock`
/// (`CLOCK_MONOTONIC`), `pthread_mutex_consistent` and `pthread_mutex_unlock`.
public struct SharedMemoryLock: @unchecked Sendable, Hashable {
  // @unchecked: the value is an address; the memory there is a process-shared pthread mutex,
  // made for use by any thread of any process.

  /// How an acquisition went. Not discardable: a caller must decide what a dead previous
  /// holder means for the data.
  public enum Acquisition: Sendable, Hashable {
    /// The caller holds the lock; the previous holder unlocked it normally.
    case acquired
    /// The caller holds the lock, but the previous holder died holding it: the protected
    /// data may be inconsistent. Call ``SharedMemoryLock/markConsistent()`` once it is
    /// repaired; unlocking without that makes the lock unusable for good.
    case previousOwnerDied
  }

  /// The bytes the lock occupies (a fixed size on every platform, so processes agree on the
  /// layout of the shared memory).
  public static let byteCount = 64

  /// The alignment the lock's address needs.
  public static let alignment = 8

  /// The lock's address in the shared memory.
  public let address: UnsafeMutableRawPointer

  @usableFromInline
  var mutex: UnsafeMutablePointer<pthread_mutex_t> { address.assumingMemoryBound(to: pthread_mutex_t.self) }

  /// Initializes an unlocked lock in the ``byteCount`` bytes at `address` and returns it. Do
  /// this once, in one process, before any process uses the lock (typically right after
  /// creating the shared memory); initializing memory that holds a lock in use breaks it.
  ///
  /// Stops the process if `address` is not aligned to ``alignment``.
  ///
  /// - Throws: ``SystemCallError`` when the C library refuses the attributes (no robust or
  ///   process-shared mutexes: `.notSupported`-style codes) or has no memory for them.
  public static func initialize(at address: UnsafeMutableRawPointer) throws(SystemCallError) -> SharedMemoryLock {
    checkAlignment(address, typeName: "SharedMemoryLock")
    precondition(MemoryLayout<pthread_mutex_t>.size <= markOffset)
    let mutex = address.bindMemory(to: pthread_mutex_t.self, capacity: 1)
    try RobustMutex.initialize(mutex)
    // Releasing: a process that reads the mark (acquiring) sees the initialized mutex.
    let mark = (address + markOffset).bindMemory(to: UInt64.self, capacity: 1)
    UInt64.atomicStore(initializedMark, at: mark, ordering: .releasing)
    return SharedMemoryLock(existingAt: address)
  }

  /// Where ``initialize(at:)`` leaves its mark: the last 8 of the ``byteCount`` bytes, after
  /// the mutex.
  static let markOffset = 56

  /// The mark (`"TKSHMLCK"`).
  static let initializedMark: UInt64 = 0x544B_5348_4D4C_434B

  /// Stops the process unless ``initialize(at:)`` ran on this memory. One acquiring load.
  func checkInitialized() {
    let mark = (address + Self.markOffset).assumingMemoryBound(to: UInt64.self)
    if UInt64.atomicLoad(at: mark, ordering: .acquiring) != Self.initializedMark {
      reportMisuse(
        "SharedMemoryLock", "the memory at \(address) does not hold an initialized lock (call initialize(at:) first)")
    }
  }

  /// The lock that ``initialize(at:)`` created at `address` (in this process or another
  /// one that shares the memory). Stops the process if `address` is not aligned.
  public init(existingAt address: UnsafeMutableRawPointer) {
    checkAlignment(address, typeName: "SharedMemoryLock")
    self.address = address
  }

  /// Acquires the lock, blocking until it is free.
  ///
  /// - Returns: ``Acquisition/acquired``, or ``Acquisition/previousOwnerDied`` when its
  ///   previous holder died holding it (see the type's documentation). Either way the
  ///   caller holds the lock.
  /// - Throws: ``SharedMemoryLockError/notRecoverable`` when the lock is unusable for good
  ///   (the caller does not hold it); ``SharedMemoryLockError/system(_:)`` if the call
  ///   fails otherwise.
  @available(*, noasync, message: "blocks the thread")
  public func lock() throws(SharedMemoryLockError) -> Acquisition {
    // Non-nil: without a deadline the call does not time out.
    try acquire(before: .distantFuture)!
  }

  /// Acquires the lock, blocking until it is free or `deadline` (monotonic clock) passes.
  /// Returns `nil` when the deadline passed first (the caller does not hold the lock);
  /// otherwise as ``lock()``.
  @available(*, noasync, message: "blocks the thread")
  public func lock(before deadline: MonotonicInstant) throws(SharedMemoryLockError) -> Acquisition? {
    try acquire(before: deadline)
  }

  /// Acquires the lock, blocking at most `timeout` (monotonic clock). Returns `nil` when it
  /// passed first; otherwise as ``lock()``.
  @available(*, noasync, message: "blocks the thread")
  public func lock(timeout: Duration) throws(SharedMemoryLockError) -> Acquisition? {
    try acquire(before: .after(timeout))
  }

  /// Acquires the lock if it is free right now; never blocks (a busy lock costs one system
  /// call that returns at once). Returns `nil` when it is held (by anyone, including the
  /// calling thread); otherwise as ``lock()``.
  public func tryLock() throws(SharedMemoryLockError) -> Acquisition? {
    checkInitialized()
    let outcome: RobustMutex.Outcome
    do throws(SystemCallError) {
      outcome = try RobustMutex.tryLock(mutex, typeName: "SharedMemoryLock")
    } catch {
      throw .system(error)
    }
    return try Self.acquisition(outcome)
  }

  /// Declares the protected data consistent again after an acquisition returned
  /// ``Acquisition/previousOwnerDied``; the lock then works normally. Call it holding the
  /// lock, before ``unlock()``.
  ///
  /// Stops the process if the calling thread does not hold the lock or the lock's previous
  /// owner did not die.
  public func markConsistent() {
    checkInitialized()
    RobustMutex.markConsistent(mutex, typeName: "SharedMemoryLock")
  }

  /// Releases the lock. After an acquisition that returned
  /// ``Acquisition/previousOwnerDied``, unlocking without ``markConsistent()`` makes the
  /// lock permanently unusable (``SharedMemoryLockError/notRecoverable``).
  ///
  /// Stops the process if the calling thread does not hold the lock.
  public func unlock() {
    checkInitialized()
    RobustMutex.unlock(mutex, typeName: "SharedMemoryLock")
  }

  /// Runs `body` holding the lock and returns its result; releases the lock however `body`
  /// exits. If the previous holder died, `recover` runs first, holding the lock: return
  /// `true` once the data is repaired (the lock is marked consistent and `body` runs), or
  /// `false` when it cannot be (the lock is released unrecovered, becomes unusable for
  /// every process, and this call throws ``SharedMemoryLockError/notRecoverable`` without
  /// running `body`). `recover` may call ``markConsistent()`` itself; the lock is then not
  /// marked again (and stays usable even if `recover` returns `false`).
  ///
  /// Blocks until the lock is free. For a `body` that throws, use ``lock()`` and
  /// ``unlock()`` with `defer`.
  ///
  /// - Throws: ``SharedMemoryLockError`` as ``lock()`` does, or
  ///   ``SharedMemoryLockError/notRecoverable`` when `recover` returned `false`.
  public func withLock<Result>(
    recovering recover: () -> Bool, _ body: () -> Result
  ) throws(SharedMemoryLockError) -> Result {
    // Non-nil: without a deadline the call does not time out.
    let acquisition = try acquire(before: .distantFuture)!
    if acquisition == .previousOwnerDied {
      guard recover() else {
        unlock()
        throw .notRecoverable
      }
      // `recover` may have marked it itself.
      RobustMutex.markConsistent(mutex, typeName: "SharedMemoryLock", unlessConsistent: true)
    }
    defer { unlock() }
    return body()
  }

  func acquire(before deadline: MonotonicInstant) throws(SharedMemoryLockError) -> Acquisition? {
    checkInitialized()
    let outcome: RobustMutex.Outcome
    do throws(SystemCallError) {
      outcome = try RobustMutex.lock(mutex, before: deadline, typeName: "SharedMemoryLock")
    } catch {
      throw .system(error)
    }
    return try Self.acquisition(outcome)
  }

  /// The public view of an attempt's outcome: nil for busy or timed out.
  static func acquisition(_ outcome: RobustMutex.Outcome) throws(SharedMemoryLockError) -> Acquisition? {
    switch outcome {
    case .acquired: return .acquired
    case .acquiredAfterOwnerDied: return .previousOwnerDied
    case .busy, .timedOut: return nil
    case .notRecoverable: throw .notRecoverable
    }
  }
}

/// Stops the process when `address` is not aligned for a shared-memory lock or condition.
func checkAlignment(_ address: UnsafeMutableRawPointer, typeName: String) {
  if Int(bitPattern: address) % SharedMemoryLock.alignment != 0 {
    reportMisuse(typeName, "address \(address) is not aligned to \(SharedMemoryLock.alignment) bytes")
  }
}
