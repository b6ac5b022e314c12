import CAllocationStats
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

@Suite(.timeLimit(.minutes(3))) struct RunLoopExecutorMisuseTests {
  @Test(.runsExitTests) func assumeIsolatedOffTheLoopThreadStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let loop = LoopThread()
      let actor = PinnedCounter(on: loop)
      _ = await actor.increment()
      readValueAssumingIsolation(actor)
    }
    let stderr = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
    #expect(
      stderr.contains("ran on another thread") || stderr.contains("Incorrect actor executor assumption"), "\(stderr)")
  }

  @Test(.runsExitTests) func aJobEnqueuedAfterTheLoopThreadEndedStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let loop = LoopThread()
      let actor = PinnedCounter(on: loop)
      _ = await actor.increment()
      loop.stop()
      _ = await actor.increment()
    }
    #expect(
      result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) }?.contains(
        "job enqueued after the run loop") == true)
  }

  @Test(.runsExitTests) func anExecutorForARunLoopWhoseThreadEndedStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let slot = LockedValue<RunLoop?>(nil)
      let thread = try! Thread.spawn { () throws(Never) in slot.withLock { $0 = RunLoop.current } }
      await thread.value()
      _ = RunLoopExecutor(runLoop: slot.withLock { $0 }!)
    }
    #expect(
      result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) }?.contains(
        "created for a run loop whose thread has ended") == true)
  }

  @Test(.runsExitTests) func aThreadEndingWithJobsQueuedOnItsLoopStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let ready = Latch(count: 1)
      let end = Latch(count: 1)
      let slot = LockedValue<RunLoop?>(nil)
      let thread = try! Thread.spawn { () throws(Never) in
        slot.withLock { $0 = RunLoop.current }
        ready.countDown()
        end.wait()  // ends without running its loop
      }
      await offPool { blockingWait(ready) }
      let executor = RunLoopExecutor(runLoop: slot.withLock { $0 }!)
      let actor = Pinned(executor: executor)
      let call = Task { await actor.answer() }
      while executor.queuedJobCount == 0 { await Task.yield() }
      end.countDown()
      await thread.value()
      _ = await call.value
    }
    #expect(result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) }?.contains("still queued") == true)
  }

  /// Jobs captured from the runtime by an executor that only stores them, so they can be
  /// handed to a run-loop executor later (pre-created jobs).
  @Test(.runsExitTests) func enqueueAllocatesNothingInTheSteadyState() async throws {
    // The child prints the bytes allocated in each round; the parent judges them, so a
    // failure shows the figures.
    let allocation = try await #require(processExitsWith: .success, observing: [\.standardOutputContent]) {
      // The loop's thread is held on purpose while jobs are enqueued: not a stall to report.
      Diagnostics.setMode(.off, for: .stalls)
      // The allocation count is process-wide: the diagnostics watchdog's thread (these two
      // kinds) scans and allocates on its own schedule, which a run with diagnostics on
      // counted in the window (18 KB over 10,000 enqueues once). It sleeps while both are off.
      Diagnostics.setMode(.off, for: .deadlocks)
      Diagnostics.setMode(.off, for: .blockingInTask)
      let loop = LoopThread()
      let executor = RunLoopExecutor(runLoop: loop.runLoop)
      let capture = CapturingExecutor()
      let target = Captured(executor: capture)
      let count = steadyStateEnqueues
      for round in 0..<3 {
        capture.reset(expecting: count)
        var tasks: [Task<Void, Never>] = []
        tasks.reserveCapacity(count)
        for _ in 0..<count { tasks.append(Task { await target.noop() }) }
        await offPool { capture.waitForAll() }
        let jobs = capture.jobs
        // Hold the loop's thread so the enqueued jobs stay queued while counting.
        let hold = Latch(count: 1)
        let holding = Latch(count: 1)
        loop.runLoop.performAndWakeUp {
          holding.countDown()
          hold.wait()
        }
        await offPool { blockingWait(holding) }
        let before = tk_test_allocated_bytes()
        for job in jobs { executor.enqueue(ExecutorJob(job)) }
        let after = tk_test_allocated_bytes()
        hold.countDown()
        for task in tasks { await task.value }
        print("round \(round): \(Int(after) - Int(before))")
      }
      loop.stop()
    }
    let rounds = printedFigures(allocation.standardOutputContent, after: "round ").compactMap(\.last)
    try #require(
      rounds.count == 3, "the child printed \(String(decoding: allocation.standardOutputContent, as: UTF8.self))")
    // The first round grows the queue to its peak; later ones must allocate nothing. The
    // statistics are process-wide and the runtime's idle pool threads may free or allocate a
    // little meanwhile, so the bound is under one byte per enqueue: one allocation per
    // enqueue would be at least 16 bytes each.
    #expect(
      rounds.dropFirst().allSatisfy { $0 < steadyStateEnqueues },
      "bytes allocated over \(steadyStateEnqueues) enqueues per round: \(rounds)")
  }
}

/// Jobs enqueued per round of the steady-state allocation test.
private let steadyStateEnqueues = 10_000

/// Stores every job it is given; `waitForAll` returns once the expected number arrived.
final class CapturingExecutor: SerialExecutor, @unchecked Sendable {
  // @unchecked: `stored` and `expected` are protected by `lock`.
  private let lock = Lock()
  private var stored: [UnownedJob] = []
  private var expected = 0
  private let arrived = Semaphore(value: 0)

  func reset(expecting count: Int) {
    lock.withLock {
      stored = []
      stored.reserveCapacity(count)
      expected = count
    }
  }

  func enqueue(_ job: consuming ExecutorJob) {
    let unownedJob = UnownedJob(job)
    let complete = lock.withLock {
      stored.append(unownedJob)
      return stored.count == expected
    }
    if complete { arrived.signal() }
  }

  func waitForAll() { arrived.wait() }

  var jobs: [UnownedJob] { lock.withLock { stored } }
}

actor Captured {
  let executor: CapturingExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  init(executor: CapturingExecutor) { self.executor = executor }
  func noop() {}
}

/// `assumeIsolated` from synchronous code, as a callback would call it.
func readValueAssumingIsolation(_ actor: PinnedCounter) {
  _ = actor.assumeIsolated { $0.value }
}
