import CThreadingShims

#if canImport(Glibc)
  import Glibc
#endif

/// A condition variable in memory shared between processes, paired with a
/// ``SharedMemoryLock``: threads of any process that maps the memory wait on it and wake
/// each other.
///
/// Like the lock, it lives in ``byteCount`` bytes at an address aligned to ``alignment`` in
/// shared memory: one process calls ``initialize(at:)`` once; every process uses it through
/// ``init(existingAt:)``. The value is only an address and does not own the memory.
///
/// Wait in a loop over your predicate, holding the lock, as with every condition variable;
/// a wait may return without a signal. Each wait re-acquires the lock before it returns
/// and reports that acquisition: ``SharedMemoryLock/Acquisition/previousOwnerDied`` when a
/// holder died while the caller waited, exactly as ``SharedMemoryLock/lock()`` would.
///
/// **Failures:**
/// - *A waiter dies* (killed while waiting): the kernel drops its wait; no signal is lost to
///   it and the condition keeps working. The waiter count it had raised stays raised, which
///   only makes each later ``signal()``/``broadcast()`` pay one system call that finds
///   nobody to wake. A waiter killed in the first instants of its wait, after it counted
///   itself but before it released the lock, dies as the lock's holder: the next locker gets
///   ``SharedMemoryLock/Acquisition/previousOwnerDied``, as for any holder that dies.
/// - *The lock's holder dies*: see ``SharedMemoryLock``; a waiter re-acquiring the lock
///   after that gets ``SharedMemoryLock/Acquisition/previousOwnerDied``.
/// - *The lock becomes unusable*: the wait throws ``SharedMemoryLockError/notRecoverable``
///   and returns without the lock.
///
/// **Blocking**: ``wait(_:)`` until signalled; ``wait(_:before:)`` and ``wait(_:timeout:)``
/// until signalled or a deadline on the monotonic clock. ``signal()`` and ``broadcast()``
/// never block.
///
/// **Misuse** stops the process with a message: waiting without holding the lock, waiting
/// on a lock acquired with ``SharedMemoryLock/Acquisition/previousOwnerDied`` before
/// ``SharedMemoryLock/markConsistent()`` (see ``wait(_:)``), and using a misaligned address.
///
/// ```swift
/// // Shared: a flag at offset 0, the lock at 64, the condition at 128.
/// let ready = region.address.bindMemory(to: Int32.self, capacity: 1)
/// let lock = SharedMemoryLock(existingAt: region.address + 64)
/// let changed = SharedMemoryCondition(existingAt: region.address + 128)
///
/// // Consumer (any process):
/// // Mark the lock consistent as soon as an acquisition says its holder died: waiting on
/// // it first stops the process (its release would make the lock unusable for good).
/// if try lock.lock() == .previousOwnerDied { /* check the data, then */ lock.markConsistent() }
/// while ready.pointee == 0 {
///     if try changed.wait(lock) == .previousOwnerDied { /* check */ lock.markConsistent() }
/// }
/// lock.unlock()
///
/// // Producer (another process):
/// _ = try lock.lock()
/// ready.pointee = 1
/// changed.broadcast()
/// lock.unlock()
/// ```
///
/// Built on a process-shared futex (the kernel matches waits by the word's physical page),
/// not on `pthread_cond_t`: glibc's process-shared condition keeps per-waiter group
/// references that a waiter killed mid-wait never returns, after which a signal can wait
/// for it forever.
public struct SharedMemoryCondition: @unchecked Sendable, Hashable {
  // @unchecked: the value is an address; the memory there is two words changed only with
  // atomics and futex calls, made for any thread of any process.

  /// How a timed wait ended.
  public struct WaitResult: Sendable, Hashable {
    /// Whether the deadline passed before a signal (`false`: signalled or a spurious
    /// wake-up; re-check the predicate either way).
    public let timedOut: Bool
    /// How the lock was re-acquired (the caller holds it in both cases).
    public let acquisition: SharedMemoryLock.Acquisition
  }

  /// The bytes the condition occupies (fixed on every platform).
  public static let byteCount = 64

  /// The alignment the condition's address needs.
  public static let alignment = 8

  /// The condition's address in the shared memory.
  public let address: UnsafeMutableRawPointer

  /// Bumped by every signal; waiters sleep while it holds the value they read.
  var sequence: UnsafeMutablePointer<UInt32> { address.assumingMemoryBound(to: UInt32.self) }
  /// Threads between registering to wait and waking; lets signals skip the wake-up call.
  var waiters: UnsafeMutablePointer<UInt32> { (address + 4).assumingMemoryBound(to: UInt32.self) }

  /// Initializes a condition in the ``byteCount`` bytes at `address` and returns it. Do
  /// this once, in one process, before any process uses it. Never fails (the condition is
  /// two words set to zero). Stops the process if `address` is not aligned.
  public static func initialize(at address: UnsafeMutableRawPointer) -> SharedMemoryCondition {
    checkAlignment(address, typeName: "SharedMemoryCondition")
    address.initializeMemory(as: UInt8.self, repeating: 0, count: byteCount)
    _ = address.bindMemory(to: UInt32.self, capacity: 2)
    return SharedMemoryCondition(existingAt: address)
  }

  /// The condition that ``initialize(at:)`` created at `address`. Stops the process if
  /// `address` is not aligned.
  public init(existingAt address: UnsafeMutableRawPointer) {
    checkAlignment(address, typeName: "SharedMemoryCondition")
    self.address = address
  }

  /// Releases `lock` (the caller must hold it), waits until signalled, and re-acquires
  /// `lock`. Returns how the lock was re-acquired. May return without a signal.
  ///
  /// **Misuse** stops the process with a message: waiting without holding `lock`, and
  /// waiting on a lock acquired with ``SharedMemoryLock/Acquisition/previousOwnerDied``
  /// before ``SharedMemoryLock/markConsistent()`` (the wait's release would make the lock
  /// unusable for every process, for good): decide about the data first.
  ///
  /// - Throws: ``SharedMemoryLockError`` as ``SharedMemoryLock/lock()`` does; the caller
  ///   then does not hold the lock.
  @available(*, noasync, message: "blocks the thread")
  public func wait(_ lock: SharedMemoryLock) throws(SharedMemoryLockError) -> SharedMemoryLock.Acquisition {
    try wait(lock, deadline: .distantFuture).acquisition
  }

  /// Releases `lock`, waits until signalled or `deadline` (monotonic clock) passes, and
  /// re-acquires `lock`. A deadline already passed returns at once, still holding the lock
  /// (the caller must hold it then too). Misuse as ``wait(_:)``, whatever the deadline: a
  /// passed one also stops the process for a lock not yet marked consistent.
  ///
  /// - Throws: ``SharedMemoryLockError`` as ``SharedMemoryLock/lock()`` does.
  @available(*, noasync, message: "blocks the thread")
  public func wait(_ lock: SharedMemoryLock, before deadline: MonotonicInstant) throws(SharedMemoryLockError)
    -> WaitResult
  {
    try wait(lock, deadline: deadline)
  }

  /// Releases `lock`, waits until signalled or `timeout` (monotonic clock) has passed, and
  /// re-acquires `lock`.
  ///
  /// - Throws: ``SharedMemoryLockError`` as ``SharedMemoryLock/lock()`` does.
  @available(*, noasync, message: "blocks the thread")
  public func wait(_ lock: SharedMemoryLock, timeout: Duration) throws(SharedMemoryLockError) -> WaitResult {
    try wait(lock, deadline: .after(timeout))
  }

  /// Wakes one waiting thread, in any process, if there is one.
  public func signal() {
    notify(count: 1)
  }

  /// Wakes every waiting thread, in every process.
  public func broadcast() {
    notify(count: Int32.max)
  }

  // The protocol is `FutexCondition`'s (see there for the step table and why no wake-up
  // is lost): the waiter reads `sequence` holding the lock and raises `waiters` with a full
  // read-modify-write; the notifier bumps `sequence` with a full read-modify-write and then
  // reads `waiters`, so one of the two sees the other (Dekker's pattern, on x86 and arm64
  // alike). The futex is process-shared, so the kernel's compare and wake-up meet across
  // processes at the word's physical page.
  func wait(_ lock: SharedMemoryLock, deadline: MonotonicInstant) throws(SharedMemoryLockError) -> WaitResult {
    lock.checkInitialized()
    let passed = deadline != .distantFuture && deadline.hasPassed
    // Checked before anything shared changes: a non-holder stopped after raising `waiters`
    // would leave the count raised in the mapping for good (every later notify, in every
    // process, would then make a system call).
    if !RobustMutex.isHeldByCurrentThread(lock.mutex) {
      reportMisuse("SharedMemoryCondition", "wait without holding the lock")
    }
    // Checked whatever the deadline: a wait that only gives up at once now would release
    // the lock, and break it, once its deadline is later.
    if lock.mutex.pointee.__data.__owner == Int32.max {  // PTHREAD_MUTEX_INCONSISTENT
      // Releasing an inconsistent robust mutex makes it ENOTRECOVERABLE for every process.
      reportMisuse(
        "SharedMemoryCondition",
        "wait() on a lock acquired with previousOwnerDied before markConsistent() (the wait's release would make the lock unrecoverable for good)"
      )
    }
    if passed { return WaitResult(timedOut: true, acquisition: .acquired) }
    let seen = UInt32.atomicLoad(at: sequence, ordering: .relaxed)
    _ = UInt32.atomicFetchAdd(1, at: waiters, ordering: .full)
    lock.unlock()
    var timedOut = false
    let result: Int32
    if deadline == .distantFuture {
      result = tk_futex_wait_shared(sequence, seen, nil)
    } else {
      var time = deadline.timespec
      result = tk_futex_wait_shared(sequence, seen, &time)
    }
    switch -result {
    case 0, EAGAIN, EINTR: break
    case ETIMEDOUT: timedOut = true
    default:
      // EFAULT/EINVAL: the memory is not a condition any more (unmapped, or corrupted).
      fatalError(
        "SharedMemoryCondition: \(SystemCallError(call: "futex(FUTEX_WAIT_BITSET)", code: SystemErrorCode(rawValue: -result)))"
      )
    }
    // Relaxed: the count only decides whether a notifier makes a system call.
    _ = UInt32.atomicFetchAdd(UInt32.max, at: waiters, ordering: .relaxed)  // minus one
    // Non-nil: without a deadline the lock does not time out.
    let acquisition = try lock.acquire(before: .distantFuture)!
    return WaitResult(timedOut: timedOut, acquisition: acquisition)
  }

  func notify(count: Int32) {
    _ = UInt32.atomicFetchAdd(1, at: sequence, ordering: .full)
    if UInt32.atomicLoad(at: waiters, ordering: .relaxed) == 0 { return }
    let woken = tk_futex_wake_shared(sequence, count)
    if woken < 0 {
      fatalError(
        "SharedMemoryCondition: \(SystemCallError(call: "futex(FUTEX_WAKE)", code: SystemErrorCode(rawValue: -woken)))")
    }
  }
}
