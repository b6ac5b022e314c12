import CThreadingShims
import Sync
import Threads

extension RunLoop {
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
  /// - one source's handler ran (``RunLoopRunResult/handledSource``; such a run fires one
  /// source: other sources ready in the same pass, custom, port and descriptor sources
  /// alike, keep their events for the next run). A deadline already
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
      reportMisuse("RunLoop", "run: a run loop can only be run by its own thread")
    }
    if backend.isInherited {
      ForkDetection.reportInheritedUse("RunLoop", "run loop", "run", creator: backend.creatorProcess)
    }
    if mode == .common {
      reportMisuse("RunLoop", "run(mode: .common): the common pseudo-mode cannot be run; run a concrete mode")
    }
    // The thread was asked to exit: no run starts (its check and this call may have raced).
    // Its own flag is read too: the handler that sets the loop's bit runs on the requesting
    // thread after that flag is set, so a thread that saw its flag could otherwise start a
    // run in between. (Once this check passed, the handler's wake-up ends the run.)
    if isExitRequested || Thread.current.isExitRequested { return .stopped }
    let start: (Activation, MonotonicInstant, UInt)? = lock.withLock {
      // Handed to the poll descriptor by `runDueWork`: this run takes the loop back.
      unparkFromForeignLoop()
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
    // A run nested in a callback: that callback is not stalling the loop meanwhile.
    let suspended = diagnostics.suspendCallbackRecord()
    if entryMask & RunLoopActivity.entry.rawValue != 0 { notify(.entry, items) }
    let (result, exitMask) = runPasses(
      activation, deadline: deadline, returnAfterSourceHandled: returnAfterSourceHandled)
    if exitMask & RunLoopActivity.exit.rawValue != 0 { notify(.exit, items) }
    diagnostics.resumeCallbackRecord(suspended)
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

  /// Whether a queued block runs in `mode`. Called with `lock` held; an empty queue (the
  /// usual case) costs one check.
  func hasQueuedBlock(for mode: ModeItems) -> Bool {
    blocks.contains { $0.runs(in: mode.name, commonModes: commonModeNames) }
  }

  /// The passes of one run call (steps 2-9 of the guide's list). Returns the result and the
  /// mode's observer mask at the end (for the exit notification).
  ///
  /// Lock traffic is kept to a few acquisitions per pass by folding work into the same
  /// critical section where the order of events allows it: blocks are taken at the top of a
  /// pass only when no before-timers/before-sources observer could queue more first, and
  /// after the wait only when no after-waiting observer or timer runs in between; the end of
  /// a pass (does the run return?) is decided in the top of the next pass's section, nothing
  /// happening between the two; and in the hand-off shape (see
  /// ``handOffStep(_:afterHandler:deadline:)``) firing the source and deciding the wait share
  /// a section, which after a handler also ends the pass and begins the next. So a handler
  /// that wakes another thread is followed by this thread's sleep after one lock round trip:
  /// the thread it woke finds this one asleep, not running beside it.
  func runPasses(_ activation: Activation, deadline: MonotonicInstant, returnAfterSourceHandled: Bool)
    -> (RunLoopRunResult, UInt)
  {
    let mode = activation.mode
    let pollOnly = deadline == .distantPast || deadline.hasPassed
    let beforeMask = RunLoopActivity.beforeTimers.rawValue | RunLoopActivity.beforeSources.rawValue
    // The hand-off shape's steps apply to runs that neither poll nor return after a source.
    let handOffs = !pollOnly && !returnAfterSourceHandled
    var firstPass = true
    // How the previous pass ended, for the check of its result in this pass's first section.
    var previous: PassEnd? = nil
    // The top section of the next pass when the previous pass's after-wait section took it.
    var carried: TopSection? = nil
    while true {
      // Top of the pass: from here on a wake-up must end the coming sleep.
      var top =
        carried
        ?? lock.withLock {
          beginPass(activation, after: previous, firstPass: firstPass, handOffs: handOffs, deadline: deadline)
        }
      carried = nil
      // A pass began unless the previous one ended the run (a stop found at the top ends a
      // pass that began).
      if top.began { diagnostics.passWillStart() }
      if let result = top.result { return (result, top.mask) }
      firstPass = false
      previous = nil
      if top.mask & RunLoopActivity.beforeTimers.rawValue != 0 {
        notify(.beforeTimers, mode)
        // Those observers may have added before-sources observers, which this pass calls
        // (`notify` reads the current mask).
        notify(.beforeSources, mode)
      } else if top.mask & RunLoopActivity.beforeSources.rawValue != 0 {
        notify(.beforeSources, mode)
      }
      // Moved out of `top`, which lives to the end of the pass: the taken blocks (and their
      // captures) are released here, before the pass can sleep. A capture's deinit may queue
      // a block and wake the loop; released after the sleep, nothing would wake it.
      var taken = top.takeBlocks()
      if let common = taken?.1 {
        runBlocks(&taken!.0, common, mode)
      } else if top.mask & beforeMask != 0 {
        runBlocks(mode)
      }
      // Step 5 and, in the hand-off shape, step 7's decision (see `handOffStep`; the top's
      // section took the first step).
      var sourceHandled = false
      var decidedWait: WaitPlan? = nil
      // Moved out too: a source fired in this step that its handler invalidated must not be
      // kept, with its handler's captures, until after the sleep.
      var step = top.takeStep()
      var afterHandler = false
      steps: while true {
        switch step {
        case .general:
          sourceHandled = afterHandler || fireSources(mode, onlyOne: returnAfterSourceHandled)
          break steps
        case .fire(let source, let newPass):
          // Dropped before the next hand-off step decides the sleep: a source its handler
          // invalidated goes (with its captures) before that decision, not after it.
          step = .general
          if newPass { diagnostics.passWillStart() }
          afterHandler = fire(source, in: mode)
        case .wait(let plan, let newPass):
          if newPass { diagnostics.passWillStart() }
          decidedWait = plan
          break steps
        }
        step = lock.withLock { handOffStep(activation, afterHandler: afterHandler, deadline: deadline) }
      }
      if sourceHandled { runBlocks(mode) }
      // Deviation from Core Foundation, which would sleep until the deadline: a mode left
      // with nothing that could end a wait (its blocks ran, its last timer fired elsewhere)
      // does not sleep; the pass ends and the run returns finished.
      let poll: Bool
      let readyCount: Int
      if let decidedWait {
        poll = false
        readyCount = wait(decidedWait)
      } else if sourceHandled || pollOnly {
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
      var after: (due: [RunLoopTimer], blocks: ([QueuedBlock], Set<RunLoopMode>)?, mask: UInt, next: TopSection?) =
        lock.withLock {
          isSleeping = false
          // A hand-off step's wait with nothing to do after it (no descriptor members or
          // timers to report, no blocks, no after-waiting observers): the pass ends here and
          // the next one begins in this section, without the ignore-wake-ups window between.
          if decidedWait != nil && readyCount == 0 && mode.observerMask == 0 && memberCount == 0 && !mode.hasTimers
            && blocks.isEmpty
          {
            if consumedWakeUp {
              consumedWakeUp = false
              if activations.count > 1 { passWakeUpToOuterActivations() }
            }
            let end = PassEnd(handledSource: false, deadlinePassed: deadline != .distantFuture && deadline.hasPassed)
            let next = beginPass(activation, after: end, firstPass: false, handOffs: handOffs, deadline: deadline)
            return ([], nil, mode.observerMask, next)
          }
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
          return (due, early ? takeBlocks() : nil, mode.observerMask, nil)
        }
      if let next = after.next {
        carried = next
        continue
      }
      if !poll && after.mask & RunLoopActivity.afterWaiting.rawValue != 0 { notify(.afterWaiting, mode) }
      if !after.due.isEmpty {
        for timer in after.due {
          // A timer an earlier callback of this pass removed from the mode does not fire
          // (as a stopped timer in libuv, or a timer removed from its run loop in Core
          // Foundation); an invalidated or re-armed one is refused by `fireIfDue`.
          guard lock.withLock({ mode.contains(timer) }) else { continue }
          fire(timer, in: mode)
        }
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
      // Moved out for the same reason as the top's: released before the port sources fire.
      if let common = after.blocks?.1 {
        runBlocks(&after.blocks!.0, common, mode)
      } else if !after.due.isEmpty || (!poll && after.mask & RunLoopActivity.afterWaiting.rawValue != 0) {
        runBlocks(mode)
      }
      // Step 9 for port-based sources: deliver what the wait reported in this pass. Not in a
      // run that returns after one source when a source already fired in this pass: the run
      // returns after that one, and the members the wait reported stay signalled on the
      // ready list, for the source step of the next pass.
      var portHandled = false
      if descriptorMembersReady {
        descriptorMembersReady = false
        if !(returnAfterSourceHandled && sourceHandled) {
          portHandled = fireSources(mode, onlyOne: returnAfterSourceHandled)
        }
      }
      previous = PassEnd(
        handledSource: (sourceHandled || portHandled) && returnAfterSourceHandled,
        deadlinePassed: pollOnly || (deadline != .distantFuture && deadline.hasPassed))
    }
  }

  /// What the top section of a pass decided (``beginPass(_:after:firstPass:handOffs:deadline:)``).
  struct TopSection {
    /// The mode's observer mask.
    let mask: UInt
    /// The run returns this (the previous pass ended it, or a stop was found at the top).
    let result: RunLoopRunResult?
    /// A pass began (false when the previous pass's end returns the run).
    let began: Bool
    /// Blocks taken at the top (no before-timers/before-sources observer runs first); the
    /// pass moves them out with ``takeBlocks()``.
    private(set) var blocks: ([QueuedBlock], Set<RunLoopMode>)?
    /// Step 5 (and 7) when decided at the top: the hand-off shape with nothing before it;
    /// the pass moves it out with ``takeStep()``.
    private(set) var step: HandOffStep

    /// Hands over the blocks taken at the top and forgets them, so they are released when
    /// the caller is done with them rather than when this section is.
    mutating func takeBlocks() -> ([QueuedBlock], Set<RunLoopMode>)? {
      blocks.take()
    }

    /// Hands over the step and forgets it (leaving `.general`), so a source it names is not
    /// kept alive by this section.
    mutating func takeStep() -> HandOffStep {
      defer { step = .general }
      return step
    }
  }

  /// The end of the previous pass (step 10: does the run return?) and the top of the next
  /// one, in one critical section (nothing happens between the two). Called with `lock` held.
  func beginPass(
    _ activation: Activation, after previous: PassEnd?, firstPass: Bool, handOffs: Bool, deadline: MonotonicInstant
  ) -> TopSection {
    let mode = activation.mode
    if let previous, let result = passResult(activation, previous) {
      return TopSection(mask: mode.observerMask, result: result, began: false, blocks: nil, step: .general)
    }
    activation.ignoresWakeUps = false
    // This pass re-checks everything, so a wake-up received before it is accounted for
    // here; one dropped while ignoring may also have been meant for an outer activation.
    activation.wokenWhileNested = false
    // Full: its trailing fence keeps the checks of sources and blocks below after the
    // clear (pairs with the leading fence of `wakeUp()`'s `.full` load; arm64 included).
    let state = wakeState.fetchAnd(~(RunLoop.ignoringWakeUps | RunLoop.wakeUpDropped), ordering: .full)
    if state & RunLoop.wakeUpDropped != 0 && activations.count > 1 { passWakeUpToOuterActivations() }
    if state & RunLoop.exitRequested != 0 {
      return TopSection(mask: mode.observerMask, result: .stopped, began: true, blocks: nil, step: .general)
    }
    if firstPass && activation.stopped {  // stopped by an entry observer
      activation.stopped = false
      return TopSection(mask: mode.observerMask, result: .stopped, began: true, blocks: nil, step: .general)
    }
    let beforeMask = RunLoopActivity.beforeTimers.rawValue | RunLoopActivity.beforeSources.rawValue
    if mode.observerMask & beforeMask == 0 && !blocks.isEmpty {
      return TopSection(mask: mode.observerMask, result: nil, began: true, blocks: takeBlocks(), step: .general)
    }
    // Nothing before step 5: in the hand-off shape it is decided here too.
    let step = handOffs ? handOffStep(activation, afterHandler: false, deadline: deadline) : .general
    return TopSection(mask: mode.observerMask, result: nil, began: true, blocks: nil, step: step)
  }

  /// How a pass ended, for the check of its result (step 10).
  struct PassEnd {
    /// A handler ran and the run returns after one.
    let handledSource: Bool
    /// The run's deadline had passed at the end of the pass.
    let deadlinePassed: Bool
  }

  /// Step 10: the result the run returns after a pass that ended as `end`, or nil when it
  /// goes on. Called with `lock` held.
  func passResult(_ activation: Activation, _ end: PassEnd) -> RunLoopRunResult? {
    if end.handledSource { return .handledSource }
    if end.deadlinePassed { return .timedOut }
    if activation.stopped || isExitRequested {
      activation.stopped = false
      return .stopped
    }
    if isEmpty(activation.mode) { return .finished }
    return nil
  }

  /// What a pass in the hand-off shape does next, decided by ``handOffStep(_:afterHandler:deadline:)``.
  enum HandOffStep {
    /// Not the hand-off shape (or something to do besides the source): the general steps.
    case general
    /// Fire this source, whose signal was claimed; `newPass` when a new pass began first.
    case fire(RunLoopSource, newPass: Bool)
    /// Nothing to fire: wait as planned (step 7, armed); `newPass` when a new pass began
    /// first.
    case wait(WaitPlan, newPass: Bool)
  }

  /// Steps 5 and 7 of a pass for the hand-off shape, with `lock` held: a mode with at most one
  /// custom source and no observers, timers or descriptor members, in a run that neither
  /// polls nor returns after a source. Claims the source's signal (`.fire`), or else decides
  /// the wait and arms it (`.wait`), in one critical section: the same decisions as
  /// ``fireSources(_:onlyOne:)`` followed by the sleep decision, without the lock between.
  ///
  /// `afterHandler`: the source's handler just ran in this pass. Then the rest of the pass
  /// would do nothing (no blocks queued, no poll without descriptor members, no timers, no
  /// after-waiting observers) and end with the run going on (not stopped, no exit request,
  /// deadline not passed, mode not empty), and the top of the next pass would do nothing
  /// either (no observers, no blocks, wake-ups already counted: `ignoringWakeUps` was cleared
  /// at the top of this pass and is set only after a wait); so the next pass begins here and
  /// goes on to its step 5. Any of those with something to do returns `.general`, before
  /// anything changes, and the pass continues with its general steps.
  ///
  /// Ordering: a waker's signal and wake-up racing this check are caught as in the general
  /// path: the sleep's compare-and-swap in ``wait(_:)`` requires `wakeUpPending` clear, and a
  /// waker that misses the sleeping bit sets it by a read-modify-write on the same word.
  func handOffStep(_ activation: Activation, afterHandler: Bool, deadline: MonotonicInstant) -> HandOffStep {
    let mode = activation.mode
    let sources = mode.scannedSources
    guard mode.observerMask == 0, memberCount == 0, readySources.isEmpty, !mode.hasTimers, sources.count <= 1,
      !activation.wokenWhileNested
    else { return .general }
    if afterHandler {
      let state = wakeState.load(ordering: .relaxed)
      guard blocks.isEmpty, !activation.stopped, state & (RunLoop.exitRequested | RunLoop.wakeUpDropped) == 0,
        deadline == .distantFuture || !deadline.hasPassed, !isEmpty(mode)
      else { return .general }
    }
    if let only = sources.first, only.claimSignal() { return .fire(only, newPass: afterHandler) }
    if isEmpty(mode) { return .general }
    return .wait(prepareWait(activation, poll: false, deadline: deadline), newPass: afterHandler)
  }

  /// Calls `mode`'s observers of `activity` in order, without the lock.
  func notify(_ activity: RunLoopActivity, _ mode: ModeItems) {
    let observers: [RunLoopObserver] = lock.withLock {
      guard mode.observerMask & activity.rawValue != 0 else { return [] }
      return mode.observers.filter { $0.activities.contains(activity) }
    }
    for observer in observers { fire(observer, activity, in: mode) }
  }

  /// Fires the signalled sources of `mode`, lower order first, equal orders in the order
  /// added (when `onlyOne`, until one's handler ran). Returns whether a handler ran. Looks at
  /// the mode's custom sources and at the descriptor members this loop found ready, never at
  /// idle members.
  func fireSources(_ mode: ModeItems, onlyOne: Bool) -> Bool {
    var (claimed, candidates, listed): (RunLoopSource?, [RunLoopSource], Bool) = lock.withLock {
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
    if let only = claimed.take() { return fire(only, in: mode) }
    if candidates.isEmpty { return false }
    var handled = false
    // Popped one at a time, so a source that left the loop in its handler is released before
    // the next handler runs (which may run the loop nested).
    candidates.reverse()
    while let source = candidates.popLast() {
      // A descriptor drained since it was reported runs no handler and does not count.
      if source.claimSignal() && fire(source, in: mode) {
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
    // the next pass has re-checked. Nor with a block for this mode queued (by a callback of
    // this pass, on this thread, which `perform` does not wake): nothing else would wake the
    // loop for it. The pass goes on to run it instead.
    if poll || activation.wokenWhileNested || hasQueuedBlock(for: activation.mode) {
      return memberCount > 0 ? .pollMembers : .none
    }
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
    // The wait starts here for the adaptive rule: a spin that found nothing counts in the
    // sleep after it, which is then not short, so the next one does not spin. Without the
    // switch, the clock is not read.
    let watches = plan == .sleepOnFutex && spinsBeforeSleepingSwitch.load(ordering: .relaxed)
    var waitStart = MonotonicInstant.distantPast
    if watches {
      waitStart = .now
      if lastFutexSleepWasShort { spinForWakeUp() }
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
    let sleepStart = diagnostics.sleepWillBegin()
    if plan == .sleepOnFutex {
      // Returns when a waker sets `wakeUpPending` and wakes, or at once when the word already
      // changed; a spurious return only costs a pass.
      wakeState.wait(whileEqualTo: state | sleepingBit)
      lastFutexSleepWasShort = watches && waitStart.duration(to: .now) < RunLoop.futexSpinLimit
      count = 0
    } else {
      count = backend.wait(block: true)
    }
    diagnostics.sleepDidEnd(sleepStart)
    let ended = wakeState.fetchAnd(~(sleepingBit | RunLoop.wakeUpPending), ordering: .full)
    if ended & RunLoop.wakeUpPending != 0 { consumedWakeUp = true }
    return count
  }

  /// How long a loop about to sleep on its futex first watches for a wake-up, when its last
  /// futex sleep was shorter than this (see ``spinForWakeUp()``).
  static let futexSpinLimit = Duration.microseconds(30)

  /// Before a futex sleep that is likely short (the last one was; see
  /// ``spinsBeforeSleeping``): watches `wakeState` for a wake-up or an exit request for at
  /// most ``futexSpinLimit``, yielding the CPU before each few looks (a partner thread on the
  /// same CPU gets to run and answer; `pause` alone would hold the CPU it needs). Meanwhile
  /// the loop is not marked sleeping, so a waker only sets `wakeUpPending`, without a system
  /// call, and the loop goes on without being woken. The adaptive rule bounds the CPU spent:
  /// a loop whose sleeps are long never spins, and a spin that finds nothing counts in the
  /// sleep after it, which is then not short, so the next one does not spin.
  ///
  /// Relaxed loads suffice: they only decide when to go on to `wait`'s `.full` load and
  /// compare-and-swap, which order everything as without the spin.
  func spinForWakeUp() {
    let end = MonotonicInstant.after(RunLoop.futexSpinLimit)
    let watched = RunLoop.wakeUpPending | RunLoop.exitRequested
    watchingCPU.store(tk_current_cpu(), ordering: .relaxed)
    defer { watchingCPU.store(-1, ordering: .relaxed) }
    while true {
      // Yield first: a partner on the same CPU answers at once.
      Thread.yield()
      for _ in 0..<16 {
        if wakeState.load(ordering: .relaxed) & watched != 0 { return }
        tk_cpu_relax()
      }
      if end.hasPassed { return }
    }
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
}
