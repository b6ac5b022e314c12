import Glibc
import RunLoop
import RunLoopConcurrency
import Sync
import TestSupport
import Testing
import Threads

@Suite(.timeLimit(.minutes(3))) struct RunLoopThreadGroupTests {
  @Test func aTaskPreferringTheGroupRunsOnOneOfItsThreads() async {
    let group = makeGroup(threadCount: 2)
    let thread = await Task(executorPreference: group) { Thread.current }.value
    #expect(group.threads.contains(thread))
    let scoped = await withTaskExecutorPreference(group) { await currentThreadOffActor() }
    #expect(group.threads.contains(scoped))
    await shutDownOffPool(group)
  }

  @Test func consecutiveJobsGoRoundRobinToEveryThread() async {
    let group = makeGroup(threadCount: 3)
    // Each task's only job is its first: three consecutive enqueues, three threads.
    let tasks = (0..<3).map { _ in Task(executorPreference: group) { Thread.current } }
    var threads: Set<Thread> = []
    for task in tasks { threads.insert(await task.value) }
    #expect(threads == Set(group.threads))
    await shutDownOffPool(group)
  }

  @Test func jobsOnAThreadRunHigherPriorityFirstAndInOrderWithinAPriority() async {
    let group = makeGroup(threadCount: 1)
    let priorities: [TaskPriority] = [.low, .high, .medium, .low, .high, .background, .medium, .high]
    let order = Recorder<Int>()
    let done = Latch(count: priorities.count)
    // Created by a job on the group's only thread: they queue behind it, and the next pass
    // takes them by priority (no callback waits meanwhile).
    await Task(executorPreference: group) {
      for (index, priority) in priorities.enumerated() {
        Task(executorPreference: group, priority: priority) {
          order.append(index)
          done.countDown()
        }
      }
    }.value
    // Waited for off the tasks: awaiting them would escalate their priorities.
    await offPool { blockingWait(done) }
    let expected = priorities.enumerated().sorted { lhs, rhs in
      lhs.element.rawValue != rhs.element.rawValue
        ? lhs.element.rawValue > rhs.element.rawValue : lhs.offset < rhs.offset
    }.map(\.offset)
    #expect(order.snapshot == expected)
    await shutDownOffPool(group)
  }

  @Test func shutDownRunsTheQueuedJobsOnTheGroupsThreadsThenJoinsThem() async {
    let group = makeGroup(threadCount: 1)
    let groupThread = group.threads[0]
    let ranOn = Recorder<Thread>()
    let stopper = LockedValue<TestThread?>(nil)
    // One job queues five tasks behind itself and starts the shutdown from another thread,
    // so the shutdown meets them queued.
    let queued = await Task(executorPreference: group) {
      let queued = (0..<5).map { _ in Task(executorPreference: group) { ranOn.append(Thread.current) } }
      stopper.withLock { $0 = TestThread.spawn { group.shutDown() } }
      return queued
    }.value
    await stopper.withLock { $0 }?.joined()
    #expect(group.isShutDown)
    #expect(ranOn.snapshot.count == 5)
    #expect(ranOn.snapshot.allSatisfy { $0 === groupThread })
    #expect(groupThread.isFinished)
    for task in queued { await task.value }
  }

  @Test func aJobEnqueuedAfterShutDownRunsOnTheGlobalExecutor() async {
    let group = makeGroup(threadCount: 2)
    let groupThreads = group.threads
    await shutDownOffPool(group)
    let thread = await Task(executorPreference: group) { Thread.current }.value
    #expect(!groupThreads.contains(thread))
    #expect(groupThreads.allSatisfy { $0.isFinished })
  }

  @Test func releasingTheGroupEndsAndJoinsItsThreads() async {
    // No task here: a task made with `Task(executorPreference:)` retains the group until it
    // is destroyed, which could make it, not this test, release the group last.
    var group: RunLoopThreadGroup? = makeGroup(threadCount: 2)
    let threads = group!.threads
    #expect(threads.allSatisfy { !$0.isFinished })
    group = nil
    #expect(threads.allSatisfy { $0.isFinished })
  }

  @Test func aGroupReleasedLastByATaskOnOneOfItsThreadsStillEndsEveryThread() async {
    var group: RunLoopThreadGroup? = makeGroup(threadCount: 2)
    let threads = group!.threads
    let release = Latch(count: 1)
    // The task retains the group; with the handle discarded and the test's reference gone,
    // the task's end (on a group thread) releases the group there.
    Task(executorPreference: group!) { blockingWait(release) }
    group = nil
    release.countDown()
    await offPool { waitUntil { threads.allSatisfy { $0.isFinished } } }
    #expect(threads.allSatisfy { $0.isFinished })
  }

  @Test func awaitingShutDownFromATaskOnTheGroupEndsTheGroupAndResumesTheTaskElsewhere() async {
    let group = makeGroup(threadCount: 2)
    let groupThreads = group.threads
    let resumedOn = await Task(executorPreference: group) { () -> Thread in
      await group.shutDown()
      return Thread.current
    }.value
    #expect(group.isShutDown)
    #expect(groupThreads.allSatisfy { $0.isFinished })
    #expect(!groupThreads.contains(resumedOn))
  }

  @Test func aSecondShutDownReturnsOnceTheFirstHasFinished() async {
    let group = makeGroup(threadCount: 2)
    await shutDownOffPool(group)
    await shutDownOffPool(group)
    #expect(group.isShutDown)
  }

  @Test(.runsExitTests) func shutDownOnOneOfTheGroupsThreadsStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let group = makeGroup(threadCount: 1)
      await Task(executorPreference: group) { shutDownInPlace(group) }.value
    }
    #expect(
      result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) }?.contains(
        "shutDown() called on one of the group's threads") == true)
  }

  @Test func longGroupNamesKeepEachThreadsIndexInTheKernelName() async throws {
    // The default name with "-<index>" is 16 bytes or more, over the kernel's 15: the kernel
    // name loses the end of the group's name, never the index.
    let group = try await RunLoopThreadGroup.start(threadCount: 12)
    let kernelNames = group.threads.map { thread in
      thread.kernelThreadID.map { readFirstLine("/proc/self/task/\($0)/comm") } ?? "ended"
    }
    #expect(kernelNames[0] == "run-loop-grou-0")
    #expect(kernelNames[11] == "run-loop-gro-11")
    #expect(Set(kernelNames).count == 12, "\(kernelNames)")
    #expect(group.threads.map { $0.name } == (0..<12).map { "run-loop-group-\($0)" })
    await shutDownOffPool(group)
  }

  @Test func keptSuffixRule() {
    #expect(ThreadConfiguration.kernelName(for: "short-3", keeping: "-3") == "short-3")
    #expect(ThreadConfiguration.kernelName(for: "com.example.downloader-7", keeping: "-7") == "com.example.d-7")
    #expect(ThreadConfiguration.kernelName(for: "grösse-grösse-grösse-1", keeping: "-1") == "grösse-grös-1")
    // A suffix the name does not end with, or one as long as the limit, changes nothing.
    #expect(ThreadConfiguration.kernelName(for: "com.example.downloader", keeping: "-7") == "com.example.dow")
    #expect(
      ThreadConfiguration.kernelName(for: "com.example.downloader-123456789012345", keeping: "-123456789012345")
        == "com.example.dow")
  }

  @Test(.runsExitTests) func aGroupWithoutThreadsStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      _ = makeGroup(threadCount: 0)
    }
    #expect(
      result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) }?.contains("created with 0 threads")
        == true)
  }
}

/// `RunLoopThreadGroup.init` blocks (`noasync`): async tests call it through this function.
func makeGroup(threadCount: Int) -> RunLoopThreadGroup {
  do {
    return try RunLoopThreadGroup(threadCount: threadCount, name: "group-test")
  } catch {
    fatalError("RunLoopThreadGroup: \(error)")
  }
}

/// Shuts `group` down from a thread outside the cooperative pool (the call blocks).
func shutDownOffPool(_ group: RunLoopThreadGroup) async {
  await offPool { shutDownInPlace(group) }
}

/// Calls the blocking `shutDown()` on the calling thread.
func shutDownInPlace(_ group: RunLoopThreadGroup) {
  group.shutDown()
}

/// Waits for `latch` at most `timeout` on the calling thread; false when it did not open.
func blockingWait(_ latch: Latch, timeout: Duration) -> Bool {
  latch.wait(timeout: timeout)
}

/// The thread that runs a nonisolated async function (the task's executor preference).
nonisolated func currentThreadOffActor() async -> Thread {
  Thread.current
}

/// The first line of a small text file (a /proc entry), without its newline; "" if unreadable.
func readFirstLine(_ path: String) -> String {
  guard let file = fopen(path, "r") else { return "" }
  defer { fclose(file) }
  var buffer = [CChar](repeating: 0, count: 256)
  guard fgets(&buffer, Int32(buffer.count), file) != nil else { return "" }
  let line = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
  return line.hasSuffix("\n") ? String(line.dropLast()) : line
}
