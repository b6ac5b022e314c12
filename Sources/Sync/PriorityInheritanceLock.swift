/// A non-recursive lock with priority inheritance: while a higher-priority thread waits for
/// it, the holder runs at that thread's priority, so a low-priority holder cannot be kept off
/// the CPU by medium-priority work while a real-time thread waits (priority inversion). The
/// lock for real-time threads configured through the Threads module's
/// `ThreadConfiguration.schedulingPolicy` (`.fifo`, `.roundRobin`).
///
/// Built on the kernel's priority-inheritance futex (`FUTEX_LOCK_PI`): the word holds the
/// holder's kernel thread id (see ``ownerThreadID``). Uncontended, `lock()` and `unlock()`
/// are one compare-and-swap each in user space, like ``Lock``'s. Contended, a waiter never
/// spins (a spinning real-time waiter would keep the holder it waits for off the CPU): it
/// sleeps in the kernel at once, queued by priority, and `unlock()` makes the kernel hand
/// the lock to the highest-priority waiter. Each contended hand-off costs a system call on
/// both sides, so under contention this lock is slower than ``Lock``
/// (`cost-tables --filter pilock.` shows the price).
///
/// **Who is boosted.** Only real-time waiters (`SCHED_FIFO`, `SCHED_RR`) raise a holder's
/// priority; a normal (`SCHED_OTHER`) waiter leaves it unchanged, whatever its nice value.
/// Boosting needs no privilege; *starting* real-time threads does (`CAP_SYS_NICE`, or a
/// non-zero `RLIMIT_RTPRIO`, e.g. `ulimit -r 99`); without it the Threads module refuses the
/// thread with `EPERM`, and every thread is normal, so the lock works but never boosts.
///
/// **Timeouts** use the monotonic clock. On Linux 5.14 and later the kernel waits on it
/// directly (`FUTEX_LOCK_PI2`). Older kernels only take a wall-clock deadline
/// (`FUTEX_LOCK_PI`); there the lock waits in slices of at most 20 ms and re-checks the
/// monotonic deadline after each, so a wall-clock jump never ends the wait early and delays
/// the timeout by at most one slice.
///
/// **Errors.** Creating the lock throws ``SystemCallError`` when the kernel does not offer
/// priority-inheritance futexes (`ENOSYS`: a kernel built without `CONFIG_FUTEX_PI`, or a
/// system-call filter that refuses them; `EPERM` from such a filter). The kernel's support is
/// probed once per process; after that, acquiring and releasing cannot fail for a reason the
/// caller could handle, and a failure that would mean a corrupted lock stops the process.
///
/// **Misuse** always stops the process with a message, in every mode: `unlock()` from a
/// thread that does not hold the lock (the owner check is free: the word names the owner),
/// `unlock()` of an unlocked lock, `lock()` by the holder (self-deadlock), an untimed
/// `lock()` that would close a cycle of these locks (two threads taking two of them in
/// opposite orders: the kernel detects it; a timed `lock` instead waits for the cycle to
/// break, polling every millisecond, and returns false at its deadline), destroying a held
/// lock, and a thread that ends holding one of these locks: checked as the thread ends,
/// before the kernel could hand the lock to a waiter without a word (the check costs one
/// thread-local add per acquisition and per release). A thread that ends the process with
/// `exit()` while holding one is not reported (nothing runs after it). Use
/// ``SharedMemoryLock`` where a holder's death must be survived and reported to the next
/// owner.
///
/// ```swift
/// let lock = try PriorityInheritanceLock()
/// var configuration = ThreadConfiguration()
/// configuration.schedulingPolicy = .fifo(priority: 10)
/// let audio = try Thread.spawn(configuration: configuration) {
///     lock.withLock { mixNextBuffer() }   // a normal-priority holder is boosted to 10
/// }
/// lock.withLock { updateMixerSettings() }  // this thread may run at normal priority
/// ```
///
/// The corresponding C facility is a `pthread_mutex_t` with `PTHREAD_PRIO_INHERIT`
/// (`pthread_mutexattr_setprotocol`); this lock uses the same kernel calls without the
/// attribute object, and `pthread_mutex_clocklock`'s monotonic timeout.
public final class PriorityInheritanceLock: Locking, @unchecked Sendable {
  // @unchecked: all state is the futex word, accessed only through atomics and the kernel.

  /// The futex word, alone at the start of a 64-byte, 64-aligned block (one cache line) so
  /// contention on it moves no neighbour's data.
  @usableFromInline
  let word: UnsafeMutablePointer<UInt32>

  /// How timed acquisitions wait (decided by the kernel probe; tests choose the fallback).
  let timedWait: PriorityInheritanceFutex.TimedWait

  /// Creates an unlocked lock.
  ///
  /// - Throws: ``SystemCallError`` for `futex(FUTEX_LOCK_PI)` when the kernel does not
  ///   support priority-inheritance futexes (`.notImplemented`, ENOSYS) or a system-call
  ///   filter refuses them (`.operationNotPermitted`, EPERM).
  public convenience init() throws(SystemCallError) {
    let timedWait = try PriorityInheritanceFutex.support.get()
    if let error = PriorityInheritanceFutex.heldCheck { throw error }
    self.init(timedWait: timedWait)
  }

  /// A lock whose timed acquisitions wait as `timedWait` says (tests run the wall-clock
  /// fallback on kernels that have the monotonic call).
  init(timedWait: PriorityInheritanceFutex.TimedWait) {
    if let error = PriorityInheritanceFutex.heldCheck { fatalError("PriorityInheritanceLock: \(error)") }
    let block = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64)
    word = block.bindMemory(to: UInt32.self, capacity: 1)
    word.initialize(to: 0)
    self.timedWait = timedWait
  }

  deinit {
    if UInt32.atomicLoad(at: word, ordering: .relaxed) != 0 {
      reportMisuse("PriorityInheritanceLock", "deinitialized while locked")
    }
    UnsafeMutableRawPointer(word).deallocate()
  }

  /// Acquires the lock, blocking the calling thread until it is available. While it waits,
  /// the holder runs at least at the calling thread's real-time priority.
  ///
  /// Stops the process if the calling thread already holds it (self-deadlock).
  @available(*, noasync, message: "blocks the thread; use withLock for a short critical section")
  @inlinable
  @inline(__always)
  public func lock() {
    _ = acquire(before: .distantFuture)
  }

  /// Acquires the lock if it is free right now; never blocks and never enters the kernel.
  /// Returns false when it is held, including by the calling thread.
  @inlinable
  @inline(__always)
  public func tryLock() -> Bool {
    guard
      UInt32.atomicCompareAndSwap(
        expected: 0, desired: PriorityInheritanceFutex.currentThreadID(), at: word, ordering: .acquiring)
    else { return false }
    PriorityInheritanceFutex.noteAcquired()
    return true
  }

  /// Acquires the lock, blocking until it is available or `deadline` (monotonic clock)
  /// passes; returns whether it was acquired. A deadline in the past makes one attempt.
  /// Stops the process if the calling thread already holds it.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func lock(before deadline: MonotonicInstant) -> Bool {
    acquire(before: deadline)
  }

  /// Releases the lock; if threads wait, the kernel hands it to the one with the highest
  /// priority and the calling thread's priority returns to its own. Stops the process if the
  /// calling thread does not hold the lock (always checked).
  @inlinable
  @inline(__always)
  public func unlock() {
    let me = PriorityInheritanceFutex.currentThreadID()
    // Releasing: the critical section's writes happen before the next owner's acquire. The
    // swap fails when waiters sleep (the kernel set the waiters bit) or the caller is not
    // the owner; the slow path tells the two apart.
    if !UInt32.atomicCompareAndSwap(expected: me, desired: 0, at: word, ordering: .releasing) {
      unlockSlow(me)
    }
    PriorityInheritanceFutex.noteReleased()
  }

  /// Runs `body` holding the lock and returns its result; releases it however `body` exits.
  @inlinable
  public func withLock<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
    _ = acquire(before: .distantFuture)
    defer { unlock() }
    return try body()
  }

  /// Whether the calling thread holds the lock. Exact for the calling thread.
  @inlinable
  public var isHeldByCurrentThread: Bool {
    UInt32.atomicLoad(at: word, ordering: .relaxed) & PriorityInheritanceFutex.threadIDMask
      == PriorityInheritanceFutex.currentThreadID()
  }

  /// The kernel thread id (`gettid()`) of the thread holding the lock, read from the lock
  /// word, or nil when the lock is free. A snapshot for diagnostics: another thread's
  /// answer may be stale by the time it returns.
  public var ownerThreadID: Int32? {
    let owner = UInt32.atomicLoad(at: word, ordering: .relaxed) & PriorityInheritanceFutex.threadIDMask
    return owner == 0 ? nil : Int32(bitPattern: owner)
  }

  /// Whether threads wait for the lock in the kernel (the word's waiters bit). A snapshot,
  /// for diagnostics and tests.
  public var hasWaiters: Bool {
    UInt32.atomicLoad(at: word, ordering: .relaxed) & PriorityInheritanceFutex.waitersBit != 0
  }

  @inlinable
  @inline(__always)
  func acquire(before deadline: MonotonicInstant) -> Bool {
    let me = PriorityInheritanceFutex.currentThreadID()
    // Acquiring: pairs with the releasing swap in `unlock()`.
    if UInt32.atomicCompareAndSwap(expected: 0, desired: me, at: word, ordering: .acquiring)
      || acquireSlow(me, before: deadline)
    {
      PriorityInheritanceFutex.noteAcquired()
      return true
    }
    return false
  }

  @usableFromInline
  func acquireSlow(_ me: UInt32, before deadline: MonotonicInstant) -> Bool {
    while true {
      let seen = UInt32.atomicLoad(at: word, ordering: .relaxed)
      if seen & PriorityInheritanceFutex.threadIDMask == me {
        reportMisuse("PriorityInheritanceLock", "lock() by the thread that already holds it (self-deadlock)")
      }
      if seen == 0 {
        if UInt32.atomicCompareAndSwap(expected: 0, desired: me, at: word, ordering: .acquiring) { return true }
        continue
      }
      if deadline != .distantFuture, deadline.hasPassed { return false }
      return PriorityInheritanceFutex.lock(
        word, me: me, before: deadline, timedWait: timedWait, typeName: "PriorityInheritanceLock")
    }
  }

  @usableFromInline
  func unlockSlow(_ me: UInt32) {
    while true {
      let seen = UInt32.atomicLoad(at: word, ordering: .relaxed)
      let owner = seen & PriorityInheritanceFutex.threadIDMask
      if owner == 0 {
        reportMisuse("PriorityInheritanceLock", "unlock() of a lock that is not locked")
      }
      if owner != me {
        reportMisuse("PriorityInheritanceLock", "unlock() from a thread that does not hold the lock")
      }
      if seen == me {
        // Not expected (while the lock is held only the kernel writes the word, and it only
        // adds the waiters bit), but then a user-space release is the right one.
        if UInt32.atomicCompareAndSwap(expected: me, desired: 0, at: word, ordering: .releasing) { return }
        continue
      }
      PriorityInheritanceFutex.unlockInKernel(word, typeName: "PriorityInheritanceLock")
      return
    }
  }
}
