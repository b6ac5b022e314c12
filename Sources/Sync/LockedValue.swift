/// A value that only one thread at a time may touch, with its lock beside it: the toolkit's
/// `Synchronization.Mutex<Value>` (and SwiftNIO's `NIOLockedValueBox`).
///
/// The state you protect lives inside the object, one allocation with the lock, and ends where the
/// lock word begins: a value of up to 8 bytes always shares the word's cache line (the object is
/// 16-byte aligned), and the end of a larger one does unless the value ends exactly at a line
/// boundary, as in `Synchronization.Mutex` and SwiftNIO's `NIOLockedValueBox`. A thread that takes
/// the lock from another core then fetches one line, not two, before it can touch the value. The
/// price: a waiter polling the word pulls the value's line away from the holder too. Measured in
/// `cost-tables` on a 2-vCPU AMD EPYC VM, 2-32 threads, five and three interleaved runs of a build
/// with the value 64 bytes away from the word against this layout: with private work between
/// acquisitions (`contention.scaling-with-work-N`, the usual shape of real code) this layout took
/// 35.8-37.3 ns per acquisition against 40.7-42.8 ns; back-to-back acquisitions
/// (`contention.scaling-N`, `mutex.contended-N`) took 11-21 ns against 10-15 ns, still well under
/// every peer. (On an Intel Xeon VM the separated layout measured 17-31% faster back-to-back; with
/// work between, it was not measured there.)
///
/// The lock is the same futex lock as ``Lock`` (inlined uncontended path, bounded spinning,
/// then sleeping in the kernel; a contended waiter first polls twice, one `pause` apart, as
/// the value it needs is on the line it polls), with the same **bounded wait**: once a
/// waiter has slept about 1 ms, releases hand the lock to the starving waiters instead of
/// letting others barge in (see ``Lock``'s Fairness section for the rule and its cost).
/// Always scoped: the value is reachable only inside the `withLock` family, so it can be
/// neither touched unlocked nor left locked. `Value` may be non-copyable (a file handle, a
/// unique buffer): it is stored in place and only ever lent to the bodies.
///
/// **Waiting for a state** (Abseil's `LockWhen`): ``withLock(when:_:)`` blocks until the
/// predicate holds, then runs its body under the same lock acquisition, so nothing can
/// change the value in between. Waiting threads re-evaluate their predicates whenever a
/// `withLock` body (any of them: each may change the value) ends while threads wait; while
/// nobody waits, that costs one load of a word on the lock's own cache line. The timed
/// variants ``withLock(when:before:_:)`` and ``withLock(when:timeout:_:)`` return nil when
/// the time is up (the toolkit's time rule is in ``MonotonicInstant``).
///
/// **Misuse** stops the process with a message: calling `withLock` again on the thread that
/// is inside it (a certain self-deadlock, also from a predicate), or releasing the last
/// reference while locked.
///
/// ```swift
/// let hits = LockedValue([String: Int]())
/// hits.withLock { $0["index.html", default: 0] += 1 }
/// let snapshot = hits.withLock { $0 }
///
/// // A non-blocking attempt: nil when another thread holds it.
/// if let count = hits.withLockIfAvailable({ $0.count }) { print(count) }
///
/// // Wait until there is something to take, then take it, atomically.
/// let jobs = LockedValue([Job]())
/// let next = jobs.withLock(when: { !$0.isEmpty }) { $0.removeFirst() }
/// ```
///
/// `Sendable` whatever `Value` is: values go in and out only as `sending` (disconnected)
/// values, as with `Synchronization.Mutex`; predicates are `@Sendable` so they cannot keep
/// the value they are shown.
public final class LockedValue<Value: ~Copyable>: @unchecked Sendable {
  // @unchecked: `value` is touched only by the thread holding `core`; values cross
  // threads only as `sending` values.

  /// Everything the object holds, in one allocation: the value, then the lock's words, then the
  /// predicate waiters' words. The value comes first, right before the lock word, so that a small
  /// one shares the word's cache line (see the type's discussion for why). Swift lays a struct's
  /// fields out in declaration order, each at its alignment.
  @usableFromInline
  struct Storage: ~Copyable {
    var value: Value
    var words = FutexLock.Words()
    /// Bumped (with the lock held) by every `withLock` that ends while predicate waiters
    /// sleep; the waiters sleep on it.
    var sequence: UInt32 = 0
    /// How many threads wait in `withLock(when:)` for their predicate. Changed and read
    /// only with the lock held, so the lock orders every access and relaxed atomics
    /// suffice.
    var waiters: UInt32 = 0

    init(_ value: consuming Value) {
      self.value = value
    }
  }

  /// The object's first stored property, reached only through the pointers below (never
  /// through the property, so no exclusivity check or copy touches it); destroyed with the
  /// object, which destroys the value.
  private var storage: Storage

  /// Who the lock is to the lock detectors and contention statistics of ``Diagnostics``
  /// (after `storage`, which must stay the first stored property).
  @usableFromInline
  let identity: LockIdentity

  /// The start of `storage`: the first stored property, after the object header, at the
  /// storage's alignment (see ``FutexLock/init(inside:)``).
  @inlinable
  var base: UnsafeMutableRawPointer {
    _getUnsafePointerToStoredProperties(self).alignedUp(toMultipleOf: MemoryLayout<Storage>.alignment)
  }

  /// The offset of the lock's words in `Storage`: right after the value, at the words'
  /// 8-byte alignment.
  @inlinable
  static var wordsOffset: Int { ((MemoryLayout<Value>.size + 7) & ~7) }

  /// `Storage.value`.
  @inlinable
  var value: UnsafeMutablePointer<Value> { base.assumingMemoryBound(to: Value.self) }
  /// The lock.
  @inlinable
  var core: FutexLock { FutexLock(existingWordsAt: base + Self.wordsOffset) }
  /// `Storage.sequence`, right after the lock's words.
  @inlinable
  var sequence: UnsafeMutablePointer<UInt32> {
    (base + Self.wordsOffset + FutexLock.wordsSize).assumingMemoryBound(to: UInt32.self)
  }
  /// `Storage.waiters`, after `sequence`.
  @inlinable
  var waiters: UnsafeMutablePointer<UInt32> {
    (base + Self.wordsOffset + FutexLock.wordsSize + 4).assumingMemoryBound(to: UInt32.self)
  }

  /// Creates the lock, unlocked, protecting `initialValue`. `name` is what diagnostics
  /// reports call it (lock-order cycles, deadlocks, contention statistics; see
  /// ``Diagnostics``); without one they use the creation site, `fileID:line`, which the
  /// defaults capture.
  public init(
    _ initialValue: consuming sending Value, name: String? = nil, fileID: StaticString = #fileID, line: UInt = #line
  ) {
    storage = Storage(initialValue)
    identity = LockIdentity(name: name, fileID: fileID, line: line)
    // The layout the pointers rely on (checked in debug builds, before any other thread
    // can see the object).
    assert(
      withUnsafeMutablePointer(to: &storage.waiters) { UnsafeMutableRawPointer($0) } == UnsafeMutableRawPointer(waiters)
    )
  }

  deinit {
    core.checkNotHeld(typeName: "LockedValue")
    LockDiagnostics.lockWillBeDestroyed(identity)
  }

  /// What diagnostics reports call the lock: the `name` given at creation, else its
  /// creation site (`"Module/File.swift:12"`).
  public var name: String { identity.label }

  // The lock operations behind every `withLock`: the plain futex operation behind one
  // inlined diagnostics check (one relaxed load, a test, a not-taken branch while
  // diagnostics are off), the hooked path outlined.

  /// Polls one `pause` apart before a contended acquisition's backoff: the value shares the
  /// word's line, so taking the lock as soon as it is free costs no extra line move
  /// (measured in ``FutexLock/spin(_:quickPolls:)``).
  @inlinable
  static var quickPolls: Int { 2 }

  /// Acquires, blocking as long as it takes.
  @inlinable
  @inline(__always)
  func acquire() {
    if LockDiagnostics.acquisitionHooksRun {
      _ = acquireHooked(before: .distantFuture)
      return
    }
    core.acquire(spinRounds: Lock.spinRoundsBeforeSleeping, quickPolls: Self.quickPolls, typeName: "LockedValue")
  }

  /// Acquires before `deadline`; returns whether it did.
  @inlinable
  @inline(__always)
  func acquire(before deadline: MonotonicInstant) -> Bool {
    if LockDiagnostics.acquisitionHooksRun { return acquireHooked(before: deadline) }
    return core.acquire(
      before: deadline, spinRounds: Lock.spinRoundsBeforeSleeping, quickPolls: Self.quickPolls, typeName: "LockedValue")
  }

  /// One attempt, never blocks.
  @inlinable
  @inline(__always)
  func tryAcquire() -> Bool {
    if LockDiagnostics.tryAcquisitionHooksRun { return tryAcquireHooked() }
    return core.tryAcquireFree()
  }

  /// Releases (without waking predicate waiters: see ``releaseAfterChange()``).
  @inlinable
  @inline(__always)
  func release() {
    if LockDiagnostics.releaseHooksRun { return releaseHooked() }
    core.release(checkOwner: false, typeName: "LockedValue")
  }

  @usableFromInline
  @inline(never)
  func acquireHooked(before deadline: MonotonicInstant) -> Bool {
    core.acquireHooked(
      identity, before: deadline, spinRounds: Lock.spinRoundsBeforeSleeping, quickPolls: Self.quickPolls,
      typeName: "LockedValue")
  }

  @usableFromInline
  @inline(never)
  func tryAcquireHooked() -> Bool {
    core.tryAcquireHooked(identity)
  }

  @usableFromInline
  @inline(never)
  func releaseHooked() {
    core.releaseHooked(identity, checkOwner: false, typeName: "LockedValue")
  }

  /// Runs `body` with exclusive access to the value and returns its result; the lock is
  /// released however `body` exits. Blocks while another thread holds the lock.
  ///
  /// Stops the process if the calling thread is already inside a `withLock` of this lock.
  @inlinable
  public func withLock<Result: ~Copyable, Failure: Error>(
    _ body: (inout sending Value) throws(Failure) -> sending Result
  ) throws(Failure) -> sending Result {
    acquire()
    defer { releaseAfterChange() }
    return try body(&value.pointee)
  }

  /// Runs `body` with exclusive access to the value if the lock is free right now, and
  /// returns its result; returns nil at once, without running `body`, when another thread
  /// (or the calling thread) holds it. Never blocks.
  @inlinable
  public func withLockIfAvailable<Result: ~Copyable, Failure: Error>(
    _ body: (inout sending Value) throws(Failure) -> sending Result
  ) throws(Failure) -> sending Result? {
    guard tryAcquire() else { return nil }
    defer { releaseAfterChange() }
    return try body(&value.pointee)
  }

  /// Runs `body` with exclusive access to the value if the lock can be acquired before
  /// `deadline` (monotonic clock), and returns its result; returns nil without running
  /// `body` otherwise. A deadline in the past makes one attempt.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func withLock<Result: ~Copyable, Failure: Error>(
    before deadline: MonotonicInstant,
    _ body: (inout sending Value) throws(Failure) -> sending Result
  ) throws(Failure) -> sending Result? {
    guard acquire(before: deadline) else {
      return nil
    }
    defer { releaseAfterChange() }
    return try body(&value.pointee)
  }

  /// Runs `body` with exclusive access to the value if the lock can be acquired within
  /// `timeout` (monotonic clock); see ``withLock(before:_:)``. A zero or negative timeout
  /// makes one attempt.
  @available(*, noasync, message: "blocks the thread")
  @inlinable
  public func withLock<Result: ~Copyable, Failure: Error>(
    timeout: Duration,
    _ body: (inout sending Value) throws(Failure) -> sending Result
  ) throws(Failure) -> sending Result? {
    try withLock(before: .after(timeout), body)
  }

  /// Runs `body` with exclusive access to the value once `condition` holds, and returns its
  /// result (Abseil's `LockWhen`). `condition` and `body` run under the same acquisition of
  /// the lock, so `body` sees the value `condition` accepted.
  ///
  /// Blocks until the lock is free and `condition` returns true. `condition` runs with the
  /// lock held: at once, then each time a `withLock` body of this lock ends on another
  /// thread; it must not change anything `condition` reads other than the value. Stops the
  /// process if the calling thread is already inside a `withLock` of this lock.
  @available(*, noasync, message: "blocks the thread until the condition holds")
  @inlinable
  public func withLock<Result: ~Copyable, Failure: Error>(
    when condition: @Sendable (borrowing Value) -> Bool,
    _ body: (inout sending Value) throws(Failure) -> sending Result
  ) throws(Failure) -> sending Result {
    acquire()
    defer { releaseAfterChange() }
    _ = waitHolding(for: condition, before: .distantFuture)
    return try body(&value.pointee)
  }

  /// Runs `body` with exclusive access to the value once `condition` holds, if that happens
  /// before `deadline` (monotonic clock); returns nil without running `body` otherwise.
  ///
  /// As ``withLock(when:_:)``, with a limit: blocks until `condition` holds or `deadline`
  /// passes. A deadline in the past makes one attempt to take the lock and one evaluation
  /// of `condition`.
  @available(*, noasync, message: "blocks the thread until the condition holds or the deadline passes")
  @inlinable
  public func withLock<Result: ~Copyable, Failure: Error>(
    when condition: @Sendable (borrowing Value) -> Bool,
    before deadline: MonotonicInstant,
    _ body: (inout sending Value) throws(Failure) -> sending Result
  ) throws(Failure) -> sending Result? {
    guard acquire(before: deadline) else {
      return nil
    }
    guard waitHolding(for: condition, before: deadline) else {
      // Nothing changed the value: no waiter needs to hear about this release.
      release()
      return nil
    }
    defer { releaseAfterChange() }
    return try body(&value.pointee)
  }

  /// Runs `body` with exclusive access to the value once `condition` holds, if that happens
  /// within `timeout` (monotonic clock); returns nil without running `body` otherwise.
  ///
  /// As ``withLock(when:before:_:)`` with the deadline `timeout` from now; a zero or
  /// negative timeout makes one attempt.
  @available(*, noasync, message: "blocks the thread until the condition holds or the timeout ends")
  @inlinable
  public func withLock<Result: ~Copyable, Failure: Error>(
    when condition: @Sendable (borrowing Value) -> Bool,
    timeout: Duration,
    _ body: (inout sending Value) throws(Failure) -> sending Result
  ) throws(Failure) -> sending Result? {
    try withLock(when: condition, before: .after(timeout), body)
  }

  /// Releases the lock after a body that may have changed the value, first waking the
  /// predicate waiters if there are any. With nobody waiting this adds one relaxed load of
  /// a word on the cache line the lock word just brought in.
  @inlinable
  @inline(__always)
  func releaseAfterChange() {
    // Relaxed: `waiters` is changed only with the lock held, which we hold, so the lock's
    // acquire/release ordering already makes every waiter's increment visible here.
    if UInt32.atomicLoad(at: waiters, ordering: .relaxed) != 0 {
      wakeWaiters()
    }
    release()
  }

  /// Wakes every predicate waiter (each re-evaluates its predicate under the lock). Called
  /// with the lock held.
  @usableFromInline
  func wakeWaiters() {
    // Relaxed: each waiter read `sequence` with the lock held before releasing it, so this
    // increment (made holding the lock) comes after that read; the kernel's futex wake is
    // ordered after the store (the futex call is a full barrier on x86 and arm64), and a
    // waiter not yet asleep finds the new value in its futex compare and does not sleep.
    _ = UInt32.atomicFetchAdd(1, at: sequence, ordering: .relaxed)
    Futex.wake(sequence, count: Int32.max)
  }

  /// With the lock held: returns true once `condition` holds (lock still held), sleeping
  /// between evaluations, or false when `deadline` passes first (lock held again).
  @usableFromInline
  func waitHolding(
    for condition: @Sendable (borrowing Value) -> Bool, before deadline: MonotonicInstant
  ) -> Bool {
    while !condition(value.pointee) {
      if deadline != .distantFuture, deadline.hasPassed { return false }
      // Read with the lock held: any `withLock` that ends after our release bumps it.
      let seen = UInt32.atomicLoad(at: sequence, ordering: .relaxed)
      _ = UInt32.atomicFetchAdd(1, at: waiters, ordering: .relaxed)
      // The lock stays on the thread's held list (diagnostics) across the wait, as with a
      // condition wait: the body runs under it.
      core.release(checkOwner: false, typeName: "LockedValue")
      _ = LockDiagnostics.conditionWait(identity, before: deadline) {
        _ = Futex.wait(sequence, expected: seen, deadline: deadline)
        return true
      }
      // No spinning: the waker usually still holds the lock while it wakes us.
      core.acquire(spinRounds: 0, typeName: "LockedValue")
      _ = UInt32.atomicFetchAdd(UInt32.max, at: waiters, ordering: .relaxed)
    }
    return true
  }
}
