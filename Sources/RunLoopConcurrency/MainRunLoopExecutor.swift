// The one file of the toolkit that uses the concurrency runtime's SPI
// (`@_spi(ExperimentalCustomExecutors)`: `ExecutorFactory`, `MainExecutor`,
// `RunLoopExecutor`, `PlatformExecutorFactory`, `_createExecutors(factory:)`;
// `@_spi(ExperimentalScheduling)`: `SchedulingExecutor`). Checked on Swift 6.3.1 (Linux).
// SPI can change between toolchains: everything that depends on it stays here, behind the
// explicit opt-in `MainRunLoopExecutor.install(sleepTimers:)`; the rest of the module
// compiles without it.
//
// What this toolchain does, as found when writing this file:
// - `_createExecutors(factory:)` replaces `MainActor.executor` and `Task.defaultExecutor`;
//   the runtime then sends every main-actor job to the factory's main executor, and the
//   drain of an `async` main calls that executor's `run()`.
// - An `async` function captures its actor's executor when it is entered: the `async` main
//   of a program, entered before any line of it runs, keeps hopping back to the platform's
//   main executor (Dispatch's main queue) whatever is installed later. Hence `install` is
//   `noasync`: it belongs in a synchronous `main` (or top-level code without `await`).
// - `Task.sleep` asks the current scheduling executor (an actor's executor is not consulted;
//   a task executor preference is, then the default executor) and, failing one, makes the
//   runtime force-unwrap the default executor's scheduling conformance: a default executor
//   of a factory must be a `SchedulingExecutor`.

import RunLoop
import Sync
import Threads
@_spi(ExperimentalCustomExecutors) @_spi(ExperimentalScheduling) import _Concurrency

#if canImport(Glibc)
  import Glibc
#endif

/// Makes ``/RunLoop/RunLoop/main`` the main actor's executor: an opt-in, one-call switch so
/// that `@MainActor` code runs on the process's main thread, inside passes of the main run
/// loop, and comes back there after every `await` (a sleep, an actor hop, a continuation
/// resumed from another thread).
///
/// On Linux the toolchain's main executor is Dispatch's main queue: `@MainActor` code may
/// run on other threads, and none of it runs while the main thread runs something else's
/// event loop. Call ``install(sleepTimers:)`` first thing in a synchronous `main`, then run
/// the main run loop (or call ``runMain(sleepTimers:_:)``, which does all of it):
///
/// ```swift
/// @main struct App {
///   static func main() {
///     MainRunLoopExecutor.runMain {   // @MainActor, on the main thread
///       let model = await loadModel()  // back on the main thread after each await
///       window.show(model)
///     }
///   }
/// }
/// ```
///
/// **Where `@MainActor` jobs run.** In the main run loop's passes in its common modes, at
/// the source step (see ``RunLoopExecutor``: priority order, first in first out within a
/// priority), whoever drives the loop: `RunLoop.main.run()`, a nested run in a common mode,
/// or a foreign event loop calling ``/RunLoop/RunLoop/runDueWork(mode:)`` once before its
/// first wait and then whenever ``/RunLoop/RunLoop/pollDescriptor`` is readable (an
/// enqueued job makes it readable once the first call has handed the loop to it). The
/// main run loop's common modes always hold the executor's source, so runs in them no
/// longer return ``/RunLoop/RunLoopRunResult/finished``. `MainActor.assumeIsolated` passes
/// on the main thread and stops the process elsewhere.
///
/// **Everything else** keeps the platform's default executor (Dispatch's global pool on
/// Linux): tasks, default actors and `Task.detached` run there as before. Only the timers of
/// sleeping tasks change with ``SleepTimers/runLoopThread`` (the default).
///
/// **Toolchain SPI.** The switch uses the concurrency runtime's experimental executor SPI
/// (`ExecutorFactory`, `MainExecutor`, `_createExecutors(factory:)`), checked on Swift 6.3.1;
/// it may change or break with another toolchain. Nothing else in the toolkit depends on it.
public enum MainRunLoopExecutor {
  /// Which timers wake sleeping tasks (`Task.sleep`, `Clock.sleep`) once the switch is
  /// installed.
  public enum SleepTimers: Sendable, Hashable {
    /// Run-loop timers on one toolkit thread (named "sleep timers", started by
    /// ``MainRunLoopExecutor/install(sleepTimers:)``): a sleep never ends early (its timer
    /// is armed on `CLOCK_MONOTONIC` and the sleep's own clock is checked again before the
    /// task is woken), and its tolerance is the timer's (it may end up to that much late, to
    /// coalesce wake-ups, plus scheduling delay). The woken task goes to the platform's
    /// default executor, from where it returns to its actor, as with the platform's timers.
    /// For clocks other than `ContinuousClock` and `SuspendingClock` the platform's timers
    /// are used.
    case runLoopThread
    /// The platform's timers (Dispatch's on Linux), as without the switch.
    case platform
  }

  /// Whether ``install(sleepTimers:)`` has run in this process.
  public static var isInstalled: Bool { installed.load(ordering: .acquiring) }

  /// Makes ``/RunLoop/RunLoop/main`` the main actor's executor, and gives sleeping tasks the
  /// timers `sleepTimers` names; the platform's default executor keeps running everything
  /// else. Call it once, on the main thread, first thing in a synchronous `main` (or in
  /// top-level code without `await`), before any task starts; then run the main run loop
  /// (`RunLoop.main.run()`), or drive it from a foreign event loop. Blocks only to start the
  /// timer thread.
  ///
  /// Unavailable from `async` code: an `async` main captures the platform's main executor
  /// when it is entered, so its own code would never come back to the main run loop.
  ///
  /// - Throws: ``/Threads/ThreadStartError`` (nothing is installed then): `.system` when the
  ///   main run loop, made here if no code asked for it yet, cannot get its descriptors
  ///   (`EMFILE` from `epoll_create1`, ...), or when the timer thread of
  ///   ``SleepTimers/runLoopThread`` cannot be started.
  ///
  /// Misuse stops the process with a message: a call from another thread than the main
  /// thread, or a second call.
  @available(*, noasync, message: "install the main executor in a synchronous main, before any task starts")
  public static func install(sleepTimers: SleepTimers = .runLoopThread) throws(ThreadStartError) {
    guard Thread.isMainThread else {
      concurrencyMisuse("MainRunLoopExecutor", "install() called off the main thread (\(Thread.current))")
    }
    if installed.load(ordering: .acquiring) {
      concurrencyMisuse(
        "MainRunLoopExecutor", "install() called twice (the main executor is installed once per process)")
    }
    // The main run loop first (this is the main thread): its descriptors are an environment
    // failure to throw, like the timer thread's, and both come before anything is installed.
    do throws(SystemCallError) {
      _ = try RunLoop.currentOrThrow()
    } catch {
      throw .system(error)
    }
    let platform = PlatformExecutorFactory.defaultExecutor
    let defaultExecutor: any TaskExecutor
    switch sleepTimers {
    case .runLoopThread: defaultExecutor = try RunLoopSleepTimerExecutor(forwardingTo: platform)
    case .platform: defaultExecutor = platform
    }
    let executors = MainRunLoopExecutorFactory.Executors(main: MainRunLoopMainExecutor(), default: defaultExecutor)
    MainRunLoopExecutorFactory.installing.withLock { $0 = executors }
    _createExecutors(factory: MainRunLoopExecutorFactory.self)
    installed.store(true, ordering: .releasing)
  }

  /// Installs the switch (``install(sleepTimers:)``), starts `body` as a `@MainActor` task,
  /// and runs the main run loop until `body` returns; then exits the process with status 0
  /// (from the main thread, so standard output is flushed). An exit request for the main
  /// thread (`Thread.main.requestExit()`, from any thread) ends the run loop's runs, so it
  /// ends the program the same way once the current pass is over, without waiting for `body`
  /// (its task, and every other task, is not resumed again). Call it from a synchronous
  /// `main`, on the main thread. A timer thread that cannot be started ends the process with
  /// status 1 and a message on standard error.
  @available(*, noasync, message: "call it from a synchronous main")
  public static func runMain(
    sleepTimers: SleepTimers = .runLoopThread, _ body: @escaping @MainActor @Sendable () async -> Void
  ) -> Never {
    do throws(ThreadStartError) {
      try install(sleepTimers: sleepTimers)
    } catch {
      var message = "MainRunLoopExecutor.runMain: \(error)\n"
      message.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
      exit(1)
    }
    // The runtime's own entry points of the main executor: `run()` until `stop()`.
    let mainExecutor = MainRunLoopExecutorFactory.installing.withLock { $0! }.main
    Task { @MainActor in
      await body()
      mainExecutor.stop()
    }
    mainExecutor.run()
    exit(0)
  }

  private static let installed = AtomicBool(false)
}

/// The factory `_createExecutors(factory:)` reads: the executors `install` made.
private enum MainRunLoopExecutorFactory: ExecutorFactory {
  struct Executors: @unchecked Sendable {
    // @unchecked: both are executors, safe to use from any thread; stored once.
    let main: MainRunLoopMainExecutor
    let `default`: any TaskExecutor
  }
  /// Written once by `install` before `_createExecutors` reads it (same thread).
  static let installing = LockedValue<Executors?>(nil)

  static var mainExecutor: any MainExecutor { installing.withLock { $0! }.main }
  static var defaultExecutor: any TaskExecutor { installing.withLock { $0! }.default }
}

/// The main actor's executor once installed: a ``RunLoopExecutor`` on the main run loop
/// (common modes) whose jobs run as this executor, plus the runtime's `run`/`stop` mapped to
/// running the main run loop.
final class MainRunLoopMainExecutor: MainExecutor, @unchecked Sendable {
  // @unchecked: `jobs` is thread-safe; `stopRequested` is atomic.
  let jobs: RunLoopConcurrency.RunLoopExecutor
  private let stopRequested = AtomicBool(false)

  init() {
    jobs = RunLoopConcurrency.RunLoopExecutor(runLoop: RunLoop.main, modes: [.common])
    // Before the executor is installed, so before any job: see `jobExecutor`.
    jobs.jobExecutor = asUnownedSerialExecutor()
  }

  func enqueue(_ job: consuming ExecutorJob) {
    jobs.enqueue(job)
  }

  func checkIsolated() {
    jobs.checkIsolated()
  }

  func isIsolatingCurrentContext() -> Bool? {
    jobs.isIsolatingCurrentContext()
  }

  /// Runs the main run loop (default mode) until `stop()`. Main thread only (the run loop
  /// stops the process otherwise). What the drain of an `async` main calls.
  func run() {
    runUntil { false }
  }

  /// Runs the main run loop (default mode) until `condition` holds, checked after each
  /// handled source (a batch of jobs is one), until `stop()`, or until the main thread is
  /// asked to exit (`Thread.main.requestExit()`).
  func runUntil(_ condition: () -> Bool) {
    while !condition() {
      if stopRequested.exchange(false, ordering: .acquiring) { return }
      let result = RunLoop.main.run(mode: .default, before: .distantFuture, returnAfterSourceHandled: true)
      // An exit request stops every run of the thread's loop from then on, so the main
      // actor's jobs could never run again: the drain ends instead of spinning on runs that
      // return at once.
      if result == .stopped && Thread.current.isExitRequested { return }
    }
  }

  /// Ends `run()`/`runUntil(_:)` from any thread: a flag the loop checks between runs, and a
  /// block that stops the current run if the flag is still set (a stop of a loop that is not
  /// running is dropped, so the block covers a run that starts after the flag was checked).
  func stop() {
    stopRequested.store(true, ordering: .releasing)
    RunLoop.main.performAndWakeUp(inModes: [.common]) { [stopRequested] in
      if stopRequested.load(ordering: .acquiring) { RunLoop.current.stop() }
    }
  }
}

/// The default executor of ``MainRunLoopExecutor/SleepTimers/runLoopThread``: forwards jobs
/// to the platform's default executor, and holds delayed jobs (`Task.sleep`'s wake-ups) in
/// run-loop timers on one thread of its own, handing each to the platform's executor when
/// due. Releasing it stops and joins that thread, dropping sleeps still pending (the installed
/// one lives as long as the process; tests release theirs once their sleeps are over).
final class RunLoopSleepTimerExecutor: TaskExecutor, SchedulingExecutor, @unchecked Sendable {
  // @unchecked: the scheduler is thread-safe; the thread's handle is only kept.
  let scheduler: SleepTimerScheduler
  private let timerThread: TimerThreadHandle

  /// Starts the timer thread. Blocks until it runs.
  init(forwardingTo platform: any TaskExecutor) throws(ThreadStartError) {
    let thread = try RunLoopThread.start(name: "sleep timers")
    scheduler = SleepTimerScheduler(platform: platform, timers: thread.runLoop)
    timerThread = TimerThreadHandle(thread)
  }

  /// Forwarding to the platform's default executor.
  convenience init() throws(ThreadStartError) {
    try self.init(forwardingTo: PlatformExecutorFactory.defaultExecutor)
  }

  func enqueue(_ job: consuming ExecutorJob) {
    scheduler.platform.enqueue(job)
  }

  func enqueue<C: Clock>(_ job: consuming ExecutorJob, after delay: C.Duration, tolerance: C.Duration?, clock: C) {
    guard clock is ContinuousClock || clock is SuspendingClock else {
      scheduler.platformScheduling.enqueue(job, after: delay, tolerance: tolerance, clock: clock)
      return
    }
    scheduler.schedule(UnownedJob(job), at: clock.now.advanced(by: delay), tolerance: tolerance, clock: clock)
  }

  func enqueue<C: Clock>(_ job: consuming ExecutorJob, at instant: C.Instant, tolerance: C.Duration?, clock: C) {
    guard clock is ContinuousClock || clock is SuspendingClock else {
      scheduler.platformScheduling.enqueue(job, at: instant, tolerance: tolerance, clock: clock)
      return
    }
    scheduler.schedule(UnownedJob(job), at: instant, tolerance: tolerance, clock: clock)
  }
}

/// The timers of a ``RunLoopSleepTimerExecutor`` (what their blocks capture: not the thread's
/// handle, so a timer never keeps the thread from being joined).
final class SleepTimerScheduler: @unchecked Sendable {
  // @unchecked: `platform` is an executor and `timers` a run loop (both thread-safe);
  // `timerScheduledForTesting` is written before the executor is used.
  let platform: any TaskExecutor
  /// The timer thread's run loop.
  let timers: RunLoop
  /// Test seam, nil outside tests: sees each timer before it is added.
  var timerScheduledForTesting: (@Sendable (RunLoopTimer) -> Void)?

  init(platform: any TaskExecutor, timers: RunLoop) {
    self.platform = platform
    self.timers = timers
  }

  /// The platform executor's own scheduling, for clocks this executor does not time.
  var platformScheduling: any SchedulingExecutor {
    guard let scheduling = platform as? any SchedulingExecutor else {
      concurrencyMisuse("RunLoopSleepTimerExecutor", "the platform's default executor schedules no delayed jobs")
    }
    return scheduling
  }

  /// Arms a timer for `instant` of `clock` (whose durations are `Duration`: a continuous or
  /// suspending clock). The timer's `CLOCK_MONOTONIC` fire date is the remaining duration
  /// from now: `clock.now` is read first, so the monotonic wait covers at least that duration
  /// of `clock` (the continuous clock also counts suspension, so it runs at least as fast).
  /// When it fires, `clock` is asked again; a job still early (a clock running faster than
  /// the monotonic one) gets a new timer for the rest. Due, the job goes to the platform's
  /// executor, as the platform's own timers hand it over (a sleep's job only resumes the
  /// sleeping task, which then returns to its actor's executor).
  func schedule<C: Clock>(_ job: UnownedJob, at instant: C.Instant, tolerance: C.Duration?, clock: C) {
    let remaining = clock.now.duration(to: instant)
    let delay = (remaining as? Duration) ?? .zero
    let slack = max((tolerance as? Duration) ?? .zero, .zero)
    let timer = RunLoopTimer(after: max(delay, .zero), tolerance: slack) { [self] _ in
      if clock.now < instant {
        schedule(job, at: instant, tolerance: tolerance, clock: clock)
      } else {
        platform.enqueue(job)
      }
    }
    timerScheduledForTesting?(timer)
    timers.add(timer, forMode: .default)
  }
}

/// Keeps the timer thread's non-copyable handle (stopped and joined if the executor is ever
/// released; an installed one lives as long as the process).
private final class TimerThreadHandle: @unchecked Sendable {
  // @unchecked: the handle is only kept, never used.
  let thread: RunLoopThread
  init(_ thread: consuming RunLoopThread) { self.thread = thread }
}
