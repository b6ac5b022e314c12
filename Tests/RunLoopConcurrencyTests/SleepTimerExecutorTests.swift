import RunLoop
import Sync
import TestSupport
import Testing
import Threads

@testable import RunLoopConcurrency

/// An actor pinned to a run-loop thread that sleeps and says how it went.
private actor Sleeper {
  let executor: RunLoopExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  init(on runLoop: RunLoop) { executor = RunLoopExecutor(runLoop: runLoop) }

  func sleep(for duration: Duration) async -> (elapsed: Duration, isolated: Bool) {
    let start = ContinuousClock.now
    try? await Task.sleep(for: duration)
    let elapsed = ContinuousClock.now - start
    // Back on the loop's thread: the executor answers from the running thread.
    return (elapsed, executor.isIsolatingCurrentContext() == true)
  }
}

/// The sleep timers of `MainRunLoopExecutor` (its default executor), exercised without
/// installing anything: a task that prefers an executor sleeps through that executor's
/// scheduling (the runtime asks the current task executor before the default one).
@Suite(.timeLimit(.minutes(3))) struct SleepTimerExecutorTests {
  /// A fresh executor (its own timer thread, joined when it is released) and the
  /// tolerances of the timers it armed.
  static func makeExecutor() throws -> (RunLoopSleepTimerExecutor, Recorder<Duration>) {
    let executor = try RunLoopSleepTimerExecutor()
    let tolerances = Recorder<Duration>()
    executor.scheduler.timerScheduledForTesting = { timer in tolerances.append(timer.tolerance) }
    return (executor, tolerances)
  }

  @Test func sleepsOnTheContinuousAndSuspendingClocksAreNeverEarly() async throws {
    let (executor, tolerances) = try Self.makeExecutor()
    let durations: [Duration] = [.microseconds(100), .milliseconds(1), .milliseconds(4), .milliseconds(15)]
    let early = await withTaskExecutorPreference(executor) {
      var early: [String] = []
      for duration in durations {
        var start = ContinuousClock.now
        try? await Task.sleep(for: duration)
        if ContinuousClock.now - start < duration { early.append("continuous \(duration)") }
        let suspendingStart = SuspendingClock.now
        start = ContinuousClock.now
        try? await Task.sleep(for: duration, clock: .suspending)
        if SuspendingClock.now - suspendingStart < duration || ContinuousClock.now - start < duration {
          early.append("suspending \(duration)")
        }
      }
      return early
    }
    #expect(early.isEmpty)
    // Every sleep went through the executor's run-loop timers.
    #expect(tolerances.count == durations.count * 2)
  }

  @Test func aSleepsToleranceIsItsTimersTolerance() async throws {
    let (executor, tolerances) = try Self.makeExecutor()
    let elapsed = await withTaskExecutorPreference(executor) {
      let start = ContinuousClock.now
      try? await Task.sleep(for: .milliseconds(5), tolerance: .milliseconds(7))
      try? await Task.sleep(for: .milliseconds(5))
      return ContinuousClock.now - start
    }
    #expect(elapsed >= .milliseconds(10))
    #expect(tolerances.snapshot == [.milliseconds(7), .zero])
  }

  @Test func aSleepUntilAnInstantEndsAtOrAfterIt() async throws {
    let (executor, tolerances) = try Self.makeExecutor()
    let (continuousLate, suspendingLate) = await withTaskExecutorPreference(executor) {
      let continuousDeadline = ContinuousClock.now.advanced(by: .milliseconds(8))
      try? await Task.sleep(until: continuousDeadline, clock: .continuous)
      let continuousLate = ContinuousClock.now >= continuousDeadline
      let suspendingDeadline = SuspendingClock.now.advanced(by: .milliseconds(8))
      try? await Task.sleep(until: suspendingDeadline, clock: .suspending)
      return (continuousLate, SuspendingClock.now >= suspendingDeadline)
    }
    #expect(continuousLate && suspendingLate)
    #expect(tolerances.count == 2)
  }

  @Test func aSleepInAnActorPinnedToARunLoopThreadResumesThereNeverEarly() async throws {
    let (executor, tolerances) = try Self.makeExecutor()
    let loop = LoopThread(name: "sleeper")
    let sleeper = Sleeper(on: loop.runLoop)
    let outcome = await withTaskExecutorPreference(executor) {
      await sleeper.sleep(for: .milliseconds(12))
    }
    #expect(outcome.elapsed >= .milliseconds(12))
    #expect(outcome.isolated)
    #expect(tolerances.count == 1)
    loop.stop()
  }
}
