import CThreadingShims

#if canImport(Glibc)
  import Glibc
#endif

/// The toolkit's run-time diagnostics: detectors that watch the toolkit's own primitives and
/// report what they find (a run-loop callback that stalls its loop, ...), each switched on
/// or off while the program runs, and costing one relaxed load of a global word on the
/// paths that check them when off.
///
/// Every detector is a ``Kind`` with a ``Mode``: ``Mode/off`` (the default),
/// ``Mode/report`` (each ``Finding`` goes to ``reportHandler``, by default one line per
/// finding on standard error with indented detail lines), or ``Mode/stop`` (report, then
/// stop the process: a watchdog for a shipped binary or a test run). Today's kinds:
/// - ``Kind/stalls``: a run-loop callback (timer, source, observer, queued block, executor
///   jobs) that has run longer than ``stallThreshold`` is reported while it still runs,
///   naming the loop's thread, the mode and the item; a second report gives its total when
///   it returns. A monitor thread, started when the first loop runs a callback with stalls
///   on, scans the loops.
/// - ``Kind/lockOrder``: potential deadlocks from lock order. The first acquisition of a
///   diagnosed lock that closes a cycle in the process's acquired-before graph is reported
///   with the locks of the cycle (up to 10, by name or creation site), the threads and where
///   each order was first seen, before the acquisition blocks.
/// - ``Kind/deadlocks``: actual deadlocks. A watchdog thread, started when the kind is
///   switched on, looks every ``deadlockCheckInterval`` for threads parked in diagnosed locks
///   or in `JoinableThread.join()` (Threads module: the joiner waits for the joined thread)
///   that wait for each other in a cycle, and reports each cycle once with the threads'
///   names, what each waits for (a lock, or "joins thread X"; timed waits marked) and what
///   each holds.
/// - ``Kind/heldLockInCallback``: a run-loop callback that returns still holding a diagnosed
///   lock it took.
/// - ``Kind/blockingInTask``: a thread running a task (a thread of Swift's cooperative pool,
///   or of another executor) blocked longer than ``blockingInTaskThreshold`` in a diagnosed
///   lock or condition wait (a ``Condition``, a ``ConditionLock``, or a
///   ``ConditionVariable`` with its ``Lock``), in a ``Semaphore``, ``Latch`` or
///   ``ThreadBarrier`` wait (the classic way to starve the cooperative pool: a task waiting
///   for a signal that only another task, queued behind it, would send), or in a join
///   (`JoinableThread.join()`, Threads module). The watchdog thread (the one
///   ``Kind/deadlocks`` uses) reports each such wait once, while it is still blocked, naming what it waits for,
///   the thread and how long it has waited, at most about a quarter of the threshold after
///   it passed. Off by default and **not** switched by `all` (async code that blocks on
///   purpose, such as a test waiting on a latch, would stop the process): switch it on by
///   name.
///
/// Lock contention statistics (``collectsLockContention``, ``lockContention()``) are not
/// findings either: they are sampled figures per named lock, dumped at exit on request.
///
/// The lock detectors (``Kind/lockOrder``, ``Kind/deadlocks``, ``Kind/heldLockInCallback``,
/// ``Kind/blockingInTask``) watch the toolkit's diagnosed locks (``Lock``, ``RecursiveLock``,
/// ``ReadWriteLock``, ``LockedValue``, ``SpinLock``, ``Condition``, ``ConditionLock`` and
/// the per-object locks of `synchronized`); while any of them (or contention statistics) is on, every
/// lock operation of those types takes an out-of-line path that keeps the thread's held
/// locks; while all are off, the operation pays one relaxed load and a branch. Locks held
/// while they are switched on are tracked from their next acquisition. The semaphore,
/// latch and barrier waits and joins that ``Kind/blockingInTask`` also watches pay the same
/// load and branch, only once they are about to sleep.
///
/// **Fork.** In the child of a `fork()` the lock detectors and contention statistics are off,
/// whatever the environment variable or an API call says: the child has only the forking
/// thread, and the detectors' internal locks may have been copied while another thread held
/// them, so using them there could hang the child. The run-loop kinds keep their settings
/// (run loops themselves are not usable in the child; see the run loop's fork rule).
/// While the watchdog thread (``Kind/deadlocks``, ``Kind/blockingInTask``) is awake and
/// scanning, a `fork()` waits for it to go back to sleep (a scan takes microseconds): the
/// scan makes the Swift runtime instantiate types under the runtime's own locks, and a child
/// copied in the middle of one would hang at its own first use of a new type. The program's
/// other threads are the program's to quiesce: a child of a multithreaded process should do
/// little more than `exec` or `_exit` (POSIX allows only async-signal-safe calls there).
///
/// Run-loop metrics (`RunLoop.metrics` in the RunLoop module) are not findings: each loop
/// switches them on with `metricsEnabled`; ``collectsRunLoopMetrics`` switches them on for
/// every loop created afterwards.
///
/// **Turning it on.** By API at any time (``setMode(_:for:)``, ``stallThreshold``,
/// ``collectsRunLoopMetrics``), or without rebuilding through the environment variable
/// `THREADING_TOOLKIT_DIAGNOSTICS` (``environmentVariable``), read once, at the first
/// diagnostics check of the process; settings made by API apply on top of it. Its value is
/// a comma-separated list of items, without spaces:
///
/// | item | meaning |
/// |---|---|
/// | `KIND` | the kind (for example `stalls`) reports: the same as `KIND=report` |
/// | `KIND=report`, `KIND=stop`, `KIND=off` | the kind's ``Mode`` |
/// | `all`, `all=MODE` | every kind but `blocking-in-task` |
/// | `metrics` | ``collectsRunLoopMetrics``: every run loop collects metrics from its creation |
/// | `stall-ms=N` | ``stallThreshold`` of `N` milliseconds (a positive integer) |
/// | `deadlock-ms=N` | ``deadlockCheckInterval`` of `N` milliseconds (a positive integer) |
/// | `blocking-ms=N` | ``blockingInTaskThreshold`` of `N` milliseconds (a positive integer) |
/// | `contention` | ``collectsLockContention``: lock contention statistics are collected |
/// | `contention-sample=N` | ``lockContentionSampling``: one acquisition in `N` is measured |
/// | `contention-dump`, `contention-dump=text`, `contention-dump=json` | collect contention statistics and write them to standard error when the process exits normally (`exit` or a return from `main`) |
///
/// Later items override earlier ones. Any other value (an unknown name, a bad number, an
/// empty item) stops the process with a message naming the variable, as
/// `THREADING_TOOLKIT_CHECKS` does: a typo must not silently disable a diagnostic.
///
/// ```swift
/// // From the shell:
/// //   THREADING_TOOLKIT_DIAGNOSTICS=stalls,stall-ms=50,metrics ./server
///
/// // Or in code:
/// Diagnostics.stallThreshold = .milliseconds(50)
/// Diagnostics.setMode(.report, for: .stalls)
/// Diagnostics.reportHandler = { finding in log.warning("\(finding)") }
/// ```
///
/// **Adding a detector** (for toolkit contributors): give it a ``Kind`` with the next free
/// index and list it in ``Kind/all`` (the environment parser and `all` pick it up from there; a
/// kind `all` must not switch goes in `Kind.every` only); its checks call ``isOn(_:)`` (one
/// relaxed load) and hand what they find to `Diagnostics.report(_:)` (package-internal), never
/// with a toolkit lock held (the handler is user code). A numeric option takes a free slot of
/// the options block (see `OptionSlot`) and a line in the environment parser; a monitor thread
/// sleeps in `Diagnostics.waitForChange(since:before:)` so a new setting wakes it.
public enum Diagnostics {
  /// What a detector does with what it finds.
  public enum Mode: Hashable, Sendable, CustomStringConvertible {
    /// The detector does not run (its checks cost one relaxed load).
    case off
    /// Each finding goes to ``Diagnostics/reportHandler``; the program goes on.
    case report
    /// Each finding goes to ``Diagnostics/reportHandler``, then the process stops with a
    /// message repeating the finding's summary.
    case stop

    /// `"off"`, `"report"` or `"stop"`: the spelling the environment variable takes.
    public var description: String {
      switch self {
      case .off: "off"
      case .report: "report"
      case .stop: "stop"
      }
    }

    @usableFromInline
    var bits: UInt32 {
      switch self {
      case .off: 0
      case .report: 1
      case .stop: 2
      }
    }

    @usableFromInline
    init(bits: UInt32) {
      switch bits {
      case 1: self = .report
      case 2: self = .stop
      default: self = .off
      }
    }
  }

  /// One detector.
  public struct Kind: Hashable, Sendable, CustomStringConvertible {
    /// The kind's name in reports and in the environment variable (`"stalls"`).
    public let name: String
    /// Its two bits in the switches word start at `index * 2`.
    @usableFromInline
    let index: UInt32

    @usableFromInline
    init(name: String, index: UInt32) {
      self.name = name
      self.index = index
    }

    /// Run-loop callbacks that run longer than ``Diagnostics/stallThreshold``.
    @inlinable
    public static var stalls: Kind { Kind(name: "stalls", index: 0) }

    /// Potential deadlocks: an acquisition that closes a cycle in the lock-order graph.
    /// Environment name `lock-order`.
    @inlinable
    public static var lockOrder: Kind { Kind(name: "lock-order", index: 1) }

    /// Actual deadlocks among threads parked in diagnosed locks and joins, found by a
    /// watchdog thread. Environment name `deadlocks`.
    @inlinable
    public static var deadlocks: Kind { Kind(name: "deadlocks", index: 2) }

    /// A run-loop callback that returns holding a diagnosed lock it took. Environment name
    /// `held-lock-in-callback`.
    @inlinable
    public static var heldLockInCallback: Kind { Kind(name: "held-lock-in-callback", index: 3) }

    /// A thread running a task blocked longer than ``Diagnostics/blockingInTaskThreshold``
    /// in a diagnosed lock or condition wait, a ``Semaphore``, ``Latch`` or
    /// ``ThreadBarrier`` wait, or a join (`JoinableThread.join()`, Threads module).
    /// Environment name `blocking-in-task`; not part of ``all``.
    @inlinable
    public static var blockingInTask: Kind { Kind(name: "blocking-in-task", index: 4) }

    /// The kinds `all` in the environment variable switches, in index order: every kind but
    /// ``blockingInTask`` (async code may block on purpose; switch it on by name).
    public static var all: [Kind] { [.stalls, .lockOrder, .deadlocks, .heldLockInCallback] }

    /// Every kind, in index order (the environment variable's names).
    static var every: [Kind] { all + [.blockingInTask] }

    /// The name.
    public var description: String { name }
  }

  /// The name of the environment variable read once, at the first diagnostics check.
  public static let environmentVariable = "THREADING_TOOLKIT_DIAGNOSTICS"

  // MARK: The switches

  /// The switches word (C static storage): two bits per kind from bit 0 (`Mode.bits`),
  /// `metricsBit`, `contentionBit`, and `undecidedBit`, set at load time (a static
  /// initializer, no code) and cleared once the environment was read. Undecided is a set
  /// bit, not a clear one, so the lock types' inlined check ("undecided, or a lock hook
  /// on?") is one test of one load. Every access is atomic and relaxed: the word publishes
  /// nothing but itself.
  static let undecidedBit: UInt32 = 1 << 31
  static let metricsBit: UInt32 = 1 << 30
  /// ``collectsLockContention``.
  static let contentionBit: UInt32 = 1 << 29
  /// The lock kinds' bits (kinds 1 to 4): while any is set, threads keep their held locks.
  static let lockKindsMask: UInt32 = 0x3FC
  /// The lock hooks' mask: `lockKindsMask` and `contentionBit` (spelled as literals in the
  /// inlined checks of `LockDiagnostics`, and as `TK_DIAGNOSTICS_LOCK_TRACKING_MASK` in the
  /// C fork handler that clears them in a child: a new lock kind changes all of them).
  static let lockTrackingMask: UInt32 = 0x2000_03FC

  /// The switches, the environment applied: one relaxed load once decided (the first call
  /// of the process reads the environment).
  @inlinable
  @inline(__always)
  static func switches() -> UInt32 {
    let word = tk_diagnostics_load_switches()
    // `undecidedBit`, spelled as a literal so the inlined check needs no global's accessor.
    if word & 0x8000_0000 == 0 { return word }
    return decideFromEnvironment()
  }

  /// Whether `kind` is on (reports or stops): the check a toolkit path makes, one relaxed
  /// load of a global word.
  @inlinable
  @inline(__always)
  public static func isOn(_ kind: Kind) -> Bool {
    switches() & (3 << (kind.index * 2)) != 0
  }

  /// Whether `first` or `second` is on: one relaxed load, for a path two detectors watch.
  @inlinable
  @inline(__always)
  package static func isOn(_ first: Kind, or second: Kind) -> Bool {
    switches() & (3 << (first.index * 2) | 3 << (second.index * 2)) != 0
  }

  /// The mode of `kind` now. The first call of the process reads the environment variable.
  public static func mode(of kind: Kind) -> Mode {
    Mode(bits: (switches() >> (kind.index * 2)) & 3)
  }

  /// Sets the mode of `kind`, from any thread, at any time; effective for the checks that
  /// follow (a callback already running when stalls are switched on is not watched).
  public static func setMode(_ mode: Mode, for kind: Kind) {
    let shift = kind.index * 2
    update { ($0 & ~(3 << shift)) | (mode.bits << shift) }
  }

  /// Whether run loops created from now on collect metrics from their creation (their
  /// `metricsEnabled` starts true). Off by default; `metrics` in the environment variable
  /// switches it on. Loops created earlier keep their setting.
  public static var collectsRunLoopMetrics: Bool {
    get { switches() & metricsBit != 0 }
    set { update { newValue ? $0 | metricsBit : $0 & ~metricsBit } }
  }

  /// How long one run-loop callback may run before ``Kind/stalls`` reports it: 250 ms by
  /// default (what Apple's tools call a hang); `stall-ms=N` in the environment variable sets
  /// it. Values below one millisecond are raised to one millisecond. The stall monitor
  /// picks up a change within its current scan interval.
  public static var stallThreshold: Duration {
    get {
      _ = switches()
      let stored = UInt64.atomicLoad(at: OptionSlot.stallThreshold.pointer, ordering: .relaxed)
      return stored == 0 ? defaultStallThreshold : .nanoseconds(Int64(stored))
    }
    set {
      _ = switches()
      let floor = Duration.milliseconds(1)
      let value = newValue < floor ? floor : newValue
      UInt64.atomicStore(
        UInt64(MonotonicInstant.nanoseconds(of: value)), at: OptionSlot.stallThreshold.pointer, ordering: .relaxed)
      wakeWatchers()
    }
  }

  /// Whether diagnosed locks collect contention statistics (see ``lockContention()``).
  /// Off by default; `contention` (or `contention-dump`) in the environment variable
  /// switches it on. One acquisition in ``lockContentionSampling`` is measured.
  public static var collectsLockContention: Bool {
    get { switches() & contentionBit != 0 }
    set { update { newValue ? $0 | contentionBit : $0 & ~contentionBit } }
  }

  /// How often contention statistics measure an acquisition: one in `N` per thread (100 by
  /// default; `contention-sample=N` sets it), each measurement counting `N` times in the
  /// figures (Go's rule for its mutex profile), so the cost stays bounded and the figures
  /// stay unbiased estimates. `1` measures every acquisition. Values below 1 are raised to 1.
  ///
  /// The gap between two measured acquisitions of a thread is drawn at random, 1 to `2N - 1`
  /// (mean `N`), so locks taken in a fixed cycle are each measured. A new value takes effect
  /// at once on the calling thread (its next acquisition is measured) and on every other
  /// thread at its next measured acquisition.
  ///
  /// Values above one billion (the largest `contention-sample=N` accepts) are lowered to it,
  /// so the random gap (up to `2N - 1`) and the figures (each sample counts `N` times) stay
  /// within `Int`.
  public static var lockContentionSampling: Int {
    get {
      _ = switches()
      let stored = UInt64.atomicLoad(at: OptionSlot.contentionSampling.pointer, ordering: .relaxed)
      return stored == 0 ? defaultLockContentionSampling : Int(stored)
    }
    set {
      _ = switches()
      let interval = Swift.min(maximumLockContentionSampling, Swift.max(1, newValue))
      UInt64.atomicStore(UInt64(interval), at: OptionSlot.contentionSampling.pointer, ordering: .relaxed)
      // The calling thread's countdown may have been drawn from the old interval.
      tk_lock_diagnostics_set_countdown(0)
    }
  }

  /// ``lockContentionSampling``'s default.
  public static let defaultLockContentionSampling = 100

  /// The largest ``lockContentionSampling``: one billion (one acquisition in a billion).
  package static let maximumLockContentionSampling = 1_000_000_000

  /// How often the ``Kind/deadlocks`` watchdog looks for threads waiting for each other: 1
  /// second by default; `deadlock-ms=N` in the environment variable sets it. Values below
  /// one millisecond are raised to one millisecond. A deadlock is reported within about two
  /// intervals of forming.
  public static var deadlockCheckInterval: Duration {
    get {
      _ = switches()
      let stored = UInt64.atomicLoad(at: OptionSlot.deadlockInterval.pointer, ordering: .relaxed)
      return stored == 0 ? defaultDeadlockCheckInterval : .nanoseconds(Int64(stored))
    }
    set {
      _ = switches()
      let floor = Duration.milliseconds(1)
      let value = newValue < floor ? floor : newValue
      UInt64.atomicStore(
        UInt64(MonotonicInstant.nanoseconds(of: value)), at: OptionSlot.deadlockInterval.pointer, ordering: .relaxed)
      wakeWatchers()
    }
  }

  /// ``deadlockCheckInterval``'s default.
  public static let defaultDeadlockCheckInterval = Duration.seconds(1)

  /// How long a thread running a task may block in a diagnosed lock or condition wait before
  /// ``Kind/blockingInTask`` reports it: 100 ms by default; `blocking-ms=N` in the
  /// environment variable sets it. Values below one millisecond are raised to one
  /// millisecond. The watchdog picks up a change within its current scan interval.
  public static var blockingInTaskThreshold: Duration {
    get {
      _ = switches()
      let stored = UInt64.atomicLoad(at: OptionSlot.blockingInTaskThreshold.pointer, ordering: .relaxed)
      return stored == 0 ? defaultBlockingInTaskThreshold : .nanoseconds(Int64(stored))
    }
    set {
      _ = switches()
      let floor = Duration.milliseconds(1)
      let value = newValue < floor ? floor : newValue
      UInt64.atomicStore(
        UInt64(MonotonicInstant.nanoseconds(of: value)), at: OptionSlot.blockingInTaskThreshold.pointer,
        ordering: .relaxed)
      wakeWatchers()
    }
  }

  /// ``blockingInTaskThreshold``'s default.
  public static let defaultBlockingInTaskThreshold = Duration.milliseconds(100)

  /// Sleeps until a setting changes (``setMode(_:for:)``, ``collectsRunLoopMetrics``,
  /// ``stallThreshold``) or `deadline` passes, whichever comes first (it may also return
  /// early, spuriously). For detectors' monitor threads, so a new setting applies at once.
  /// `settings` is what the caller last read with ``settings()``: a change made since
  /// then ends the wait at once.
  package static func waitForChange(since settings: UInt32, before deadline: MonotonicInstant) {
    _ = Futex.wait(tk_diagnostics_switches(), expected: settings, deadline: deadline)
  }

  /// The switches word, for ``waitForChange(since:before:)`` and ``isOn(_:in:)``.
  package static func settings() -> UInt32 { switches() }

  /// Whether `kind` is on in `settings` (a word from ``settings()``).
  package static func isOn(_ kind: Kind, in settings: UInt32) -> Bool {
    settings & (3 << (kind.index * 2)) != 0
  }

  /// Wakes the threads in ``waitForChange(since:before:)``.
  static func wakeWatchers() {
    _ = Futex.wake(tk_diagnostics_switches(), count: Int32.max)
  }

  /// ``stallThreshold``'s default.
  public static let defaultStallThreshold = Duration.milliseconds(250)

  /// The numeric options' slots in C static storage (sixteen 64-bit words, zero meaning "the
  /// default"). Relaxed accesses: each option is read on its own, by the detector using it.
  enum OptionSlot: Int32 {
    /// ``stallThreshold`` in nanoseconds.
    case stallThreshold = 0
    /// ``lockContentionSampling``.
    case contentionSampling = 1
    /// ``deadlockCheckInterval`` in nanoseconds.
    case deadlockInterval = 2
    /// Bumped each time the lock hooks go from on to off, so the threads' held-lock lists
    /// recorded before are dropped when they come back on (locks released meanwhile were
    /// not seen).
    case lockEpoch = 3
    /// Non-zero once the lock-order graph has had a node: destroyed locks are then
    /// forgotten (before, a destroyed lock costs one relaxed load).
    case graphUsed = 4
    /// Non-zero once the deadlock watchdog's thread was started (or is being started; a
    /// failed start sets it back to zero).
    case watchdogStarted = 5
    /// The contention dump at exit: 1 text, 2 JSON (set once, with the atexit handler).
    case contentionDump = 6
    /// Bumped each time a lock with entries in the lock-order graph is forgotten: the
    /// threads' caches of checked orders are emptied when they see a new value, so they never
    /// keep entries of destroyed locks.
    case graphGeneration = 7
    /// ``blockingInTaskThreshold`` in nanoseconds.
    case blockingInTaskThreshold = 8
    /// Non-zero once a contention sample was recorded: destroyed locks then leave the
    /// contention table's cache of entries by lock (before, a destroyed lock costs one
    /// relaxed load).
    case contentionUsed = 9
    /// Test seam, zero outside tests: a nonzero value is the error the next watchdog start
    /// takes as `pthread_create`'s result instead of creating the thread.
    case watchdogStartFailureForTesting = 10

    var pointer: UnsafeMutablePointer<UInt64> { tk_diagnostics_option(rawValue) }
  }

  /// `switches` without the lock detectors and contention statistics in the child of a fork
  /// (their internal locks may have been copied held there; see ``Diagnostics``). Stops the
  /// process if a lock detector is asked for and the fork handler that makes this so could
  /// not be registered at load time.
  static func allowedInThisProcess(_ switches: UInt32) -> UInt32 {
    if tk_diagnostics_in_forked_child() != 0 { return switches & ~lockTrackingMask }
    if switches & lockTrackingMask != 0 {
      mustSucceed("Diagnostics: cannot register the fork handler the lock detectors need") {
        () throws(SystemCallError) in
        try pthreadCall("pthread_atfork") { tk_diagnostics_fork_handler_status() }
      }
    }
    return switches
  }

  /// Applies `change` to the decided switches word (a compare-and-swap loop).
  static func update(_ change: (UInt32) -> UInt32) {
    var current = switches()
    while true {
      let desired = allowedInThisProcess(change(current) & ~undecidedBit)
      // Relaxed: the word publishes nothing but itself.
      let seen = UInt32.atomicCompareExchange(
        expected: current, desired: desired, at: tk_diagnostics_switches(), ordering: .relaxed)
      if seen == current {
        if current & lockKindsMask != 0 && desired & lockKindsMask == 0 {
          _ = UInt64.atomicFetchAdd(1, at: OptionSlot.lockEpoch.pointer, ordering: .relaxed)
        }
        if desired & LockDiagnostics.watchdogKindsMask != 0 { LockDiagnostics.startWatchdog(for: desired) }
        wakeWatchers()
        return
      }
      current = seen
    }
  }

  /// Reads the environment variable and decides the word (the first check of the process).
  /// Two first checks may race: both parse the same value, the first to store wins.
  @usableFromInline
  @inline(never)
  static func decideFromEnvironment() -> UInt32 {
    var decided: UInt32 = 0
    var dump: LockContentionFormat? = nil
    if let raw = getenv(environmentVariable) {
      let text = String(cString: raw)
      switch parse(text) {
      case .success(let settings):
        decided |= settings.switches
        if let threshold = settings.stallThreshold {
          UInt64.atomicStore(
            UInt64(MonotonicInstant.nanoseconds(of: threshold)), at: OptionSlot.stallThreshold.pointer,
            ordering: .relaxed)
        }
        if let interval = settings.deadlockCheckInterval {
          UInt64.atomicStore(
            UInt64(MonotonicInstant.nanoseconds(of: interval)), at: OptionSlot.deadlockInterval.pointer,
            ordering: .relaxed)
        }
        if let threshold = settings.blockingInTaskThreshold {
          UInt64.atomicStore(
            UInt64(MonotonicInstant.nanoseconds(of: threshold)), at: OptionSlot.blockingInTaskThreshold.pointer,
            ordering: .relaxed)
        }
        if let sampling = settings.lockContentionSampling {
          UInt64.atomicStore(UInt64(sampling), at: OptionSlot.contentionSampling.pointer, ordering: .relaxed)
        }
        dump = settings.contentionDump
      case .failure(let problem):
        reportMisuse("Diagnostics", "\(environmentVariable)=\(text): \(problem.message)")
      }
    }
    decided = allowedInThisProcess(decided)
    let previous = UInt32.atomicCompareExchange(
      expected: undecidedBit, desired: decided, at: tk_diagnostics_switches(), ordering: .relaxed)
    if previous != undecidedBit { return previous }
    if let dump { LockDiagnostics.dumpContentionAtExit(as: dump) }
    if decided & LockDiagnostics.watchdogKindsMask != 0 { LockDiagnostics.startWatchdog(for: decided) }
    return decided
  }
}
