import CThreadingShims

#if canImport(Glibc)
  import Glibc
#endif

/// Who a diagnosed lock is: a never-reused number (the detectors' key, so a lock created at
/// a destroyed lock's address is a new lock) and what reports call it (the name given at
/// creation, or its creation site `fileID:line`). A trivial value (no reference), so the
/// detectors copy it into a thread's held list and their caches with plain stores, never a
/// retain: a given name is kept in ``LockNames`` under the number, from creation until
/// ``LockDiagnostics/lockWillBeDestroyed(_:)``. Creating an unnamed one costs one relaxed
/// atomic increment and no allocation (the creation site is formatted only when a report or
/// a statistic needs it); a named one also enters the name table.
@usableFromInline
package struct LockIdentity: Sendable {
  /// The process-wide number, never 0, never reused.
  @usableFromInline
  package let id: UInt64
  /// The creation site.
  package let fileID: StaticString
  package let line: UInt
  /// Whether a name was given (it is in ``LockNames``).
  package let isNamed: Bool

  /// A new identity for a lock named `name`, created at `fileID:line`.
  package init(name: String?, fileID: StaticString, line: UInt) {
    id = tk_lock_diagnostics_new_id()
    self.fileID = fileID
    self.line = line
    isNamed = name != nil
    if let name { LockNames.shared.add(name, for: id) }
  }

  /// The identity numbered `id` (from an earlier identity), unnamed, created at
  /// `fileID:line`: for a lock that keeps its identity's parts apart (`synchronized`'s
  /// entries).
  package init(id: UInt64, fileID: StaticString, line: UInt) {
    self.id = id
    self.fileID = fileID
    self.line = line
    isNamed = false
  }

  /// The name given at creation, if any (nil too once the lock was destroyed).
  package var givenName: String? { isNamed ? LockNames.shared.name(of: id) : nil }

  /// What reports and statistics call the lock: its name, else its creation site.
  package var label: String { givenName ?? ReportName.site(fileID: fileID, line: line) }
}

/// What diagnostics reports call a waitable object that is not a diagnosed lock (a
/// ``Semaphore``, ``Latch`` or ``ThreadBarrier``): the name given at creation, else the
/// creation site, as a lock's ``LockIdentity/label``. Kept in the object itself: such names
/// are read only by a report.
struct ReportName: Sendable {
  let given: String?
  let fileID: StaticString
  let line: UInt

  /// The label: `given`, else `fileID:line`.
  var label: String { given ?? Self.site(fileID: fileID, line: line) }

  /// A creation site as reports spell it (`"Module/File.swift:12"`).
  static func site(fileID: StaticString, line: UInt) -> String { "\(fileID):\(line)" }
}

/// The names given to live diagnosed locks, by identity number. A name enters when its lock
/// is created and leaves when it is destroyed; only reports and `name` read it.
package final class LockNames: @unchecked Sendable {
  // @unchecked: `names` is protected by `word`.
  private let word: UnsafeMutablePointer<UInt32>
  private var names: [UInt64: String] = [:]

  private init() {
    word = .allocate(capacity: 1)
    word.initialize(to: 0)
  }

  /// Never freed: the process's one table.
  package static let shared = LockNames()

  func add(_ name: String, for id: UInt64) {
    WordLock.withLock(word) { names[id] = name }
  }

  func remove(_ id: UInt64) {
    // The name is released after the lock.
    let removed = WordLock.withLock(word) { names.removeValue(forKey: id) }
    withExtendedLifetime(removed) {}
  }

  func name(of id: UInt64) -> String? {
    WordLock.withLock(word) { names[id] }
  }

  /// How many names are kept (tests: destroyed locks leave the table).
  package var count: Int { WordLock.withLock(word) { names.count } }
}

/// The hooks a diagnosed lock type calls, and the per-thread record behind the lock
/// detectors (``Diagnostics/Kind/lockOrder``, ``Diagnostics/Kind/deadlocks``,
/// ``Diagnostics/Kind/heldLockInCallback``, ``Diagnostics/Kind/blockingInTask``) and
/// contention statistics
/// (``Diagnostics/collectsLockContention``).
///
/// **How a lock type uses it.** It stores a ``LockIdentity`` and, in each inlined operation,
/// checks ``hooksMayRun`` (one relaxed load of the switches word, one test and a branch
/// while everything is off): while false it runs its plain code; while true it calls its
/// own outlined (`@inline(never)`) hooked operation, which decides with
/// ``diagnosesAcquisition``, ``diagnosesRelease`` or ``tracksHeldLocks`` (with contention
/// statistics alone on, a thread-local countdown picks the sampled acquisitions) and runs
/// either the plain operation or the hook, with the lock's primitive steps as closures
/// (`FutexLock`'s `acquireHooked`, `releaseHooked`, `tryAcquireHooked` do it for the
/// futex-based locks):
///
/// ```swift
/// public func lock() {
///   if LockDiagnostics.hooksMayRun { return lockHooked() }
///   core.acquire(spinRounds: ..., typeName: "Lock")
/// }
/// @usableFromInline @inline(never) func lockHooked() {
///   guard LockDiagnostics.diagnosesAcquisition else { return core.acquire(...) }
///   _ = LockDiagnostics.acquire(identity, before: .distantFuture, holder: { core.ownerTag },
///     tryAcquire: { core.tryAcquire() }, acquire: { core.acquire(before: .distantFuture, ...) })
/// }
/// ```
///
/// Outlining the hooked path as a method of the lock (not a function taking the identity)
/// keeps the inlined code to the check and one call: no copy of the identity at the call
/// site.
///
/// ``acquire(_:before:access:holder:tryAcquire:acquire:)`` checks the lock order before it blocks
/// (so a real deadlock is reported before it hangs), marks the thread as waiting while the
/// lock is taken (the watchdog's wait-for graph), times sampled waits and holds, and pushes
/// the lock on the thread's held list; ``release(_:release:)`` pops it;
/// ``tryAcquire(_:tryAcquire:)`` never reports; ``conditionWait(_:before:wait:)`` marks a
/// condition wait; ``lockWillBeDestroyed(_:)`` (from `deinit`, unconditionally) forgets the
/// lock. A re-entry of a lock the thread already holds (a recursive lock) adds no order.
///
/// **Thread state.** Each thread that runs a hook gets a ``ThreadState`` (reached through an
/// initial-exec thread-local, released at thread exit by a pthread key destructor) and is
/// listed in the registry the watchdog reads. Its held list and its cache of checked orders
/// are the owning thread's alone (no lock, no atomic read-modify-write, no allocation per
/// operation); only a thread about to wait publishes its held list, with its wait record,
/// under the state's own word lock, which the watchdog takes to read them.
@usableFromInline
package enum LockDiagnostics {
  /// Whether a lock operation leaves its inlined fast path for its outlined hooked path:
  /// the environment has not been read yet, or a lock detector or contention statistics are
  /// on. The only diagnostics cost of an inlined lock operation while everything is off:
  /// one relaxed load of the switches word, one test, one branch (never taken). The
  /// outlined path reads the environment if needed and decides with
  /// ``diagnosesAcquisition``, ``diagnosesRelease`` or ``tracksHeldLocks``.
  @inlinable
  @inline(__always)
  static var hooksMayRun: Bool {
    // `Diagnostics.undecidedBit | Diagnostics.lockTrackingMask`, spelled as a literal so
    // the check inlines without a global's accessor.
    tk_diagnostics_load_switches() & 0xA000_03FC != 0
  }

  /// Whether an acquisition takes the hooks under the switches `word`: never with every lock
  /// detector and contention statistics off; with contention statistics alone, only the
  /// thread's sample (the thread-local countdown, decremented here, so one acquisition in
  /// ``Diagnostics/lockContentionSampling`` on average); with a lock detector on, or while
  /// `word` is still undecided (the environment not read yet), always.
  @inlinable
  @inline(__always)
  static func acquisitionTakesHooks(_ word: UInt32) -> Bool {
    // `Diagnostics.undecidedBit | Diagnostics.lockTrackingMask`, spelled as a literal so the
    // check inlines without a global's accessor.
    if word & 0xA000_03FC == 0 { return false }
    // `Diagnostics.undecidedBit | Diagnostics.lockKindsMask` clear: contention statistics
    // alone.
    if word & 0x8000_03FC == 0 { return tk_lock_diagnostics_count_down() != 0 }
    return true
  }

  /// Whether a release takes the hooks under the switches `word`: as
  /// ``acquisitionTakesHooks(_:)``, except that with contention statistics alone only a
  /// thread with an unreleased sampled hold does (one thread-local read).
  @inlinable
  @inline(__always)
  static func releaseTakesHooks(_ word: UInt32) -> Bool {
    if word & 0xA000_03FC == 0 { return false }
    if word & 0x8000_03FC == 0 { return tk_lock_diagnostics_sampled_holds() != 0 }
    return true
  }

  /// Whether a blocking or timed acquisition leaves its inlined fast path for its outlined
  /// hooked path (``acquisitionTakesHooks(_:)`` on the switches as they are, undecided or
  /// not). Everything off: ``hooksMayRun``'s one load, test and branch; contention
  /// statistics alone: also the inline countdown, so only samples make the outlined call.
  /// The outlined path decides again with ``diagnosesAcquisition`` (it may have to read the
  /// environment first); for a sample that counts down once more, which keeps it a sample:
  /// the countdown stays at or below zero until `ThreadState.sample` sets it anew.
  @inlinable
  @inline(__always)
  static var acquisitionHooksRun: Bool {
    acquisitionTakesHooks(tk_diagnostics_load_switches())
  }

  /// Whether a release leaves its inlined fast path for its outlined hooked path
  /// (``releaseTakesHooks(_:)`` on the switches as they are).
  @inlinable
  @inline(__always)
  static var releaseHooksRun: Bool {
    releaseTakesHooks(tk_diagnostics_load_switches())
  }

  /// Whether a `tryLock` leaves its inlined fast path for its outlined hooked path: a lock
  /// detector is on or the environment was not read yet (contention statistics do not count
  /// `tryLock`).
  @inlinable
  @inline(__always)
  static var tryAcquisitionHooksRun: Bool {
    tk_diagnostics_load_switches() & 0x8000_03FC != 0
  }

  /// Whether the lock hooks run: some lock detector or contention statistics are on. One
  /// relaxed load of the switches word, inlined into the lock types' public inlinable
  /// operations (hence internal, not package: see ``trackingIsOn``).
  @inlinable
  @inline(__always)
  static var isTracking: Bool {
    // `Diagnostics.lockTrackingMask`, spelled as a literal so the check inlines.
    Diagnostics.switches() & 0x2000_03FC != 0
  }

  /// Whether an acquisition takes the diagnosed path: a lock detector is on, or contention
  /// statistics alone are on and this acquisition is the thread's sample (a thread-local
  /// countdown, decremented inline). Off: one relaxed load and a branch.
  @inlinable
  @inline(__always)
  static var diagnosesAcquisition: Bool {
    acquisitionTakesHooks(Diagnostics.switches())
  }

  /// Whether a release takes the diagnosed path: a lock detector is on, or contention
  /// statistics are on and the thread has an unreleased sampled hold.
  @inlinable
  @inline(__always)
  static var diagnosesRelease: Bool {
    releaseTakesHooks(Diagnostics.switches())
  }

  /// Whether a `tryLock` takes the diagnosed path: a lock detector is on (contention
  /// statistics do not count `tryLock`).
  @inlinable
  @inline(__always)
  static var tracksHeldLocks: Bool {
    Diagnostics.switches() & 0x3FC != 0
  }

  /// ``isTracking``, for diagnosed lock types outside Sync (tests).
  @inline(__always)
  package static var trackingIsOn: Bool { isTracking }

  // MARK: Hooks

  /// The diagnosed path of a blocking acquisition of `lock` before `deadline`: `tryAcquire`
  /// is the lock's non-blocking attempt, `acquire` its blocking one (returning false when the
  /// deadline passed), `holder` reads the holder's thread identity (`tk_thread_identity`,
  /// 0 if unknown) when the attempt failed. Returns what `acquire` returned (true when the
  /// attempt succeeded). Reports a lock-order cycle before blocking; in ``Diagnostics/Mode/stop``
  /// mode the process stops there.
  /// `access` says how a ``ReadWriteLock`` is taken (``LockAccess/read`` or
  /// ``LockAccess/write``; the watchdog's edges differ); every other lock is
  /// ``LockAccess/exclusive``.
  package static func acquire(
    _ lock: LockIdentity, before deadline: MonotonicInstant, access: LockAccess = .exclusive, holder: () -> UInt64,
    tryAcquire: () -> Bool, acquire: () -> Bool
  ) -> Bool {
    let settings = Diagnostics.settings()
    // Guaranteed without a retain: the thread's state lives until the thread exits (its
    // key's destructor), so it outlives this call.
    return ThreadState.current(settings: settings)._withUnsafeGuaranteedRef { state in
      acquireTracked(
        lock, before: deadline, access: access, settings: settings, state: state, holder: holder,
        tryAcquire: tryAcquire, acquire: acquire)
    }
  }

  /// ``acquire(_:before:access:holder:tryAcquire:acquire:)`` on the calling thread's `state`.
  private static func acquireTracked(
    _ lock: LockIdentity, before deadline: MonotonicInstant, access: LockAccess, settings: UInt32,
    state: ThreadState, holder: () -> UInt64, tryAcquire: () -> Bool, acquire: () -> Bool
  ) -> Bool {
    let tracksHeld = settings & Diagnostics.lockKindsMask != 0
    // `Kind.lockOrder`'s bits (index 1), as a mask.
    if settings & 0xC != 0 && !state.holds(lock.id) {
      if let finding = OrderGraph.shared.check(acquiring: lock, on: state) {
        Diagnostics.report(finding)
      }
    }
    let weight = settings & Diagnostics.contentionBit != 0 ? state.sample(countedDown: !tracksHeld) : 0
    var acquired = true
    var waited: Int64 = -1
    var holderName: String? = nil
    if !tryAcquire() {
      let holderID = holder()
      // 0: the holder released the lock in between (no thread to blame).
      if weight != 0 && holderID != 0 { holderName = ThreadRegistry.shared.name(of: holderID) }
      let start = weight != 0 ? MonotonicInstant.now.nanoseconds : 0
      if tracksHeld {
        state.setWaiting(
          WaitRecord(lock: lock, access: access, deadline: deadline, inTask: blockingInTaskIsOn(settings) && isInTask())
        )
      }
      acquired = acquire()
      if tracksHeld { state.setWaiting(nil) }
      if weight != 0 { waited = MonotonicInstant.now.nanoseconds - start }
    }
    // A sampled acquisition that did not wait is counted with its hold, at the release: one
    // section of the contention table per sample instead of two.
    let countedAtRelease = weight != 0 && acquired && waited < 0
    if weight != 0 && !countedAtRelease {
      ContentionTable.shared.recordAcquisition(
        of: lock, weight: weight, waited: waited, holder: holderName, acquired: acquired)
    }
    if acquired {
      let holdStart = weight != 0 ? Swift.max(1, MonotonicInstant.now.nanoseconds) : 0
      state.push(
        lock, holdStart: holdStart, weight: weight, tracksHeld: tracksHeld, isRead: access == .read,
        countsAcquisition: countedAtRelease)
    }
    return acquired
  }

  /// The diagnosed path of a non-blocking attempt: never reports (a `tryLock` cannot
  /// deadlock); a taken lock joins the held list, so locks taken while holding it are
  /// ordered after it.
  package static func tryAcquire(_ lock: LockIdentity, access: LockAccess = .exclusive, tryAcquire: () -> Bool)
    -> Bool
  {
    guard tryAcquire() else { return false }
    let settings = Diagnostics.settings()
    ThreadState.current(settings: settings)._withUnsafeGuaranteedRef { state in
      state.push(
        lock, holdStart: 0, weight: 0, tracksHeld: settings & Diagnostics.lockKindsMask != 0, isRead: access == .read)
    }
    return true
  }

  /// The diagnosed path of a release: pops `lock` from the held list (the latest entry for
  /// it; releases need not be in reverse order), records a sampled hold time, then runs
  /// `release`. A lock the list does not have (taken while the hooks were off) is just
  /// released.
  package static func release(_ lock: LockIdentity, release: () -> Void) {
    if let raw = tk_lock_diagnostics_state() {
      // Guaranteed without a retain: see `acquire`.
      let popped = Unmanaged<ThreadState>.fromOpaque(raw)._withUnsafeGuaranteedRef { $0.pop(lock.id) }
      if popped.holdStart != 0 {
        let held = MonotonicInstant.now.nanoseconds - popped.holdStart
        ContentionTable.shared.recordHold(
          of: lock, nanoseconds: held, weight: popped.weight, countsAcquisition: popped.countsAcquisition)
      }
    }
    release()
  }

  /// The diagnosed path of a condition wait on `lock`'s condition: the thread is marked as
  /// waiting for a notification (listed by the watchdog, never an edge of the wait-for
  /// graph: any thread may notify) while `wait` runs. The lock stays on the held list: it
  /// is re-acquired before the wait returns.
  package static func conditionWait(_ lock: LockIdentity, before deadline: MonotonicInstant, wait: () -> Bool)
    -> Bool
  {
    let settings = Diagnostics.settings()
    guard settings & Diagnostics.lockKindsMask != 0 else { return wait() }
    let state = ThreadState.current(settings: settings).takeUnretainedValue()
    state.setWaiting(
      WaitRecord(conditionOf: lock, deadline: deadline, inTask: blockingInTaskIsOn(settings) && isInTask()))
    let result = wait()
    state.setWaiting(nil)
    return result
  }

  /// Forgets `lock`'s entries in the lock-order graph and its name. Lock types call it from
  /// `deinit` unconditionally: for an unnamed lock it costs one relaxed load unless the
  /// graph was ever used.
  @inline(__always)
  package static func lockWillBeDestroyed(_ lock: LockIdentity) {
    if lock.isNamed { LockNames.shared.remove(lock.id) }
    if UInt64.atomicLoad(at: Diagnostics.OptionSlot.graphUsed.pointer, ordering: .relaxed) != 0 {
      OrderGraph.shared.forget(lock.id)
    }
    if UInt64.atomicLoad(at: Diagnostics.OptionSlot.contentionUsed.pointer, ordering: .relaxed) != 0 {
      ContentionTable.shared.forget(lock.id)
    }
  }

  // MARK: Blocking in a task

  /// Whether ``Diagnostics/Kind/blockingInTask`` is on in `settings`.
  @inline(__always)
  static func blockingInTaskIsOn(_ settings: UInt32) -> Bool {
    settings & (3 << (Diagnostics.Kind.blockingInTask.index * 2)) != 0
  }

  /// Whether the calling thread is running a task now (a thread of Swift's cooperative pool,
  /// or an executor's thread, inside a job). One runtime call reading a thread-local; made
  /// only on a diagnosed path about to block.
  static func isInTask() -> Bool {
    withUnsafeCurrentTask { $0 != nil }
  }

  /// Runs `wait`, a wait that no lock is part of (a ``Semaphore``'s permit, a ``Latch``'s
  /// opening, a ``ThreadBarrier``'s other parties) about to sleep: while
  /// ``Diagnostics/Kind/blockingInTask`` is on and the calling thread runs a task, the
  /// thread is marked as waiting for `what` meanwhile, so the watchdog reports the wait once
  /// it has lasted the threshold. Such a wait is never an edge of the deadlock detector's
  /// wait-for graph: any thread may end it. Off, one relaxed load and a branch before
  /// `wait`, on a path that is about to sleep in the kernel anyway.
  @inline(__always)
  static func blockingWait<Result>(
    _ what: @autoclosure () -> String, before deadline: MonotonicInstant, wait: () -> Result
  ) -> Result {
    // `Diagnostics.undecidedBit` and the bits of kind 4 (blocking in a task), spelled as a
    // literal so the check needs no global's accessor.
    guard tk_diagnostics_load_switches() & 0x8000_0300 != 0 else { return wait() }
    return blockingWaitHooked(what(), before: deadline, wait: wait)
  }

  /// The hooked path of ``blockingWait(_:before:wait:)``: the environment has not been read
  /// yet, or ``Diagnostics/Kind/blockingInTask`` is on.
  static func blockingWaitHooked<Result>(
    _ what: @autoclosure () -> String, before deadline: MonotonicInstant, wait: () -> Result
  ) -> Result {
    let settings = Diagnostics.settings()
    guard blockingInTaskIsOn(settings), isInTask() else { return wait() }
    let state = ThreadState.current(settings: settings).takeUnretainedValue()
    state.setWaiting(WaitRecord(waitingFor: what(), deadline: deadline))
    let result = wait()
    state.setWaiting(nil)
    return result
  }

  // MARK: Joins

  /// Whether a join takes its hooked path (``join(thread:name:wait:)``): the environment has
  /// not been read yet, or a lock detector is on. One relaxed load, a test and a branch, as
  /// the locks' ``hooksMayRun``; for `JoinableThread.join()` in the Threads module.
  @inlinable
  @inline(__always)
  package static var joinHooksMayRun: Bool {
    // `Diagnostics.undecidedBit` and the bits of kinds 1 to 4 (lock order, deadlocks, held
    // lock in callback, blocking in a task), spelled as a literal so the check inlines
    // without a global's accessor.
    tk_diagnostics_load_switches() & 0x8000_03FC != 0
  }

  /// The hooked path of a join: while a lock detector is on, the calling thread is marked as
  /// waiting for the end of the thread with identity `thread` (its `tk_thread_identity`),
  /// named `name` (empty when unnamed), while `wait` (the blocking join) runs, so the
  /// ``Diagnostics/Kind/deadlocks`` watchdog follows the join as an edge of its wait-for
  /// graph: the joiner waits for the joined thread, and a join inside a task is watched by
  /// ``Diagnostics/Kind/blockingInTask``. Otherwise it just runs `wait`.
  @usableFromInline
  package static func join(thread: UInt64, name: String, wait: () -> Void) {
    let settings = Diagnostics.settings()
    guard settings & Diagnostics.lockKindsMask != 0 else { return wait() }
    let state = ThreadState.current(settings: settings).takeUnretainedValue()
    state.setWaiting(WaitRecord(joining: thread, name: name, inTask: blockingInTaskIsOn(settings) && isInTask()))
    wait()
    state.setWaiting(nil)
  }

  // MARK: Held locks, for the run loop

  /// How many diagnosed locks the calling thread holds (0 while the lock detectors are off,
  /// or before its first tracked operation).
  package static func heldCount() -> Int {
    ThreadState.existing()?.heldCount ?? 0
  }

  /// The labels of the locks the calling thread holds, from position `start` of its held
  /// list (oldest first).
  package static func heldLabels(from start: Int) -> [String] {
    ThreadState.existing()?.heldLabels(from: start) ?? []
  }

  /// How many locks the lock-order graph has now (destroyed locks leave it).
  package static func orderGraphSize() -> Int {
    OrderGraph.shared.nodeCount()
  }

  // MARK: Thread names

  /// `"name" (#identity)` for a thread's cached name, or `thread #identity` when unnamed.
  static func describeThread(name: String, identity: UInt64) -> String {
    name.isEmpty ? "thread #\(identity)" : "\"\(name)\" (#\(identity))"
  }
}

/// How a diagnosed acquisition takes its lock.
package enum LockAccess {
  /// A lock with one holder at a time (every lock type but ``ReadWriteLock``).
  case exclusive
  /// A ``ReadWriteLock``'s read lock (shared).
  case read
  /// A ``ReadWriteLock``'s write lock.
  case write
}

/// What a parked thread waits for.
struct WaitRecord {
  /// What the wait ends with.
  enum Target {
    /// The lock itself (held by one thread).
    case lock(LockIdentity)
    /// A read lock of a ``ReadWriteLock``: it waits for the writer holding it, or for the
    /// writers waiting for it (they go first).
    case read(LockIdentity)
    /// The write lock of a ``ReadWriteLock``: it waits for the writer or the readers
    /// holding it.
    case write(LockIdentity)
    /// A notification of the lock's condition (from any thread: never an edge of the
    /// wait-for graph).
    case condition(LockIdentity)
    /// The end of the thread with identity `thread` (`tk_thread_identity`), named `name`
    /// (empty when unnamed): a join.
    case join(thread: UInt64, name: String)
    /// A wait no lock is part of, as the report words it ("a permit of a Semaphore"): a
    /// semaphore's permit, a latch's opening, a barrier's other parties. Any thread may end
    /// it, so it is never an edge of the wait-for graph.
    case signal(String)
  }

  let target: Target
  let deadline: MonotonicInstant
  let since = MonotonicInstant.now

  /// The wait runs inside a task (``Diagnostics/Kind/blockingInTask`` watches it).
  let inTask: Bool

  init(lock: LockIdentity, access: LockAccess, deadline: MonotonicInstant, inTask: Bool = false) {
    switch access {
    case .exclusive: target = .lock(lock)
    case .read: target = .read(lock)
    case .write: target = .write(lock)
    }
    self.deadline = deadline
    self.inTask = inTask
  }

  init(conditionOf lock: LockIdentity, deadline: MonotonicInstant, inTask: Bool = false) {
    target = .condition(lock)
    self.deadline = deadline
    self.inTask = inTask
  }

  init(joining thread: UInt64, name: String, inTask: Bool = false) {
    target = .join(thread: thread, name: name)
    deadline = .distantFuture
    self.inTask = inTask
  }

  /// A wait inside a task for `what` (see ``Target/signal(_:)``).
  init(waitingFor what: String, deadline: MonotonicInstant) {
    target = .signal(what)
    self.deadline = deadline
    inTask = true
  }

  /// The lock whose condition the thread waits for, if it waits for a notification: that
  /// lock is not held during the wait.
  var conditionLock: UInt64? {
    if case .condition(let lock) = target { return lock.id }
    return nil
  }
}

/// One entry of a thread's held list: trivial, so pushing and popping are plain stores.
struct HeldLock {
  let lock: LockIdentity
  /// When a sampled hold began (nanoseconds, monotonic), 0 when not sampled.
  let holdStart: Int64
  /// The sample's weight (contention sampling interval) when sampled.
  let weight: Int
  /// A ``ReadWriteLock``'s read lock (shared with other readers), for the watchdog.
  var isRead = false
  /// A sampled acquisition that did not wait, counted when the hold is recorded.
  var countsAcquisition = false
}

/// One slot of a thread's cache of checked lock orders: the order `from -> to` is in the
/// graph (or was reported) as of graph generation `generation`.
struct CheckedOrder {
  var from: UInt64 = 0
  var to: UInt64 = 0
  var generation: UInt64 = 0
}

/// One thread's lock-diagnostics state (see ``LockDiagnostics``).
///
/// **Owner-private, lock-free per operation.** The held list is a buffer the owning thread
/// alone reads and writes (plain loads and stores, no lock, no allocation once it has the
/// thread's deepest nesting: it starts with room for `initialCapacity` locks and doubles
/// when full). The cache of checked orders is a fixed direct-mapped table the owner alone
/// uses. What the watchdog needs, it gets only from a thread that is about to wait:
/// `setWaiting` publishes a copy of the held list with the wait record under the state's
/// word lock (a blocking path, where a copy costs nothing next to the sleep), and
/// `setWaiting(nil)` withdraws it. A deadlock cycle consists of waiting threads only, so
/// the watchdog sees every thread and lock of a cycle.
final class ThreadState: @unchecked Sendable {
  // Dynamic exclusivity checks are off for the mutable properties: the access rules below
  // (one owning thread; the word lock for what the watchdog reads) already exclude
  // overlapping accesses, and the checks would cost every diagnosed lock operation.
  // @unchecked: `published` and `waiting` are protected by `word` (the owning thread
  // writes them, the watchdog reads them); everything else mutable is touched by the
  // owning thread only; the rest is immutable.
  let word: UnsafeMutablePointer<UInt32>
  /// The held locks, oldest first: `heldCount` entries of a buffer of `heldCapacity`.
  @exclusivity(unchecked)
  private var held: UnsafeMutablePointer<HeldLock>
  @exclusivity(unchecked)
  private var heldCapacity: Int
  @exclusivity(unchecked)
  private(set) var heldCount = 0
  /// The held list as of the current wait (empty when not waiting), for the watchdog.
  @exclusivity(unchecked)
  private var published: [HeldLock] = []
  @exclusivity(unchecked)
  private var waiting: WaitRecord? = nil
  /// The lock epoch the held list belongs to (see `Diagnostics.OptionSlot.lockEpoch`).
  @exclusivity(unchecked)
  private var epoch: UInt64
  /// Sampled holds outside the held list (contention statistics alone keep no list).
  @exclusivity(unchecked)
  private var sampledHolds: [HeldLock] = []
  /// ``nextRandom()``'s state, never 0.
  @exclusivity(unchecked)
  private var randomState: UInt64 = {
    var system = SystemRandomNumberGenerator()
    return system.next() | 1
  }()
  /// Lock-order edges this thread knows are in the graph (or were reported): a
  /// direct-mapped table of `orderCacheSize` slots, each stamped with the graph generation
  /// it was filled in, so a lock with orders being destroyed (a new generation) empties it
  /// without touching it, and it never keeps a destroyed lock's entries. A hit is the
  /// steady state's only cost: one multiply for the slot, three compares.
  private let checkedOrders: UnsafeMutablePointer<CheckedOrder>
  static let orderCacheSize = 512
  static let initialCapacity = 16
  /// The thread's identity (`tk_thread_identity`) and its name when the state was made.
  let identity: UInt64
  let name: String

  private init() {
    word = .allocate(capacity: 1)
    word.initialize(to: 0)
    held = .allocate(capacity: ThreadState.initialCapacity)
    heldCapacity = ThreadState.initialCapacity
    checkedOrders = .allocate(capacity: ThreadState.orderCacheSize)
    // Generation 0 never matches: the graph's generation starts at 1 for the cache (see
    // `check`), so an empty slot is never a hit.
    checkedOrders.initialize(repeating: CheckedOrder(), count: ThreadState.orderCacheSize)
    epoch = UInt64.atomicLoad(at: Diagnostics.OptionSlot.lockEpoch.pointer, ordering: .relaxed)
    identity = tk_thread_identity()
    var buffer = [CChar](repeating: 0, count: 16)
    // The name as the kernel has it (the toolkit's `Thread.name` sets it); an unnamed thread
    // or a failing call gives an empty name, and reports use the identity.
    let result = buffer.withUnsafeMutableBufferPointer { tk_thread_get_name($0.baseAddress!, 16) }
    name = result == 0 ? String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : ""
  }

  deinit {
    word.deallocate()
    held.deinitialize(count: heldCount)
    held.deallocate()
    checkedOrders.deinitialize(count: ThreadState.orderCacheSize)
    checkedOrders.deallocate()
  }

  var description: String { LockDiagnostics.describeThread(name: name, identity: identity) }

  /// The calling thread's state, made and registered on first use; its held list emptied
  /// if the lock detectors were switched off since it was last used.
  @inline(__always)
  static func current(settings: UInt32) -> Unmanaged<ThreadState> {
    let state: Unmanaged<ThreadState>
    if let raw = tk_lock_diagnostics_state() {
      state = Unmanaged<ThreadState>.fromOpaque(raw)
    } else {
      state = Unmanaged.passUnretained(make())
    }
    let epoch = UInt64.atomicLoad(at: Diagnostics.OptionSlot.lockEpoch.pointer, ordering: .relaxed)
    state._withUnsafeGuaranteedRef { if epoch != $0.epoch { $0.restart(epoch: epoch) } }
    return state
  }

  /// Empties the held list and the sampled holds: the lock detectors were switched off
  /// since they were recorded.
  @inline(never)
  private func restart(epoch: UInt64) {
    self.epoch = epoch
    held.deinitialize(count: heldCount)
    heldCount = 0
    tk_lock_diagnostics_add_sampled_holds(-Int64(sampledHolds.count))
    sampledHolds.removeAll()
  }

  /// The calling thread's state if it has one.
  static func existing() -> ThreadState? {
    tk_lock_diagnostics_state().map { Unmanaged<ThreadState>.fromOpaque($0).takeUnretainedValue() }
  }

  @inline(never)
  private static func make() -> ThreadState {
    let state = ThreadState()
    let raw = Unmanaged.passRetained(state).toOpaque()
    tk_lock_diagnostics_set_state(raw)
    // The key's destructor releases the state at thread exit. Without a key (the process ran
    // out of them) the state lives as long as the process and stays listed.
    // ENOMEM from pthread_setspecific: no destructor for this thread either; the state
    // stays listed (see above).
    if let key = stateKey, pthread_setspecific(key, raw) != 0 {}
    ThreadRegistry.shared.add(state)
    return state
  }

  /// The pthread key whose destructor unregisters and releases a thread's state.
  static let stateKey: pthread_key_t? = {
    var key = pthread_key_t()
    let result = pthread_key_create(&key) { raw in
      guard let raw else { return }
      let state = Unmanaged<ThreadState>.fromOpaque(raw)
      ThreadRegistry.shared.remove(state.takeUnretainedValue().identity)
      tk_lock_diagnostics_set_state(nil)
      state.release()
    }
    // EAGAIN: the process's keys are used up; states are then never released (see `make`).
    return result == 0 ? key : nil
  }()

  // MARK: The owning thread

  /// Whether the held list has `id` (a re-entry of a recursive lock).
  func holds(_ id: UInt64) -> Bool {
    var index = heldCount
    while index > 0 {
      index -= 1
      if held[index].lock.id == id { return true }
    }
    return false
  }

  /// The held lock at `index` (oldest first).
  func heldLock(at index: Int) -> LockIdentity {
    held[index].lock
  }

  /// The slot of the order `from -> to` in the cache of checked orders.
  @inline(__always)
  private func orderSlot(from: UInt64, to: UInt64) -> UnsafeMutablePointer<CheckedOrder> {
    // A multiplicative hash of both ends (the odd constants of Fibonacci hashing), its top
    // bits picking the slot.
    let mixed = (from &* 0x9E37_79B9_7F4A_7C15) ^ (to &* 0xC2B2_AE3D_27D4_EB4F)
    return checkedOrders + Int(truncatingIfNeeded: mixed >> 55) & (ThreadState.orderCacheSize - 1)
  }

  /// Whether this thread knows the order `from -> to` was checked in graph `generation`.
  @inline(__always)
  func hasChecked(from: UInt64, to: UInt64, generation: UInt64) -> Bool {
    let slot = orderSlot(from: from, to: to)
    return slot.pointee.from == from && slot.pointee.to == to && slot.pointee.generation == generation
  }

  /// Remembers that the order `from -> to` is in the graph (or was reported) as of
  /// `generation`, replacing whatever order shared its slot.
  func markChecked(from: UInt64, to: UInt64, generation: UInt64) {
    orderSlot(from: from, to: to).pointee = CheckedOrder(from: from, to: to, generation: generation)
  }

  /// The contention sample's weight for this acquisition, or 0 when it is not sampled.
  /// `countedDown`: the inlined check already counted it down to a sample (contention
  /// statistics alone are on).
  ///
  /// The next sample is drawn at random, uniformly 1 to `2N - 1` acquisitions on (mean N,
  /// the sampling interval), so a thread that takes several locks in a fixed cycle samples
  /// each of them, not always the same one: with a fixed countdown, two locks taken in turn
  /// under an even N would show one lock only. A changed interval takes effect on each
  /// thread at its next sample.
  func sample(countedDown: Bool) -> Int {
    if !countedDown && tk_lock_diagnostics_count_down() == 0 { return 0 }
    let interval = Diagnostics.lockContentionSampling
    tk_lock_diagnostics_set_countdown(interval <= 1 ? 1 : Int64(1 + nextRandom() % UInt64(2 * interval - 1)))
    return interval
  }

  /// The thread's xorshift64* generator (sampling needs spread, not secrecy), seeded from
  /// the system's generator when the state is made.
  private func nextRandom() -> UInt64 {
    randomState ^= randomState >> 12
    randomState ^= randomState << 25
    randomState ^= randomState >> 27
    return randomState &* 0x2545_F491_4F6C_DD1D
  }

  func push(
    _ lock: LockIdentity, holdStart: Int64, weight: Int, tracksHeld: Bool, isRead: Bool = false,
    countsAcquisition: Bool = false
  ) {
    let entry = HeldLock(
      lock: lock, holdStart: holdStart, weight: weight, isRead: isRead, countsAcquisition: countsAcquisition)
    if tracksHeld {
      if heldCount == heldCapacity { grow() }
      (held + heldCount).initialize(to: entry)
      heldCount += 1
    } else if holdStart != 0 {
      sampledHolds.append(entry)
      tk_lock_diagnostics_add_sampled_holds(1)
    }
  }

  /// Doubles the held list's buffer (a thread holding more locks at once than ever before).
  @inline(never)
  private func grow() {
    let bigger = UnsafeMutablePointer<HeldLock>.allocate(capacity: heldCapacity * 2)
    bigger.moveInitialize(from: held, count: heldCount)
    held.deallocate()
    held = bigger
    heldCapacity *= 2
  }

  /// Removes the latest entry for `id` (releases need not be in reverse order; usually it
  /// is the last) and returns its sampled hold's start and weight ((0, 0) when the hold was
  /// not sampled or `id` is not held).
  func pop(_ id: UInt64) -> (holdStart: Int64, weight: Int, countsAcquisition: Bool) {
    if heldCount > 0 && held[heldCount - 1].lock.id == id {
      heldCount -= 1
      return (held[heldCount].holdStart, held[heldCount].weight, held[heldCount].countsAcquisition)
    }
    var index = heldCount
    while index > 0 {
      index -= 1
      if held[index].lock.id == id {
        let entry = (held + index).move()
        (held + index).moveInitialize(from: held + index + 1, count: heldCount - index - 1)
        heldCount -= 1
        return (entry.holdStart, entry.weight, entry.countsAcquisition)
      }
    }
    if !sampledHolds.isEmpty, let index = sampledHolds.lastIndex(where: { $0.lock.id == id }) {
      tk_lock_diagnostics_add_sampled_holds(-1)
      let entry = sampledHolds.remove(at: index)
      return (entry.holdStart, entry.weight, entry.countsAcquisition)
    }
    return (0, 0, false)
  }

  /// Marks the thread as waiting (`record`) with its held locks, for the watchdog, or as no
  /// longer waiting (nil).
  func setWaiting(_ record: WaitRecord?) {
    var locks = record == nil ? [] : Array(UnsafeBufferPointer(start: held, count: heldCount))
    var record = record
    WordLock.withLock(word) {
      swap(&waiting, &record)
      swap(&published, &locks)
    }
    // `locks` and `record` (now the previous ones) are released here, after the lock.
  }

  func heldLabels(from start: Int) -> [String] {
    start < heldCount ? (start..<heldCount).map { held[$0].lock.label } : []
  }

  // MARK: Any thread

  /// What the watchdog reads: the wait record and the locks held at that wait, taken
  /// together (no locks while the thread does not wait).
  func snapshot() -> (held: [HeldLock], waiting: WaitRecord?) {
    WordLock.withLock(word) { (published, waiting) }
  }
}

/// The states of the threads that ran a lock hook and have not exited, by identity.
final class ThreadRegistry: @unchecked Sendable {
  // @unchecked: `states` is protected by `word`.
  private let word: UnsafeMutablePointer<UInt32>
  private var states: [UInt64: ThreadState] = [:]

  private init() {
    word = .allocate(capacity: 1)
    word.initialize(to: 0)
  }

  /// Never freed: the process's one registry.
  static let shared = ThreadRegistry()

  func add(_ state: ThreadState) {
    WordLock.withLock(word) { states[state.identity] = state }
  }

  func remove(_ identity: UInt64) {
    // The removed state is released by the caller, after this lock.
    let removed = WordLock.withLock(word) { states.removeValue(forKey: identity) }
    withExtendedLifetime(removed) {}
  }

  /// The registered states (strong references, taken under the lock).
  func all() -> [ThreadState] {
    WordLock.withLock(word) { Array(states.values) }
  }

  /// How reports name the thread with `identity`.
  func name(of identity: UInt64) -> String {
    if identity == 0 { return "unknown thread" }
    let state = WordLock.withLock(word) { states[identity] }
    return LockDiagnostics.describeThread(name: state?.name ?? "", identity: identity)
  }
}
