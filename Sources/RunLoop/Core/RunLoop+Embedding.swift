import Sync

/// What one ``RunLoop/runDueWork(mode:)`` call did, and when the loop next needs its thread.
public struct RunLoopDueWorkResult: Sendable, Hashable, CustomStringConvertible {
  /// How the pass ended: ``RunLoopRunResult/timedOut`` after a pass (the usual value),
  /// ``RunLoopRunResult/finished`` when the mode has nothing in it (no pass was made),
  /// ``RunLoopRunResult/stopped`` when the loop's thread was asked to exit (no pass was made:
  /// stop calling), ``RunLoopRunResult/handledSource`` never.
  public let result: RunLoopRunResult
  /// The earliest instant a timer of the mode must fire by (its fire date plus tolerance),
  /// or nil when none is scheduled. Informational: the loop's
  /// ``RunLoop/pollDescriptor`` becomes readable at that instant by itself, so a foreign loop
  /// that watches the descriptor needs no timeout of its own.
  public let nextTimerDeadline: MonotonicInstant?

  /// Creates a result (for tests and for wrappers that report a pass of their own).
  public init(result: RunLoopRunResult, nextTimerDeadline: MonotonicInstant?) {
    self.result = result
    self.nextTimerDeadline = nextTimerDeadline
  }

  /// `"RunLoopDueWorkResult(timedOut, next timer: ...)"`.
  public var description: String {
    let next = nextTimerDeadline.map { "\($0)" } ?? "none"
    return "RunLoopDueWorkResult(\(result), next timer: \(next))"
  }
}

extension RunLoop {
  // MARK: Embedding in a foreign event loop

  /// A descriptor that becomes readable whenever the loop has work for its thread: for
  /// a thread whose event loop is someone else's (GTK's, libuv's, a game loop), which adds
  /// this descriptor to what it polls and calls ``runDueWork(mode:)`` when it is readable.
  ///
  /// Call ``runDueWork(mode:)`` once before the foreign loop first waits on the descriptor:
  /// that call hands the loop to the descriptor. Until then the loop is neither running nor
  /// handed over, so work that is already there or arrives meanwhile (a timer added at
  /// start-up, a wake-up, a queued block) does not make the descriptor readable, and a
  /// foreign loop that waits without a timeout would wait for ever.
  ///
  /// Once handed over, it is the loop's epoll descriptor, so it is readable when:
  /// - a descriptor source or port of the loop is ready;
  /// - ``wakeUp()`` is called (and with it every call that wakes the loop: a source's
  ///   ``RunLoopSource/signalAndWakeUp()``, ``performAndWakeUp(inModes:_:)``, the perform
  ///   requests, a message sent to a port, a job for an executor on the loop, an exit
  ///   request for its thread, also one made during a ``runDueWork(mode:)`` call, which
  ///   then leaves the descriptor readable for the call that answers
  ///   ``RunLoopRunResult/stopped``; not ``stop()``: between two calls no run is active, so a
  ///   stop does nothing, as for any loop that is not running);
  /// - a timer of the mode passed to the last ``runDueWork(mode:)`` is due (fire date plus
  ///   tolerance reached; the descriptor includes the loop's `CLOCK_MONOTONIC` timerfd,
  ///   re-armed when another thread adds or changes a timer).
  ///
  /// It wakes exactly when the loop would wake from its own sleep: a block queued with
  /// plain ``perform(inModes:_:)`` or a source signalled with ``RunLoopSource/signal()``
  /// (neither wakes a loop) waits for the next call, as it waits for the next pass in a
  /// loop's own run. A wake-up asks the loop to re-check its own work: one that arrives while
  /// ``runDueWork(mode:)`` runs is answered by that call, which looks for work left before it
  /// arms the descriptor again; it does not make the descriptor readable for state the loop
  /// does not hold (hand such a change to the loop as a block or a source signal).
  ///
  /// Poll it for reading only (`POLLIN`/`EPOLLIN`, level-triggered is fine); never read it,
  /// close it, or add it to the loop's own epoll set. It stays open as long as the run loop
  /// exists (for ``main``: the process's lifetime). Callable from any thread.
  ///
  /// ```swift
  /// let loop = RunLoop.main
  /// var watched = pollfd(fd: loop.pollDescriptor, events: Int16(POLLIN), revents: 0)
  /// _ = loop.runDueWork()              // once first: hands the loop to the descriptor
  /// while running {
  ///   _ = poll(&watched, 1, -1)        // the foreign loop's own wait, no timeout needed
  ///   if watched.revents != 0 { _ = loop.runDueWork() }
  /// }
  /// ```
  ///
  /// libuv equivalent: `uv_backend_fd`.
  public var pollDescriptor: Int32 { backend.epollDescriptor }

  /// Runs what is due in `mode` without ever sleeping, then arms ``pollDescriptor`` to
  /// become readable when the loop next has work: the call a foreign event loop makes when
  /// the descriptor is readable (and may make at any other time; it costs one pass). Make
  /// the first call before the foreign loop first waits on the descriptor: only a call
  /// hands the loop to it (see ``pollDescriptor``).
  ///
  /// One pass in `mode` (observers see an entry, one pass and an exit): queued blocks,
  /// signalled sources, ready descriptor sources and ports, due timers, as
  /// ``run(mode:before:returnAfterSourceHandled:)`` with a deadline already passed. Work
  /// that arrives during the pass and is not run by it (a block queued by a callback, a timer
  /// that becomes due) leaves the descriptor readable, so the foreign loop calls again at
  /// once; it never sleeps here. Callbacks may run the loop nested, as in any pass (a nested
  /// call of this method runs one pass and leaves the arming to the outer one).
  ///
  /// Between calls the loop counts as sleeping (``isWaiting`` is true), so wake-ups cost what
  /// they cost for a loop asleep in epoll: one eventfd write. Running the loop directly
  /// (``run(mode:before:returnAfterSourceHandled:)``) between calls is allowed: the run takes
  /// the loop back, and the next call of this method hands it to the descriptor again.
  ///
  /// Blocks only for the callbacks it runs. Misuse stops the process with a message: a call
  /// from a thread other than the loop's own, or in ``RunLoopMode/common``.
  /// (libuv: `uv_run(loop, UV_RUN_NOWAIT)`; GLib: `g_main_context_iteration(context, FALSE)`)
  @available(*, noasync, message: "runs the thread's run loop; call it from the foreign loop's callback")
  @discardableResult
  public func runDueWork(mode: RunLoopMode = .default) -> RunLoopDueWorkResult {
    guard isOwnedByCurrentThread else {
      reportMisuse("RunLoop", "runDueWork: a run loop can only be run by its own thread")
    }
    if mode == .common {
      reportMisuse("RunLoop", "runDueWork(mode: .common): the common pseudo-mode cannot be run; run a concrete mode")
    }
    let outermost = lock.withLock {
      unparkFromForeignLoop()
      return activations.isEmpty
    }
    if outermost { collectReadyEvents() }
    let result = run(mode: mode, before: .distantPast)
    let next: MonotonicInstant
    // An exit request ends every run: the loop is not handed to the descriptor again (stop
    // calling). One that arrived during this pass, after the run's check (its wake-up found
    // the loop busy, so it wrote nothing), has not been reported by `result`: the descriptor
    // is left readable, so the foreign loop calls once more and gets `stopped`.
    if outermost && !isExitRequested {
      next = parkForForeignLoop(mode)
    } else {
      if outermost && result != .stopped { backend.signalWakeUp() }
      next = lock.withLock { (mode == .default ? defaultItems : modes[mode])?.earliestWakeDeadline() ?? .distantFuture }
    }
    return RunLoopDueWorkResult(result: result, nextTimerDeadline: next == .distantFuture ? nil : next)
  }

  /// Takes every event the epoll set holds (the wake-up eventfd's, an expired timerfd's, ready
  /// members'), so the descriptor stops being readable for what this call will now handle:
  /// members are signalled for the pass, the timerfd drained (and marked for re-arming).
  /// The loop's own passes poll the set only when it has members; a foreign loop polls the
  /// set itself, so here it is always collected. Owning thread, without the lock.
  func collectReadyEvents() {
    let count = backend.wait(block: false)
    if count == 0 { return }
    lock.withLock { consumeReadyTokens(count) }
  }

  /// Hands the loop to its ``pollDescriptor`` after a pass in `mode` (no run is active):
  /// arms the timerfd for the mode's timers and marks the loop as asleep in epoll, so every
  /// wake-up writes the eventfd. Returns the wake instant armed. Owning thread.
  ///
  /// Why no wake-up is lost (the argument of `wakeState`, with this call as the sleep): the
  /// loop stops ignoring wake-ups by a full-barrier RMW before it looks for work left (blocks
  /// for the mode, signalled sources); a client writes its work before its `wakeUp()` reads
  /// the word with a full barrier. So either this call sees the work, or the client sets
  /// `wakeUpPending`: before the compare-and-swap below (which then fails and sees it) or
  /// after it (when the client finds `sleepingInEpoll` and writes the eventfd). Work found, or
  /// a wake-up pending, is answered by writing the eventfd here: the descriptor is readable
  /// and the foreign loop calls again. Timers need no wake-up: one added or changed after
  /// the lock below is re-armed by `rearmIfSleeping` (which sees `parkedMode`), one before
  /// it is in the deadline armed here, and a deadline already passed makes the timerfd
  /// readable at once.
  func parkForForeignLoop(_ modeName: RunLoopMode) -> MonotonicInstant {
    let (state, workLeft, wakeAt): (UInt32, Bool, MonotonicInstant) = lock.withLock {
      // Looked up, not created: a mode that does not exist stays so, as for a run in it
      // (`rearmIfSleeping` finds it by name once something is added to it).
      let mode = modeName == .default ? defaultItems : modes[modeName]
      // Full: its trailing fence keeps the checks below after the clear (pairs with the
      // leading fence of `wakeUp()`'s `.full` load; arm64 included).
      let state = wakeState.fetchAnd(~(RunLoop.ignoringWakeUps | RunLoop.wakeUpDropped), ordering: .full)
      let workLeft =
        blocks.contains { $0.runs(in: modeName, commonModes: commonModeNames) }
        || (mode?.scannedSources.contains { $0.isSignalled } ?? false)
      let wakeAt = mode?.earliestWakeDeadline() ?? .distantFuture
      if wakeAt != armedDeadline {
        backend.armTimer(at: wakeAt)
        armedDeadline = wakeAt
      }
      parkedMode = modeName
      isSleeping = true
      sleepsOnFutex = false
      return (state, workLeft, wakeAt)
    }
    var current = state & ~(RunLoop.ignoringWakeUps | RunLoop.wakeUpDropped)
    var pending = false
    while true {
      if current & RunLoop.exitRequested != 0 {
        pending = true
        break
      }
      let desired = (current & ~RunLoop.wakeUpPending) | RunLoop.sleepingInEpoll
      if wakeState.compareAndSwap(expected: current, desired: desired, ordering: .full) {
        pending = current & RunLoop.wakeUpPending != 0
        break
      }
      current = wakeState.load(ordering: .full)
    }
    if pending || workLeft { backend.signalWakeUp() }
    return wakeAt
  }

  /// Takes the loop back from its ``pollDescriptor`` (if it was handed to it): no longer
  /// asleep, wake-ups ignored until a run's next top of pass (which re-checks everything, so
  /// a pending wake-up is dropped here). Called with `lock` held, by the loop's thread.
  func unparkFromForeignLoop() {
    guard parkedMode != nil else { return }
    parkedMode = nil
    isSleeping = false
    var state = wakeState.load(ordering: .full)
    while true {
      let desired = (state & ~(RunLoop.sleepingInEpoll | RunLoop.wakeUpPending)) | RunLoop.ignoringWakeUps
      if wakeState.compareAndSwap(expected: state, desired: desired, ordering: .full) { return }
      state = wakeState.load(ordering: .full)
    }
  }
}
