import CThreadingShims
import Sync
import Threads

/// A thread's event loop: waits for custom sources, timers, queued blocks and explicit
/// wake-ups, and dispatches them on its thread (the guide's run loop, with Core Foundation's
/// semantics and thread-safety rule).
///
/// Every thread has exactly one run loop, created on first use through ``current`` and
/// released when the thread ends; the main thread's run loop is reachable from any thread as
/// ``main``. A run loop does nothing until its own thread runs it, in one concrete mode
/// (``RunLoopMode``), with ``run()``, ``run(before:)`` or
/// ``run(mode:before:returnAfterSourceHandled:)``.
///
/// **One pass** (observers see exactly this, see ``RunLoopActivity``): entry (once per run
/// call); before-timers; before-sources; queued blocks; signalled custom sources (lowest order
/// first); blocks again if a source fired; before-waiting (skipped for a zero-timeout run and
/// when a source fired); sleep until a timer, the run's deadline or a wake-up; after-waiting
/// (only if it slept); due timers fire; blocks; then the run returns handled-source, timed-out,
/// stopped or finished, or makes another pass; exit (once per run call).
///
/// **Items added during a pass** (by a callback, or by another thread) are seen from the next
/// point that looks at them, as in Core Foundation: an observer at the next notification, a
/// signalled source at the next source step, a timer at the next check after a wait, a block
/// at the next block step (blocks queued while blocks run wait for the next step).
///
/// **Where this differs from Core Foundation** (each on purpose): deadlines and timers use the
/// monotonic clock; timers never fire early; a mode left with nothing that could end a wait
/// (no sources, timers or blocks) ends the run with `finished` instead of sleeping until the
/// deadline, also when another thread removes or invalidates the mode's last timer or source
/// while the loop sleeps; and a `Threads` exit request for the loop's thread (see below)
/// ends its runs. A `stop` or `wakeUp` while the loop is not running is dropped, as in Core
/// Foundation.
///
/// **Exit requests**: once ``/Threads/Thread/requestExit()`` was called for the loop's thread,
/// every active run of the loop (nested runs and the runs they are nested in) returns
/// ``RunLoopRunResult/stopped`` at the end of its current pass (at once if it sleeps), and
/// every later run returns ``RunLoopRunResult/stopped`` at once, without entry or exit
/// notifications. So `while !Thread.current.isExitRequested { runLoop.run(...) }` ends
/// promptly however the request races with the check and the run.
///
/// **Thread safety**: every method may be called from any thread (the Core Foundation rule),
/// except that running the loop is reserved to its thread. Callbacks run on the loop's thread
/// without any lock held, so they may call back into the loop, including running it nested.
///
/// **Linux backend**: one epoll set, one eventfd for wake-ups, one `CLOCK_MONOTONIC` timerfd
/// armed with absolute nanosecond deadlines to the earliest instant the loop must wake at
/// (re-armed only when that instant changes). When the loop has nothing to wait for but
/// wake-ups (no timer or run deadline pending, no descriptor source or named port in it), it
/// sleeps on a futex instead, so a cross-thread ``wakeUp()`` is one `futex_wake`, the cheapest
/// sleep/wake pair Linux has. A wake-up sent while the loop is busy costs one
/// compare-and-swap and no system call, and a zero-timeout pass with nothing but timers,
/// sources and blocks makes no system call at all. Before such a futex sleep, a loop whose
/// previous one lasted under 30 us (a partner thread answering quickly: an actor's callers,
/// a ping-pong) first watches for the wake-up for up to 30 us, yielding the CPU between
/// looks; see ``spinsBeforeSleeping`` for what that buys and costs, and how to turn it off.
///
/// **After `fork()`**: a run loop belongs to the process that created it. The child's copy
/// of a parent's run loop (``current`` on the forking thread, ``main``, any other) shares
/// the parent's epoll set, eventfd and timerfd, so the child must not use it: running it or
/// adding a timer, source, observer or port to it stops the child with a message naming
/// both processes, and what the child's copies do implicitly (wake-ups, timer re-arms,
/// removing descriptors as the copies are released) leaves the parent's kernel objects
/// alone. The parent's loops, timers and sources are never disturbed. A child that needs a
/// run loop gets a fresh one on a thread it starts (that thread's ``current``), or `exec`s
/// a new program. The same holds for the parent's ``Port``s.
///
/// The type is named like Foundation's; a client importing both writes `RunLoop::RunLoop`.
///
/// ```swift
/// let runLoop = RunLoop.current
/// let timer = RunLoopTimer(after: .milliseconds(100)) { _ in print("fired") }
/// runLoop.add(timer, forMode: .default)
/// let result = runLoop.run(mode: .default, timeout: .seconds(1))   // .finished once it fired
/// ```
///
/// Core Foundation equivalent: `CFRunLoopRef` (`CFRunLoopGetCurrent`, `CFRunLoopRunInMode`, ...).
public final class RunLoop: @unchecked Sendable, CustomStringConvertible {
  // @unchecked: the mutable state is protected by `lock` as each field says; `backend`'s
  // descriptors are immutable and it is used as its own doc comment allows.

  /// The wait primitive (epoll + eventfd + timerfd).
  let backend: EpollBackend
  /// The owning thread's `tk_thread_identity()` (never reused by a later thread, so a thread
  /// created after the owner ended cannot pass for it); 0 for the main run loop until the
  /// main thread first asks for it. Written once.
  let ownerTag: AtomicInteger<UInt64>

  /// Protects every `var` below, and the contents of the `ModeItems` and `Activation`
  /// objects they reference. Never held while a callback runs. Lock order: this lock, then
  /// an item's lock.
  ///
  /// The vars a pass reads are `@exclusivity(unchecked)`: this lock (or, for the two the
  /// loop's thread alone touches, that thread) already makes every access exclusive, and the
  /// runtime's dynamic exclusivity check costs a thread-local lookup per access, several per
  /// pass.
  let lock = Lock()
  /// Modes by name, created on first mention. Protected by `lock`.
  @exclusivity(unchecked) var modes: [RunLoopMode: ModeItems] = [:]
  /// The common modes; only grows. Protected by `lock`.
  @exclusivity(unchecked) var commonModeNames: Set<RunLoopMode> = [.default]
  /// Items added to `.common`, re-added to every mode that becomes common. Protected by `lock`.
  var commonSources: [RunLoopSource] = []
  /// See `commonSources`. Protected by `lock`.
  var commonTimers: [RunLoopTimer] = []
  /// See `commonSources`. Protected by `lock`.
  var commonObservers: [RunLoopObserver] = []
  /// Blocks queued by `perform`, FIFO. Protected by `lock`.
  @exclusivity(unchecked) var blocks: [QueuedBlock] = []
  /// Active run calls, innermost last. Protected by `lock`.
  @exclusivity(unchecked) var activations: [Activation] = []
  /// True while the owning thread sleeps (in `epoll_wait` or on its futex, see
  /// `sleepsOnFutex`). Protected by `lock`.
  @exclusivity(unchecked) var isSleeping = false
  /// The wake-up state, read and updated with atomics so `wakeUp` never takes `lock` (a
  /// signalling thread must not contend with the loop's own passes). It is also the futex
  /// word the loop sleeps on when it has nothing to watch but wake-ups:
  ///
  /// | bit | set by | cleared by | meaning |
  /// |---|---|---|---|
  /// | `ignoringWakeUps` | owner: after a wait, and while not running | owner: top of a pass | the loop will re-check everything before it sleeps again: nothing to do |
  /// | `wakeUpPending` | `wakeUp` (compare-and-swap) | owner: when its sleep ends, or instead of sleeping | a wake-up arrived since the top of the pass: the coming sleep must not happen |
  /// | `wakeUpDropped` | `wakeUp` while ignoring | owner: top of a pass, end of a nested run | a wake-up arrived while the loop ignored them: outer runs must hear of it |
  /// | `sleepingOnFutex` | owner: compare-and-swap just before `futex_wait` on this word | owner: when the sleep ends | a waker must `futex_wake` |
  /// | `sleepingInEpoll` | owner: compare-and-swap just before `epoll_wait` | owner: when the sleep ends | a waker must write the eventfd |
  /// | `exitRequested` | the thread's exit-request handler, before its `wakeUp` | never | every run ends with `stopped`; no sleep may start |
  ///
  /// Why no wake-up is lost: the owner clears `ignoringWakeUps` (a full-barrier RMW) before it
  /// reads sources, blocks and the stop flag; a client writes those (under their locks) before
  /// it reads this word with a full barrier. So either the owner sees the client's change, or
  /// the client sets `wakeUpPending`. The owner goes to sleep only by a compare-and-swap that
  /// requires `wakeUpPending` and `exitRequested` clear, and a waker that finds a sleeping bit
  /// makes the system call that ends that sleep; a waker that finds none makes no system call
  /// at all. The exit bit needs no barrier argument: it is set by an RMW on this same word,
  /// so it is ordered against the owner's top-of-pass RMW and its sleeping compare-and-swap
  /// (the owner sees it at one of them, or sleeps first and is woken by the `wakeUp` after it).
  ///
  /// Why nesting loses none either: a wake-up is meant for whichever run should re-check, and
  /// only the innermost run can receive it. So every wake-up the loop receives while runs are
  /// nested is passed on to every outer activation (`Activation.wokenWhileNested`): one that
  /// the nested run consumed (`wakeUpPending` cleared in `wait`, reported through
  /// `consumedWakeUp`), and one dropped while it ignored them (`wakeUpDropped`, collected at
  /// the top of its next pass or when it ends). An activation so marked does not sleep
  /// before the top of its next pass, which re-checks everything (the client's writes are
  /// visible there: they precede its wake-up, which the owner observed by an RMW). A wake-up
  /// still pending when a nested run ends simply stays pending for the outer run. The cost is
  /// at most one extra pass per outer run for a wake-up that was meant for the nested run;
  /// nothing changes for a loop that is not nested.
  let wakeState = AtomicInteger<UInt32>(RunLoop.ignoringWakeUps)
  static let ignoringWakeUps: UInt32 = 1
  static let wakeUpPending: UInt32 = 2
  static let wakeUpDropped: UInt32 = 4
  static let sleepingOnFutex: UInt32 = 8
  static let sleepingInEpoll: UInt32 = 16
  static let exitRequested: UInt32 = 32
  /// How the loop sleeps right now (meaningful while `isSleeping`). Protected by `lock`.
  @exclusivity(unchecked) var sleepsOnFutex = false
  /// The mode whose timers arm the timerfd while the loop is handed to its `pollDescriptor`
  /// between two `runDueWork` calls (asleep in epoll with no run active); nil otherwise. A
  /// name, not the mode's items: `runDueWork` in a mode that does not exist creates nothing,
  /// and items added to that mode later are found by it. Protected by `lock`.
  var parkedMode: RunLoopMode?
  /// What the timerfd is armed to (`.distantFuture`: disarmed; `.distantPast`: expired or
  /// unknown, so the next arming always happens). Protected by `lock`.
  @exclusivity(unchecked) var armedDeadline: MonotonicInstant = .distantFuture
  /// Hands out `RunLoopTimer.scheduleSequence` values. Protected by `lock`.
  var nextTimerSequence: UInt64 = 0
  /// Hands out `RunLoopTimer.scheduleGeneration` values. Protected by `lock`.
  var nextTimerGeneration: UInt64 = 0
  /// Test seam, nil outside tests: called by `add(_:forMode:)` for a timer, with `lock`
  /// held, right after the loop claimed the timer, so a test can invalidate it at that point.
  /// Protected by `lock`.
  var timerClaimedForTesting: (@Sendable (RunLoopTimer) -> Void)?
  /// The deadline of the innermost run call. Protected by `lock`.
  @exclusivity(unchecked) var currentRunDeadline: MonotonicInstant = .distantFuture
  /// How many descriptor members are in the epoll set; with none, a polling pass
  /// needs no epoll_wait. Protected by `lock`.
  @exclusivity(unchecked) var memberCount = 0
  /// Descriptor members' sources this loop signalled after its epoll wait reported them,
  /// until they fire (in a run of one of their modes) or stop being signalled. Protected by
  /// `lock`.
  @exclusivity(unchecked) var readySources: [RunLoopSource] = []
  /// Set when a wait reported a descriptor member, so the same pass delivers it.
  /// Read and written only by the thread running the loop.
  @exclusivity(unchecked) var descriptorMembersReady = false
  /// Set by `wait` when it consumed a wake-up (`wakeUpPending`), so the pass can pass it on
  /// to outer activations. Read and written only by the thread running the loop.
  @exclusivity(unchecked) var consumedWakeUp = false
  /// Whether the last futex sleep ended within ``RunLoop/futexSpinLimit`` of its start (a
  /// partner thread answering quickly): the next futex sleep then first watches for a
  /// wake-up for at most that long. Read and written only by the thread running the loop.
  @exclusivity(unchecked) var lastFutexSleepWasShort = false
  /// The CPU the loop's thread watches for a wake-up on (see ``spinForWakeUp()``), -1 while
  /// it does not watch. Relaxed: only a scheduling hint for wakers
  /// (``wakeUpYieldingToWatcher()``), never part of the wake-up protocol.
  let watchingCPU = AtomicInteger<Int32>(-1)
  /// The storage of ``spinsBeforeSleeping``.
  let spinsBeforeSleepingSwitch = AtomicBool(true)

  /// Set once by `threadDidExit`: nothing will ever run a block queued from then on, so
  /// `enqueue` drops it. Protected by `lock`.
  @exclusivity(unchecked) var threadHasEnded = false
  /// Whether the loop's thread has ended: the loop dropped its items (custom sources got
  /// their `cancel` callbacks, with this already true) and never runs again. For the
  /// toolkit's async bridges, which end their waits then instead of waiting forever.
  package var hasThreadEnded: Bool { lock.withLock { threadHasEnded } }
  /// Set once by `RunLoopThread`: the common modes count as never empty, so the thread's
  /// runs wait for work instead of returning finished. Protected by `lock`.
  @exclusivity(unchecked) var keepsCommonModesAlive = false

  /// The default mode's items, also in `modes`: runs in the default mode skip the lookup.
  let defaultItems = ModeItems(name: .default)

  /// Metrics counters and the stall record (`Diagnostics/`).
  let diagnostics = LoopDiagnostics(metrics: Diagnostics.collectsRunLoopMetrics)

  init(ownerTag: UInt64) throws(SystemCallError) {
    backend = try EpollBackend()
    self.ownerTag = AtomicInteger(ownerTag)
    modes[.default] = defaultItems
  }

  // MARK: Getting a run loop

  /// The calling thread's run loop, created on first use and released when the thread ends.
  ///
  /// Creating a run loop opens three descriptors (epoll, eventfd, timerfd); if the system
  /// refuses them (`EMFILE`, `ENOMEM`), the process stops with a message naming the failed
  /// call: use ``currentOrThrow()`` to handle that case. (`CFRunLoopGetCurrent`)
  public static var current: RunLoop {
    do {
      return try CurrentRunLoopStorage.current()
    } catch {
      fatalError("RunLoop.current: \(error)")
    }
  }

  /// The calling thread's run loop, created on first use; throws the ``/Sync/SystemCallError`` of
  /// the descriptor call that failed when it cannot be created.
  public static func currentOrThrow() throws(SystemCallError) -> RunLoop {
    try CurrentRunLoopStorage.current()
  }

  /// The main thread's run loop, reachable from any thread (it can only be run by the main
  /// thread). Stops the process if its descriptors cannot be created. (`CFRunLoopGetMain`)
  public static var main: RunLoop {
    do {
      return try CurrentRunLoopStorage.main()
    } catch {
      fatalError("RunLoop.main: \(error)")
    }
  }

  /// Records the main thread as the owner of the main run loop created by another thread.
  func claimOwnership() {
    _ = ownerTag.compareAndSwap(expected: 0, desired: tk_thread_identity(), ordering: .full)
  }

  /// Whether the calling thread owns this run loop (the thread it was created for; the main
  /// thread for ``main``). Never creates a run loop.
  package var isOwnedByCurrentThread: Bool {
    let owner = ownerTag.load(ordering: .acquiring)
    if owner == tk_thread_identity() { return true }
    if owner == 0 && CurrentRunLoopStorage.isMainThread {
      claimOwnership()
      return true
    }
    return false
  }

  /// Called by the thread-exit destructor: drops every item (custom sources get their
  /// `cancel` callbacks), so nothing keeps the loop alive after its thread is gone.
  ///
  /// Everything is moved out under the lock and released after it: queued blocks, and items
  /// the user no longer references, may capture objects whose deinit calls this loop.
  func threadDidExit() {
    var sources: [(RunLoopSource, RunLoopMode)] = []
    var timers: [RunLoopTimer] = []
    var observers: [RunLoopObserver] = []
    var queued: [QueuedBlock] = []
    // Only a common item removed from every concrete mode is held by these lists alone.
    var common: ([RunLoopSource], [RunLoopTimer], [RunLoopObserver]) = ([], [], [])
    var ready: [RunLoopSource] = []
    lock.withLock {
      for (name, mode) in modes {
        sources += mode.removeAllSources().map { ($0, name) }
        timers += mode.removeAllTimers()
        observers += mode.observers
        mode.observers = []
        mode.observerMask = 0
      }
      swap(&common.0, &commonSources)
      swap(&common.1, &commonTimers)
      swap(&common.2, &commonObservers)
      swap(&queued, &blocks)
      swap(&ready, &readySources)
      threadHasEnded = true
    }
    timers += common.1
    var ended: [RunLoopTimer] = []
    for timer in timers {
      let ends: Bool = timer.lock.withLock {
        if timer.runLoop === self { timer.runLoop = nil }
        return timer.endsWithItsRunLoop
      }
      if ends { ended.append(timer) }
    }
    // Delayed perform requests that can never run now: invalidated, so their handles say
    // so and their blocks are released here even while a handle is kept.
    for timer in ended { timer.invalidate() }
    for observer in observers + common.2 {
      observer.lock.withLock { if observer.runLoop === self { observer.runLoop = nil } }
    }
    for (source, mode) in sources { source.cancelCallback?(self, mode) }
    // The queued blocks go last, after the loop is empty, in the order queued.
    withExtendedLifetime((common, ready)) {}
    queued.removeAll()
  }

  /// `"RunLoop(mode: kCFRunLoopDefaultMode, waiting: false)"`.
  public var description: String {
    let (mode, sleeping) = lock.withLock { (activations.last?.mode.name, isSleeping) }
    return "RunLoop(mode: \(mode?.rawValue ?? "none"), waiting: \(sleeping))"
  }
}
