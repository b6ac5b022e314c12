import Sync
import Threads

/// Perform requests (the guide's Table 3-2): run a block on the main thread, on another
/// thread, or on this thread after a delay, through the target's run loop.
///
/// A request is a block queued on the target run loop for the given modes (by default
/// ``RunLoopMode/common``) and the loop is woken; the block runs on the target's thread the
/// next time its loop makes a pass in one of those modes. Requests to one target run in the
/// order they were made, and every queued request runs in each pass. Nothing creates a
/// thread: a target that never runs its loop never runs the request.
///
/// **Waiting until done** blocks the caller until the block has run; when the target is the
/// calling thread's own run loop, the block runs at once instead (the guide's rule), so
/// waiting on yourself never deadlocks. The deadline variants
/// (``perform(inModes:waitUntilDoneBefore:_:)``, ``perform(on:inModes:waitUntilDone:_:)``
/// with a deadline) throw ``PerformError`` instead of waiting forever when the target does
/// not run its loop, has ended, or has none; without a deadline, waiting on a thread that
/// never runs its loop waits forever, as in Cocoa.
///
/// ```swift
/// // On a worker thread: publish a result on the main thread and go on.
/// RunLoop.performOnMain(waitUntilDone: false) { model.update(result) }
///
/// // Ask the worker to do something, waiting at most a second.
/// try RunLoop.perform(on: worker, waitUntilDoneBefore: .after(.seconds(1))) { cache.flush() }
///
/// // Coalesce: only the last request within 100 ms runs.
/// RunLoop.current.cancelPerformRequests(target: view, action: "redraw", argument: nil)
/// RunLoop.current.perform(afterDelay: .milliseconds(100), target: view, action: "redraw") { view.redraw() }
/// ```
extension RunLoop {
  // MARK: On this run loop's thread

  /// Queues `block` on this run loop for `modes` and wakes it; with `waitUntilDone`, blocks
  /// the caller until the block ran (runs it at once when this is the caller's run loop).
  /// Without a deadline the wait is unbounded: use ``perform(inModes:waitUntilDoneBefore:_:)``
  /// when the target might not run its loop.
  /// (`performSelector:onThread:withObject:waitUntilDone:modes:`)
  @available(*, noasync, message: "may block until the target run loop runs the block")
  public func perform(inModes modes: [RunLoopMode] = [.common], waitUntilDone: Bool, _ block: @escaping @Sendable () -> Void) {
    if !waitUntilDone {
      performAndWakeUp(inModes: modes, block)
      return
    }
    do {
      try perform(inModes: modes, waitUntilDoneBefore: .distantFuture, block)
    } catch {
      // Only a thread that ends with the request queued gets here: the block never ran.
      fatalError("RunLoop.perform(waitUntilDone:): \(error); use perform(inModes:waitUntilDoneBefore:_:) to handle it")
    }
  }

  /// Queues `block` on this run loop for `modes`, wakes it, and waits until the block ran or
  /// `deadline` (monotonic clock) passed; runs it at once when this is the caller's run loop.
  ///
  /// Throws ``PerformError/timedOut`` when the deadline passed first (the request is
  /// withdrawn, taken out of the loop's queue, and will not run; if it had already started,
  /// the call waits for it to end and returns normally), ``PerformError/targetExited`` when
  /// the loop's thread ended with the request unrun.
  @available(*, noasync, message: "blocks until the target run loop runs the block")
  public func perform(
    inModes modes: [RunLoopMode] = [.common], waitUntilDoneBefore deadline: MonotonicInstant,
    _ block: @escaping @Sendable () -> Void
  ) throws(PerformError) {
    if isOwnedByCurrentThread {
      block()
      return
    }
    let pending = PendingPerform(block)
    let request = ObjectIdentifier(pending)
    // The ticket lives only in the queued block (no local keeps it), so the run loop
    // discarding the block releases it, which tells the waiter.
    enqueue(
      QueuedBlock(modes: modes, block: { [ticket = PendingPerform.Ticket(pending)] in ticket.run() }, request: request))
    wakeUp()
    switch pending.wait(before: deadline) {
    case .ran?: return
    case .dropped?: throw .targetExited
    case nil:
      // Withdrawn: take it out of the queue too, so a loop that never runs does not
      // accumulate the requests of callers that gave up.
      withdrawQueuedBlock(request: request)
      throw .timedOut
    }
  }

  // MARK: On the main thread or a given thread

  /// Runs `block` on the main thread through its run loop, in `modes`; with `waitUntilDone`
  /// waits until it ran (at once when called on the main thread).
  /// (`performSelectorOnMainThread:withObject:waitUntilDone:modes:`)
  @available(*, noasync, message: "may block until the main run loop runs the block")
  public static func performOnMain(
    inModes modes: [RunLoopMode] = [.common], waitUntilDone: Bool, _ block: @escaping @Sendable () -> Void
  ) {
    RunLoop.main.perform(inModes: modes, waitUntilDone: waitUntilDone, block)
  }

  /// Runs `block` on the main thread through its run loop and waits until it ran or
  /// `deadline` passed (at once when called on the main thread). Throws
  /// ``PerformError/timedOut`` when the main thread does not run its loop in one of `modes`
  /// before the deadline (the request is withdrawn).
  @available(*, noasync, message: "blocks until the main run loop runs the block")
  public static func performOnMain(
    inModes modes: [RunLoopMode] = [.common], waitUntilDoneBefore deadline: MonotonicInstant,
    _ block: @escaping @Sendable () -> Void
  ) throws(PerformError) {
    try RunLoop.main.perform(inModes: modes, waitUntilDoneBefore: deadline, block)
  }

  /// Runs `block` on `thread` through its run loop, in `modes`; with `waitUntilDone` waits
  /// until it ran (at once when `thread` is the caller). Throws ``PerformError/noRunLoop``
  /// when the thread has no run loop (it must have asked for ``RunLoop/current`` first),
  /// and ``PerformError/targetExited`` when it ends with the request unrun.
  /// (`performSelector:onThread:withObject:waitUntilDone:modes:`)
  @available(*, noasync, message: "may block until the target run loop runs the block")
  public static func perform(
    on thread: Thread, inModes modes: [RunLoopMode] = [.common], waitUntilDone: Bool,
    _ block: @escaping @Sendable () -> Void
  ) throws(PerformError) {
    guard let runLoop = ThreadRunLoops.runLoop(of: thread) else { throw .noRunLoop }
    if waitUntilDone {
      try runLoop.perform(inModes: modes, waitUntilDoneBefore: .distantFuture, block)
    } else {
      runLoop.performAndWakeUp(inModes: modes, block)
    }
  }

  /// Runs `block` on `thread` through its run loop and waits until it ran or `deadline`
  /// passed; throws ``PerformError`` (`.noRunLoop`, `.timedOut`, `.targetExited`).
  @available(*, noasync, message: "blocks until the target run loop runs the block")
  public static func perform(
    on thread: Thread, inModes modes: [RunLoopMode] = [.common], waitUntilDoneBefore deadline: MonotonicInstant,
    _ block: @escaping @Sendable () -> Void
  ) throws(PerformError) {
    guard let runLoop = ThreadRunLoops.runLoop(of: thread) else { throw .noRunLoop }
    try runLoop.perform(inModes: modes, waitUntilDoneBefore: deadline, block)
  }

  /// The run loop of `thread`, if it has asked for one and is still alive (the main
  /// thread's always exists).
  public static func runLoop(of thread: Thread) -> RunLoop? {
    ThreadRunLoops.runLoop(of: thread)
  }

  // MARK: After a delay

  /// Runs `block` on this run loop's thread after `delay` (never earlier), when the loop runs
  /// in one of `modes`; a one-shot ``RunLoopTimer`` is returned (invalidate it to cancel).
  /// `target`, `action` and `argument` identify the request for
  /// ``cancelPerformRequests(target:)`` and ``cancelPerformRequests(target:action:argument:)``;
  /// the target is not retained. (`performSelector:withObject:afterDelay:inModes:`)
  @discardableResult
  public func perform(
    afterDelay delay: Duration, inModes modes: [RunLoopMode] = [.common], target: AnyObject? = nil,
    action: String? = nil, argument: AnyHashable? = nil, _ block: @escaping @Sendable () -> Void
  ) -> RunLoopTimer {
    let slot = DelayedEntrySlot()
    let timer = RunLoopTimer(after: delay) { _ in
      if let entry = slot.entry { DelayedPerformRegistry.remove(entry) }
      block()
    }
    let entry = DelayedPerformRegistry.Entry(
      runLoop: self, target: target.map(ObjectIdentifier.init), action: action, argument: argument, timer: timer)
    slot.entry = entry
    DelayedPerformRegistry.add(entry)
    for mode in modes { add(timer, forMode: mode) }
    return timer
  }

  /// Cancels every delayed request on this run loop made with `target`.
  /// (`cancelPreviousPerformRequestsWithTarget:`)
  public func cancelPerformRequests(target: AnyObject) {
    let identity = ObjectIdentifier(target)
    for entry in DelayedPerformRegistry.take(on: self, where: { $0.target == identity }) { entry.timer.invalidate() }
  }

  /// Cancels the delayed requests on this run loop made with `target`, `action` and an equal
  /// `argument` (nil matches requests made without one).
  /// (`cancelPreviousPerformRequestsWithTarget:selector:object:`)
  public func cancelPerformRequests(target: AnyObject, action: String, argument: AnyHashable?) {
    let identity = ObjectIdentifier(target)
    let taken = DelayedPerformRegistry.take(on: self) {
      $0.target == identity && $0.action == action && $0.argument == argument
    }
    for entry in taken { entry.timer.invalidate() }
  }
}

/// Lets a delayed request's timer find its registry entry (created after the timer).
private final class DelayedEntrySlot: @unchecked Sendable {
  // Written once before the timer is scheduled; read when it fires (the run loop's locks
  // order the two). Weak: the entry holds the timer, whose block holds this slot; the
  // registry alone keeps the entry, so it goes once fired, cancelled or purged.
  weak var entry: DelayedPerformRegistry.Entry?
}
