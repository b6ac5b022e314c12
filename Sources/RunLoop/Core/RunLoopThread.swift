import CThreadingShims
import Sync
import Threads

/// A thread that runs its run loop until told to stop: the common home for work handed over
/// with perform requests, sources, timers and ports.
///
/// ``start(name:configuration:)`` returns once the new thread's run loop exists and has made
/// its first pass, so requests made right after it (``RunLoop/performAndWait(inModes:_:)``,
/// ``RunLoop/performAndWait(on:inModes:_:)``, adding a source) are served; no start-up
/// handshake of your own is needed. The thread runs its loop in ``RunLoopMode/default`` until
/// ``stop()``; the loop's common modes are kept alive by an internal item, so the loop waits
/// for work even while it has no source or timer of yours, and never returns `finished`.
///
/// Why this type exists: a run loop whose mode has nothing in it (no source, timer or queued
/// block) ends a run at once with ``RunLoopRunResult/finished`` - the toolkit's one deviation
/// from Core Foundation here, which sleeps until the deadline instead - and a thread's run
/// loop exists only once the thread asked for ``RunLoop/current``. A hand-made serving thread
/// therefore needs a dummy source to keep running, and its clients need a handshake before
/// ``RunLoop/performAndWait(on:inModes:_:)`` stops throwing ``PerformError/noRunLoop``.
///
/// ```swift
/// let worker = try RunLoopThread.start(name: "io")
/// try worker.runLoop.performAndWait { openFiles() }
/// worker.runLoop.performAndWakeUp { flush() }
/// worker.stop()   // ends the loop and joins the thread
/// ```
///
/// The handle is not copyable: one owner stops it. Dropping it without ``stop()`` stops and
/// joins the thread too (as C++'s `std::jthread`), so no serving thread outlives its handle
/// unnoticed, and the end of the handle's scope is the usual place it stops (no `defer` is
/// needed). A block running on the thread may call `RunLoop.current.stop()` (it ends the
/// current run only; the thread runs its loop again). The handle may also be dropped on the
/// thread itself (say, by an object that owns it and whose last reference goes away in a
/// block on that thread): a thread cannot join itself, so the drop then asks the thread to
/// exit and detaches it, and the thread ends once the code running on it returns to its
/// loop. Calling ``stop()`` on the thread itself is misuse and stops the process with a
/// message, because ``stop()`` promises the thread has ended when it returns.
public struct RunLoopThread: ~Copyable, Sendable {
  /// The thread's run loop: add sources, timers and ports to it, or queue blocks on it.
  public let runLoop: RunLoop
  private let core: Core

  /// The thread's object (its name, identity and dictionary).
  public var thread: Thread { core.thread }

  private init(runLoop: RunLoop, core: Core) {
    self.runLoop = runLoop
    self.core = core
  }

  /// Starts a thread that runs its run loop until ``stop()``, and returns once that loop
  /// exists and has made its first pass. Blocks the caller for the thread's start-up only.
  ///
  /// - Parameters:
  ///   - name: The thread's name; overrides `configuration.name` when not nil.
  ///   - configuration: Stack, priority, affinity and the other thread settings.
  ///     ``/Threads/ThreadConfiguration/finishBeforeExit`` must stay false (setting it stops
  ///     the process: misuse): the thread runs its loop until ``stop()``, so `exit()` would
  ///     wait for it for ever; to finish the loop's work before the process ends, call
  ///     ``stop()`` first (as for a ``/Threads/ThreadPool``).
  /// - Throws: ``/Threads/ThreadStartError``: `.invalidConfiguration` for a configuration
  ///   field out of range, as ``/Threads/Thread/spawn(name:configuration:_:)`` throws it;
  ///   `.system` when the thread cannot be created (`EAGAIN` from `pthread_create`, ...) or
  ///   when its run loop's descriptors cannot be (`EMFILE` from `epoll_create1`, ...; the
  ///   thread has then ended and been joined).
  @available(*, noasync, message: "blocks until the new thread's run loop runs")
  public static func start(
    name: String? = nil, configuration: ThreadConfiguration = ThreadConfiguration()
  ) throws(ThreadStartError) -> RunLoopThread {
    if configuration.finishBeforeExit {
      reportMisuse(
        "RunLoopThread",
        "configuration.finishBeforeExit is not supported (the thread runs its loop until stop(), so exit() would wait for ever); call stop() before exiting to finish the loop's work"
      )
    }
    let started = Latch(count: 1)
    let outcome = LockedValue<Result<RunLoop, SystemCallError>?>(nil)
    // The thread's `tk_thread_identity()`: tells a drop on the thread itself from others
    // (valid even while the thread's thread-local destructors run, unlike `Thread.current`).
    let identity = LockedValue<UInt64>(0)
    let joinable = try Thread.spawn(name: name, configuration: configuration) { () throws(Never) -> Void in
      identity.withLock { $0 = tk_thread_identity() }
      let runLoop: RunLoop
      do throws(SystemCallError) {
        runLoop = try RunLoop.currentOrThrow()
      } catch {
        outcome.withLock { $0 = .failure(error) }
        started.countDown()
        return
      }
      runLoop.keepCommonModesAlive()
      // Reported from the first pass, so the caller knows the loop runs.
      runLoop.perform(inModes: [.default]) {
        outcome.withLock { $0 = .success(runLoop) }
        started.countDown()
      }
      // An exit request (from `stop`) ends every run, current and later (see
      // `RunLoop`'s "Exit requests"); a `stop()` of the loop ends one run only.
      while !Thread.current.isExitRequested {
        _ = runLoop.run(mode: .default, before: .distantFuture)
      }
    }
    started.wait()
    let core = Core(joinable, identity: identity.withLock { $0 })
    switch outcome.withLock({ $0 }) {
    case .success(let runLoop)?:
      return RunLoopThread(runLoop: runLoop, core: core)
    case .failure(let error)?:
      core.stopAndJoin()
      throw .system(error)
    case nil:
      preconditionFailure("RunLoopThread.start: the latch opened without an outcome")
    }
  }

  /// Stops the thread and waits for it to end: its current run returns, it runs its loop no
  /// more, and its thread exits (the loop's remaining items are dropped: sources get their
  /// `cancel` callbacks, and requests still queued fail with
  /// ``PerformError/targetExited``). Blocks until the thread has ended. Calling it from the
  /// thread itself stops the process (a thread cannot join itself).
  @available(*, noasync, message: "blocks until the thread has ended")
  public consuming func stop() {
    if core.isCurrentThread {
      reportMisuse(
        "RunLoopThread", "stop() on the thread itself: a thread cannot join itself (drop the handle instead)")
    }
    core.stopAndJoin()
  }

  deinit {
    if core.isCurrentThread {
      core.stopAndDetach()
    } else {
      core.stopAndJoin()
    }
  }

  // MARK: Perform requests (forwarded to `runLoop`)

  /// Queues `block` on the thread's run loop without waking it; see
  /// ``RunLoop/perform(inModes:_:)``. Never blocks.
  public func perform(inModes modes: [RunLoopMode] = [.common], _ block: @escaping @Sendable () -> Void) {
    runLoop.perform(inModes: modes, block)
  }

  /// Queues `block` on the thread's run loop and wakes it; see
  /// ``RunLoop/performAndWakeUp(inModes:_:)``. Never blocks.
  public func performAndWakeUp(inModes modes: [RunLoopMode] = [.common], _ block: @escaping @Sendable () -> Void) {
    runLoop.performAndWakeUp(inModes: modes, block)
  }

  /// Runs `block` on the thread and waits until it ran or `deadline` passed; see
  /// ``RunLoop/performAndWait(inModes:before:_:)``.
  ///
  /// - Throws: ``PerformError/timedOut`` or ``PerformError/targetExited``.
  @available(*, noasync, message: "blocks until the thread runs the block")
  public func performAndWait(
    inModes modes: [RunLoopMode] = [.common], before deadline: MonotonicInstant,
    _ block: @escaping @Sendable () -> Void
  ) throws(PerformError) {
    try runLoop.performAndWait(inModes: modes, before: deadline, block)
  }

  /// Runs `block` on the thread and waits at most `timeout` until it ran; see
  /// ``RunLoop/performAndWait(inModes:timeout:_:)``.
  ///
  /// - Throws: ``PerformError/timedOut`` or ``PerformError/targetExited``.
  @available(*, noasync, message: "blocks until the thread runs the block")
  public func performAndWait(
    inModes modes: [RunLoopMode] = [.common], timeout: Duration, _ block: @escaping @Sendable () -> Void
  ) throws(PerformError) {
    try runLoop.performAndWait(inModes: modes, timeout: timeout, block)
  }

  /// Runs `block` on the thread and waits without a limit until it ran; see
  /// ``RunLoop/performAndWait(inModes:_:)``.
  ///
  /// - Throws: ``PerformError/targetExited``.
  @available(*, noasync, message: "blocks until the thread runs the block")
  public func performAndWait(inModes modes: [RunLoopMode] = [.common], _ block: @escaping @Sendable () -> Void)
    throws(PerformError)
  {
    try runLoop.performAndWait(inModes: modes, block)
  }
}

extension RunLoopThread {
  /// The joinable thread until it is joined; owned by one `RunLoopThread` handle.
  private final class Core: @unchecked Sendable {
    // @unchecked: `joinable` is touched only by the handle's single owner (the handle is not
    // copyable; `stop` consumes it and `deinit` runs after it).
    let thread: Thread
    /// The thread's `tk_thread_identity()`, never reused by another thread.
    let identity: UInt64
    private var joinable: JoinableThread<Void, Never>?

    init(_ joinable: consuming JoinableThread<Void, Never>, identity: UInt64) {
      thread = joinable.thread
      self.identity = identity
      self.joinable = consume joinable
    }

    /// Whether the calling thread is the one this handle runs.
    var isCurrentThread: Bool { tk_thread_identity() == identity }

    /// Requests the thread's exit and detaches it, once: for a handle dropped on the thread
    /// itself, which cannot wait for its own end. The exit request ends the thread's current
    /// run as soon as the code running on it returns to the loop, and every later run.
    func stopAndDetach() {
      guard let joinable = joinable.take() else { return }
      thread.requestExit()
      joinable.detach()
    }

    /// Requests the thread's exit (which ends every run of its loop) and joins it, once.
    func stopAndJoin() {
      guard let joinable = joinable.take() else { return }
      thread.requestExit()
      joinable.join()
    }
  }
}
