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
/// sources and blocks makes no system call at all.
///
/// **After `fork()`**: a child process must not use any run loop it inherited from the
/// parent (``current`` or ``main`` included), nor the parent's ports: the child shares the
/// parent's epoll set, eventfd and timerfd, so its waits and wake-ups would mix with the
/// parent's. A child that needs a run loop should `exec` a new program.
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
  let lock = Lock()
  /// Modes by name, created on first mention. Protected by `lock`.
  var modes: [RunLoopMode: ModeItems] = [:]
  /// The common modes; only grows. Protected by `lock`.
  var commonModeNames: Set<RunLoopMode> = [.default]
  /// Items added to `.common`, re-added to every mode that becomes common. Protected by `lock`.
  var commonSources: [RunLoopSource] = []
  /// See `commonSources`. Protected by `lock`.
  var commonTimers: [RunLoopTimer] = []
  /// See `commonSources`. Protected by `lock`.
  var commonObservers: [RunLoopObserver] = []
  /// Blocks queued by `perform`, FIFO. Protected by `lock`.
  var blocks: [QueuedBlock] = []
  /// Active run calls, innermost last. Protected by `lock`.
  var activations: [Activation] = []
  /// True while the owning thread sleeps (in `epoll_wait` or on its futex, see
  /// `sleepsOnFutex`). Protected by `lock`.
  var isSleeping = false
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
  var sleepsOnFutex = false
  /// What the timerfd is armed to (`.distantFuture`: disarmed; `.distantPast`: expired or
  /// unknown, so the next arming always happens). Protected by `lock`.
  var armedDeadline: MonotonicInstant = .distantFuture
  /// How many descriptor members are in the epoll set; with none, a polling pass
  /// needs no epoll_wait. Protected by `lock`.
  var memberCount = 0
  /// Descriptor members' sources this loop signalled after its epoll wait reported them,
  /// until they fire (in a run of one of their modes) or stop being signalled. Protected by
  /// `lock`.
  var readySources: [RunLoopSource] = []
  /// Set when a wait reported a descriptor member, so the same pass delivers it.
  /// Read and written only by the thread running the loop.
  var descriptorMembersReady = false
  /// Set by `wait` when it consumed a wake-up (`wakeUpPending`), so the pass can pass it on
  /// to outer activations. Read and written only by the thread running the loop.
  var consumedWakeUp = false

  /// Set once by `threadDidExit`: nothing will ever run a block queued from then on, so
  /// `enqueue` drops it. Protected by `lock`.
  var threadHasEnded = false
  /// Set once by `RunLoopThread`: the common modes count as never empty, so the thread's
  /// runs wait for work instead of returning finished. Protected by `lock`.
  var keepsCommonModesAlive = false

  /// The default mode's items, also in `modes`: runs in the default mode skip the lookup.
  let defaultItems = ModeItems(name: .default)

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

  /// Whether the calling thread owns this run loop.
  var isOwnedByCurrentThread: Bool {
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
    for timer in timers { timer.lock.withLock { if timer.runLoop === self { timer.runLoop = nil } } }
    for observer in observers + common.2 {
      observer.lock.withLock { if observer.runLoop === self { observer.runLoop = nil } }
    }
    for (source, mode) in sources { source.cancelCallback?(self, mode) }
    // The queued blocks go last, after the loop is empty, in the order queued.
    withExtendedLifetime((common, ready)) {}
    queued.removeAll()
  }

  // MARK: Modes

  /// The mode of the innermost active run call, or nil when the loop is not running.
  /// (`CFRunLoopCopyCurrentMode`)
  public var currentMode: RunLoopMode? {
    lock.withLock { activations.last?.mode.name }
  }

  /// The modes in the common set (initially only ``RunLoopMode/default``).
  public var commonModes: Set<RunLoopMode> {
    lock.withLock { commonModeNames }
  }

  /// Every mode the loop knows (modes are created when first mentioned).
  /// (`CFRunLoopCopyAllModes`)
  public var allModes: Set<RunLoopMode> {
    lock.withLock { Set(modes.keys) }
  }

  /// Adds `mode` to the common set: every item added to ``RunLoopMode/common`` (before or
  /// after) is present in it too. A mode never leaves the set. Adding
  /// ``RunLoopMode/common`` itself stops the process with a message.
  /// (`CFRunLoopAddCommonMode`)
  public func addCommonMode(_ mode: RunLoopMode) {
    if mode == .common { runLoopMisuse("RunLoop", "addCommonMode(.common): the common pseudo-mode cannot be a common mode") }
    let scheduled: [RunLoopSource] = lock.withLock {
      guard !commonModeNames.contains(mode) else { return [] }
      commonModeNames.insert(mode)
      let items = modeItems(mode)
      var scheduled: [RunLoopSource] = []
      for source in commonSources where source.isValid && items.insert(source) { scheduled.append(source) }
      for timer in commonTimers where timer.isValid && items.insert(timer) { renewSchedule(timer) }
      for observer in commonObservers where observer.isValid { _ = items.insert(observer) }
      rearmIfSleeping()
      return scheduled
    }
    for source in scheduled { source.scheduleCallback?(self, mode) }
  }

  /// The items of `mode`, created if needed. Called with `lock` held.
  func modeItems(_ mode: RunLoopMode) -> ModeItems {
    if let items = modes[mode] { return items }
    let items = ModeItems(name: mode)
    modes[mode] = items
    return items
  }

  /// The concrete modes `mode` stands for. Called with `lock` held.
  func concreteModes(_ mode: RunLoopMode) -> [RunLoopMode] {
    mode == .common ? Array(commonModeNames) : [mode]
  }

  // MARK: Sources

  /// Adds `source` to `mode` (to every common mode for ``RunLoopMode/common``) and calls its
  /// `schedule` callback for each mode it entered, on the calling thread. Adding a source
  /// twice to a mode is harmless. Returns false, adding nothing, when the source was
  /// invalidated. Does not wake the loop. (`CFRunLoopAddSource`)
  @discardableResult
  public func add(_ source: RunLoopSource, forMode mode: RunLoopMode) -> Bool {
    var entered: [RunLoopMode] = []
    let added: Bool = lock.withLock {
      guard source.register(in: self) else { return false }
      if mode == .common && !commonSources.contains(where: { $0 === source }) {
        commonSources.append(source)
      }
      for name in concreteModes(mode) where modeItems(name).insert(source) {
        entered.append(name)
      }
      return true
    }
    for name in entered { source.scheduleCallback?(self, name) }
    return added
  }

  /// Removes `source` from `mode` (from every common mode for ``RunLoopMode/common``),
  /// calling its `cancel` callback for each mode it left. Removing what was never added is
  /// harmless. (`CFRunLoopRemoveSource`)
  public func remove(_ source: RunLoopSource, forMode mode: RunLoopMode) {
    let left: [RunLoopMode] = lock.withLock {
      if mode == .common {
        guard let index = commonSources.firstIndex(where: { $0 === source }) else { return [] }
        commonSources.remove(at: index)
      }
      let left = concreteModes(mode).filter { modes[$0]?.remove(source) ?? false }
      if !left.isEmpty { wakeUpIfARunIsLeftEmpty() }
      return left
    }
    for name in left { source.cancelCallback?(self, name) }
  }

  /// Whether `source` is in `mode` (for ``RunLoopMode/common``: whether it was added to
  /// common). (`CFRunLoopContainsSource`)
  public func contains(_ source: RunLoopSource, inMode mode: RunLoopMode) -> Bool {
    lock.withLock {
      if mode == .common { return commonSources.contains { $0 === source } }
      return modes[mode]?.contains(source) ?? false
    }
  }

  /// Removes an invalidated source everywhere, calling `cancel` for each mode it left.
  func removeFromEveryMode(_ source: RunLoopSource) {
    let left: [RunLoopMode] = lock.withLock {
      commonSources.removeAll { $0 === source }
      let left = modes.values.filter { $0.remove(source) }.map(\.name)
      if !left.isEmpty { wakeUpIfARunIsLeftEmpty() }
      return left
    }
    for name in left { source.cancelCallback?(self, name) }
  }

  // MARK: Timers

  /// Adds `timer` to `mode` (to every common mode for ``RunLoopMode/common``). Returns false,
  /// adding nothing, when the timer was invalidated. A timer belongs to one run loop: adding
  /// it to a second one stops the process with a message. If the loop sleeps in that mode
  /// its timerfd is re-armed at once (no wake-up needed). (`CFRunLoopAddTimer`)
  @discardableResult
  public func add(_ timer: RunLoopTimer, forMode mode: RunLoopMode) -> Bool {
    let outcome: Int = lock.withLock {
      let claim: Int = timer.lock.withLock {
        guard timer.valid else { return 0 }
        if let owner = timer.runLoop, owner !== self { return -1 }
        if timer.runLoop == nil {
          // Newly this loop's: it goes after the timers added before it on equal dates.
          nextTimerSequence &+= 1
          timer.scheduleSequence = nextTimerSequence
        }
        timer.runLoop = self
        return 1
      }
      guard claim == 1 else { return claim }
      if mode == .common && !commonTimers.contains(where: { $0 === timer }) {
        commonTimers.append(timer)
      }
      for name in concreteModes(mode) { _ = modeItems(name).insert(timer) }
      renewSchedule(timer)
      rearmIfSleeping()
      return 1
    }
    if outcome < 0 {
      runLoopMisuse("RunLoop", "add(timer): the timer is already scheduled in another run loop")
    }
    return outcome == 1
  }

  /// Removes `timer` from `mode` (every common mode for ``RunLoopMode/common``). Harmless if
  /// it is not there. Once in no mode, the timer may be added to another run loop.
  /// (`CFRunLoopRemoveTimer`)
  public func remove(_ timer: RunLoopTimer, forMode mode: RunLoopMode) {
    lock.withLock {
      if mode == .common {
        guard let index = commonTimers.firstIndex(where: { $0 === timer }) else { return }
        commonTimers.remove(at: index)
      }
      for name in concreteModes(mode) { _ = modes[name]?.remove(timer) }
      releaseTimerIfUnscheduled(timer)
      wakeUpIfARunIsLeftEmpty()
    }
  }

  /// Whether `timer` is in `mode` (for ``RunLoopMode/common``: whether it was added to
  /// common). (`CFRunLoopContainsTimer`)
  public func contains(_ timer: RunLoopTimer, inMode mode: RunLoopMode) -> Bool {
    lock.withLock {
      if mode == .common { return commonTimers.contains { $0 === timer } }
      return modes[mode]?.contains(timer) ?? false
    }
  }

  /// The earliest scheduled fire date among `mode`'s valid timers, or nil.
  /// (`CFRunLoopGetNextTimerFireDate`)
  public func nextTimerFireDate(inMode mode: RunLoopMode) -> MonotonicInstant? {
    lock.withLock {
      modes[mode]?.timers.compactMap { timer in timer.lock.withLock { timer.valid ? timer.fireDate : nil } }.min()
    }
  }

  /// Forgets the timer's owner once it is in no mode. Called with `lock` held.
  func releaseTimerIfUnscheduled(_ timer: RunLoopTimer) {
    if commonTimers.contains(where: { $0 === timer }) { return }
    if modes.values.contains(where: { $0.contains(timer) }) { return }
    timer.lock.withLock { if timer.runLoop === self { timer.runLoop = nil } }
  }

  /// Removes an invalidated timer everywhere, and forgets being its owner (a re-armed timer
  /// may join any run loop).
  func removeFromEveryMode(_ timer: RunLoopTimer) {
    lock.withLock {
      commonTimers.removeAll { $0 === timer }
      for mode in modes.values { _ = mode.remove(timer) }
      timer.lock.withLock { if timer.runLoop === self { timer.runLoop = nil } }
      rearmIfSleeping()
      wakeUpIfARunIsLeftEmpty()
    }
  }

  /// `timer`'s fire date or tolerance changed: renew its schedule, and re-arm now if the
  /// loop sleeps.
  func timerScheduleDidChange(_ timer: RunLoopTimer) {
    lock.withLock {
      renewSchedule(timer)
      rearmIfSleeping()
    }
  }

  /// Replaces `timer`'s schedule entries in every mode holding it with ones for its current
  /// fire date and tolerance (none once it is invalid). Called with `lock` held: after it is
  /// added, after its schedule changes, and after the pass that fired it. A re-armed timer
  /// gets a new sequence, so it goes after the timers already due at its new instant.
  func renewSchedule(_ timer: RunLoopTimer) {
    // Not this loop's any more (or invalid): its entries here are already stale (it left
    // every mode), and its schedule fields belong to its new loop's lock.
    guard let schedule = timer.scheduleForRenewal(in: self) else { return }
    if schedule.rearmed {
      nextTimerSequence &+= 1
      timer.scheduleSequence = nextTimerSequence
    }
    // Unique in this loop, so no entry of a freed timer matches a timer that reuses its
    // address (see `ModeItems.currentTimer`).
    nextTimerGeneration &+= 1
    timer.scheduleGeneration = nextTimerGeneration
    for mode in modes.values where mode.contains(timer) {
      mode.schedule(timer, fireDate: schedule.fireDate, tolerance: schedule.tolerance, in: self)
    }
  }

  /// Hands out `RunLoopTimer.scheduleSequence` values. Protected by `lock`.
  var nextTimerSequence: UInt64 = 0
  /// Hands out `RunLoopTimer.scheduleGeneration` values. Protected by `lock`.
  var nextTimerGeneration: UInt64 = 0

  /// While the loop sleeps, moves the timerfd to the new wake instant of the mode it sleeps
  /// in, so timer changes from other threads take effect without a wake-up. Called with
  /// `lock` held.
  func rearmIfSleeping() {
    guard isSleeping, let activation = activations.last else { return }
    let wakeAt = min(activation.mode.earliestWakeDeadline(), currentRunDeadline)
    if sleepsOnFutex {
      // A futex sleep has no instant to wake at: if there is one now, the loop must wake
      // and sleep again in epoll with the timerfd armed.
      if wakeAt != .distantFuture { wakeUp() }
      return
    }
    if wakeAt != armedDeadline {
      backend.armTimer(at: wakeAt)
      armedDeadline = wakeAt
    }
  }

  /// The deadline of the innermost run call. Protected by `lock`.
  var currentRunDeadline: MonotonicInstant = .distantFuture

  // MARK: Observers

  /// Adds `observer` to `mode` (every common mode for ``RunLoopMode/common``). Returns false,
  /// adding nothing, when it was invalidated; adding it to a second run loop stops the process
  /// with a message. (`CFRunLoopAddObserver`)
  @discardableResult
  public func add(_ observer: RunLoopObserver, forMode mode: RunLoopMode) -> Bool {
    let outcome: Int = lock.withLock {
      let claim: Int = observer.lock.withLock {
        guard observer.valid else { return 0 }
        if let owner = observer.runLoop, owner !== self { return -1 }
        observer.runLoop = self
        return 1
      }
      guard claim == 1 else { return claim }
      if mode == .common && !commonObservers.contains(where: { $0 === observer }) {
        commonObservers.append(observer)
      }
      for name in concreteModes(mode) { _ = modeItems(name).insert(observer) }
      return 1
    }
    if outcome < 0 {
      runLoopMisuse("RunLoop", "add(observer): the observer belongs to another run loop")
    }
    return outcome == 1
  }

  /// Removes `observer` from `mode` (every common mode for ``RunLoopMode/common``). Harmless
  /// if it is not there. (`CFRunLoopRemoveObserver`)
  public func remove(_ observer: RunLoopObserver, forMode mode: RunLoopMode) {
    lock.withLock {
      if mode == .common {
        guard let index = commonObservers.firstIndex(where: { $0 === observer }) else { return }
        commonObservers.remove(at: index)
      }
      for name in concreteModes(mode) { _ = modes[name]?.remove(observer) }
    }
  }

  /// Whether `observer` is in `mode` (for ``RunLoopMode/common``: whether it was added to
  /// common). (`CFRunLoopContainsObserver`)
  public func contains(_ observer: RunLoopObserver, inMode mode: RunLoopMode) -> Bool {
    lock.withLock {
      if mode == .common { return commonObservers.contains { $0 === observer } }
      return modes[mode]?.observers.contains { $0 === observer } ?? false
    }
  }

  /// Removes an invalidated observer everywhere.
  func removeFromEveryMode(_ observer: RunLoopObserver) {
    lock.withLock {
      commonObservers.removeAll { $0 === observer }
      for mode in modes.values { _ = mode.remove(observer) }
    }
  }

  // MARK: Blocks

  /// Queues `block` to run on the loop's thread during a pass in one of `modes`
  /// (``RunLoopMode/common`` means every common mode), after the blocks queued before it.
  /// Each pass runs every queued block whose mode matches. Does NOT wake a sleeping loop
  /// (Core Foundation's rule): the block runs when the loop next makes a pass; use
  /// ``performAndWakeUp(inModes:_:)`` for prompt execution, ``performAndWait(inModes:_:)``
  /// to wait for it. Never blocks and cannot fail. A queued block keeps its mode
  /// non-empty, so a run in it does not return finished before the block ran.
  /// (`CFRunLoopPerformBlock`)
  public func perform(inModes modes: [RunLoopMode] = [.common], _ block: @escaping @Sendable () -> Void) {
    enqueue(QueuedBlock(modes: modes, block: block))
  }

  /// Makes the common modes count as never empty (an internal keep-alive item), for
  /// `RunLoopThread`.
  func keepCommonModesAlive() {
    lock.withLock { keepsCommonModesAlive = true }
  }

  /// Queues `item` (see ``perform(inModes:_:)``).
  /// A loop whose thread has ended drops the block at once, after the lock is released (its
  /// release tells a waiting request that it will never run).
  func enqueue(_ item: QueuedBlock) {
    let modes = item.modes
    let refused: QueuedBlock? = lock.withLock {
      if threadHasEnded { return item }
      // Like Core Foundation, naming a mode creates it, so a run in it sees the block.
      for mode in modes where mode != .common && mode != .default && self.modes[mode] == nil {
        _ = modeItems(mode)
      }
      blocks.append(item)
      return nil
    }
    withExtendedLifetime(refused) {}
  }

  /// Removes the queued block that carries out `request` (a waiting perform request whose
  /// waiter gave up), so requests to a loop that does not run cannot pile up. A block already
  /// taken by a pass is not affected (the request itself refuses to run once withdrawn).
  func withdrawQueuedBlock(request: ObjectIdentifier) {
    let removed: [QueuedBlock] = lock.withLock {
      guard let index = blocks.firstIndex(where: { $0.request == request }) else { return [] }
      let removed = blocks.remove(at: index)
      // A queued block keeps a run of its mode going (`isEmpty`); without it the run may
      // have nothing left and must end, as when its last source or timer leaves.
      wakeUpIfARunIsLeftEmpty()
      return [removed]
    }
    // Released outside the lock: the block's captures may run arbitrary deinit code.
    withExtendedLifetime(removed) {}
  }

  /// Queues `block` like ``perform(inModes:_:)`` and wakes the loop so a sleeping loop runs it
  /// promptly. Never blocks and cannot fail (a loop whose thread has ended drops the block
  /// unrun). (`CFRunLoopPerformBlock` + `CFRunLoopWakeUp`)
  public func performAndWakeUp(inModes modes: [RunLoopMode] = [.common], _ block: @escaping @Sendable () -> Void) {
    perform(inModes: modes, block)
    wakeUp()
  }

  // MARK: Waking and stopping

  /// Makes a sleeping loop wake up and re-check its sources, timers, blocks and stop
  /// request. Coalesced: costs nothing when a wake-up is already pending, when the loop is
  /// not running (it re-checks everything when it starts), or when it has just woken up and
  /// is about to re-check; one compare-and-swap when the loop is busy; one `futex_wake` or
  /// eventfd write when it sleeps. Lock-free: never blocks.
  /// (`CFRunLoopWakeUp`)
  public func wakeUp() {
    // Full load: its leading fence keeps the caller's signal or queued block (stored just
    // before) ahead of this read, so returning early on a pending wake-up is safe: the loop
    // clears `wakeUpPending` with a `.full` update (trailing fence) before it checks sources.
    var state = wakeState.load(ordering: .full)
    if state & RunLoop.ignoringWakeUps != 0 && state & RunLoop.wakeUpDropped == 0 {
      _ = wakeState.or(RunLoop.wakeUpDropped, ordering: .full)
      return
    }
    while state & (RunLoop.ignoringWakeUps | RunLoop.wakeUpPending) == 0 {
      if wakeState.compareAndSwap(expected: state, desired: state | RunLoop.wakeUpPending, ordering: .full) {
        // Only a loop that committed to sleeping needs a system call; a busy one sees
        // `wakeUpPending` before it sleeps.
        if state & RunLoop.sleepingOnFutex != 0 {
          wakeState.wake(count: 1)
        } else if state & RunLoop.sleepingInEpoll != 0 {
          backend.signalWakeUp()
        }
        return
      }
      state = wakeState.load(ordering: .full)
    }
  }

  /// Ends the innermost active run call: it returns ``RunLoopRunResult/stopped`` at the end
  /// of its current pass (at once if it sleeps). Outer nested runs continue. Does nothing when
  /// the loop is not running (a later run is not affected, as in Core Foundation). Callable
  /// from any thread. (`CFRunLoopStop`)
  public func stop() {
    let running: Bool = lock.withLock {
      guard let activation = activations.last else { return false }
      activation.stopped = true
      return true
    }
    if running { wakeUp() }
  }

  /// The loop's thread was asked to exit: from now on every run of the loop ends (see the
  /// type's "Exit requests"). Called by the thread's exit-request handler, on any thread;
  /// lock-free.
  func threadExitRequested() {
    // Set before the wake-up, by an RMW on the word the owner updates at the top of every
    // pass and checks by compare-and-swap before every sleep: one modification order, so no
    // fence argument is needed (see `wakeState`); `.full` for the `wakeUp` load after it.
    _ = wakeState.fetchOr(RunLoop.exitRequested, ordering: .full)
    wakeUp()
  }

  /// Whether the loop's thread was asked to exit. Called by the loop's thread. An early
  /// check only (acquiring is enough: it orders nothing else); the decisive ones are the
  /// read-modify-writes at the top of a pass and before a sleep.
  var isExitRequested: Bool {
    wakeState.load(ordering: .acquiring) & RunLoop.exitRequested != 0
  }

  /// Marks every activation but the innermost as woken: a wake-up the innermost run received
  /// may have been meant for any of them (see `wakeState`). Called with `lock` held.
  func passWakeUpToOuterActivations() {
    for activation in activations.dropLast() { activation.wokenWhileNested = true }
  }

  /// Wakes the loop when a run's mode has nothing left that could end a wait, so that run
  /// returns finished instead of sleeping on. Called with `lock` held after an item left a
  /// mode; costs nothing when the loop is not running. Any activation counts, not only the
  /// innermost: the wake-up reaches an outer run through `passWakeUpToOuterActivations`.
  func wakeUpIfARunIsLeftEmpty() {
    if activations.isEmpty { return }
    if activations.contains(where: { isEmpty($0.mode) }) { wakeUp() }
  }

  /// Whether the loop is asleep waiting for an event. Meant for other threads (is it worth
  /// waking?); about your own thread's loop it is always false. (`CFRunLoopIsWaiting`)
  public var isWaiting: Bool {
    lock.withLock { isSleeping }
  }

  // MARK: Running

  /// Runs the loop in the default mode until ``stop()`` ends it or the mode has no sources or
  /// timers left (it returns at once if it has none). Blocks the calling thread, which must
  /// be the loop's own. (`CFRunLoopRun`)
  @available(*, noasync, message: "runs the thread's run loop; call it from the thread's entry routine")
  public func run() {
    while true {
      let result = run(mode: .default, before: .distantFuture, returnAfterSourceHandled: false)
      if result == .stopped || result == .finished { return }
    }
  }

  /// Runs the loop in the default mode until `deadline` (monotonic clock), ``stop()``, or the
  /// mode becoming empty, and says which. Blocks; the calling thread must be the loop's own.
  /// Unlike Foundation's `run(until:)`, a stop ends it.
  @available(*, noasync, message: "runs the thread's run loop; call it from the thread's entry routine")
  @discardableResult
  public func run(before deadline: MonotonicInstant) -> RunLoopRunResult {
    run(mode: .default, before: deadline, returnAfterSourceHandled: false)
  }

  /// Runs the loop in the default mode for at most `timeout` (monotonic clock); see
  /// ``run(before:)``.
  @available(*, noasync, message: "runs the thread's run loop; call it from the thread's entry routine")
  @discardableResult
  public func run(timeout: Duration) -> RunLoopRunResult {
    run(mode: .default, timeout: timeout, returnAfterSourceHandled: false)
  }

  /// Deprecated: renamed ``run(before:)`` (the toolkit's time rule: `before:` takes a
  /// deadline), which this forwards to.
  @available(*, deprecated, renamed: "run(before:)")
  @available(*, noasync, message: "runs the thread's run loop; call it from the thread's entry routine")
  @discardableResult
  public func run(until deadline: MonotonicInstant) -> RunLoopRunResult {
    run(before: deadline)
  }

  /// Runs the loop in `mode` for at most `timeout` (monotonic clock). A zero or negative
  /// timeout makes exactly one pass. See ``run(mode:before:returnAfterSourceHandled:)``.
  @available(*, noasync, message: "runs the thread's run loop; call it from the thread's entry routine")
  @discardableResult
  public func run(mode: RunLoopMode, timeout: Duration, returnAfterSourceHandled: Bool = false) -> RunLoopRunResult {
    let deadline: MonotonicInstant = timeout <= .zero ? .distantPast : .after(timeout)
    return run(mode: mode, before: deadline, returnAfterSourceHandled: returnAfterSourceHandled)
  }

  /// Runs the loop in `mode` until `deadline` passes (``RunLoopRunResult/timedOut``),
  /// ``stop()`` or an exit request for the loop's thread (``RunLoopRunResult/stopped``, at
  /// once and without entry/exit notifications when the exit was requested before the call),
  /// the mode has no sources or timers (``RunLoopRunResult/finished``, at once and without
  /// entry/exit notifications if it has none on entry), or - when `returnAfterSourceHandled`
  /// - one source's handler ran (``RunLoopRunResult/handledSource``). A deadline already
  /// passed makes exactly one pass. Runs nest: a callback may run the loop again in any mode;
  /// ``stop()`` ends the innermost, an exit request ends them all.
  ///
  /// Blocks the calling thread. Misuse stops the process with a message: running another
  /// thread's run loop, or running in ``RunLoopMode/common``. (`CFRunLoopRunInMode`, with a
  /// monotonic deadline instead of a relative wall-clock interval)
  @available(*, noasync, message: "runs the thread's run loop; call it from the thread's entry routine")
  public func run(mode: RunLoopMode, before deadline: MonotonicInstant, returnAfterSourceHandled: Bool = false)
    -> RunLoopRunResult
  {
    guard isOwnedByCurrentThread else {
      runLoopMisuse("RunLoop", "run: a run loop can only be run by its own thread")
    }
    if mode == .common {
      runLoopMisuse("RunLoop", "run(mode: .common): the common pseudo-mode cannot be run; run a concrete mode")
    }
    // The thread was asked to exit: no run starts (its check and this call may have raced).
    // Its own flag is read too: the handler that sets the loop's bit runs on the requesting
    // thread after that flag is set, so a thread that saw its flag could otherwise start a
    // run in between. (Once this check passed, the handler's wake-up ends the run.)
    if isExitRequested || Thread.current.isExitRequested { return .stopped }
    let start: (Activation, MonotonicInstant, UInt)? = lock.withLock {
      guard let items = mode == .default ? defaultItems : modes[mode], !isEmpty(items) else { return nil }
      let activation = Activation(mode: items)
      let previousDeadline = currentRunDeadline
      activations.append(activation)
      // A new activation ignores wake-ups until the top of its first pass.
      _ = wakeState.or(RunLoop.ignoringWakeUps, ordering: .full)
      currentRunDeadline = deadline
      return (activation, previousDeadline, items.observerMask)
    }
    guard let (activation, previousDeadline, entryMask) = start else { return .finished }
    let items = activation.mode
    if entryMask & RunLoopActivity.entry.rawValue != 0 { notify(.entry, items) }
    let (result, exitMask) = runPasses(
      activation, deadline: deadline, returnAfterSourceHandled: returnAfterSourceHandled)
    if exitMask & RunLoopActivity.exit.rawValue != 0 { notify(.exit, items) }
    lock.withLock {
      activations.removeLast()
      currentRunDeadline = previousDeadline
      // Back in the outer activation (mid-pass: wake-ups count unless it ignores them), or
      // not running (ignored). An outer activation that ignores them keeps `wakeUpDropped`
      // for the top of its next pass, which re-checks and passes it further out.
      if let outer = activations.last, !outer.ignoresWakeUps {
        let state = wakeState.fetchAnd(~(RunLoop.ignoringWakeUps | RunLoop.wakeUpDropped), ordering: .full)
        // A wake-up dropped while the nested run ignored them may have been meant for any
        // outer activation, which may not re-check before it sleeps.
        if state & RunLoop.wakeUpDropped != 0 {
          for activation in activations { activation.wokenWhileNested = true }
        }
      } else {
        _ = wakeState.or(RunLoop.ignoringWakeUps, ordering: .full)
      }
    }
    return result
  }

  /// Whether a run in `mode` has nothing that could ever end a wait: no sources, no timers, no
  /// queued blocks for it, and no keep-alive item (a common mode of a `RunLoopThread`'s loop).
  /// Called with `lock` held.
  func isEmpty(_ mode: ModeItems) -> Bool {
    guard mode.hasNoSourcesOrTimers else { return false }
    if keepsCommonModesAlive && (mode === defaultItems || commonModeNames.contains(mode.name)) { return false }
    return !blocks.contains { $0.runs(in: mode.name, commonModes: commonModeNames) }
  }

  /// Takes every queued block (to run those of the running mode), with the common modes they
  /// are matched against. Called with `lock` held.
  func takeBlocks() -> ([QueuedBlock], Set<RunLoopMode>) {
    var taken: [QueuedBlock] = []
    swap(&taken, &blocks)
    return (taken, commonModeNames)
  }

  /// The passes of one run call (steps 2-9 of the guide's list). Returns the result and the
  /// mode's observer mask at the end (for the exit notification).
  ///
  /// Lock traffic is kept to a few acquisitions per pass by folding work into the same
  /// critical section where the order of events allows it: blocks are taken at the top of a
  /// pass only when no before-timers/before-sources observer could queue more first, and
  /// after the wait only when no after-waiting observer or timer runs in between.
  func runPasses(_ activation: Activation, deadline: MonotonicInstant, returnAfterSourceHandled: Bool)
    -> (RunLoopRunResult, UInt)
  {
    let mode = activation.mode
    let pollOnly = deadline == .distantPast || deadline.hasPassed
    let beforeMask = RunLoopActivity.beforeTimers.rawValue | RunLoopActivity.beforeSources.rawValue
    var firstPass = true
    while true {
      // Top of the pass: from here on a wake-up must end the coming sleep.
      let top: (mask: UInt, stopped: Bool, blocks: ([QueuedBlock], Set<RunLoopMode>)?) = lock.withLock {
        activation.ignoresWakeUps = false
        // This pass re-checks everything, so a wake-up received before it is accounted for
        // here; one dropped while ignoring may also have been meant for an outer activation.
        activation.wokenWhileNested = false
        // Full: its trailing fence keeps the checks of sources and blocks below after the
        // clear (pairs with the leading fence of `wakeUp()`'s `.full` load; arm64 included).
        let state = wakeState.fetchAnd(~(RunLoop.ignoringWakeUps | RunLoop.wakeUpDropped), ordering: .full)
        if state & RunLoop.wakeUpDropped != 0 && activations.count > 1 { passWakeUpToOuterActivations() }
        if state & RunLoop.exitRequested != 0 { return (mode.observerMask, true, nil) }
        if firstPass && activation.stopped {  // stopped by an entry observer
          activation.stopped = false
          return (mode.observerMask, true, nil)
        }
        let early = mode.observerMask & beforeMask == 0 && !blocks.isEmpty
        return (mode.observerMask, false, early ? takeBlocks() : nil)
      }
      if top.stopped { return (.stopped, top.mask) }
      firstPass = false
      if top.mask & RunLoopActivity.beforeTimers.rawValue != 0 {
        notify(.beforeTimers, mode)
        // Those observers may have added before-sources observers, which this pass calls
        // (`notify` reads the current mask).
        notify(.beforeSources, mode)
      } else if top.mask & RunLoopActivity.beforeSources.rawValue != 0 {
        notify(.beforeSources, mode)
      }
      if let (queued, common) = top.blocks {
        runBlocks(queued, common, mode)
      } else if top.mask & beforeMask != 0 {
        runBlocks(mode)
      }
      let sourceHandled = fireSources(mode, onlyOne: returnAfterSourceHandled)
      if sourceHandled { runBlocks(mode) }
      // Deviation from Core Foundation, which would sleep until the deadline: a mode left
      // with nothing that could end a wait (its blocks ran, its last timer fired elsewhere)
      // does not sleep; the pass ends and the run returns finished.
      let poll: Bool
      let readyCount: Int
      if sourceHandled || pollOnly {
        poll = true
        readyCount = waitForEvents(activation, poll: true, deadline: deadline)
      } else {
        // Without before-waiting observers, deciding to sleep and arming share one lock.
        let (empty, observed, prepared): (Bool, Bool, WaitPlan) = lock.withLock {
          if isEmpty(mode) { return (true, false, .none) }
          if mode.observerMask & RunLoopActivity.beforeWaiting.rawValue != 0 { return (false, true, .none) }
          return (false, false, prepareWait(activation, poll: false, deadline: deadline))
        }
        poll = empty
        if empty {
          readyCount = waitForEvents(activation, poll: true, deadline: deadline)
        } else if observed {
          notify(.beforeWaiting, mode)
          readyCount = waitForEvents(activation, poll: false, deadline: deadline)
        } else {
          readyCount = wait(prepared)
        }
      }
      let after: (due: [RunLoopTimer], blocks: ([QueuedBlock], Set<RunLoopMode>)?, mask: UInt) = lock.withLock {
        isSleeping = false
        activation.ignoresWakeUps = true
        _ = wakeState.or(RunLoop.ignoringWakeUps, ordering: .full)
        if consumedWakeUp {
          consumedWakeUp = false
          if activations.count > 1 { passWakeUpToOuterActivations() }
        }
        consumeReadyTokens(readyCount)
        let due = mode.hasTimers ? mode.dueTimers(at: .now) : []
        // Blocks can be taken now unless an after-waiting observer or a timer runs first.
        let afterWaitingObserved = !poll && mode.observerMask & RunLoopActivity.afterWaiting.rawValue != 0
        let early = !afterWaitingObserved && due.isEmpty && !blocks.isEmpty
        return (due, early ? takeBlocks() : nil, mode.observerMask)
      }
      if !poll && after.mask & RunLoopActivity.afterWaiting.rawValue != 0 { notify(.afterWaiting, mode) }
      if !after.due.isEmpty {
        for timer in after.due { timer.fireIfDue() }
        // Their fire dates moved (or they ended): schedule them again, in the loop that owns
        // each now (a callback may have moved its timer to another run loop).
        var moved: [(RunLoopTimer, RunLoop)] = []
        lock.withLock {
          for timer in after.due {
            if let owner = timer.owningRunLoop, owner !== self {
              moved.append((timer, owner))
            } else {
              renewSchedule(timer)
            }
          }
        }
        for (timer, owner) in moved { owner.timerScheduleDidChange(timer) }
      }
      if let (queued, common) = after.blocks {
        runBlocks(queued, common, mode)
      } else if !after.due.isEmpty || (!poll && after.mask & RunLoopActivity.afterWaiting.rawValue != 0) {
        runBlocks(mode)
      }
      // Step 9 for port-based sources: deliver what the wait reported in this pass.
      var portHandled = false
      if descriptorMembersReady {
        descriptorMembersReady = false
        portHandled = fireSources(mode, onlyOne: returnAfterSourceHandled)
      }
      let deadlinePassed = pollOnly || (deadline != .distantFuture && deadline.hasPassed)
      let result: (RunLoopRunResult?, UInt) = lock.withLock {
        if (sourceHandled || portHandled) && returnAfterSourceHandled { return (.handledSource, mode.observerMask) }
        if deadlinePassed { return (.timedOut, mode.observerMask) }
        if activation.stopped || isExitRequested {
          activation.stopped = false
          return (.stopped, mode.observerMask)
        }
        if isEmpty(mode) { return (.finished, mode.observerMask) }
        return (nil, 0)
      }
      if let value = result.0 { return (value, result.1) }
    }
  }

  /// Calls `mode`'s observers of `activity` in order, without the lock.
  func notify(_ activity: RunLoopActivity, _ mode: ModeItems) {
    let observers: [RunLoopObserver] = lock.withLock {
      guard mode.observerMask & activity.rawValue != 0 else { return [] }
      return mode.observers.filter { $0.activities.contains(activity) }
    }
    for observer in observers { observer.fire(activity) }
  }

  /// Runs the queued blocks that match `mode` (FIFO); blocks queued meanwhile wait for the
  /// next call, blocks of other modes stay queued in order.
  func runBlocks(_ mode: ModeItems) {
    let taken: ([QueuedBlock], Set<RunLoopMode>)? = lock.withLock {
      blocks.isEmpty ? nil : takeBlocks()
    }
    if let (queued, common) = taken { runBlocks(queued, common, mode) }
  }

  /// Runs the taken blocks that match `mode` and puts the others back at the queue's head.
  func runBlocks(_ queued: [QueuedBlock], _ common: Set<RunLoopMode>, _ mode: ModeItems) {
    var kept: [QueuedBlock] = []
    for item in queued {
      if item.runs(in: mode.name, commonModes: common) {
        item.block()
      } else {
        kept.append(item)
      }
    }
    if !kept.isEmpty {
      lock.withLock { blocks = kept + blocks }
    }
  }

  /// Fires the signalled sources of `mode`, lower order first, equal orders in the order
  /// added (when `onlyOne`, until one's handler ran). Returns whether a handler ran. Looks at
  /// the mode's custom sources and at the descriptor members this loop found ready, never at
  /// idle members.
  func fireSources(_ mode: ModeItems, onlyOne: Bool) -> Bool {
    let (claimed, candidates, listed): (RunLoopSource?, [RunLoopSource], Bool) = lock.withLock {
      let scanned = mode.scannedSources
      let listed = !readySources.isEmpty
      // One custom source in the mode and no listed members (the common case): claim its
      // signal in this critical section.
      if !listed && scanned.count == 1 {
        let only = scanned[0]
        return (only.claimSignal() ? only : nil, [], false)
      }
      var ready = scanned.isEmpty ? [] : scanned.filter(\.isReady)
      if listed {
        var seen = Set<ObjectIdentifier>()
        for source in readySources where mode.contains(source) && source.isReady {
          if seen.insert(ObjectIdentifier(source)).inserted { ready.append(source) }
        }
      }
      if ready.count > 1 {
        ready.sort {
          ($0.order, mode.sequence(of: $0) ?? .max) < ($1.order, mode.sequence(of: $1) ?? .max)
        }
      }
      return (nil, ready, listed)
    }
    if let claimed { return claimed.fire() }
    if candidates.isEmpty { return false }
    var handled = false
    for source in candidates {
      // A descriptor drained since it was reported runs no handler and does not count.
      if source.claimSignal() && source.fire() {
        handled = true
        if onlyOne { break }
      }
    }
    // Listed members that fired (or were invalidated) leave the list; those still
    // signalled wait for a run in one of their modes.
    if listed {
      // The sources leaving the list are dropped after the lock: one may hold the last
      // reference to an invalidated member, whose handler's captures run arbitrary deinits.
      let left: [RunLoopSource] = lock.withLock {
        var left: [RunLoopSource] = []
        var kept: [RunLoopSource] = []
        for source in readySources {
          if source.isSignalled { kept.append(source) } else { left.append(source) }
        }
        readySources = kept
        return left
      }
      _ = left
    }
    return handled
  }

  /// How a pass waits (step 7), decided with `lock` held by ``prepareWait(_:poll:deadline:)``.
  enum WaitPlan {
    /// No system call: nothing could be ready that the pass does not already see.
    case none
    /// `epoll_wait` with a zero timeout: descriptor members may be ready.
    case pollMembers
    /// Sleep in `epoll_wait` until a member, the timerfd or the wake-up eventfd is ready.
    case sleepInEpoll
    /// Sleep on the `wakeState` futex: nothing to wait for but a wake-up.
    case sleepOnFutex
  }

  /// Step 7: decides how to wait and waits. Returns how many ready tokens
  /// `backend.readyTokens` holds; the caller consumes them with the lock held. A polling pass
  /// without descriptor members makes no system call: timers are checked against the clock,
  /// wake-ups need no draining.
  func waitForEvents(_ activation: Activation, poll: Bool, deadline: MonotonicInstant) -> Int {
    let plan = lock.withLock { prepareWait(activation, poll: poll, deadline: deadline) }
    return wait(plan)
  }

  /// Decides how to wait, arming the timerfd for an epoll sleep with a wake instant. Sets
  /// `isSleeping` (and `sleepsOnFutex`) for a sleep. Called with `lock` held.
  ///
  /// The futex is used only when the loop would sleep with no instant to wake at and no
  /// descriptor to watch: a futex cannot watch descriptors, and its timeout would add the
  /// thread's timer slack (50 us by default) to timers, which the timerfd does not.
  func prepareWait(_ activation: Activation, poll: Bool, deadline: MonotonicInstant) -> WaitPlan {
    // A wake-up received by a nested run may have been meant for this one: no sleep before
    // the next pass has re-checked.
    if poll || activation.wokenWhileNested { return memberCount > 0 ? .pollMembers : .none }
    let wakeAt = min(activation.mode.earliestWakeDeadline(), deadline)
    if wakeAt == .distantFuture && memberCount == 0 {
      isSleeping = true
      sleepsOnFutex = true
      return .sleepOnFutex
    }
    if wakeAt <= .now { return memberCount > 0 ? .pollMembers : .none }
    if wakeAt != armedDeadline {
      backend.armTimer(at: wakeAt)
      armedDeadline = wakeAt
    }
    isSleeping = true
    sleepsOnFutex = false
    return .sleepInEpoll
  }

  /// Carries out `plan` without the lock. A sleep first publishes itself in `wakeState` by a
  /// compare-and-swap that requires no wake-up pending; when one is pending the loop does not
  /// sleep at all (the pass repeats). Returns the number of ready epoll tokens.
  func wait(_ plan: WaitPlan) -> Int {
    let sleepingBit: UInt32
    switch plan {
    case .none: return 0
    case .pollMembers: return backend.wait(block: false)
    case .sleepInEpoll: sleepingBit = RunLoop.sleepingInEpoll
    case .sleepOnFutex: sleepingBit = RunLoop.sleepingOnFutex
    }
    var state = wakeState.load(ordering: .full)
    while true {
      if state & RunLoop.exitRequested != 0 { return 0 }
      if state & RunLoop.wakeUpPending != 0 {
        // Woken before sleeping: consume the wake-up and make another pass.
        _ = wakeState.and(~RunLoop.wakeUpPending, ordering: .full)
        consumedWakeUp = true
        return 0
      }
      if wakeState.compareAndSwap(expected: state, desired: state | sleepingBit, ordering: .full) { break }
      state = wakeState.load(ordering: .full)
    }
    let count: Int
    if plan == .sleepOnFutex {
      // Returns when a waker sets `wakeUpPending` and wakes, or at once when the word already
      // changed; a spurious return only costs a pass.
      wakeState.wait(whileEqualTo: state | sleepingBit)
      count = 0
    } else {
      count = backend.wait(block: true)
    }
    let ended = wakeState.fetchAnd(~(sleepingBit | RunLoop.wakeUpPending), ordering: .full)
    if ended & RunLoop.wakeUpPending != 0 { consumedWakeUp = true }
    return count
  }

  /// A descriptor member joined the epoll set. A loop sleeping on its futex would not see the
  /// member become ready, so it is woken to sleep again in epoll.
  func memberAdded() {
    lock.withLock {
      memberCount += 1
      if isSleeping && sleepsOnFutex { wakeUp() }
    }
  }

  /// A descriptor member left the epoll set.
  func memberRemoved() {
    lock.withLock { memberCount -= 1 }
  }

  /// Consumes the ready epoll tokens. Called with `lock` held.
  func consumeReadyTokens(_ count: Int) {
    for index in 0..<count {
      switch backend.readyTokens[index] {
      case EpollBackend.wakeUpToken:
        // Edge-triggered: each write is reported once, the counter needs no read; `wait`
        // already cleared `wakeUpPending`.
        break
      case EpollBackend.timerToken:
        backend.drainTimer()
        armedDeadline = .distantPast
      default:
        // Descriptor sources and ports: signal the member's source.
        descriptorTokenReady(backend.readyTokens[index])
        descriptorMembersReady = true
      }
    }
  }

  /// `"RunLoop(mode: kCFRunLoopDefaultMode, waiting: false)"`.
  public var description: String {
    let (mode, sleeping) = lock.withLock { (activations.last?.mode.name, isSleeping) }
    return "RunLoop(mode: \(mode?.rawValue ?? "none"), waiting: \(sleeping))"
  }
}
