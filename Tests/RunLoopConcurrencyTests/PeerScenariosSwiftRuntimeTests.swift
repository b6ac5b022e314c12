import RunLoop
import Sync
import TestSupport
import Testing
import Threads
@_spi(ExperimentalScheduling) import _Concurrency

@_spi(ExperimentalScheduling) @testable import RunLoopConcurrency

// Scenarios of the Swift toolchain's own concurrency runtime tests for custom executors
// (task-executor preference with structured and unstructured tasks, default actors and
// actors with their own serial executor under a preference, `assumeIsolated` and the
// isolation checks, isolated deinit, yielding and sleeping on a custom executor, delayed
// jobs), asked of the toolkit's executors: a custom `SerialExecutor` is a
// ``RunLoopExecutor``, a custom `TaskExecutor` is a ``RunLoopThreadGroup``.

/// An actor whose code runs on a run loop's thread.
private actor LoopResident {
  let executor: RunLoopExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  let loopThread: Thread
  private var counter = 0

  init(executor: RunLoopExecutor, loopThread: Thread) {
    self.executor = executor
    self.loopThread = loopThread
  }

  /// Whether this job runs on the loop's thread and the executor says so.
  private func onLoop() -> Bool {
    Thread.current === loopThread && executor.isIsolatingCurrentContext() == true
  }

  func currentThread() -> Thread { Thread.current }

  /// Suspends in every way an actor method can, and records after each resumption whether
  /// the method is back on the loop's thread.
  func suspendEveryWay(other: LoopResident, foreign: RunLoop) async -> [Bool] {
    var checks = [onLoop()]
    _ = await other.currentThread()
    checks.append(onLoop())
    await Task.yield()
    checks.append(onLoop())
    try? await Task.sleep(for: .milliseconds(1))
    checks.append(onLoop())
    _ = try? await foreign.performAndAwait { 1 }
    checks.append(onLoop())
    let helper = try? Thread.spawn(name: "resumer") { () throws(Never) -> Int in 7 }
    _ = await helper?.value()
    checks.append(onLoop())
    _ = await currentThreadOffActor()
    checks.append(onLoop())
    _ = await Task.detached { 1 }.value
    checks.append(onLoop())
    async let child = currentThreadOffActor()
    _ = await child
    checks.append(onLoop())
    counter += 1
    preconditionIsolated()
    return checks
  }

  /// Reads another actor's state through `assumeIsolated` from this actor's job.
  func readAssumingIsolation(of other: LoopResident) -> Int {
    other.assumeIsolated { $0.counter }
  }

  /// Arms a timer on the loop, then yields until it fired and `others` other jobs ran, or
  /// `limit` yields; returns how many yields that took.
  func yieldUntilTimerAndOthersRan(others: Int, ran: AtomicInteger<Int>, limit: Int) async -> Int {
    let fired = AtomicBool(false)
    // Armed from this job: it can fire only at the timer step of a later pass.
    RunLoop.current.add(RunLoopTimer(fireAt: .now) { _ in fired.store(true, ordering: .relaxed) }, forMode: .default)
    var yields = 0
    while yields < limit && !(fired.load(ordering: .relaxed) && ran.load(ordering: .relaxed) == others) {
      await Task.yield()
      yields += 1
    }
    return yields
  }

  func increment() { counter += 1 }

  /// Sleeps for a long time; returns the error and where the method resumed.
  func sleepLong() async -> (error: (any Error)?, onLoop: Bool) {
    do {
      try await Task.sleep(for: .seconds(30))
      return (nil, onLoop())
    } catch {
      return (error, onLoop())
    }
  }

  /// Sleeps `duration` (zero or negative) and tells where the method resumed.
  func sleep(for duration: Duration) async -> Bool {
    try? await Task.sleep(for: duration)
    return onLoop()
  }

  /// Calls a nonisolated async function under a preference for `group` and returns the
  /// threads it and an `async let` child ran on, then whether the method is back on the loop.
  func callUnderPreference(_ group: RunLoopThreadGroup) async -> (nonisolated: Thread, child: Thread, back: Bool) {
    await withTaskExecutorPreference(group) {
      let nonisolated = await currentThreadOffActor()
      async let child = currentThreadOffActor()
      let childThread = await child
      return (nonisolated, childThread, onLoop())
    }
  }
}

/// An actor on a run loop's executor whose isolated deinit records where it ran.
private actor DeinitResident {
  let executor: RunLoopExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  private let record: LockedValue<(thread: Thread, isolated: Bool?)?>
  private let done: Latch
  private var counter = 0

  init(executor: RunLoopExecutor, record: LockedValue<(thread: Thread, isolated: Bool?)?>, done: Latch) {
    self.executor = executor
    self.record = record
    self.done = done
  }

  isolated deinit {
    record.withLock { $0 = (Thread.current, executor.isIsolatingCurrentContext()) }
    done.countDown()
  }

  func increment() { counter += 1 }
}

/// An actor with no executor of its own (a default actor).
private actor DefaultActor {
  func currentThread() -> Thread { Thread.current }
}

private func makeResident(_ loop: LoopThread) -> LoopResident {
  LoopResident(executor: RunLoopExecutor(runLoop: loop.runLoop), loopThread: loop.thread)
}

@Suite("Swift runtime serial-executor scenarios", .timeLimit(.minutes(3)))
struct PeerScenariosSwiftSerialExecutorTests {
  @Test func anActorOnALoopStaysOnTheLoopThreadAcrossEveryKindOfSuspension() async {
    let loop = LoopThread()
    let otherLoop = LoopThread(name: "other-loop")
    let foreign = LoopThread(name: "foreign-loop")
    let resident = makeResident(loop)
    let other = makeResident(otherLoop)
    let checks = await resident.suspendEveryWay(other: other, foreign: foreign.runLoop)
    #expect(checks.count == 9)
    #expect(checks.allSatisfy { $0 }, "\(checks)")
    foreign.stop()
    otherLoop.stop()
    loop.stop()
  }

  @Test func twoActorsSharingAnExecutorMayAssumeEachOthersIsolation() async {
    let loop = LoopThread()
    let executor = RunLoopExecutor(runLoop: loop.runLoop)
    let first = LoopResident(executor: executor, loopThread: loop.thread)
    let second = LoopResident(executor: executor, loopThread: loop.thread)
    await second.increment()
    #expect(await first.readAssumingIsolation(of: second) == 1)
    loop.stop()
  }

  @Test func anActorOnASecondExecutorOfTheSameLoopMayBeAssumedIsolatedThere() async {
    // The toolkit's isolation is the loop's thread: every executor of one loop isolates it.
    let loop = LoopThread()
    let first = makeResident(loop)
    let second = makeResident(loop)
    await second.increment()
    #expect(await first.readAssumingIsolation(of: second) == 1)
    loop.stop()
  }

  @Test(.runsExitTests) func assumeIsolatedFromAnotherActorsLoopStopsTheProcessWithAMessage() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let loop = LoopThread()
      let otherLoop = LoopThread(name: "other-loop")
      let first = makeResident(loop)
      let second = makeResident(otherLoop)
      _ = await first.readAssumingIsolation(of: second)
    }
    let stderr = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
    // The executor answers `isIsolatingCurrentContext()` with false off its loop's thread, so
    // the runtime reports the wrong assumption itself (naming the actor); `checkIsolated()`
    // reports it when the runtime asks that instead.
    #expect(
      stderr.contains("Incorrect actor executor assumption") || stderr.contains("ran on another thread"), "\(stderr)")
  }

  @Test func isolatedDeinitRunsOnTheLoopThreadWhenReleasedElsewhere() async {
    let loop = LoopThread()
    let record = LockedValue<(thread: Thread, isolated: Bool?)?>(nil)
    let done = Latch(count: 1)
    let executor = RunLoopExecutor(runLoop: loop.runLoop)
    do {
      let resident = DeinitResident(executor: executor, record: record, done: done)
      await resident.increment()
    }
    await offPool { blockingWait(done) }
    let ran = record.withLock { $0 }
    #expect(ran?.thread === loop.thread)
    #expect(ran?.isolated == true)
    await executor.shutDown()
    loop.stop()
  }

  @Test func shutDownRunsTheIsolatedDeinitOfAnActorReleasedBeforeIt() async {
    let loop = LoopThread()
    let record = LockedValue<(thread: Thread, isolated: Bool?)?>(nil)
    let done = Latch(count: 1)
    let executor = RunLoopExecutor(runLoop: loop.runLoop)
    do {
      let resident = DeinitResident(executor: executor, record: record, done: done)
      await resident.increment()
    }
    // The release queued the deinit as a job: the shutdown drains it.
    await executor.shutDown()
    #expect(done.isOpen)
    #expect(record.withLock { $0 }?.thread === loop.thread)
    loop.stop()
  }

  @Test(.runsExitTests) func anActorWithAnIsolatedDeinitReleasedAfterItsLoopThreadEndedStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let loop = LoopThread()
      let resident = DeinitResident(
        executor: RunLoopExecutor(runLoop: loop.runLoop), record: LockedValue(nil), done: Latch(count: 1))
      await resident.increment()
      loop.stop()
      // The last release enqueues the deinit on an executor whose thread has ended.
      _ = consume resident
    }
    let stderr = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
    #expect(stderr.contains("job enqueued after the run loop's thread ended"), "\(stderr)")
  }

  @Test func yieldingInAnActorLetsTheLoopsOtherJobsAndTimersRunBetween() async {
    let loop = LoopThread()
    let resident = makeResident(loop)
    let other = LoopResident(executor: resident.executor, loopThread: loop.thread)
    let ran = AtomicInteger<Int>(0)
    let limit = 100_000
    let yielding = Task { await resident.yieldUntilTimerAndOthersRan(others: 20, ran: ran, limit: limit) }
    let others = (0..<20).map { _ in
      Task {
        await other.increment()
        ran.increment(ordering: .relaxed)
      }
    }
    for task in others { await task.value }
    // Each yield queues the actor's job for a later pass: timers and the other jobs of the
    // executor run in between, so the loop ends long before the limit.
    let yields = await yielding.value
    #expect(yields < limit)
    loop.stop()
  }

  @Test func cancellingALongSleepInAnActorOnALoopResumesItThereAtOnce() async {
    let loop = LoopThread()
    let resident = makeResident(loop)
    let sleeper = Task { await resident.sleepLong() }
    sleeper.cancel()
    let outcome = await sleeper.value
    #expect(outcome.error is CancellationError)
    #expect(outcome.onLoop)
    loop.stop()
  }

  @Test func zeroAndNegativeSleepsInAnActorOnALoopReturnThere() async {
    let loop = LoopThread()
    let resident = makeResident(loop)
    #expect(await resident.sleep(for: .zero))
    #expect(await resident.sleep(for: .seconds(-5)))
    loop.stop()
  }

  @Test func delayedJobsWithZeroOrNegativeDelaysRunAtTheNextPassOnTheLoop() async {
    let loop = LoopThread()
    let executor = RunLoopExecutor(runLoop: loop.runLoop)
    let (zeroJob, zeroStamp) = await capturedStampJob()
    let (negativeJob, negativeStamp) = await capturedStampJob()
    let (hugeNegativeJob, hugeNegativeStamp) = await capturedStampJob()
    executor.enqueue(ExecutorJob(zeroJob), after: .zero, tolerance: nil, clock: .continuous)
    executor.enqueue(ExecutorJob(negativeJob), after: .seconds(-3), tolerance: .seconds(-1), clock: .suspending)
    executor.enqueue(
      ExecutorJob(hugeNegativeJob), after: .seconds(Int64.min / 2), tolerance: nil, clock: .continuous)
    #expect(await zeroStamp.value.thread === loop.thread)
    #expect(await negativeStamp.value.thread === loop.thread)
    #expect(await hugeNegativeStamp.value.thread === loop.thread)
    loop.stop()
  }

  @Test func shutDownWithJobsQueuedAndDelayedRunsThemAllFirst() async {
    let held = HeldLoop()
    let executor = RunLoopExecutor(runLoop: held.runLoop)
    let (delayedJob, delayedStamp) = await capturedStampJob()
    let start = ContinuousClock.now
    executor.enqueue(ExecutorJob(delayedJob), after: .milliseconds(30), tolerance: nil, clock: .continuous)
    let resident = LoopResident(executor: executor, loopThread: held.thread)
    let calls = (0..<10).map { _ in Task { await resident.increment() } }
    await waitUntilQueued(executor, count: 10)
    held.release()
    await executor.shutDown()
    // Both kinds had run by the time the shutdown returned.
    #expect(executor.queuedJobCount == 0)
    for call in calls { await call.value }
    let stamp = await delayedStamp.value
    #expect(stamp.continuous - start >= .milliseconds(30))
    #expect(stamp.thread === held.thread)
    _ = resident
    held.stop()
  }
}

/// Waits (suspending) until `executor` holds `count` queued jobs.
private func waitUntilQueued(_ executor: RunLoopExecutor, count: Int) async {
  while executor.queuedJobCount < count { await Task.yield() }
}

@Suite("Swift runtime task-executor scenarios", .timeLimit(.minutes(3)))
struct PeerScenariosSwiftTaskExecutorTests {
  @Test func childTasksOfEveryKindInheritThePreferenceAndRunOnTheGroup() async {
    let group = makeGroup(threadCount: 2)
    let threads = await withTaskExecutorPreference(group) { () async -> [Thread] in
      var threads: [Thread] = [await currentThreadOffActor()]
      async let first = currentThreadOffActor()
      async let second = currentThreadOffActor()
      threads += [await first, await second]
      let fromGroup = await withTaskGroup(of: [Thread].self) { children in
        for _ in 0..<8 {
          children.addTask {
            // A grandchild inherits the preference too.
            async let grandchild = currentThreadOffActor()
            return [await currentThreadOffActor(), await grandchild]
          }
        }
        var collected: [Thread] = []
        for await result in children { collected += result }
        return collected
      }
      threads += fromGroup
      let recorder = Recorder<Thread>()
      await withDiscardingTaskGroup { children in
        for _ in 0..<4 { children.addTask { recorder.append(await currentThreadOffActor()) } }
      }
      threads += recorder.snapshot
      return threads
    }
    let expectedCount = 23  // the scope, two async lets, 8 children and 8 grandchildren, 4 discarded
    #expect(threads.count == expectedCount)
    #expect(threads.allSatisfy { group.threads.contains($0) })
    await shutDownOffPool(group)
  }

  @Test func detachedTasksAndAnInnerGlobalPreferenceLeaveTheGroup() async {
    let group = makeGroup(threadCount: 1)
    let (detached, global) = await withTaskExecutorPreference(group) {
      let detached = await Task.detached { Thread.current }.value
      let global = await Task(executorPreference: globalConcurrentExecutor) { await currentThreadOffActor() }.value
      return (detached, global)
    }
    #expect(!group.threads.contains(detached))
    #expect(!group.threads.contains(global))
    await shutDownOffPool(group)
  }

  @Test func anInnerPreferenceForAnotherGroupWinsAndTheOuterOneComesBack() async {
    let outer = makeGroup(threadCount: 1)
    let inner = makeGroup(threadCount: 1)
    let (innerThread, outerThread) = await withTaskExecutorPreference(outer) {
      let innerThread = await withTaskExecutorPreference(inner) { await currentThreadOffActor() }
      return (innerThread, await currentThreadOffActor())
    }
    #expect(innerThread === inner.threads[0])
    #expect(outerThread === outer.threads[0])
    await shutDownOffPool(inner)
    await shutDownOffPool(outer)
  }

  @Test func aDefaultActorCalledUnderThePreferenceRunsOnTheGroup() async {
    let group = makeGroup(threadCount: 2)
    let actor = DefaultActor()
    let thread = await Task(executorPreference: group) { await actor.currentThread() }.value
    #expect(group.threads.contains(thread))
    await shutDownOffPool(group)
  }

  @Test func anActorWithItsOwnExecutorRunsThereAndTheTaskComesBackToTheGroup() async {
    let group = makeGroup(threadCount: 2)
    let loop = LoopThread()
    let resident = makeResident(loop)
    let (actorThread, afterThread) = await Task(executorPreference: group) {
      let actorThread = await resident.currentThread()
      return (actorThread, await currentThreadOffActor())
    }.value
    #expect(actorThread === loop.thread)
    #expect(group.threads.contains(afterThread))
    await shutDownOffPool(group)
    loop.stop()
  }

  @Test func anActorOnALoopSendsNonisolatedWorkToThePreferredGroupAndComesBack() async {
    let group = makeGroup(threadCount: 2)
    let loop = LoopThread()
    let resident = makeResident(loop)
    let (nonisolated, child, back) = await resident.callUnderPreference(group)
    #expect(group.threads.contains(nonisolated))
    #expect(group.threads.contains(child))
    #expect(back)
    await shutDownOffPool(group)
    loop.stop()
  }

  @Test func delayedJobsOnTheGroupWithZeroOrNegativeDelaysRunAtOnceOnIt() async {
    let group = makeGroup(threadCount: 2)
    let (zeroJob, zeroStamp) = await capturedStampJob()
    let (negativeJob, negativeStamp) = await capturedStampJob()
    let (pastJob, pastStamp) = await capturedStampJob()
    group.enqueue(ExecutorJob(zeroJob), after: .zero, tolerance: nil, clock: .continuous)
    group.enqueue(ExecutorJob(negativeJob), after: .seconds(-3), tolerance: .seconds(-1), clock: .suspending)
    group.enqueue(
      ExecutorJob(pastJob), at: ContinuousClock.now.advanced(by: .seconds(-60)), tolerance: nil, clock: .continuous)
    // The jobs are a stamp actor's: they run where the group runs them, as that actor's jobs.
    #expect(group.threads.contains(await zeroStamp.value.thread))
    #expect(group.threads.contains(await negativeStamp.value.thread))
    #expect(group.threads.contains(await pastStamp.value.thread))
    await shutDownOffPool(group)
  }
}

@Suite("Swift runtime cooperative-pool scenarios", .timeLimit(.minutes(3)))
struct PeerScenariosSwiftCooperativePoolTests {
  /// Far more awaits than the cooperative pool has threads: if any of these calls blocked
  /// its thread, the task that opens the gate could never run and the test would hang.
  @Test func manyTasksAwaitingThreadsLoopsAndShutdownsAtOnceLeaveThePoolFree() async {
    let width = isRunningUnderSanitizer ? 16 : 48
    let gate = Latch(count: 1)
    let waiting = AtomicInteger<Int>(0)
    // The loop does not run until the gate opens (a held loop, not a blocking block: a block
    // that blocks its loop this long is a stall, which the diagnostics pass stops on).
    let loop = HeldLoop()
    let heldExecutor = RunLoopExecutor(runLoop: loop.runLoop)
    let resident = LoopResident(executor: heldExecutor, loopThread: loop.thread)
    let total = await withTaskGroup(of: Int.self) { tasks in
      for index in 0..<width {
        tasks.addTask {
          waiting.increment(ordering: .relaxed)
          switch index % 4 {
          case 0:
            guard
              let thread = try? Thread.spawn(
                name: "gated",
                { () throws(Never) -> Int in
                  gate.wait()
                  return 1
                })
            else { return 0 }
            return await thread.value()
          case 1:
            return (try? await loop.runLoop.performAndAwait { 1 }) ?? 0
          case 2:
            await resident.increment()
            return 1
          default:
            guard let started = try? await RunLoopThreadGroup.start(threadCount: 1, name: "pool-check") else {
              return 0
            }
            await started.shutDown()
            return 1
          }
        }
      }
      tasks.addTask {
        while waiting.load(ordering: .relaxed) < width { await Task.yield() }
        gate.countDown()
        loop.release()
        return 0
      }
      var sum = 0
      for await value in tasks { sum += value }
      return sum
    }
    #expect(total == width)
    await heldExecutor.shutDown()
    loop.stop()
  }
}

@Suite("Swift runtime delayed-job misuse scenarios", .timeLimit(.minutes(3)))
struct PeerScenariosSwiftDelayedJobMisuseTests {
  @Test(.runsExitTests) func aJobDelayedOnAShutDownExecutorStopsTheProcessAtTheCall() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let loop = LoopThread()
      let executor = RunLoopExecutor(runLoop: loop.runLoop)
      await executor.shutDown()
      let (job, _) = await capturedStampJob()
      // Reported by this call, not when (or if) the timer fires.
      executor.enqueue(ExecutorJob(job), after: .seconds(3600), tolerance: nil, clock: .continuous)
      loop.stop()
    }
    let stderr = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
    #expect(stderr.contains("job delayed after the executor was shut down"), "\(stderr)")
  }

  @Test(.runsExitTests) func aJobDelayedOnALoopWhoseThreadEndedStopsTheProcessAtTheCall() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let loop = LoopThread()
      let executor = RunLoopExecutor(runLoop: loop.runLoop)
      let (job, _) = await capturedStampJob()
      loop.stop()
      executor.enqueue(ExecutorJob(job), after: .seconds(3600), tolerance: nil, clock: .continuous)
    }
    let stderr = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
    #expect(stderr.contains("job delayed after the run loop's thread ended"), "\(stderr)")
  }
}

/// An actor on a capturing executor whose method records the priority it runs at.
private actor PriorityProbe {
  let executor: CapturingExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  init(executor: CapturingExecutor) { self.executor = executor }

  func record(into recorder: Recorder<UInt8>, thread: Recorder<Thread>, done: Latch) {
    recorder.append(Task.currentPriority.rawValue)
    thread.append(Thread.current)
    done.countDown()
  }
}

@Suite("Swift runtime job-priority scenarios", .timeLimit(.minutes(3)))
struct PeerScenariosSwiftJobPriorityTests {
  @Test func jobsEnqueuedFromManyThreadsOnAWaitingLoopRunOnceEachHighestPriorityFirst() async {
    let jobCount = 96
    let enqueuers = 4
    let priorities: [TaskPriority] = [.background, .low, .medium, .high, .userInitiated, .utility]
    let capture = CapturingExecutor()
    let probe = PriorityProbe(executor: capture)
    let ran = Recorder<UInt8>()
    let ranOn = Recorder<Thread>()
    let done = Latch(count: jobCount)
    capture.reset(expecting: jobCount)
    let tasks = (0..<jobCount).map { index in
      Task(priority: priorities[index % priorities.count]) { await probe.record(into: ran, thread: ranOn, done: done) }
    }
    await offPool { capture.waitForAll() }
    let jobs = capture.jobs
    let held = HeldLoop()
    let executor = RunLoopExecutor(runLoop: held.runLoop)
    // Every job is queued before the loop runs: one pass takes them all, by priority.
    await offPool {
      runThreads(enqueuers) { thread in
        for index in stride(from: thread, to: jobCount, by: enqueuers) { executor.enqueue(ExecutorJob(jobs[index])) }
      }
    }
    #expect(executor.queuedJobCount == jobCount)
    held.release()
    // Waited for off the tasks: awaiting them first would escalate their priorities.
    await offPool { blockingWait(done) }
    for task in tasks { await task.value }
    let order = ran.snapshot
    #expect(order.count == jobCount)
    #expect(order == order.sorted(by: >), "\(order)")
    #expect(ranOn.snapshot.allSatisfy { $0 === held.thread })
    held.stop()
  }
}

@Suite("Swift runtime executor-mode scenarios", .timeLimit(.minutes(3)))
struct PeerScenariosSwiftExecutorModeTests {
  @Test func anExecutorInAPrivateModeRunsItsJobsOnlyInRunsOfThatMode() async {
    let loop = LoopThread()
    let privateMode = RunLoopMode("peer-private")
    let executor = RunLoopExecutor(runLoop: loop.runLoop, modes: [privateMode])
    let resident = LoopResident(executor: executor, loopThread: loop.thread)
    let call = Task { await resident.currentThread() }
    await waitUntilQueued(executor, count: 1)
    // Passes in the default mode (each request is one) leave the job queued.
    for _ in 0..<3 { _ = try? await loop.runLoop.performAndAwait(inModes: [.default]) { 0 } }
    #expect(executor.queuedJobCount == 1)
    // A run nested in the private mode (from a block of the default mode) runs it.
    let nested = try? await loop.runLoop.performAndAwait(inModes: [.default]) {
      RunLoop.current.run(mode: privateMode, timeout: .seconds(10), returnAfterSourceHandled: true)
    }
    #expect(nested == .handledSource)
    #expect(await call.value === loop.thread)
    #expect(executor.queuedJobCount == 0)
    loop.stop()
  }
}

extension PeerScenariosSwiftTaskExecutorTests {
  @Test func manyConcurrentSleepsOnTheGroupAreNeverEarlyAndResumeOnIt() async {
    let group = makeGroup(threadCount: 2)
    let count = 40
    let results = await withTaskGroup(of: (early: Bool, onGroup: Bool).self) { tasks in
      for index in 0..<count {
        tasks.addTask(executorPreference: group) {
          // Spread over 0...19 ms, some given as already-passed instants, on both clocks.
          let delay = Duration.milliseconds(index % 20)
          if index % 3 == 0 {
            let deadline = SuspendingClock.now.advanced(by: delay - .milliseconds(5))
            try? await Task.sleep(until: deadline, tolerance: .milliseconds(1), clock: .suspending)
            return (SuspendingClock.now < deadline, group.threads.contains(Thread.current))
          }
          let start = ContinuousClock.now
          try? await Task.sleep(for: delay)
          return (ContinuousClock.now - start < delay, group.threads.contains(Thread.current))
        }
      }
      var collected: [(early: Bool, onGroup: Bool)] = []
      for await result in tasks { collected.append(result) }
      return collected
    }
    #expect(results.count == count)
    #expect(results.allSatisfy { !$0.early })
    #expect(results.allSatisfy { $0.onGroup })
    await shutDownOffPool(group)
  }
}

extension PeerScenariosSwiftTaskExecutorTests {
  /// Not under AddressSanitizer: the runtime gives an executor no way to withdraw a
  /// cancelled sleep's job, so the group hands it to the platform's timers at shutdown,
  /// where its enormous deadline never comes and LeakSanitizer reports it at exit.
  @Test(.disabled(if: isRunningUnderAddressSanitizer, "a cancelled sleep's job outlives the process"))
  func aCancelledSleepOfAnEnormousDurationEndsAndTheGroupStillShutsDown() async {
    let group = makeGroup(threadCount: 1)
    let sleeper = Task(executorPreference: group) { () async -> (cancelled: Bool, onGroup: Bool) in
      do {
        try await Task.sleep(for: .seconds(Int64.max / 4))
        return (false, group.threads.contains(Thread.current))
      } catch {
        return (error is CancellationError, group.threads.contains(Thread.current))
      }
    }
    while group.delayedJobCount == 0 { await Task.yield() }
    sleeper.cancel()
    let outcome = await sleeper.value
    #expect(outcome.cancelled)
    #expect(outcome.onGroup)
    // The sleep's timer is still armed (the runtime cannot withdraw it): the shutdown hands
    // it to the platform's timers, saturated far in the future, without running it.
    await shutDownOffPool(group)
    #expect(group.isShutDown)
  }
}
