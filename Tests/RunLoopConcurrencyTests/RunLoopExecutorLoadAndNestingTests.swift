import ProcessTestSupport
import RunLoop
import RunLoopConcurrency
import Sync
import TestSupport
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

@Suite(.timeLimit(.minutes(3))) struct RunLoopExecutorLoadAndNestingTests {
  /// Jobs from 8 threads, each a task created on one of them and isolated to a global actor
  /// pinned to a run loop, so each task's only job is enqueued by the creating thread. Run
  /// in a child process (an exit test), so its allocations do not disturb the tests that
  /// count the process's allocated bytes while it runs.
  ///
  /// 1,000,000 jobs when the environment sets `RUNLOOP_CONCURRENCY_STRESS=1`; otherwise
  /// 200,000, 100,000 under ThreadSanitizer (which slows every enqueue and job about
  /// tenfold), 20,000 with the diagnostics on (see `manyJobsFromEightThreads`): the
  /// property tested is the same, and the run stays within its time budget (a million jobs
  /// keep both CPUs of a small CI machine busy for seconds, which starves the suites that
  /// run beside it).
  @Test(.runsExitTests) func aMillionJobsFromEightThreadsEachRunExactlyOnce() async throws {
    // The child prints its counts and the parent judges them, so a failure shows them.
    let result = try await #require(processExitsWith: .success, observing: [\.standardOutputContent]) {
      let (notMarkedOnce, wrongThread) = await manyJobsFromEightThreads()
      print("counts: \(notMarkedOnce) \(wrongThread)")
    }
    let counts = try #require(
      printedFigures(result.standardOutputContent, after: "counts: ").last,
      "the child printed \(String(decoding: result.standardOutputContent, as: UTF8.self))")
    #expect(counts == [0, 0], "jobs not run exactly once, and jobs run off the loop's thread")
  }

  @Test func checkIsolatedPassesInANestedRunOfTheLoop() async {
    let loop = LoopThread()
    let actor = PinnedCounter(on: loop)
    _ = await actor.increment()
    let outcome = await actor.checkIsolationInANestedRun()
    #expect(outcome == [true, true, true])
    loop.stop()
  }

  @Test func aBacklogOfJobsIsSpreadOverPassesSoATimerFiresBetweenThem() async {
    let held = HeldLoop()
    let actor = BacklogActor(executor: RunLoopExecutor(runLoop: held.runLoop))
    let count = 2_000
    let tasks = (0..<count).map { _ in Task { await actor.step() } }
    while actor.executor.queuedJobCount < count { await Task.yield() }
    held.release()
    for task in tasks { await task.value }
    // The first job schedules a timer due at once; it fires at the next pass's timer step,
    // after the first pass's share of the backlog, not after all of it.
    let jobsBeforeTimer = await actor.jobsBeforeTimer
    #expect(jobsBeforeTimer.map { $0 < count } == true, "\(String(describing: jobsBeforeTimer))")
    held.stop()
  }

  @Test func aNestedRunInsideAJobDoesNotStartAnotherJobOfTheSameExecutor() async {
    let loop = LoopThread()
    let actor = NestingActor(executor: RunLoopExecutor(runLoop: loop.runLoop))
    let second = await actor.runNestedWhileAnotherCallIsQueued()
    await second.value
    // The queued call ran after the first one ended, not inside its nested run.
    #expect(await actor.events == ["first: nested run returned", "first: end", "second"])
    loop.stop()
  }

  @Test(.runsExitTests) func checkIsolatedInANestedRunOfAnotherLoopStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let loop = LoopThread()
      let other = LoopThread(name: "other")
      let actor = PinnedCounter(on: loop)
      _ = await actor.increment()
      blocking {
        other.onLoop {
          let nested: RunLoopMode = "nested-check"
          RunLoop.current.perform(inModes: [nested]) { actor.executor.checkIsolated() }
          _ = RunLoop.current.run(mode: nested, timeout: .seconds(10), returnAfterSourceHandled: false)
        }
      }
    }
    #expect(
      result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) }?.contains("ran on another thread")
        == true)
  }
}

extension PinnedCounter {
  /// From one of the actor's jobs, runs the loop nested in a mode the executor is not in and
  /// checks isolation from a block of that nested run: `checkIsolated`, the executor's own
  /// answer, and `assumeIsolated`.
  func checkIsolationInANestedRun() -> [Bool] {
    let nested: RunLoopMode = "nested-check"
    let results = Recorder<Bool>()
    let executor = executor
    RunLoop.current.perform(inModes: [nested]) {
      executor.checkIsolated()  // stops the process when it fails
      results.append(true)
      results.append(executor.isIsolatingCurrentContext() == true)
      results.append(self.assumeIsolated { $0.value } == 1)
      RunLoop.current.stop()
    }
    _ = RunLoop.current.run(mode: nested, timeout: .seconds(20))
    return results.snapshot
  }
}

/// An actor whose first job schedules a timer, which records how many jobs ran before it.
actor BacklogActor {
  let executor: RunLoopExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  private var ran = 0
  private(set) var jobsBeforeTimer: Int?
  init(executor: RunLoopExecutor) { self.executor = executor }

  func step() {
    if ran == 0 {
      let timer = RunLoopTimer(fireAt: .now) { _ in
        self.assumeIsolated { $0.jobsBeforeTimer = $0.ran }  // on the loop's thread
      }
      RunLoop.current.add(timer, forMode: .default)
    }
    ran += 1
  }
}

/// An actor whose method runs the loop nested while another call to it is queued.
actor NestingActor {
  let executor: RunLoopExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  private(set) var events: [String] = []
  init(executor: RunLoopExecutor) { self.executor = executor }

  func second() { events.append("second") }

  /// Queues a call to `second` (a task isolated to this actor: its job goes to this
  /// executor at once), then runs the loop nested in the executor's mode until a source was
  /// handled (the executor's, signalled by that job).
  func runNestedWhileAnotherCallIsQueued() -> Task<Void, Never> {
    let task = Task { self.second() }
    _ = RunLoop.current.run(mode: .default, timeout: .seconds(20), returnAfterSourceHandled: true)
    events.append("first: nested run returned")
    events.append("first: end")
    return task
  }
}

/// A global actor on a run-loop thread that lives as long as the test process (a global
/// actor's executor cannot be replaced).
@globalActor actor LoopGlobalActor {
  static let shared = LoopGlobalActor()
  let executor = RunLoopExecutor(runLoop: LoopGlobalActor.loop.runLoop)
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  private static let loop = LoopThread(name: "global-actor-loop")
}

/// One counter byte per job, written only by the loop's thread (the jobs are serialized by
/// the executor) and read after the last job.
final class Marks: @unchecked Sendable {
  // @unchecked: see above; the latch the last job opens orders the reads after the writes.
  private let bytes: UnsafeMutableBufferPointer<UInt8>
  init(count: Int) {
    bytes = .allocate(capacity: count)
    bytes.initialize(repeating: 0)
  }
  deinit { bytes.deallocate() }
  func mark(_ index: Int) { bytes[index] &+= 1 }
  func notMarkedOnce() -> Int { bytes.count(where: { $0 != 1 }) }
}

/// Sends the many-jobs test's jobs and returns how many were not run exactly once and how
/// many ran off the loop's thread.
func manyJobsFromEightThreads() async -> (notMarkedOnce: Int, wrongThread: Int) {
  let stress = getenv("RUNLOOP_CONCURRENCY_STRESS").map { String(cString: $0) == "1" } ?? false
  // With the diagnostics on (the stall detector set to stop the process), 20,000: eight
  // producers keep both CPUs busy, and the loop thread, preempted among them (or waiting
  // for the queue's lock while a preempted producer holds it), can be away longer than
  // the stall threshold in the middle of a short pass; a short burst keeps that unlikely.
  let diagnostics = getenv("THREADING_TOOLKIT_DIAGNOSTICS") != nil
  let perThread = stress ? 125_000 : diagnostics ? 2_500 : isRunningUnderThreadSanitizer ? 12_500 : 25_000
  let total = 8 * perThread
  let marks = Marks(count: total)
  let remaining = AtomicInteger<Int>(total)
  let wrongThread = AtomicInteger<Int>(0)
  let allRan = Latch(count: 1)
  let executor = LoopGlobalActor.shared.executor
  runThreads(8) { thread in
    for index in 0..<perThread {
      Task { @LoopGlobalActor in
        if executor.isIsolatingCurrentContext() != true { _ = wrongThread.increment(ordering: .relaxed) }
        marks.mark(thread * perThread + index)
        if remaining.decrement(ordering: .full) == 0 { allRan.countDown() }
      }
    }
  }
  await offPool { blockingWait(allRan) }
  return (marks.notMarkedOnce(), wrongThread.load(ordering: .relaxed))
}
