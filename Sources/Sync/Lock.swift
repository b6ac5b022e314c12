/// A non-recursive mutual-exclusion lock: the guide's `pthread_mutex_t` and `NSLock`.
///
/// Called `Lock`, not `Mutex`, so it does not clash with the toolchain's
/// `Synchronization.Mutex<Value>`, a value inside its lock (here ``LockedValue``).
///
/// Built on a Linux futex whose word lives inside the object (one allocation per lock): the
/// uncontended `lock()`/`unlock()` pair is one atomic compare-and-swap each, inlined into
/// your code, and nothing else (the 64-bit word holds the holder's thread tag beside the
/// futex state, so the misuse checks below cost no extra store); a contended `lock()` spins
/// briefly, then sleeps in the kernel until the holder releases it.
///
/// **Fairness: a bounded wait.** Normally a releasing thread may re-acquire before a woken
/// sleeper runs (barging), which keeps throughput high under contention. But once a waiter
/// has slept about 1 ms without getting the lock, it counts as starving, and from then on
/// every `unlock()` hands the lock directly to a starving waiter (oldest first, as the
/// kernel queues them) instead of freeing it; nobody can barge in until no waiter starves.
/// So the longest wait is about 1 ms plus the critical sections of the starving waiters
/// ahead. A sleeper counts itself when it wakes (a release wakes the longest sleeper first,
/// in the kernel's order), so with many sleepers the last may wait for its turn to be woken
/// before it counts. A starving waiter that is not asleep when the lock is handed to it
/// (woken, but still waiting for a processor) cannot take it yet, so that release frees the
/// lock for whoever runs, and the next one hands over again: the wait also includes the
/// time the scheduler keeps the waiter off the processors, which no lock can shorten. The
/// cost is paid only while someone starves: each such hand-over is one wake-up the next
/// owner must be scheduled for (measured on 2 processors over several reports: 0.95-1.15x
/// the time per acquisition of the same lock without the bound with 16 threads contending,
/// 0.95-1.25x with 64). The uncontended path is unchanged.
///
/// **Misuse** is never undefined behaviour:
/// - `unlock()` of an unlocked lock always stops the process with a message;
/// - `lock()` by the thread that already holds it (a certain self-deadlock) always stops the
///   process with a message, instead of hanging;
/// - in *checked* mode (``MisuseChecking/mode``, chosen per process at run time, or
///   `Lock(checked: true)`), `unlock()` from a thread that does not hold the lock stops the
///   process too. Unchecked, such an unlock releases the lock on the holder's behalf.
///
/// Timed acquisition (`lock(before:)`, `lock(timeout:)`) uses the monotonic clock.
///
/// **Diagnostics.** A lock has a name for ``Diagnostics`` reports (`Lock(name:)`, by
/// default its creation site `fileID:line`) and is watched by the lock-order detector, the
/// deadlock watchdog and contention statistics when they are on. While they are all off,
/// each `lock()`/`unlock()` adds one relaxed load and a branch that is not taken.
///
/// ```swift
/// let lock = Lock()
/// var total = 0                       // protected by `lock`
/// lock.withLock { total += 1 }
///
/// if lock.tryLock() {                 // the guide's NSLock `try` loop
///     defer { lock.unlock() }
///     total += 1
/// }
/// ```
///
/// The corresponding C functions are `pthread_mutex_lock`, `pthread_mutex_trylock`,
/// `pthread_mutex_clocklock` and `pthread_mutex_unlock`; `Lock` replaces them with `futex`.
public final class Lock: Locking, @unchecked Sendable {
  // @unchecked: all state is in `core`, accessed only through atomics and the futex.

  /// The lock's words, inside the object (one allocation per lock); first, so `core` finds
  /// them (see ``FutexLock/init(inside:)``). Never read or written through the property.
  private var words = FutexLock.Words()

  /// The futex lock on `words`.
  @inlinable
  var core: FutexLock { FutexLock(inside: self) }

  /// Whether `unlock()` verifies that the calling thread holds the lock (see the type's
  /// doc); fixed at creation.
  public let isChecked: Bool

  /// Who the lock is to the lock detectors and contention statistics of ``Diagnostics``
  /// (after `words`, which must stay the first stored property).
  @usableFromInline
  let identity: LockIdentity

  /// How many rounds of exponential backoff a contended `lock()` spends polling the lock
  /// word before sleeping (twice, if another thread takes the lock it saw free), and again
  /// after each wake-up: 6 rounds, starting at 32 `pause` instructions and then 64 between
  /// polls, are 7 polls over 352 pauses (a few to about fifteen microseconds; a `pause`
  /// takes from about ten to about 140 cycles depending on the CPU). Polling stops at once
  /// while the lock is being handed to a starving waiter. Measured in `cost-tables`
  /// (`contention.scaling-*`); the reasons are at `FutexLock.spin`.
  @usableFromInline
  static let spinRoundsBeforeSleeping = 6

  /// Creates an unlocked lock; `checked` turns on the owner check in `unlock()`. By default
  /// it follows the process's ``MisuseChecking/mode``. `name` is what diagnostics reports
  /// call it (lock-order cycles, deadlocks, contention statistics; see ``Diagnostics``);
  /// without one they use the creation site, `fileID:line`, which the defaults capture.
  public init(
    checked: Bool = MisuseChecking.isChecked, name: String? = nil, fileID: StaticString = #fileID, line: UInt = #line
  ) {
    isChecked = checked
    identity = LockIdentity(name: name, fileID: fileID, line: line)
    // The layout `core` relies on (checked in debug builds).
    assert(withUnsafeMutablePointer(to: &words) { UnsafeMutableRawPointer($0) } == core.base)
  }

  deinit {
    core.checkNotHeld(typeName: "Lock")
    LockDiagnostics.lockWillBeDestroyed(identity)
  }

  /// What diagnostics reports call the lock: the `name` given at creation, else its
  /// creation site (`"Module/File.swift:12"`).
  public var name: String { identity.label }

  /// Acquires the lock, blocking the calling thread until it is available.
  ///
  /// Stops the process if the calling thread already holds it (self-deadlock).
  @available(*, noasync, message: "blocks the thread; use withLock for a short critical section")
  @inlinable
  @inline(__always)
  public func lock() {
    // Diagnostics off: one relaxed load, a test and a not-taken branch before the fast path.
    if LockDiagnostics.acquisitionHooksRun { return lockHooked() }
    core.acquire(spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "Lock")
  }

  /// Releases the lock. Stops the process if it is not locked (always) or, in checked mode,
  /// if the calling thread does not hold it.
  @inlinable
  @inline(__always)
  public func unlock() {
    if LockDiagnostics.releaseHooksRun { return unlockHooked() }
    // `isChecked` is read on the slow path only: one load fewer per uncontended pair.
    if !core.tryReleaseUncontended() { unlockSlow() }
  }

  /// The release's slow path: sleepers or starving waiters to wake, or misuse (checked
  /// against `isChecked`).
  @usableFromInline
  @inline(never)
  func unlockSlow() {
    core.releaseSlow(checkOwner: isChecked, typeName: "Lock")
  }

  /// Acquires the lock if it is free right now; never blocks. Returns false when it is held,
  /// including by the calling thread.
  @inlinable
  @inline(__always)
  public func tryLock() -> Bool {
    if LockDiagnostics.tryAcquisitionHooksRun { return tryLockHooked() }
    return core.tryAcquireFree()
  }

  /// Acquires the lock, blocking until it is available or `deadline` (monotonic clock)
  /// passes; returns whether it was acquired. Stops the process if the calling thread
  /// already holds it.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func lock(before deadline: MonotonicInstant) -> Bool {
    if LockDiagnostics.acquisitionHooksRun { return lockHooked(before: deadline) }
    return core.acquire(before: deadline, spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "Lock")
  }

  // The outlined hooked operations (see `LockDiagnostics.hooksMayRun`): methods of the lock,
  // so the inlined call site passes `self` only.

  @usableFromInline
  @inline(never)
  func lockHooked() {
    _ = core.acquireHooked(
      identity, before: .distantFuture, spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "Lock")
  }

  @usableFromInline
  @inline(never)
  func lockHooked(before deadline: MonotonicInstant) -> Bool {
    core.acquireHooked(identity, before: deadline, spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "Lock")
  }

  @usableFromInline
  @inline(never)
  func tryLockHooked() -> Bool {
    core.tryAcquireHooked(identity)
  }

  @usableFromInline
  @inline(never)
  func unlockHooked() {
    core.releaseHooked(identity, checkOwner: isChecked, typeName: "Lock")
  }

  /// Whether the calling thread holds the lock. Exact for the calling thread; meant for
  /// assertions (`assert(lock.isHeldByCurrentThread)`).
  @inlinable
  public var isHeldByCurrentThread: Bool {
    core.isHeldByCurrentThread
  }

  /// Runs `body` holding the lock and returns its result; releases it however `body` exits.
  /// Specialized here so the fast path inlines without a protocol indirection.
  @inlinable
  public func withLock<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
    lock()
    defer { unlock() }
    return try body()
  }
}
