import RunLoop
import Sync
import TestSupport
import Testing
import Threads
@_spi(ExperimentalScheduling) import _Concurrency

@_spi(ExperimentalScheduling) @testable import RunLoopConcurrency

#if canImport(Glibc)
  import Glibc
#endif

@Suite(.timeLimit(.minutes(3))) struct RunLoopExecutorShutDownTests {
  @Test func shutDownReturnsOnceEveryQueuedJobHasRun() async {
    let held = HeldLoop()
    let executor = RunLoopExecutor(runLoop: held.runLoop)
    let actor = Pinned(executor: executor)
    let calls = (0..<5).map { _ in Task { await actor.answer() } }
    while executor.queuedJobCount < 5 { await Task.yield() }
    let finished = AtomicBool(false)
    let stopper = TestThread.spawn {
      executor.shutDown()
      finished.store(true, ordering: .releasing)
    }
    #expect(!finished.load(ordering: .acquiring))  // the jobs cannot have run: the loop is held
    held.release()
    await stopper.joined()
    #expect(executor.queuedJobCount == 0)
    for call in calls { #expect(await call.value == 42) }
    held.stop()
  }

  @Test(
    "awaiting shutDown() on the loop's own thread (a group task) completes when no helper thread can start",
    .runsExitTests)
  func awaitedShutDownOnTheLoopsThreadWithoutAHelperThread() async {
    await #expect(processExitsWith: .success) {
      let group = try! await RunLoopThreadGroup.start(threadCount: 1)
      let executor = RunLoopExecutor(runLoop: group.runLoops[0])
      let actor = Pinned(executor: executor)
      _ = await actor.answer()
      let onLoopThread = await withTaskExecutorPreference(group) { () async -> Bool in
        let onLoopThread = group.runLoops[0] === RunLoop.current
        await OffPoolTesting.$refusesHelperThreads.withValue(true) { await executor.shutDown() }
        return onLoopThread
      }
      await group.shutDown()
      exit(onLoopThread ? 0 : 3)
    }
  }

  @Test func shutDownWaitsForADelayedJob() async {
    let loop = LoopThread()
    let executor = RunLoopExecutor(runLoop: loop.runLoop)
    let (job, stamped) = await capturedStampJob()
    executor.enqueue(ExecutorJob(job), after: .milliseconds(20), tolerance: nil, clock: .continuous)
    await offPool { shutDownInPlace(executor) }
    // The delayed job ran before the shutdown closed the executor.
    _ = await stamped.value
    loop.stop()
  }

  @Test func awaitingShutDownRunsTheQueuedJobsWithoutBlockingTheTask() async {
    let held = HeldLoop()
    let executor = RunLoopExecutor(runLoop: held.runLoop)
    let actor = Pinned(executor: executor)
    let calls = (0..<5).map { _ in Task { await actor.answer() } }
    while executor.queuedJobCount < 5 { await Task.yield() }
    let shutDown = Task { await executor.shutDown() }
    held.release()
    await shutDown.value
    #expect(executor.queuedJobCount == 0)
    for call in calls { #expect(await call.value == 42) }
    held.stop()
  }

  @Test(.runsExitTests) func awaitingShutDownFromCodeIsolatedToTheExecutorStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let loop = LoopThread()
      let actor = Pinned(executor: RunLoopExecutor(runLoop: loop.runLoop))
      await actor.awaitShutDownOfOwnExecutor()
    }
    #expect(
      result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) }?.contains(
        "shutDown() called from code isolated to the executor") == true)
  }

  /// Code on the loop's thread that is isolated to another executor of the same loop is
  /// not isolated to this one: its resumption is that other executor's job, so awaiting
  /// this executor's shutdown is no misuse and returns once the queued jobs ran.
  @Test(.runsExitTests) func awaitingShutDownFromAnotherExecutorOfTheSameLoopShutsItDown() async {
    await #expect(processExitsWith: .success) {
      let loop = LoopThread()
      let executor = RunLoopExecutor(runLoop: loop.runLoop)
      let target = Pinned(executor: executor)
      let neighbour = Pinned(executor: RunLoopExecutor(runLoop: loop.runLoop))
      let calls = (0..<5).map { _ in Task { await target.answer() } }
      await neighbour.awaitShutDown(of: executor)
      precondition(executor.queuedJobCount == 0, "jobs left after the shutdown")
      for call in calls {
        let answer = await call.value
        precondition(answer == 42)
      }
      _ = await neighbour.answer()
      loop.stop()
    }
  }

  @Test(.runsExitTests) func aJobEnqueuedAfterShutDownStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let loop = LoopThread()
      let executor = RunLoopExecutor(runLoop: loop.runLoop)
      let actor = Pinned(executor: executor)
      _ = await actor.answer()
      await offPool { shutDownInPlace(executor) }
      _ = await actor.answer()
    }
    #expect(
      result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) }?.contains(
        "job enqueued after the executor was shut down") == true)
  }

  @Test(.runsExitTests) func shutDownOnTheLoopsThreadStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let loop = LoopThread()
      let executor = RunLoopExecutor(runLoop: loop.runLoop)
      let actor = Pinned(executor: executor)
      await actor.shutDownOwnExecutor()
    }
    #expect(
      result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) }?.contains(
        "shutDown() called on the run loop's own thread") == true)
  }
}

@Suite(.timeLimit(.minutes(3))) struct RunLoopExecutorSchedulingTests {
  @Test func aJobDelayedOnTheContinuousClockNeverRunsEarly() async {
    let loop = LoopThread()
    let executor = RunLoopExecutor(runLoop: loop.runLoop)
    let (job, stamped) = await capturedStampJob()
    let start = ContinuousClock.now
    executor.enqueue(ExecutorJob(job), after: .milliseconds(30), tolerance: .milliseconds(5), clock: .continuous)
    let stamp = await stamped.value
    #expect(stamp.continuous - start >= .milliseconds(30))
    #expect(stamp.thread === loop.thread)
    loop.stop()
  }

  @Test func aJobAtASuspendingClockInstantNeverRunsEarly() async {
    let loop = LoopThread()
    let executor = RunLoopExecutor(runLoop: loop.runLoop)
    let (job, stamped) = await capturedStampJob()
    let deadline = SuspendingClock.now.advanced(by: .milliseconds(30))
    executor.enqueue(ExecutorJob(job), at: deadline, tolerance: nil, clock: .suspending)
    let stamp = await stamped.value
    #expect(stamp.suspending >= deadline)
    #expect(stamp.thread === loop.thread)
    loop.stop()
  }

  @Test func aJobAtAContinuousClockInstantNeverRunsEarly() async {
    let loop = LoopThread()
    let executor = RunLoopExecutor(runLoop: loop.runLoop)
    let (job, stamped) = await capturedStampJob()
    let deadline = ContinuousClock.now.advanced(by: .milliseconds(30))
    executor.enqueue(ExecutorJob(job), at: deadline, tolerance: .milliseconds(1), clock: .continuous)
    let stamp = await stamped.value
    #expect(stamp.continuous >= deadline)
    loop.stop()
  }

  @Test func aJobAtAnInstantAlreadyPastRunsAtTheNextPass() async {
    let loop = LoopThread()
    let executor = RunLoopExecutor(runLoop: loop.runLoop)
    let (job, stamped) = await capturedStampJob()
    executor.enqueue(
      ExecutorJob(job), at: ContinuousClock.now.advanced(by: .seconds(-1)), tolerance: nil, clock: .continuous)
    #expect(await stamped.value.thread === loop.thread)
    loop.stop()
  }

  @Test(.runsExitTests) func aLoopThreadEndingWithADelayedJobPendingStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let loop = LoopThread()
      let executor = RunLoopExecutor(runLoop: loop.runLoop)
      let (job, _) = await capturedStampJob()
      executor.enqueue(ExecutorJob(job), after: .seconds(30), tolerance: nil, clock: .continuous)
      loop.stop()
    }
    #expect(
      result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) }?.contains(
        "delayed job still waiting for its timer") == true)
  }
}

/// When and where a captured job ran.
struct Stamp: Sendable {
  let continuous: ContinuousClock.Instant
  let suspending: SuspendingClock.Instant
  let thread: Thread
}

/// An actor whose only job is captured by a `CapturingExecutor`, so a test can hand that job
/// to another executor's methods; the job records when and where it ran.
actor StampTarget {
  let executor: CapturingExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  init(executor: CapturingExecutor) { self.executor = executor }
  func stamp() -> Stamp { Stamp(continuous: .now, suspending: .now, thread: Thread.current) }
}

/// A job taken from the runtime (a task's call to `StampTarget.stamp`), and the task that
/// returns the stamp once some executor ran the job.
func capturedStampJob() async -> (UnownedJob, Task<Stamp, Never>) {
  let capture = CapturingExecutor()
  let target = StampTarget(executor: capture)
  capture.reset(expecting: 1)
  let task = Task { await target.stamp() }
  await offPool { capture.waitForAll() }
  return (capture.jobs[0], task)
}

extension Pinned {
  /// Calls `shutDown()` from one of the executor's own jobs (misuse).
  func shutDownOwnExecutor() {
    executor.shutDown()
  }

  /// Awaits `shutDown()` from code isolated to the executor (misuse).
  func awaitShutDownOfOwnExecutor() async {
    await executor.shutDown()
  }

  /// Awaits the shutdown of `other`, an executor that may share this actor's loop.
  func awaitShutDown(of other: RunLoopExecutor) async {
    await other.shutDown()
  }
}

/// Calls the blocking `shutDown()` on the calling thread (from a detached task).
func shutDownInPlace(_ executor: RunLoopExecutor) {
  executor.shutDown()
}

extension RunLoopExecutorSchedulingTests {
  @Test(.runsExitTests) func aClockWhoseDurationsAreNotSwiftDurationsStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let loop = LoopThread()
      let executor = RunLoopExecutor(runLoop: loop.runLoop)
      let (job, _) = await capturedStampJob()
      executor.enqueue(ExecutorJob(job), after: TickClock.Ticks(5), tolerance: nil, clock: TickClock())
    }
    #expect(
      result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) }?.contains(
        "whose durations are not Swift.Duration") == true)
  }
}

/// A clock counted in ticks of its own duration type, which the run loop's timers cannot map.
struct TickClock: Clock {
  struct Ticks: DurationProtocol, Hashable {
    var count: Int
    init(_ count: Int) { self.count = count }
    static var zero: Ticks { Ticks(0) }
    static func + (lhs: Ticks, rhs: Ticks) -> Ticks { Ticks(lhs.count + rhs.count) }
    static func - (lhs: Ticks, rhs: Ticks) -> Ticks { Ticks(lhs.count - rhs.count) }
    static func < (lhs: Ticks, rhs: Ticks) -> Bool { lhs.count < rhs.count }
    static func / (lhs: Ticks, rhs: Int) -> Ticks { Ticks(lhs.count / rhs) }
    static func * (lhs: Ticks, rhs: Int) -> Ticks { Ticks(lhs.count * rhs) }
    static func / (lhs: Ticks, rhs: Ticks) -> Double { Double(lhs.count) / Double(rhs.count) }
  }

  struct Instant: InstantProtocol {
    var tick: Int
    func advanced(by duration: Ticks) -> Instant { Instant(tick: tick + duration.count) }
    func duration(to other: Instant) -> Ticks { Ticks(other.tick - tick) }
    static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.tick < rhs.tick }
  }

  var now: Instant { Instant(tick: 0) }
  var minimumResolution: Ticks { Ticks(1) }
  func sleep(until deadline: Instant, tolerance: Ticks?) async throws {}
}
