// The scheduling side of the toolkit's executors: `RunLoopExecutor` and `RunLoopThreadGroup`
// as the toolchain's `SchedulingExecutor` (SPI, `@_spi(ExperimentalScheduling)`), checked on
// Swift 6.3.1 (Linux). SPI can change between toolchains: beside this file only
// MainRunLoopExecutor.swift (the opt-in main-executor switch) uses it.
//
// On 6.3.1 `Task.sleep` asks the task's preferred task executor for scheduling, then the
// program's default executor; it does not consult an actor's serial executor. So the group's
// conformance is what times a sleep in a task that prefers the group, while the serial
// executor's serves code that calls the `enqueue(_:after:...)`/`enqueue(_:at:...)` methods
// itself, and toolchains that consult it.

import RunLoop
import Sync
@_spi(ExperimentalScheduling) import _Concurrency

/// Delayed jobs on the loop's timers (toolchain SPI, `@_spi(ExperimentalScheduling)`).
///
/// A delayed job is a one-shot ``/RunLoop/RunLoopTimer`` in the executor's modes whose
/// callback enqueues the job (it then runs at the source step of the same pass, in priority
/// order with the other jobs). So a delayed job is **never early** and at most `tolerance`
/// (plus whatever the loop was busy with) late, as the loop's timers are.
///
/// **Clocks.** The loop's timers run on the monotonic clock (`CLOCK_MONOTONIC`). A delay
/// (`after:`) in `Swift.Duration` is counted on it from the call. An instant (`at:`) of
/// `ContinuousClock` or `SuspendingClock` becomes the time remaining until it, read from that
/// clock during the call, counted from a monotonic reading taken after it: the deadline can
/// only move later, never earlier. `SuspendingClock` is the monotonic clock on Linux;
/// `ContinuousClock` also counts time the system spent suspended, which the monotonic clock
/// does not, so after a suspension the job runs late, never early. Another clock whose
/// `Duration` is `Swift.Duration` is treated the same way (right for clocks that advance at
/// the real rate). A clock with another duration type cannot be mapped and stops the process
/// (misuse): running the job at once would be early.
///
/// Each delayed job allocates one timer. `shutDown()` also waits for the delayed jobs.
/// When the loop's thread ends before a delayed job's timer fired, the process stops with a
/// message (as for queued jobs: the job's task could never resume); so does delaying a job
/// on an executor that was shut down or whose loop's thread has ended, at the call.
@_spi(ExperimentalScheduling)
extension RunLoopExecutor: SchedulingExecutor {
  /// Runs `job` on the loop's thread once `delay` has passed on `clock` (see the extension's
  /// "Clocks"), at most `tolerance` later (nil: no tolerance). Callable from any thread;
  /// never blocks.
  public func enqueue<C: Clock>(
    _ job: consuming ExecutorJob, after delay: C.Duration, tolerance: C.Duration?, clock: C
  ) {
    guard let delay = delay as? Duration else { unmappableClock(clock) }
    schedule(job, deadline: MonotonicInstant.now.advanced(by: roundedUp(delay)), tolerance: tolerance, clock: clock)
  }

  /// Runs `job` on the loop's thread once `clock` reached `instant` (see the extension's
  /// "Clocks"), at most `tolerance` later (nil: no tolerance). Callable from any thread;
  /// never blocks.
  public func enqueue<C: Clock>(
    _ job: consuming ExecutorJob, at instant: C.Instant, tolerance: C.Duration?, clock: C
  ) {
    // The clock is read before the monotonic clock, so the time between the readings only
    // makes the deadline later.
    guard let remaining = clock.now.duration(to: instant) as? Duration else { unmappableClock(clock) }
    schedule(job, deadline: MonotonicInstant.now.advanced(by: roundedUp(remaining)), tolerance: tolerance, clock: clock)
  }

  private func schedule<C: Clock>(
    _ job: consuming ExecutorJob, deadline: MonotonicInstant, tolerance: C.Duration?, clock: C
  ) {
    let slack: Duration
    if let tolerance {
      guard let converted = tolerance as? Duration else { unmappableClock(clock) }
      slack = converted
    } else {
      slack = .zero
    }
    beginDelayedJob()
    let delayed = DelayedJob(UnownedJob(job), executor: self)
    let timer = RunLoopTimer(fireAt: deadline, tolerance: slack) { _ in delayed.fire() }
    for mode in modes { runLoop.add(timer, forMode: mode) }
  }

  private func unmappableClock<C: Clock>(_ clock: C) -> Never {
    concurrencyMisuse(
      "RunLoopExecutor",
      "a job scheduled on \(C.self), whose durations are not Swift.Duration: the run loop's timers cannot honour it")
  }
}

/// A duration rounded up to whole nanoseconds (the timers' resolution), so the deadline
/// is never early by a fraction.
private func roundedUp(_ duration: Duration) -> Duration {
  // From the full count, not `components`, which traps when the whole seconds do not fit
  // in Int64 (`Task.sleep(for: .seconds(UInt64.max))`); the deadline then saturates.
  if duration.attoseconds % 1_000_000_000 > 0 { return duration + .nanoseconds(1) }
  return duration
}

/// A delayed job held by its timer's callback; enqueues it once. Released unrun (the loop's
/// thread ended, so the timer was dropped), it stops the process: its task could never
/// resume.
private final class DelayedJob: @unchecked Sendable {
  // @unchecked: `fired` is an atomic; the rest is immutable.
  private let job: UnownedJob
  private let executor: RunLoopExecutor
  private let fired = AtomicBool(false)

  init(_ job: UnownedJob, executor: RunLoopExecutor) {
    self.job = job
    self.executor = executor
  }

  /// The timer's callback, on the loop's thread.
  func fire() {
    // Relaxed: only the loop's thread fires the timer, and `deinit` reads the flag after the
    // timer's last reference to this object was released (the reference count's
    // release/acquire orders the store before that read, arm64 included).
    if fired.exchange(true, ordering: .relaxed) { return }
    executor.enqueue(ExecutorJob(job))
    executor.endDelayedJob()
  }

  deinit {
    if !fired.load(ordering: .relaxed) {
      concurrencyMisuse(
        "RunLoopExecutor",
        "the run loop's thread ended with a delayed job still waiting for its timer (let the actors' work finish before stopping the thread)"
      )
    }
  }
}

/// Delayed jobs on the group's threads' timers (toolchain SPI, `@_spi(ExperimentalScheduling)`):
/// what `Task.sleep` uses in a task that prefers the group.
///
/// A delayed job is a one-shot ``/RunLoop/RunLoopTimer`` on one of the group's threads,
/// picked round robin as jobs are, whose callback queues the job on that thread (it runs at
/// the source step of the same pass, in priority order with the other jobs). So a delayed
/// job is **never early** and at most `tolerance` (plus whatever the thread was busy with)
/// late, as the loop's timers are; a sleeping task then resumes on one of the group's
/// threads. Each delayed job allocates one timer and its bookkeeping.
///
/// **Clocks.** `ContinuousClock` and `SuspendingClock` instants are mapped to the monotonic
/// clock as ``RunLoopExecutor``'s are (the deadline can only move later). Jobs on any other
/// clock go to the platform's timers (the global concurrent executor's scheduling), which
/// then run them on the global executor; a sleeping task still resumes on the group.
///
/// **Cancellation.** The runtime resumes a cancelled sleeping task at once; the runtime gives
/// an executor no way to withdraw the sleep's job, so its timer stays armed until its
/// deadline, then fires and is released like any other (the job does nothing by then).
///
/// **Shutting down** (or releasing the group) hands every delayed job whose timer has not
/// fired to the platform's timers, on its own clock and instant, and releases its timer: the
/// job still runs no earlier than asked, on the global executor (where a job that meets a
/// closed thread goes). A job scheduled on a shut-down group goes there at once.
@_spi(ExperimentalScheduling)
extension RunLoopThreadGroup: SchedulingExecutor {
  /// Runs `job` on one of the group's threads once `delay` has passed on `clock` (see the
  /// extension's "Clocks"), at most `tolerance` later (nil: no tolerance). Callable from any
  /// thread; never blocks (beyond a worker's short lock).
  public func enqueue<C: Clock>(
    _ job: consuming ExecutorJob, after delay: C.Duration, tolerance: C.Duration?, clock: C
  ) {
    let priority = job.priority.rawValue
    // The instant is read once, so the timer and a hand-over aim at the same one.
    scheduleDelayed(
      UnownedJob(job), priority: priority, at: clock.now.advanced(by: delay), tolerance: tolerance, clock: clock)
  }

  /// Runs `job` on one of the group's threads once `clock` reached `instant` (see the
  /// extension's "Clocks"), at most `tolerance` later (nil: no tolerance). Callable from any
  /// thread; never blocks (beyond a worker's short lock).
  public func enqueue<C: Clock>(
    _ job: consuming ExecutorJob, at instant: C.Instant, tolerance: C.Duration?, clock: C
  ) {
    let priority = job.priority.rawValue
    scheduleDelayed(UnownedJob(job), priority: priority, at: instant, tolerance: tolerance, clock: clock)
  }

  private func scheduleDelayed<C: Clock>(
    _ job: UnownedJob, priority: UInt8, at instant: C.Instant, tolerance: C.Duration?, clock: C
  ) {
    // Looked up when needed: a program may install another default executor meanwhile.
    let handOn: @Sendable () -> Void = {
      let platform = RunLoopThreadGroup.platformScheduling
      // The platform's timers trap on a deadline whose nanoseconds do not fit in Int64 (a
      // sleep of `.seconds(Int64.max)`): such a job is handed on for the farthest delay they
      // take instead (about 68 years, beyond any process's life).
      let farthest = RunLoopThreadGroup.farthestPlatformDelay
      if let remaining = clock.now.duration(to: instant) as? Duration, remaining > farthest,
        let capped = farthest as? C.Duration
      {
        platform.enqueue(ExecutorJob(job), after: capped, tolerance: tolerance, clock: clock)
      } else {
        platform.enqueue(ExecutorJob(job), at: instant, tolerance: tolerance, clock: clock)
      }
    }
    // The clock is read before the monotonic clock, so the time between the readings only
    // makes the deadline later.
    guard clock is ContinuousClock || clock is SuspendingClock,
      let remaining = clock.now.duration(to: instant) as? Duration
    else {
      handOn()
      return
    }
    let deadline = MonotonicInstant.now.advanced(by: roundedUp(max(remaining, .zero)))
    let slack = max((tolerance as? Duration) ?? .zero, .zero)
    let delayed = DelayedGroupJob(job, priority: priority, handOn: handOn)
    scheduleDelayed(delayed, deadline: deadline, tolerance: slack)
  }

  /// The longest delay a job is handed on to the platform's timers for: 2^31 seconds (about
  /// 68 years, 2.1e18 ns), so their deadline (now plus the delay) stays a plain nanosecond
  /// count; Dispatch's timers, for one, take no deadline from 2^62 ns on (they drop the job,
  /// as "never").
  private static let farthestPlatformDelay = Duration.seconds(Int64(1) << 31)

  /// The global concurrent executor's own timers, which take the jobs the group cannot time.
  private static var platformScheduling: any SchedulingExecutor {
    guard let scheduling = globalConcurrentExecutor as? any SchedulingExecutor else {
      fatalError("RunLoopThreadGroup: the global concurrent executor schedules no delayed jobs on this toolchain")
    }
    return scheduling
  }
}
