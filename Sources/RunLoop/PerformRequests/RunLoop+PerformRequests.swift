import Sync
import Threads

/// Perform requests (the guide's Table 3-2): run a block on a run loop's thread - this one,
/// the main thread's (``RunLoop/main``), or a given thread's - the next time it makes a pass
/// in one of the request's modes (by default ``RunLoopMode/common``).
///
/// **The perform rule.** Each spelling has one behaviour, named by its verb:
///
/// | call | queues | wakes the loop | blocks the caller | fails by |
/// |---|---|---|---|---|
/// | ``perform(inModes:_:)`` | yes | no (Core Foundation's rule) | never | - |
/// | ``performAndWakeUp(inModes:_:)`` | yes | yes | never | - |
/// | ``performAndWait(inModes:before:_:)``, ``performAndWait(inModes:timeout:_:)`` | yes | yes | until the block ran or the limit passed | throwing ``PerformError`` |
/// | ``performAndWait(inModes:_:)`` | yes | yes | until the block ran | throwing ``PerformError/targetExited`` |
///
/// The `on: Thread` statics (``perform(on:inModes:_:)``, ``performAndWakeUp(on:inModes:_:)``,
/// ``performAndWait(on:inModes:before:_:)``, ...) are the same three shapes for the run loop
/// of a thread, and also throw ``PerformError/noRunLoop`` when that thread has none
/// (``RunLoopThread`` is a thread that always has one; the main thread's is made on first
/// use, so it has none only when its descriptors cannot be made), except for the calling thread: a
/// waiting request naming it runs at once, run loop or not, and the others queue on its
/// ``current`` run loop (created if needed, as in Foundation). ``perform(afterDelay:inModes:_:)``
/// runs a block on this loop after a delay and returns a handle that cancels it.
///
/// Requests to one loop run in the order they were queued, and every queued request runs in
/// each pass. Nothing creates a thread: a loop that never runs never runs the request.
/// Waiting on the caller's own run loop runs the block at once instead (the guide's rule),
/// so it never deadlocks. A waiting request that times out is withdrawn: it is taken out of
/// the queue and never runs (one that had already started is waited for, and counts as run).
/// A request with an empty mode list stops the process with a message (misuse: it could never
/// run; Foundation returns without performing it).
///
/// ```swift
/// // On a worker thread: publish a result on the main thread and go on.
/// RunLoop.main.performAndWakeUp { model.update(result) }
///
/// // Ask the worker to do something, waiting at most a second.
/// try worker.runLoop.performAndWait(timeout: .seconds(1)) { cache.flush() }
///
/// // Coalesce: only the last request within 100 ms runs.
/// pendingRedraw?.cancel()
/// pendingRedraw = RunLoop.current.perform(afterDelay: .milliseconds(100)) { view.redraw() }
/// ```
extension RunLoop {
  // MARK: On this run loop's thread

  /// Queues `block` on this run loop for `modes`, wakes the loop, and waits until the block
  /// ran or `deadline` (monotonic clock) passed; runs it at once when this is the caller's
  /// run loop. Blocks the caller.
  ///
  /// - Throws: ``PerformError/timedOut`` when the deadline passed first (the request is
  ///   withdrawn, taken out of the loop's queue, and will not run; if it had already
  ///   started, the call waits for it to end and returns normally);
  ///   ``PerformError/targetExited`` when the loop's thread ended with the request unrun.
  ///   (`performSelector:onThread:withObject:waitUntilDone:YES modes:`, bounded)
  @available(*, noasync, message: "blocks until the target run loop runs the block")
  public func performAndWait(
    inModes modes: [RunLoopMode] = [.common], before deadline: MonotonicInstant,
    _ block: @escaping @Sendable () -> Void
  ) throws(PerformError) {
    RunLoop.checkModesNotEmpty(modes, "performAndWait")
    if isOwnedByCurrentThread {
      block()
      return
    }
    let pending = PendingPerform(block)
    // The ticket lives only in the queued block (no local keeps it), so the run loop
    // discarding the block releases it, which tells the waiter.
    enqueue(
      QueuedBlock(modes: modes, block: { [ticket = PendingPerform.Ticket(pending)] in ticket.run() }, request: pending))
    wakeUp()
    switch pending.wait(before: deadline) {
    case .ran?: return
    case .dropped?: throw .targetExited
    case nil:
      // Withdrawn: take it out of the queue too, so a loop that never runs does not
      // accumulate the requests of callers that gave up.
      withdrawQueuedBlock(request: ObjectIdentifier(pending))
      throw .timedOut
    }
  }

  /// Queues `block` on this run loop for `modes`, wakes the loop, and waits at most
  /// `timeout` (monotonic clock) until the block ran; see
  /// ``performAndWait(inModes:before:_:)``, which this forwards to. Blocks the caller.
  ///
  /// - Throws: ``PerformError/timedOut`` (the request is withdrawn) or
  ///   ``PerformError/targetExited``.
  @available(*, noasync, message: "blocks until the target run loop runs the block")
  public func performAndWait(
    inModes modes: [RunLoopMode] = [.common], timeout: Duration, _ block: @escaping @Sendable () -> Void
  ) throws(PerformError) {
    try performAndWait(inModes: modes, before: .after(timeout), block)
  }

  /// Queues `block` on this run loop for `modes`, wakes the loop, and waits without a limit
  /// until the block ran; runs it at once when this is the caller's run loop. Blocks the
  /// caller for as long as the loop does not run one of `modes` (forever if it never does):
  /// use ``performAndWait(inModes:timeout:_:)`` when the target might not run its loop.
  ///
  /// - Throws: ``PerformError/targetExited`` when the loop's thread ended with the request
  ///   unrun. (`performSelector:onThread:withObject:waitUntilDone:YES modes:`)
  @available(*, noasync, message: "blocks until the target run loop runs the block")
  public func performAndWait(inModes modes: [RunLoopMode] = [.common], _ block: @escaping @Sendable () -> Void)
    throws(PerformError)
  {
    try performAndWait(inModes: modes, before: .distantFuture, block)
  }

  // MARK: On a given thread

  /// Queues `block` on `thread`'s run loop for `modes` without waking it (as
  /// ``perform(inModes:_:)``): it runs at the loop's next pass. Never blocks. When `thread`
  /// is the caller, its run loop is ``RunLoop/current`` (created if it had none, as in
  /// Foundation: the caller runs it to run the block).
  ///
  /// - Throws: ``PerformError/noRunLoop`` when another thread has no run loop (it never
  ///   asked for ``RunLoop/current``, or it has ended), or the caller's cannot be created.
  public static func perform(
    on thread: Thread, inModes modes: [RunLoopMode] = [.common], _ block: @escaping @Sendable () -> Void
  ) throws(PerformError) {
    try queueingRunLoop(of: thread).perform(inModes: modes, block)
  }

  /// Queues `block` on `thread`'s run loop for `modes` and wakes it (as
  /// ``performAndWakeUp(inModes:_:)``). Never blocks. When `thread` is the caller, its run
  /// loop is ``RunLoop/current`` (created if it had none, as in Foundation).
  ///
  /// - Throws: ``PerformError/noRunLoop`` when another thread has no run loop, or the
  ///   caller's cannot be created. (`performSelector:onThread:withObject:waitUntilDone:NO modes:`)
  public static func performAndWakeUp(
    on thread: Thread, inModes modes: [RunLoopMode] = [.common], _ block: @escaping @Sendable () -> Void
  ) throws(PerformError) {
    try queueingRunLoop(of: thread).performAndWakeUp(inModes: modes, block)
  }

  /// The run loop a request that does not wait queues on: `thread`'s, or the caller's own
  /// (``RunLoop/current``, created if needed) when `thread` is the caller.
  private static func queueingRunLoop(of thread: Thread) throws(PerformError) -> RunLoop {
    if let runLoop = ThreadRunLoops.runLoop(of: thread) { return runLoop }
    guard thread === Thread.current, let runLoop = try? RunLoop.currentOrThrow() else { throw .noRunLoop }
    return runLoop
  }

  /// Runs `block` on `thread` through its run loop and waits until it ran or `deadline`
  /// passed (as ``performAndWait(inModes:before:_:)``; at once when `thread` is the caller,
  /// also when the caller has no run loop yet).
  ///
  /// - Throws: ``PerformError/noRunLoop`` (another thread without a run loop),
  ///   ``PerformError/timedOut`` or ``PerformError/targetExited``.
  @available(*, noasync, message: "blocks until the target run loop runs the block")
  public static func performAndWait(
    on thread: Thread, inModes modes: [RunLoopMode] = [.common], before deadline: MonotonicInstant,
    _ block: @escaping @Sendable () -> Void
  ) throws(PerformError) {
    guard let runLoop = ThreadRunLoops.runLoop(of: thread) else {
      // The caller naming itself: the block runs at once whatever its run loop would do
      // (the guide's rule for waiting on one's own thread), so it needs no run loop.
      guard thread === Thread.current else { throw .noRunLoop }
      checkModesNotEmpty(modes, "performAndWait")
      block()
      return
    }
    try runLoop.performAndWait(inModes: modes, before: deadline, block)
  }

  /// Runs `block` on `thread` through its run loop and waits at most `timeout` until it ran
  /// (as ``performAndWait(inModes:timeout:_:)``).
  ///
  /// - Throws: ``PerformError/noRunLoop``, ``PerformError/timedOut`` or
  ///   ``PerformError/targetExited``.
  @available(*, noasync, message: "blocks until the target run loop runs the block")
  public static func performAndWait(
    on thread: Thread, inModes modes: [RunLoopMode] = [.common], timeout: Duration,
    _ block: @escaping @Sendable () -> Void
  ) throws(PerformError) {
    try performAndWait(on: thread, inModes: modes, before: .after(timeout), block)
  }

  /// Runs `block` on `thread` through its run loop and waits without a limit until it ran
  /// (as ``performAndWait(inModes:_:)``).
  ///
  /// - Throws: ``PerformError/noRunLoop`` or ``PerformError/targetExited``.
  ///   (`performSelector:onThread:withObject:waitUntilDone:YES modes:`)
  @available(*, noasync, message: "blocks until the target run loop runs the block")
  public static func performAndWait(
    on thread: Thread, inModes modes: [RunLoopMode] = [.common], _ block: @escaping @Sendable () -> Void
  ) throws(PerformError) {
    try performAndWait(on: thread, inModes: modes, before: .distantFuture, block)
  }

  /// The run loop of `thread`, if it has asked for one and is still alive. The main thread's
  /// is made on first use by whichever thread asks (as ``RunLoop/main``); nil only when its
  /// descriptors cannot be made (`EMFILE`, `ENOMEM`).
  public static func runLoop(of thread: Thread) -> RunLoop? {
    ThreadRunLoops.runLoop(of: thread)
  }

  // MARK: Deprecated spellings

  /// Deprecated: use ``performAndWakeUp(inModes:_:)`` (`waitUntilDone: false`) or
  /// ``performAndWait(inModes:_:)`` (`waitUntilDone: true`). Forwards to them; with
  /// `waitUntilDone` it stops the process when the loop's thread ends with the request unrun
  /// (the replacement throws ``PerformError/targetExited`` instead).
  @available(*, deprecated, message: "use performAndWakeUp(inModes:_:) or performAndWait(inModes:_:)")
  @available(*, noasync, message: "may block until the target run loop runs the block")
  public func perform(
    inModes modes: [RunLoopMode] = [.common], waitUntilDone: Bool, _ block: @escaping @Sendable () -> Void
  ) {
    if !waitUntilDone {
      performAndWakeUp(inModes: modes, block)
      return
    }
    do {
      try performAndWait(inModes: modes, before: .distantFuture, block)
    } catch {
      fatalError("RunLoop.perform(waitUntilDone:): \(error); use performAndWait(inModes:_:) to handle it")
    }
  }

  /// Deprecated: renamed ``performAndWait(inModes:before:_:)``, which this forwards to.
  @available(*, deprecated, renamed: "performAndWait(inModes:before:_:)")
  @available(*, noasync, message: "blocks until the target run loop runs the block")
  public func perform(
    inModes modes: [RunLoopMode] = [.common], waitUntilDoneBefore deadline: MonotonicInstant,
    _ block: @escaping @Sendable () -> Void
  ) throws(PerformError) {
    try performAndWait(inModes: modes, before: deadline, block)
  }

  /// Deprecated: use ``RunLoop/main``'s ``performAndWakeUp(inModes:_:)`` or
  /// ``performAndWait(inModes:_:)``. Forwards to ``perform(inModes:waitUntilDone:_:)`` on the
  /// main run loop (so `waitUntilDone` stops the process when the request cannot run).
  @available(
    *, deprecated, message: "use RunLoop.main.performAndWakeUp(inModes:_:) or RunLoop.main.performAndWait(inModes:_:)"
  )
  @available(*, noasync, message: "may block until the main run loop runs the block")
  public static func performOnMain(
    inModes modes: [RunLoopMode] = [.common], waitUntilDone: Bool, _ block: @escaping @Sendable () -> Void
  ) {
    RunLoop.main.perform(inModes: modes, waitUntilDone: waitUntilDone, block)
  }

  /// Deprecated: use ``RunLoop/main``'s ``performAndWait(inModes:before:_:)``, which this
  /// forwards to.
  @available(*, deprecated, message: "use RunLoop.main.performAndWait(inModes:before:_:)")
  @available(*, noasync, message: "blocks until the main run loop runs the block")
  public static func performOnMain(
    inModes modes: [RunLoopMode] = [.common], waitUntilDoneBefore deadline: MonotonicInstant,
    _ block: @escaping @Sendable () -> Void
  ) throws(PerformError) {
    try RunLoop.main.performAndWait(inModes: modes, before: deadline, block)
  }

  /// Deprecated: use ``performAndWakeUp(on:inModes:_:)`` (`waitUntilDone: false`) or
  /// ``performAndWait(on:inModes:_:)`` (`waitUntilDone: true`), which this forwards to.
  @available(*, deprecated, message: "use performAndWakeUp(on:inModes:_:) or performAndWait(on:inModes:_:)")
  @available(*, noasync, message: "may block until the target run loop runs the block")
  public static func perform(
    on thread: Thread, inModes modes: [RunLoopMode] = [.common], waitUntilDone: Bool,
    _ block: @escaping @Sendable () -> Void
  ) throws(PerformError) {
    if waitUntilDone {
      try performAndWait(on: thread, inModes: modes, block)
    } else {
      try performAndWakeUp(on: thread, inModes: modes, block)
    }
  }

  /// Deprecated: renamed ``performAndWait(on:inModes:before:_:)``, which this forwards to.
  @available(*, deprecated, renamed: "performAndWait(on:inModes:before:_:)")
  @available(*, noasync, message: "blocks until the target run loop runs the block")
  public static func perform(
    on thread: Thread, inModes modes: [RunLoopMode] = [.common], waitUntilDoneBefore deadline: MonotonicInstant,
    _ block: @escaping @Sendable () -> Void
  ) throws(PerformError) {
    try performAndWait(on: thread, inModes: modes, before: deadline, block)
  }

  // MARK: After a delay

  /// Runs `block` on this run loop's thread after `delay` (never earlier), when the loop runs
  /// in one of `modes`. Never blocks, never wakes the loop beyond what its timer needs, and
  /// cannot fail; a loop that does not run in one of `modes` never runs it, and when the
  /// loop's thread ends first, or had already ended (a loop kept from a stopped thread), the
  /// request is withdrawn (`block` released unrun, the handle no longer pending). Returns a
  /// handle whose ``DelayedPerform/cancel()`` withdraws the request and releases `block` at
  /// once.
  /// (`performSelector:withObject:afterDelay:inModes:`)
  ///
  /// ```swift
  /// pendingRedraw?.cancel()   // coalesce: only the last request runs
  /// pendingRedraw = RunLoop.current.perform(afterDelay: .milliseconds(100)) { view.redraw() }
  /// ```
  @discardableResult
  public func perform(
    afterDelay delay: Duration, inModes modes: [RunLoopMode] = [.common], _ block: @escaping @Sendable () -> Void
  ) -> DelayedPerform {
    RunLoop.checkModesNotEmpty(modes, "perform(afterDelay:)")
    let timer = RunLoopTimer(after: delay) { _ in block() }
    timer.lock.withLock { timer.endsWithItsRunLoop = true }
    var added = false
    for mode in modes { added = add(timer, forMode: mode) || added }
    // Refused by every mode: the loop's thread had ended (the loop was kept from it), so the
    // request can never run and is withdrawn at once. One added before the thread's end is
    // withdrawn by that end, as the requests made earlier.
    if !added { timer.invalidate() }
    return DelayedPerform(timer: timer)
  }

  /// Deprecated: use ``perform(afterDelay:inModes:_:)`` and cancel through the
  /// ``DelayedPerform`` it returns. Runs `block` after `delay`; `target`, `action` and
  /// `argument` identify the request for ``cancelPerformRequests(target:)`` and
  /// ``cancelPerformRequests(target:action:argument:)`` (the target is not retained; once
  /// it is released the request runs as made, and no later object cancels it). As there,
  /// a request on a loop whose thread ends first, or had already ended, is withdrawn (the
  /// returned timer is then invalid).
  @available(*, deprecated, message: "use perform(afterDelay:inModes:_:) and cancel() its DelayedPerform")
  @discardableResult
  public func perform(
    afterDelay delay: Duration, inModes modes: [RunLoopMode] = [.common], target: AnyObject,
    action: String? = nil, argument: AnyHashable? = nil, _ block: @escaping @Sendable () -> Void
  ) -> RunLoopTimer {
    RunLoop.checkModesNotEmpty(modes, "perform(afterDelay:)")
    let slot = DelayedEntrySlot()
    let timer = RunLoopTimer(after: delay) { _ in
      if let entry = slot.entry { DelayedPerformRegistry.remove(entry) }
      block()
    }
    let entry = DelayedPerformRegistry.Entry(
      runLoop: self, target: target, action: action, argument: argument, timer: timer)
    slot.entry = entry
    timer.lock.withLock { timer.endsWithItsRunLoop = true }
    DelayedPerformRegistry.add(entry)
    var added = false
    for mode in modes { added = add(timer, forMode: mode) || added }
    // Refused by every mode (the loop's thread had ended): withdrawn at once, as above; the
    // registry purges the entry of the invalid timer.
    if !added {
      DelayedPerformRegistry.remove(entry)
      timer.invalidate()
    }
    return timer
  }

  /// Deprecated: cancel through the ``DelayedPerform`` handle. Cancels every delayed
  /// request on this run loop made with `target`. (`cancelPreviousPerformRequestsWithTarget:`)
  @available(*, deprecated, message: "cancel() the DelayedPerform that perform(afterDelay:inModes:_:) returns")
  public func cancelPerformRequests(target: AnyObject) {
    for entry in DelayedPerformRegistry.take(on: self, where: { $0.isFor(target) }) { entry.timer.invalidate() }
  }

  /// Deprecated: cancel through the ``DelayedPerform`` handle. Cancels the delayed requests
  /// on this run loop made with `target`, `action` and an equal `argument` (nil matches
  /// requests made without one). (`cancelPreviousPerformRequestsWithTarget:selector:object:`)
  @available(*, deprecated, message: "cancel() the DelayedPerform that perform(afterDelay:inModes:_:) returns")
  public func cancelPerformRequests(target: AnyObject, action: String, argument: AnyHashable?) {
    let taken = DelayedPerformRegistry.take(on: self) {
      $0.isFor(target) && $0.action == action && $0.argument == argument
    }
    for entry in taken { entry.timer.invalidate() }
  }
}

/// A delayed perform request (``RunLoop/perform(afterDelay:inModes:_:)``), to cancel it.
///
/// Copies refer to the same request. Dropping the handle does not cancel the request.
public struct DelayedPerform: Sendable, Hashable {
  let timer: RunLoopTimer

  /// Withdraws the request if it has not run: it will not run, and its block (with what it
  /// captures) is released before this returns, or, when called from the block itself, as
  /// soon as it returns. Harmless once the block ran or after an earlier cancel. Callable
  /// from any thread; never waits for the run loop.
  public func cancel() {
    timer.invalidate()
  }

  /// Whether the request is still to run: false once it ran or was cancelled, and once the
  /// run loop's thread has ended (the request is then withdrawn, its block released).
  public var isPending: Bool {
    timer.isValid
  }

  /// The instant the block is due at (monotonic clock).
  public var fireDate: MonotonicInstant {
    timer.nextFireDate
  }
}

/// Lets a delayed request's timer find its registry entry (created after the timer).
private final class DelayedEntrySlot: @unchecked Sendable {
  // Written once before the timer is scheduled; read when it fires (the run loop's locks
  // order the two). Weak: the entry holds the timer, whose block holds this slot; the
  // registry alone keeps the entry, so it goes once fired, cancelled or purged.
  weak var entry: DelayedPerformRegistry.Entry?
}
