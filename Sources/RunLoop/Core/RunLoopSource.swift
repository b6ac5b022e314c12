import Sync

/// A custom (version-0) input source: signalled by hand, fired by every run loop it is in.
///
/// A client thread hands work to the run loop's thread by recording it somewhere the
/// `perform` callback can find it (see Listings 3-3..3-9), then calling ``signalAndWakeUp()``
/// (or Core Foundation's two calls, ``signal()`` and ``RunLoop/wakeUp()`` on the right loop):
/// the loop wakes, and in its next pass fires each signalled source of the mode it runs in,
/// lower ``order`` first. `signal` alone does not wake a sleeping loop (Core Foundation's
/// rule); a signal is consumed by the first run loop that notices it.
///
/// - `schedule(runLoop, mode)` is called (on the thread that adds the source, without any
///   run-loop lock held) each time the source enters a mode of a run loop; adding it to
///   ``RunLoopMode/common`` calls it once per common mode.
/// - `perform()` is called on the run loop's thread when the source fires.
/// - `cancel(runLoop, mode)` is called each time the source leaves a mode: on
///   ``RunLoop/remove(_:forMode:)-(RunLoopSource,_)`` and, for every mode it is in, on
///   ``invalidate()``.
///
/// Every method may be called from any thread. Callbacks run without the loop's lock, so they
/// may call back into the run loop (add, remove, signal, even run it nested).
///
/// ```swift
/// let source = RunLoopSource(order: 0, perform: { drainCommands() })
/// RunLoop.current.add(source, forMode: .default)
/// // another thread:
/// enqueue(command); source.signalAndWakeUp()
/// ```
///
/// Core Foundation equivalent: `CFRunLoopSourceCreate` with a version-0 context,
/// `CFRunLoopSourceSignal`, `CFRunLoopSourceInvalidate`.
public final class RunLoopSource: @unchecked Sendable, Hashable, CustomStringConvertible {
  // @unchecked: `state` is an atomic, `runLoops` is protected by `lock`, callbacks are
  // immutable.

  /// Lower orders fire first within a pass; with return-after-one-source only the lowest
  /// ready one fires.
  public let order: Int

  let scheduleCallback: (@Sendable (RunLoop, RunLoopMode) -> Void)?
  let cancelCallback: (@Sendable (RunLoop, RunLoopMode) -> Void)?
  let performCallback: @Sendable () -> Void
  /// For a descriptor member's or a port's source: its perform callback, which says whether
  /// a handler ran (a descriptor drained, or a port emptied, since it was signalled runs
  /// none). Nil for sources made with the public initializer, whose `performCallback` always
  /// counts as handled.
  let reportingPerformCallback: (@Sendable () -> Bool)?
  /// True for the sources of descriptor members, which only a run loop signals (when its
  /// epoll wait reports their descriptor): the loop lists them as it signals them, so its
  /// passes never scan them. Sources made with the public initializer are false.
  let isSignalledByRunLoop: Bool

  /// `signalledBit` and `invalidBit`, as one atomic word: signalling, claiming and testing a
  /// source take no lock, so a signalling thread and the firing loop touch one cache line.
  let state = AtomicInteger<UInt32>(0)
  static let signalledBit: UInt32 = 1
  static let invalidBit: UInt32 = 2
  /// Protects `runLoops` (and orders `invalidate` against `register`). Taken after a run
  /// loop's lock, never before.
  let lock = Lock()
  /// The run loops the source has been added to (deduplicated). Protected by `lock`.
  var runLoops: [WeakRunLoop] = []

  /// The name diagnostics give the source (stall reports): given at creation, or else where
  /// it was created (`#fileID:#line`, for example `"App/Commands.swift:42"`). Immutable.
  public var name: String { ItemName.text(explicitName, creationFile, creationLine) }
  /// The name given at creation, if any.
  let explicitName: String?
  /// Where the source was created (`#fileID`, `#line` of the initializer's caller).
  let creationFile: StaticString
  let creationLine: UInt

  /// Creates a valid, unsignalled source. Its firing always counts as a handled source for
  /// ``RunLoop/run(mode:before:returnAfterSourceHandled:)``.
  ///
  /// - Parameters:
  ///   - order: firing order within a pass, lower first.
  ///   - name: what diagnostics call the source (default: where it is created, see
  ///     ``name``).
  ///   - schedule: called when the source is added to a mode of a run loop.
  ///   - cancel: called when the source leaves a mode (removal or invalidation).
  ///   - fileID: where the source is created (the caller's `#fileID`, by default), for the
  ///     default ``name``.
  ///   - line: the line it is created on (the caller's `#line`, by default).
  ///   - perform: the work, called on the run loop's thread when the source fires.
  public init(
    order: Int = 0,
    name: String? = nil,
    schedule: (@Sendable (RunLoop, RunLoopMode) -> Void)? = nil,
    cancel: (@Sendable (RunLoop, RunLoopMode) -> Void)? = nil,
    fileID: StaticString = #fileID, line: UInt = #line,
    perform: @escaping @Sendable () -> Void
  ) {
    self.explicitName = name
    self.creationFile = fileID
    self.creationLine = line
    self.order = order
    self.scheduleCallback = schedule
    self.cancelCallback = cancel
    self.isSignalledByRunLoop = false
    self.performCallback = perform
    self.reportingPerformCallback = nil
  }

  /// A toolkit-internal source whose `perform` returns whether a handler ran, which is what
  /// `returnAfterSourceHandled` counts: a descriptor member's (`signalledByRunLoop`, signalled
  /// only by run loops) or a port's (signalled by senders; its messages may have been taken
  /// by a blocking receive before the loop fired it).
  init(
    order: Int, schedule: (@Sendable (RunLoop, RunLoopMode) -> Void)?,
    cancel: (@Sendable (RunLoop, RunLoopMode) -> Void)?,
    signalledByRunLoop: Bool = true,
    name: String? = nil, fileID: StaticString = #fileID, line: UInt = #line,
    reportingPerform perform: @escaping @Sendable () -> Bool
  ) {
    self.explicitName = name
    self.creationFile = fileID
    self.creationLine = line
    self.order = order
    self.scheduleCallback = schedule
    self.cancelCallback = cancel
    self.isSignalledByRunLoop = signalledByRunLoop
    self.performCallback = { _ = perform() }
    self.reportingPerformCallback = perform
  }

  /// Runs the perform callback (on the run loop's thread, after the signal was claimed) and
  /// returns whether a handler ran.
  func fire() -> Bool {
    if let reportingPerformCallback { return reportingPerformCallback() }
    performCallback()
    return true
  }

  /// Marks the source ready to fire. Does not wake a sleeping run loop: call
  /// ``RunLoop/wakeUp()`` on the loop that should notice. Harmless on an invalidated source.
  /// Lock-free: one atomic or. (`CFRunLoopSourceSignal`)
  public func signal() {
    // Full: releases the caller's writes to the claiming loop, and its trailing fence keeps
    // the following `wakeUp()`'s read of the wake state after the signal (store buffering
    // against the loop clearing `wakeUpPending`, then checking sources; arm64 included).
    _ = state.fetchOr(RunLoopSource.signalledBit, ordering: .full)
  }

  /// Signals the source and wakes every run loop it has been added to, so the loop that runs
  /// one of its modes fires it promptly: the usual way to hand a source work from another
  /// thread. Takes only the source's own lock, to read its list of run loops (never a run
  /// loop's lock), and never waits for a run loop. A loop that is not running ignores the
  /// wake-up and fires the source in its next run; a loop the source has since been removed
  /// from makes one extra pass. Harmless on an invalidated source (it is in no run loop).
  /// (`CFRunLoopSourceSignal` followed by `CFRunLoopWakeUp` on each of its run loops)
  public func signalAndWakeUp() {
    signal()
    // A source in one run loop (the usual case) is woken without building an array: no
    // allocation on the hand-off path. The loops are taken out strongly and woken after the
    // lock, so a loop released meanwhile is never deinitialized under it.
    let (only, several): (RunLoop?, [RunLoop]) = lock.withLock {
      if runLoops.count <= 1 { return (runLoops.first?.value, []) }
      return (nil, runLoops.compactMap(\.value))
    }
    only?.wakeUp()
    for runLoop in several { runLoop.wakeUp() }
  }

  /// Whether the source is signalled and not yet fired (false once invalidated).
  /// (`CFRunLoopSourceIsSignalled`)
  public var isSignalled: Bool {
    state.load(ordering: .acquiring) == RunLoopSource.signalledBit
  }

  /// Whether the source can still fire (it has not been invalidated).
  /// (`CFRunLoopSourceIsValid`)
  public var isValid: Bool {
    state.load(ordering: .acquiring) & RunLoopSource.invalidBit == 0
  }

  /// Removes the source from every mode of every run loop it is in, calling `cancel` for each
  /// of those modes; the source never fires again and adding it later is a no-op (the add
  /// returns false). Idempotent; callable from any thread. (`CFRunLoopSourceInvalidate`)
  public func invalidate() {
    let loops: [RunLoop] = lock.withLock {
      let before = state.fetchOr(RunLoopSource.invalidBit, ordering: .full)
      guard before & RunLoopSource.invalidBit == 0 else { return [] }
      let loops = runLoops.compactMap(\.value)
      runLoops = []
      return loops
    }
    for runLoop in loops {
      runLoop.removeFromEveryMode(self)
    }
  }

  /// Records `runLoop` as a place the source is scheduled; false when the source is invalid.
  /// Called with `runLoop`'s lock held.
  func register(in runLoop: RunLoop) -> Bool {
    lock.withLock {
      // Under `lock`, so an `invalidate` either sees this loop or has already set the bit.
      guard isValid else { return false }
      if !runLoops.contains(where: { $0.value === runLoop }) {
        runLoops.append(WeakRunLoop(value: runLoop))
      }
      return true
    }
  }

  /// Whether the source is valid and signalled (a candidate for firing).
  var isReady: Bool { isSignalled }

  /// Atomically consumes the signal; true when this caller should fire the source.
  func claimSignal() -> Bool {
    // Only the exact state "signalled, valid" is claimed; a cheap load first keeps an
    // unsignalled source's check free of a locked instruction.
    if state.load(ordering: .acquiring) != RunLoopSource.signalledBit { return false }
    // Full: reads the signal's releasing write (acquire), so the handler sees what the
    // signalling thread wrote; a failed swap claims nothing and needs no order.
    return state.compareAndSwap(expected: RunLoopSource.signalledBit, desired: 0, ordering: .full)
  }

  /// Identity.
  public static func == (lhs: RunLoopSource, rhs: RunLoopSource) -> Bool { lhs === rhs }

  /// Identity.
  public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }

  /// `"RunLoopSource(order: 0, signalled: false, valid: true)"`.
  public var description: String {
    let current = state.load(ordering: .acquiring)
    let valid = current & RunLoopSource.invalidBit == 0
    let signalled = valid && current & RunLoopSource.signalledBit != 0
    return "RunLoopSource(order: \(order), signalled: \(signalled), valid: \(valid))"
  }
}
