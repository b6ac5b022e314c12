import RunLoop
import Sync
import TestSupport
import Testing
import Threads

@testable import RunLoopConcurrency

// More scenarios of the Swift toolchain's executor tests (test/Concurrency/Runtime:
// custom_executors*.swift, actor_recursive_deinit.swift, isolated_deinit*.swift,
// executor_deinit*.swift, actor_assume_executor.swift, task_executor_preference*.swift,
// custom_executors_priority.swift, async_task_priority.swift, sleep_executor.swift),
// asked of the toolkit's executors: a custom `SerialExecutor` is a ``RunLoopExecutor``, a
// custom `TaskExecutor` is a ``RunLoopThreadGroup``.

/// An actor on a run loop's executor that records the order its jobs ran in.
private actor OrderResident {
  let executor: RunLoopExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  let loopThread: Thread
  private(set) var order: [Int] = []
  private(set) var offLoopCalls = 0
  var value = 0

  init(executor: RunLoopExecutor, loopThread: Thread) {
    self.executor = executor
    self.loopThread = loopThread
  }

  private func onLoop() -> Bool {
    Thread.current === loopThread && executor.isIsolatingCurrentContext() == true
  }

  func record(_ index: Int) {
    if !onLoop() { offLoopCalls += 1 }
    order.append(index)
  }

  /// Starts `count` unstructured tasks isolated to this actor (their first jobs are enqueued
  /// on this executor from the loop's thread while this job runs), then records -1: the
  /// tasks' jobs must run after this one, in the order they were enqueued.
  func startTasksFromTheLoop(count: Int) -> [Task<Void, Never>] {
    let tasks = (0..<count).map { index in Task { self.record(index) } }
    record(-1)
    return tasks
  }

  /// Waits for a continuation that a timer of the loop resumes; tells whether the method
  /// resumed on the loop and only after the timer's callback had returned.
  func awaitTimerResumption() async -> (onLoop: Bool, afterCallback: Bool) {
    let callbackReturned = AtomicBool(false)
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
      RunLoop.current.add(
        RunLoopTimer(fireAt: .now) { _ in
          continuation.resume()
          // The resumption is a job of this executor: it cannot run inside this callback.
          callbackReturned.store(true, ordering: .releasing)
        }, forMode: .default)
    }
    return (onLoop(), callbackReturned.load(ordering: .acquiring))
  }

  func isCancelled() -> Bool { Task.isCancelled }

  /// Sleeps `duration` and tells how long it took and whether the method resumed on the loop.
  func timedSleep(_ duration: Duration) async -> (elapsed: Duration, back: Bool) {
    let start = ContinuousClock.now
    try? await Task.sleep(for: duration)
    return (ContinuousClock.now - start, onLoop())
  }

  /// Awaits a block on this actor's own loop: the block runs on the same thread once this
  /// job has suspended, and the method resumes there after it.
  func awaitBlockOnOwnLoop() async -> (blockOnLoop: Bool, back: Bool) {
    let thread = loopThread
    let blockOnLoop = (try? await RunLoop.current.performAndAwait { Thread.current === thread }) ?? false
    return (blockOnLoop, onLoop())
  }

  /// The running task's priority here, and an `async let` child's (which inherits it).
  func priorities() async -> (own: TaskPriority, child: TaskPriority) {
    async let child = Task.currentPriority
    return (Task.currentPriority, await child)
  }

  func increment() {
    if !onLoop() { offLoopCalls += 1 }
    value += 1
  }

  /// Runs a nonisolated async function under a preference for `group` and returns where it
  /// ran, then where this method resumed.
  func hopToGroupAndBack(_ group: RunLoopThreadGroup) async -> (nonisolated: Thread, back: Bool) {
    let nonisolated = await withTaskExecutorPreference(group) { await threadOffActor() }
    return (nonisolated, onLoop())
  }
}

private nonisolated func threadOffActor() async -> Thread { Thread.current }

/// A link of a chain of actors sharing one executor, each holding the next: releasing the
/// head runs every isolated deinit in turn (the runtime's actor_recursive_deinit).
private actor ChainLink {
  let executor: RunLoopExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  let index: Int
  let next: ChainLink?
  let log: Recorder<(index: Int, thread: Thread, isolated: Bool?)>
  let done: Latch

  init(
    index: Int, next: ChainLink?, executor: RunLoopExecutor,
    log: Recorder<(index: Int, thread: Thread, isolated: Bool?)>,
    done: Latch
  ) {
    self.index = index
    self.next = next
    self.executor = executor
    self.log = log
    self.done = done
  }

  isolated deinit {
    log.append((index, Thread.current, executor.isIsolatingCurrentContext()))
    done.countDown()
  }

  func touch() {}
}

private func makeResident(_ loop: LoopThread) -> OrderResident {
  OrderResident(executor: RunLoopExecutor(runLoop: loop.runLoop), loopThread: loop.thread)
}

@Suite("Swift runtime serial-executor scenarios, round 2", .timeLimit(.minutes(3)))
struct PeerScenariosSwiftSerialExecutorRound2Tests {
  @Test func jobsEnqueuedFromTheLoopThreadDuringAJobRunAfterItInEnqueueOrder() async {
    let loop = LoopThread()
    let resident = makeResident(loop)
    let tasks = await resident.startTasksFromTheLoop(count: 16)
    for task in tasks { await task.value }
    #expect(await resident.order == [-1] + Array(0..<16))
    #expect(await resident.offLoopCalls == 0)
    loop.stop()
  }

  @Test func aContinuationResumedByATimerOfTheLoopResumesTheActorAfterTheCallback() async {
    let loop = LoopThread()
    let resident = makeResident(loop)
    let outcome = await resident.awaitTimerResumption()
    #expect(outcome.onLoop)
    #expect(outcome.afterCallback)
    loop.stop()
  }

  @Test func nestedAssumeIsolatedOfTwoActorsOnOneLoopPassesInATimerCallback() async throws {
    let loop = LoopThread()
    let first = makeResident(loop)
    let second = makeResident(loop)
    await first.increment()
    await second.increment()
    await second.increment()
    let sum = await withCheckedContinuation { (continuation: CheckedContinuation<Int, Never>) in
      loop.runLoop.performAndWakeUp(inModes: [.default]) {
        RunLoop.current.add(
          RunLoopTimer(fireAt: .now) { _ in
            let sum = first.assumeIsolated { first in
              let firstValue = first.value
              return firstValue + second.assumeIsolated { second in second.value }
            }
            continuation.resume(returning: sum)
          }, forMode: .default)
      }
    }
    #expect(sum == 3)
    loop.stop()
  }

  @Test func anExecutorCreatedOnTheLoopThreadIsAssumedIsolatedThereBeforeItsFirstPass() async throws {
    let loop = LoopThread()
    let outcome = try await loop.runLoop.performAndAwait { () -> (before: Bool?, value: Int) in
      // No pass of the loop has run since the executor was created: the executor answers
      // from its run loop's thread all the same.
      let resident = OrderResident(executor: RunLoopExecutor(runLoop: RunLoop.current), loopThread: Thread.current)
      let before = resident.executor.isIsolatingCurrentContext()
      let value = resident.assumeIsolated { $0.value + 1 }
      return (before, value)
    }
    #expect(outcome.before == true)
    #expect(outcome.value == 1)
    loop.stop()
  }

  @Test func anActorCallCancelledWhileQueuedOnALoopNotYetRunRunsOnceTheLoopRuns() async {
    let held = HeldLoop()
    let executor = RunLoopExecutor(runLoop: held.runLoop)
    let resident = OrderResident(executor: executor, loopThread: held.thread)
    let call = Task { await resident.isCancelled() }
    while executor.queuedJobCount == 0 { await Task.yield() }
    // Cancellation does not withdraw a queued job: it runs, and sees the cancellation.
    call.cancel()
    held.release()
    #expect(await call.value)
    #expect(executor.queuedJobCount == 0)
    await executor.shutDown()
    held.stop()
  }

  @Test func anExecutorIsTheSameExclusiveContextAsItselfOnlyAndItsActorsShareIt() async {
    let loop = LoopThread()
    let executor = RunLoopExecutor(runLoop: loop.runLoop)
    let other = RunLoopExecutor(runLoop: loop.runLoop)
    #expect(executor.isSameExclusiveExecutionContext(other: executor))
    #expect(!executor.isSameExclusiveExecutionContext(other: other))
    let first = OrderResident(executor: executor, loopThread: loop.thread)
    let second = OrderResident(executor: executor, loopThread: loop.thread)
    // Both actors' unowned executors are the one executor: `#isolation` of one is the other's.
    let shared = await first.sharesExecutor(with: second)
    #expect(shared)
    loop.stop()
  }

  @Test func aHigherPriorityCallQueuedLaterOnAWaitingLoopRunsFirst() async {
    let held = HeldLoop()
    let executor = RunLoopExecutor(runLoop: held.runLoop)
    let resident = OrderResident(executor: executor, loopThread: held.thread)
    var calls: [Task<Void, Never>] = []
    for index in 0..<3 {
      calls.append(Task(priority: .low) { await resident.record(index) })
      while executor.queuedJobCount < index + 1 { await Task.yield() }
    }
    calls.append(Task(priority: .high) { await resident.record(3) })
    while executor.queuedJobCount < 4 { await Task.yield() }
    held.release()
    for call in calls { await call.value }
    // The runtime's custom-executor priority test: the later, higher-priority job first,
    // then the others first in, first out.
    #expect(await resident.order == [3, 0, 1, 2])
    #expect(await resident.offLoopCalls == 0)
    await executor.shutDown()
    held.stop()
  }

  @Test func aTasksPriorityIsKeptOnTheLoopAndInheritedByItsChildren() async {
    // The runtime's async_task_priority: a job keeps its task's priority on a custom
    // executor. High is asked for, so awaiting the task from this one cannot raise it.
    let loop = LoopThread()
    let resident = makeResident(loop)
    let seen = await Task(priority: .high) { await resident.priorities() }.value
    #expect(seen.own == .high)
    #expect(seen.child == .high)
    loop.stop()
  }

  @Test func anActorAwaitingABlockOnItsOwnLoopResumesThereWithoutDeadlock() async {
    let loop = LoopThread()
    let resident = makeResident(loop)
    let outcome = await resident.awaitBlockOnOwnLoop()
    #expect(outcome.blockOnLoop)
    #expect(outcome.back)
    loop.stop()
  }

  @Test func anExecutorIsReleasedOnceItsActorAndTheirJobsAreGone() async {
    final class WeakExecutor: @unchecked Sendable { weak var value: RunLoopExecutor? }
    let loop = LoopThread()
    let weak = WeakExecutor()
    do {
      let resident = makeResident(loop)
      weak.value = resident.executor
      await withTaskGroup(of: Void.self) { callers in
        for _ in 0..<8 { callers.addTask { for _ in 0..<50 { await resident.increment() } } }
      }
      #expect(await resident.value == 400)
    }
    // A block queued now runs after the drain that ran the last job has returned.
    await offPool { loop.onLoop {} }
    #expect(weak.value == nil)
    loop.stop()
  }

  @Test func anExecutorReleasedWithoutActorsLeavesNothingInItsMode() async throws {
    let loop = LoopThread()
    let privateMode = RunLoopMode("round2-private")
    let result = try await loop.runLoop.performAndAwait { () -> RunLoopRunResult in
      do {
        let executor = RunLoopExecutor(runLoop: RunLoop.current, modes: [privateMode])
        _ = executor
      }
      // The released executor's source was invalidated (documented): after its start-up
      // block runs, the mode is empty and the run ends as `finished`, not at the timeout.
      return RunLoop.current.run(mode: privateMode, timeout: .seconds(20))
    }
    #expect(result == .finished)
    loop.stop()
  }
}

extension OrderResident {
  /// Whether `other`'s executor is this actor's, so `other` may be assumed isolated here.
  func sharesExecutor(with other: OrderResident) -> Bool {
    other.assumeIsolated { _ in true }
  }
}

@Suite("Swift runtime isolated-deinit scenarios, round 2", .timeLimit(.minutes(3)))
struct PeerScenariosSwiftIsolatedDeinitRound2Tests {
  @Test func aChainOfActorsReleasedOffTheLoopRunsEveryIsolatedDeinitOnItInOrder() async {
    let loop = LoopThread()
    let executor = RunLoopExecutor(runLoop: loop.runLoop)
    let length = 200
    let log = Recorder<(index: Int, thread: Thread, isolated: Bool?)>()
    let done = Latch(count: length)
    do {
      var head: ChainLink? = nil
      for index in stride(from: length - 1, through: 0, by: -1) {
        head = ChainLink(index: index, next: head, executor: executor, log: log, done: done)
      }
      await head?.touch()
      head = nil
    }
    await offPool { blockingWait(done) }
    let entries = log.snapshot
    #expect(entries.map(\.index) == Array(0..<length))
    #expect(entries.allSatisfy { $0.thread === loop.thread && $0.isolated == true })
    await executor.shutDown()
    loop.stop()
  }

  @Test func anActorReleasedOffTheLoopBeforeItsExecutorsFirstPassRunsItsIsolatedDeinitThere() async {
    // The loop has made no pass since the executor was created; the release must not be
    // mistaken for one on the loop's thread, nor stop the process: the deinit is queued and
    // runs there.
    let held = HeldLoop()
    let executor = RunLoopExecutor(runLoop: held.runLoop)
    let log = Recorder<(index: Int, thread: Thread, isolated: Bool?)>()
    let done = Latch(count: 2)
    do {
      let never = ChainLink(index: 0, next: nil, executor: executor, log: log, done: done)
      _ = consume never
    }
    // Released on a plain thread too, not only on a thread of the cooperative pool.
    let other = LockedValue<ChainLink?>(ChainLink(index: 1, next: nil, executor: executor, log: log, done: done))
    await offPool { _ = other.withLock { $0.take() } }
    #expect(executor.isIsolatingCurrentContext() == false)
    held.release()
    await offPool { blockingWait(done) }
    let entries = log.snapshot
    #expect(Set(entries.map(\.index)) == [0, 1])
    #expect(entries.allSatisfy { $0.thread === held.thread && $0.isolated == true })
    await executor.shutDown()
    held.stop()
  }

  @Test func actorsReleasedFromEightThreadsRunTheirIsolatedDeinitsOnTheLoopOnce() async {
    let loop = LoopThread()
    let executor = RunLoopExecutor(runLoop: loop.runLoop)
    let perThread = isRunningUnderSanitizer ? 25 : 250
    let log = Recorder<(index: Int, thread: Thread, isolated: Bool?)>()
    let done = Latch(count: 8 * perThread)
    let links = LockedValue<[ChainLink?]>(
      (0..<(8 * perThread)).map { ChainLink(index: $0, next: nil, executor: executor, log: log, done: done) })
    await offPool {
      runThreads(8) { thread in
        for index in stride(from: thread, to: 8 * perThread, by: 8) {
          // Taken out under the lock, released (the last reference) outside it.
          let link = links.withLock { $0[index].take() }
          _ = consume link
        }
      }
    }
    await offPool { blockingWait(done) }
    let entries = log.snapshot
    #expect(Set(entries.map(\.index)) == Set(0..<(8 * perThread)))
    #expect(entries.count == 8 * perThread)
    #expect(entries.allSatisfy { $0.thread === loop.thread && $0.isolated == true })
    await executor.shutDown()
    loop.stop()
  }
}

@Suite("Swift runtime task-executor scenarios, round 2", .timeLimit(.minutes(3)))
struct PeerScenariosSwiftTaskExecutorRound2Tests {
  @Test func anActorOnOneOfTheGroupsOwnLoopsRunsThereAndNonisolatedWorkGoesToTheGroup() async {
    let group = makeGroup(threadCount: 2)
    let executor = RunLoopExecutor(runLoop: group.runLoops[1])
    let resident = OrderResident(executor: executor, loopThread: group.threads[1])
    let (nonisolated, back) = await resident.hopToGroupAndBack(group)
    #expect(group.threads.contains(nonisolated))
    #expect(back)
    // Eight concurrent callers preferring the group: the actor mutates only on its thread.
    await withTaskGroup(of: Void.self) { callers in
      for _ in 0..<8 {
        callers.addTask(executorPreference: group) {
          for _ in 0..<200 { await resident.increment() }
        }
      }
    }
    #expect(await resident.value == 1600)
    #expect(await resident.offLoopCalls == 0)
    await executor.shutDown()
    await shutDownOffPool(group)
  }

  @Test func aSleepInAnActorOnALoopCalledFromATaskPreferringTheGroupIsNeverEarly() async {
    // sleep_executor.swift's "Task.sleep on an actor" with a custom task executor: the
    // group times the sleep (the task's preference), the actor's loop resumes the method.
    let group = makeGroup(threadCount: 2)
    let loop = LoopThread()
    let resident = makeResident(loop)
    let outcome = await Task(executorPreference: group) { await resident.timedSleep(.milliseconds(30)) }.value
    #expect(outcome.elapsed >= .milliseconds(30))
    #expect(outcome.back)
    await shutDownOffPool(group)
    loop.stop()
  }

  @Test func aSleepWithAToleranceInATaskPreferringTheGroupIsNeverEarlyAndResumesOnIt() async {
    let group = makeGroup(threadCount: 2)
    let outcome = await Task(executorPreference: group) { () async -> (elapsed: Duration, onGroup: Bool) in
      let start = ContinuousClock.now
      try? await Task.sleep(for: .milliseconds(20), tolerance: .milliseconds(50), clock: .continuous)
      return (ContinuousClock.now - start, group.threads.contains(Thread.current))
    }.value
    #expect(outcome.elapsed >= .milliseconds(20))
    #expect(outcome.onGroup)
    await shutDownOffPool(group)
  }
}
