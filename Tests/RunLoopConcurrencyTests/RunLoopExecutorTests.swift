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

@Suite(.timeLimit(.minutes(3))) struct RunLoopExecutorTests {
  @Test func pinnedActorMutatesStateOnlyOnTheLoopThreadUnderEightCallers() async {
    let loop = LoopThread()
    let counter = PinnedCounter(on: loop)
    await withTaskGroup(of: Void.self) { group in
      for _ in 0..<8 {
        group.addTask {
          for _ in 0..<500 { _ = await counter.increment() }
        }
      }
    }
    #expect(await counter.value == 4000)
    #expect(await counter.wrongThreadCalls == 0)
    loop.stop()
  }

  @Test func jobsRunHigherPriorityFirstAndInOrderWithinAPriority() async {
    let loop = LoopThread()
    let actor = PinnedCounter(on: loop)
    let priorities: [TaskPriority] = [.low, .high, .medium, .low, .high, .background, .medium, .high, .low]
    let tasks = await actor.startRecorders(priorities)
    for task in tasks { await task.value }
    // Stable sort by descending priority: the expected order of the indices.
    let expected = priorities.enumerated().sorted { lhs, rhs in
      lhs.element.rawValue != rhs.element.rawValue
        ? lhs.element.rawValue > rhs.element.rawValue : lhs.offset < rhs.offset
    }.map(\.offset)
    #expect(await actor.order == expected)
    loop.stop()
  }

  /// 200,000 jobs (20,000 under ThreadSanitizer, which slows every hop about tenfold: the
  /// property tested is the same, and the suite's time limit stays meaningful).
  @Test func manyJobsFromEightTasksEachRunExactlyOnce() async {
    let loop = LoopThread()
    let actor = PinnedCounter(on: loop)
    let perTask = isRunningUnderThreadSanitizer ? 2_500 : 25_000
    await actor.prepare(slots: 8 * perTask)
    await withTaskGroup(of: Void.self) { group in
      for task in 0..<8 {
        group.addTask {
          for index in 0..<perTask { await actor.mark(task * perTask + index) }
        }
      }
    }
    #expect(await actor.slotsNotMarkedOnce() == 0)
    #expect(await actor.wrongThreadCalls == 0)
    loop.stop()
  }

  @Test func assumeIsolatedPassesOnTheLoopThreadOutsideAJob() async {
    let loop = LoopThread()
    let actor = PinnedCounter(on: loop)
    _ = await actor.increment()  // the loop has run a pass since the executor was made
    let seen = LockedValue(0)
    loop.onLoop {
      // A perform block, not one of the executor's jobs: the thread alone decides.
      let value = actor.assumeIsolated { $0.value }
      seen.withLock { $0 = value }
    }
    #expect(seen.withLock { $0 } == 1)
    #expect(actor.executor.isIsolatingCurrentContext() == false)
    loop.stop()
  }

  @Test func aLoopNotYetRunKeepsItsJobsUntilItRuns() async {
    // A thread with a run loop that it runs only when told: jobs wait for it, then run.
    let ready = Latch(count: 1)
    let go = Latch(count: 1)
    let slot = LockedValue<RunLoop?>(nil)
    let done = AtomicBool(false)
    let thread = try! Thread.spawn(name: "late-runner") { () throws(Never) in
      let runLoop = RunLoop.current
      slot.withLock { $0 = runLoop }
      ready.countDown()
      go.wait()
      // The executor's source keeps the mode non-empty: run until the test is done.
      while !done.load(ordering: .acquiring) { _ = runLoop.run(mode: .default, timeout: .seconds(1)) }
    }
    await offPool { blockingWait(ready) }
    let runLoop = slot.withLock { $0 }!
    let executor = RunLoopExecutor(runLoop: runLoop)
    let actor = Pinned(executor: executor)
    let call = Task { await actor.answer() }
    while executor.queuedJobCount == 0 { await Task.yield() }
    #expect(executor.queuedJobCount == 1)
    go.countDown()
    #expect(await call.value == 42)
    done.store(true, ordering: .releasing)
    runLoop.wakeUp()
    await thread.value()
  }
}

/// A minimal pinned actor around a given executor.
actor Pinned {
  let executor: RunLoopExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  init(executor: RunLoopExecutor) { self.executor = executor }
  func answer() -> Int { 42 }
}
