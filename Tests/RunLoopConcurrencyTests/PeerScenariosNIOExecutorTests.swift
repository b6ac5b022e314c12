import RunLoop
import RunLoopConcurrency
import Sync
import TestSupport
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

// Scenarios of SwiftNIO's serial-executor and task-executor tests (SerialExecutorTests,
// TaskExecutorTests, the ordering and shutdown tests of its event loops), asked of the
// toolkit's executors. An NIO event loop used as an actor's executor is a
// ``RunLoopExecutor`` of one run loop (of a ``RunLoopThreadGroup`` here, NIO's
// `MultiThreadedEventLoopGroup`); `loop.inEventLoop` is `isIsolatingCurrentContext()`,
// `preconditionInEventLoop` is `checkIsolated()`. NIO's per-loop task executor is a group of
// one thread: the group's task executor spreads jobs over all its threads.

/// An actor bound to a run loop's thread through its executor.
private actor LoopBound {
  let executor: RunLoopExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  var counter = 0

  init(executor: RunLoopExecutor) { self.executor = executor }

  /// Where this job runs, and which executors say they isolate it.
  func observe(other: RunLoopExecutor) -> (thread: Thread, here: Bool?, other: Bool?) {
    (Thread.current, executor.isIsolatingCurrentContext(), other.isIsolatingCurrentContext())
  }

  /// Reads the state from synchronous code that is not a job of the actor.
  nonisolated func assumeInLoop() -> Int {
    assumeIsolated { $0.counter }
  }

  /// Increments the counter and returns it, checking the thread.
  func increment(expecting thread: Thread) -> Int {
    counter += Thread.current === thread ? 1 : 1_000
    return counter
  }

  /// Counts this job, then queues the next link of the chain on the actor.
  func chain(remaining: Int, ran: AtomicInteger<Int>) {
    ran.increment(ordering: .relaxed)
    if remaining > 0 { Task { self.chain(remaining: remaining - 1, ran: ran) } }
  }
}

@Suite("SwiftNIO serial- and task-executor scenarios", .timeLimit(.minutes(3)))
struct PeerScenariosNIOExecutorTests {
  @Test func anActorOnOneLoopOfAGroupRunsOnThatLoopsThreadAndNotOnTheOther() async {
    let group = makeGroup(threadCount: 2)
    let first = RunLoopExecutor(runLoop: group.runLoops[0])
    let second = RunLoopExecutor(runLoop: group.runLoops[1])
    let actor = LoopBound(executor: first)
    let seen = await actor.observe(other: second)
    #expect(seen.thread === group.threads[0])
    #expect(seen.here == true)
    #expect(seen.other != true)
    // Once the second loop has made a pass, its executor answers for sure.
    #expect(await LoopBound(executor: second).counter == 0)
    #expect(await actor.observe(other: second).other == false)
    #expect(first.isIsolatingCurrentContext() == false, "the test's own thread")
    await first.shutDown()
    await second.shutDown()
    await shutDownOffPool(group)
  }

  @Test func assumeIsolatedPassesInABlockSubmittedToTheActorsLoop() async throws {
    let group = makeGroup(threadCount: 3)
    let executor = RunLoopExecutor(runLoop: group.runLoops[1])
    let actor = LoopBound(executor: executor)
    let value = try await group.runLoops[1].performAndAwait { actor.assumeInLoop() }
    #expect(value == 0)
    await executor.shutDown()
    await shutDownOffPool(group)
  }

  @Test func assumeIsolatedPassesOnTheLoopThreadBeforeTheLoopHasRunAnyOfTheExecutorsWork() async throws {
    let loop = LoopThread()
    // The executor is created in a block on the loop's thread and used at once, before the
    // loop has run any of its work: the check answers from the run loop's own thread.
    let (before, value, after) = try await loop.runLoop.performAndAwait { () -> (Bool?, Int, Bool?) in
      let executor = RunLoopExecutor(runLoop: RunLoop.current)
      let actor = LoopBound(executor: executor)
      let before = executor.isIsolatingCurrentContext()
      let value = actor.assumeInLoop()
      return (before, value, executor.isIsolatingCurrentContext())
    }
    #expect(before == true)
    #expect(value == 0)
    #expect(after == true)
    loop.stop()
  }

  @Test(.runsExitTests) func assumeIsolatedOffTheLoopBeforeTheLoopHasEverRunStopsTheProcess() async {
    await #expect(processExitsWith: .failure) {
      let held = HeldLoop()
      let actor = LoopBound(executor: RunLoopExecutor(runLoop: held.runLoop))
      _ = actor.assumeInLoop()
    }
  }

  @Test func tasksCreatedInOrderOnAOneThreadGroupRunInThatOrder() async {
    let count = 500
    let group = makeGroup(threadCount: 1)
    let order = Recorder<Int>()
    let done = Latch(count: count)
    // Created by one plain thread, all at the same priority.
    TestThread.run {
      for index in 0..<count {
        Task(executorPreference: group) {
          order.append(index)
          done.countDown()
        }
      }
    }
    await offPool { blockingWait(done) }
    #expect(order.snapshot == Array(0..<count))
    await shutDownOffPool(group)
  }

  @Test func tasksCreatedFromManyThreadsEachRunOnceOnTheGroupWithTheGroupAsTheirExecutor() async {
    let perThread = isRunningUnderSanitizer ? 100 : 1_000
    let creators = 4
    let group = makeGroup(threadCount: 3)
    let groupThreads = group.threads
    let expected = group.asUnownedTaskExecutor()
    let misplaced = AtomicInteger<Int>(0)
    let done = Latch(count: creators * perThread)
    runThreads(creators) { _ in
      for _ in 0..<perThread {
        Task(executorPreference: group) {
          let onGroup = groupThreads.contains { $0 === Thread.current }
          let executor = withUnsafeCurrentTask { $0?.unownedTaskExecutor }
          if !onGroup || executor != expected { misplaced.increment(ordering: .relaxed) }
          done.countDown()
        }
      }
    }
    await offPool { blockingWait(done) }
    #expect(misplaced.load(ordering: .relaxed) == 0)
    await shutDownOffPool(group)
  }

  @Test func shutDownWaitsForJobsThatQueuedJobsKeepEnqueueing() async {
    let held = HeldLoop()
    let executor = RunLoopExecutor(runLoop: held.runLoop)
    let actor = LoopBound(executor: executor)
    let ran = AtomicInteger<Int>(0)
    let links = 50
    let first = Task { await actor.chain(remaining: links, ran: ran) }
    while executor.queuedJobCount == 0 { await Task.yield() }
    let stopper = TestThread.spawn { executor.shutDown() }
    held.release()
    await stopper.joined()
    #expect(ran.load(ordering: .relaxed) == links + 1)
    #expect(executor.queuedJobCount == 0)
    await first.value
    held.stop()
  }
}

@Suite("SwiftNIO event-loop-group scenarios", .timeLimit(.minutes(3)))
struct PeerScenariosNIOGroupTests {
  @Test func aGroupsThreadsAreNamedAfterItAndEachRunsItsOwnLoop() async throws {
    let group = try await RunLoopThreadGroup.start(threadCount: 3, name: "nio-loops")
    #expect(group.threads.map(\.name) == ["nio-loops-0", "nio-loops-1", "nio-loops-2"])
    for (index, runLoop) in group.runLoops.enumerated() {
      let (thread, current) = try await runLoop.performAndAwait { (Thread.current, RunLoop.current) }
      #expect(thread === group.threads[index])
      #expect(current === runLoop)
    }
    await group.shutDown()
    #expect(group.isShutDown)
  }

  @Test(.runsExitTests) func assumeIsolatedOnAnotherLoopOfTheGroupStopsTheProcess() async {
    await #expect(processExitsWith: .failure) {
      let group = makeGroup(threadCount: 2)
      let actor = LoopBound(executor: RunLoopExecutor(runLoop: group.runLoops[0]))
      _ = await actor.counter  // the executor knows its thread from here on
      _ = try? await group.runLoops[1].performAndAwait { actor.assumeInLoop() }
    }
  }
}

@Suite("SwiftNIO thread take-over and shutdown scenarios", .timeLimit(.minutes(3)))
struct PeerScenariosNIOTakeOverTests {
  @Test func aPlainThreadLendsItselfToAnActorByRunningItsOwnLoopThenTakesItselfBack() async {
    // NIO's `withCurrentThreadAsEventLoop`: a thread runs its own loop for an actor's jobs
    // while it waits for them, and goes on without it after.
    let result = LockedValue<Int?>(nil)
    let lender = TestThread.spawn {
      let runLoop = RunLoop.current
      let actor = LoopBound(executor: RunLoopExecutor(runLoop: runLoop))
      let done = AtomicBool(false)
      let thread = Thread.current
      Task {
        _ = await actor.increment(expecting: thread)
        let value = await actor.increment(expecting: thread)
        result.withLock { $0 = value }
        done.store(true, ordering: .releasing)
        runLoop.stop()  // ends the current run; the check below catches a stop between runs
      }
      while !done.load(ordering: .acquiring) { _ = runLoop.run(mode: .default, timeout: .seconds(1)) }
    }
    await lender.joined()
    #expect(result.withLock { $0 } == 2)
  }

  @Test func aTaskStillYieldingWhenItsGroupShutsDownRunsToItsEnd() async {
    let group = makeGroup(threadCount: 1)
    let groupThread = group.threads[0]
    let yields = 200
    let started = Latch(count: 1)
    let onGroup = AtomicInteger<Int>(0)
    let task = Task(executorPreference: group) { () -> Int in
      started.countDown()
      for _ in 0..<yields {
        await Task.yield()
        if Thread.current === groupThread { onGroup.increment(ordering: .relaxed) }
      }
      return yields
    }
    await offPool {
      blockingWait(started)
      shutDownInPlace(group)
    }
    #expect(await task.value == yields)
    #expect(group.isShutDown)
    #expect(groupThread.isFinished)
    // Some jobs may have run on the group before it closed; the rest moved elsewhere.
    #expect(onGroup.load(ordering: .relaxed) <= yields)
  }
}

@Suite("SwiftNIO shutdown-on-the-loop scenarios", .timeLimit(.minutes(3)))
struct PeerScenariosNIOShutDownOnLoopTests {
  // NIO stops the process when a loop is shut down synchronously from its own thread. The
  // executor does too, also before the loop has made the pass that tells it its thread.

  @Test(.runsExitTests) func shutDownOnTheLoopsThreadBeforeItsFirstPassStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let loop = LoopThread()
      loop.onLoop {
        let executor = RunLoopExecutor(runLoop: RunLoop.current)
        executor.shutDown()
      }
    }
    #expect(
      result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) }?.contains(
        "shutDown() called on the run loop's own thread") == true)
  }

  @Test(.runsExitTests) func shutDownOnTheLoopsThreadWithJobsQueuedBeforeItsFirstPassStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let loop = LoopThread()
      loop.onLoop {
        let executor = RunLoopExecutor(runLoop: RunLoop.current)
        let actor = LoopBound(executor: executor)
        Task { _ = await actor.counter }
        while executor.queuedJobCount == 0 { sched_yield() }
        // The jobs cannot run while this block runs: waiting for them here would never end.
        executor.shutDown()
      }
    }
    #expect(
      result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) }?.contains(
        "shutDown() called on the run loop's own thread") == true)
  }
}
