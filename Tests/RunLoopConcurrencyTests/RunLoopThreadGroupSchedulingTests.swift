import RunLoop
import Sync
import TestSupport
import Testing
import Threads

@testable import RunLoopConcurrency

/// `Task.sleep` in tasks that prefer a `RunLoopThreadGroup`: the runtime asks the task's
/// preferred executor to schedule the wake-up, and the group times it with its threads'
/// run-loop timers.
@Suite(.timeLimit(.minutes(3))) struct RunLoopThreadGroupSchedulingTests {
  /// A group whose armed timers (weakly held) and their tolerances are recorded.
  static func makeRecordingGroup(threadCount: Int) -> (RunLoopThreadGroup, Recorder<WeakTimer>) {
    let group = makeGroup(threadCount: threadCount)
    let timers = Recorder<WeakTimer>()
    group.timerScheduledForTesting = { timer in timers.append(WeakTimer(timer)) }
    return (group, timers)
  }

  @Test func aSleepIsTimedByTheGroupNeverEarlyAndResumesOnOneOfItsThreads() async {
    let (group, timers) = Self.makeRecordingGroup(threadCount: 2)
    let durations: [Duration] = [.microseconds(100), .milliseconds(1), .milliseconds(4), .milliseconds(15)]
    let outcomes = await Task(executorPreference: group) { () -> [(early: Bool, thread: Thread)] in
      var outcomes: [(early: Bool, thread: Thread)] = []
      for duration in durations {
        let start = ContinuousClock.now
        try? await Task.sleep(for: duration)
        outcomes.append((ContinuousClock.now - start < duration, Thread.current))
        let suspendingStart = SuspendingClock.now
        try? await Task.sleep(until: suspendingStart.advanced(by: duration), clock: .suspending)
        outcomes.append((SuspendingClock.now - suspendingStart < duration, Thread.current))
      }
      return outcomes
    }.value
    #expect(outcomes.allSatisfy { !$0.early })
    #expect(outcomes.allSatisfy { group.threads.contains($0.thread) })
    // Every sleep went through the group's timers, not the platform's.
    #expect(timers.count == durations.count * 2)
    await shutDownOffPool(group)
  }

  @Test func aSleepsToleranceIsItsTimersTolerance() async {
    let (group, timers) = Self.makeRecordingGroup(threadCount: 1)
    await Task(executorPreference: group) {
      try? await Task.sleep(for: .milliseconds(2), tolerance: .milliseconds(7))
      try? await Task.sleep(for: .milliseconds(2))
    }.value
    #expect(timers.snapshot.map(\.tolerance) == [.milliseconds(7), .zero])
    await shutDownOffPool(group)
  }

  @Test func aFiredTimerIsReleased() async {
    let (group, timers) = Self.makeRecordingGroup(threadCount: 2)
    await withTaskExecutorPreference(group) {
      for _ in 0..<8 { try? await Task.sleep(for: .microseconds(200)) }
    }
    #expect(timers.count == 8)
    // The loop lets go of a one-shot timer once its callback has returned.
    waitOnTestThread { timers.snapshot.allSatisfy { $0.timer == nil } }
    #expect(group.delayedJobCount == 0)
    await shutDownOffPool(group)
  }

  @Test func cancellingASleepEndsItEarly() async {
    let (group, timers) = Self.makeRecordingGroup(threadCount: 1)
    // Far off, so the timer cannot have fired when the cancellation comes.
    let duration = Duration.seconds(60)
    let sleeper = Task(executorPreference: group) { () -> (cancelled: Bool, elapsed: Duration) in
      let start = ContinuousClock.now
      do {
        try await Task.sleep(for: duration)
        return (false, ContinuousClock.now - start)
      } catch {
        return (error is CancellationError, ContinuousClock.now - start)
      }
    }
    waitOnTestThread { timers.count == 1 }
    sleeper.cancel()
    let outcome = await sleeper.value
    #expect(outcome.cancelled)
    #expect(outcome.elapsed < duration)
    // The runtime cannot withdraw the sleep's job: its timer stays armed until the shutdown
    // hands it on and lets go of it.
    #expect(group.delayedJobCount == 1)
    await shutDownOffPool(group)
    #expect(group.delayedJobCount == 0)
    #expect(timers.snapshot.allSatisfy { $0.timer == nil })
  }

  @Test func aSleepBeyondInt64SecondsWaitsUntilCancelled() async {
    let (group, timers) = Self.makeRecordingGroup(threadCount: 1)
    let sleeper = Task(executorPreference: group) { () -> Bool in
      do {
        try await Task.sleep(for: .seconds(UInt64.max) + .nanoseconds(1))
        return false
      } catch {
        return error is CancellationError
      }
    }
    waitOnTestThread { timers.count == 1 }
    sleeper.cancel()
    #expect(await sleeper.value, "the sleep ended by its cancellation, not by its timer")
    await shutDownOffPool(group)
    #expect(group.delayedJobCount == 0)
  }

  @Test func aCancelledSleepsTimerIsReleasedWhenItFires() async {
    let (group, timers) = Self.makeRecordingGroup(threadCount: 1)
    let sleeper = Task(executorPreference: group) { try? await Task.sleep(for: .milliseconds(200)) }
    waitOnTestThread { timers.count == 1 }
    sleeper.cancel()
    await sleeper.value
    waitOnTestThread { group.delayedJobCount == 0 && timers.snapshot.allSatisfy { $0.timer == nil } }
    #expect(timers.count == 1)
    await shutDownOffPool(group)
  }

  @Test func shutDownHandsPendingSleepsToThePlatformTimersWithoutWakingThemEarly() async {
    let (group, timers) = Self.makeRecordingGroup(threadCount: 2)
    let groupThreads = group.threads
    let duration = Duration.seconds(1)
    let sleeper = Task(executorPreference: group) {
      () -> (start: MonotonicInstant, end: MonotonicInstant, thread: Thread) in
      let start = MonotonicInstant.now
      try? await Task.sleep(for: duration, clock: .suspending)
      return (start, MonotonicInstant.now, Thread.current)
    }
    waitOnTestThread { timers.count == 1 }
    await shutDownOffPool(group)
    let shutDownEnded = MonotonicInstant.now
    // The shutdown invalidated the timer and let go of it.
    #expect(group.delayedJobCount == 0)
    #expect(timers.snapshot.allSatisfy { $0.timer == nil })
    let outcome = await sleeper.value
    #expect(outcome.start.duration(to: outcome.end) >= duration)
    // A shutdown over before the deadline met the timer unfired (timers are never early), so
    // the platform woke the task, off the closed group. (A machine stalled for the whole
    // second leaves nothing to check here.)
    if shutDownEnded < outcome.start.advanced(by: duration) {
      #expect(!groupThreads.contains(outcome.thread))
    }
  }

  @Test func aSleepInATaskPreferringAShutDownGroupIsTimedByThePlatform() async {
    let (group, timers) = Self.makeRecordingGroup(threadCount: 1)
    await shutDownOffPool(group)
    let elapsed = await Task(executorPreference: group) { () -> Duration in
      let start = ContinuousClock.now
      try? await Task.sleep(for: .milliseconds(5))
      return ContinuousClock.now - start
    }.value
    #expect(elapsed >= .milliseconds(5))
    #expect(timers.count == 0)
    #expect(group.delayedJobCount == 0)
  }
}

/// Waits (bounded) on a thread of its own until `condition` holds: the cooperative pool may
/// be busy with the other suites for longer than the sleeps here last.
func waitOnTestThread(_ condition: @escaping @Sendable () -> Bool) {
  TestThread.run { waitUntil(within: .seconds(30), condition) }
}

/// A timer seen by the test seam, held weakly so the test can tell when the group and its
/// loop let go of it.
final class WeakTimer: @unchecked Sendable {
  // @unchecked: written once at creation; `weak` loads are atomic in the Swift runtime.
  weak var timer: RunLoopTimer?
  let tolerance: Duration
  init(_ timer: RunLoopTimer) {
    self.timer = timer
    tolerance = timer.tolerance
  }
}
