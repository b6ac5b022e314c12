import Glibc
import Sync
import Testing
import Threads

// swift-corelibs-foundation's TestThread scenarios beyond the basics in
// PeerScenariosCoreFoundationThreadTests.swift: the lifecycle flags, cancellation (here the
// exit request), the thread dictionary, names given before start, stack sizes, and the
// condition hand-shake Foundation's tests use to wait for a started thread.

@Suite("Foundation scenarios: thread state", .timeLimit(.minutes(3)))
struct PeerFoundationThreadStateTests {
  /// NSThread's `isExecuting`/`isFinished`: neither before `start()`, executing while the
  /// body runs (seen from the thread and from outside), finished and no longer executing
  /// once it returned.
  @Test func lifecycleFlagsFollowStartRunAndEnd() throws {
    let running = Semaphore()
    let release = Semaphore()
    let sawExecuting = Semaphore()
    let thread = Thread {
      if Thread.current.isExecuting && !Thread.current.isFinished { sawExecuting.signal() }
      running.signal()
      release.wait()
    }
    #expect(!thread.isExecuting)
    #expect(!thread.isFinished)
    try thread.start()
    running.wait()
    #expect(sawExecuting.wait(timeout: .zero))
    #expect(thread.isExecuting)
    #expect(!thread.isFinished)
    release.signal()
    let giveUp = MonotonicInstant.after(.seconds(30))
    while !thread.isFinished && !giveUp.hasPassed { sched_yield() }
    #expect(thread.isFinished)
    #expect(!thread.isExecuting)
  }

  /// NSThread's `cancel()`/`isCancelled`, the toolkit's `requestExit()`/`isExitRequested`:
  /// a request made before `start()` is seen by the body's first check; a request made while
  /// the body runs is seen by its loop, runs the handlers once, and repeating it is harmless.
  @Test func anExitRequestBeforeStartIsSeenAtTheBodysFirstCheck() throws {
    let seen = Semaphore()
    let flag = LockedValue<Bool?>(nil)
    let thread = Thread {
      flag.withLock { $0 = Thread.current.isExitRequested }
      seen.signal()
    }
    #expect(!thread.isExitRequested)
    thread.requestExit()
    #expect(thread.isExitRequested)
    try thread.start()
    #expect(seen.wait(timeout: .seconds(30)))
    #expect(flag.withLock { $0 } == true)
  }

  @Test func anExitRequestWhileRunningEndsTheWorkLoopAndRunsHandlersOnce() throws {
    let handlerRuns = LockedValue(0)
    let inLoop = Semaphore()
    let worker = try Thread.spawn { () -> Int in
      var rounds = 0
      inLoop.signal()
      while !Thread.current.isExitRequested {
        rounds += 1
        sched_yield()
      }
      return rounds
    }
    worker.thread.addExitRequestHandler { handlerRuns.withLock { $0 += 1 } }
    inLoop.wait()
    #expect(!worker.thread.isExitRequested)
    worker.thread.requestExit()
    worker.thread.requestExit()
    let thread = worker.thread
    _ = worker.join()
    thread.requestExit()
    #expect(thread.isExitRequested)
    #expect(handlerRuns.withLock { $0 } == 1)
  }

  /// NSThread's `threadDictionary`: each thread has its own; a value set on one is not seen
  /// on another; the same dictionary comes back each time on one thread; another thread
  /// holding the `Thread` may read and write it.
  @Test func eachThreadHasItsOwnDictionary() throws {
    let mainDictionary = Thread.current.threadDictionary
    #expect(mainDictionary === Thread.current.threadDictionary)
    mainDictionary["peer.foundation.key"] = "outside"
    defer { mainDictionary["peer.foundation.key"] = nil }
    let written = Semaphore()
    let checked = Semaphore()
    let worker = try Thread.spawn { () -> [String?] in
      let own = Thread.current.threadDictionary
      let before = own["peer.foundation.key", as: String.self]
      own["peer.foundation.key"] = "inside"
      written.signal()
      checked.wait()
      return [before, own["peer.foundation.key", as: String.self]]
    }
    written.wait()
    #expect(worker.thread.threadDictionary["peer.foundation.key", as: String.self] == "inside")
    worker.thread.threadDictionary["peer.foundation.key"] = "from outside"
    checked.signal()
    let seen = worker.join()
    #expect(seen == [nil, "from outside"])
    #expect(mainDictionary["peer.foundation.key", as: String.self] == "outside")
  }

  /// NSThread's `name` set before `start()` is the name the body sees, and the kernel gets
  /// it too.
  @Test func aNameGivenBeforeStartIsTheRunningThreadsName() throws {
    let seen = LockedValue<[String?]>([])
    let done = Semaphore()
    let thread = Thread { () throws(SystemCallError) in
      let kernel = try Thread.currentKernelName()
      seen.withLock { $0 = [Thread.current.name, kernel] }
      done.signal()
    }
    #expect(thread.name == nil)
    thread.name = "peer-worker"
    #expect(thread.name == "peer-worker")
    try thread.start()
    #expect(done.wait(timeout: .seconds(30)))
    #expect(seen.withLock { $0 } == ["peer-worker", "peer-worker"])
  }

  /// NSThread's `stackSize`: a size set before the thread starts is the stack it runs on
  /// (rounded up to whole pages, never smaller); sizes out of range are refused with a
  /// typed error instead of being ignored.
  @Test func aStackSizeSetBeforeStartIsTheRunningThreadsStack() throws {
    var configuration = ThreadConfiguration()
    configuration.stackSize = 1024 * 1024 + 1
    let worker = try Thread.spawn(configuration: configuration) { () throws(SystemCallError) -> Int in
      try Thread.currentStackSize().stackSize
    }
    let size = try worker.join()
    #expect(size >= 1024 * 1024 + 1)
    #expect(size % ThreadConfiguration.pageSize == 0)

    var tooSmall = ThreadConfiguration()
    tooSmall.stackSize = 1
    #expect(throws: ThreadConfigurationError.self) { try tooSmall.validate() }
    let ran = Semaphore()
    let stack = LockedValue(0)
    let refused = Thread(configuration: tooSmall) { () throws(SystemCallError) in
      let size = try Thread.currentStackSize().stackSize
      stack.withLock { $0 = size }
      ran.signal()
    }
    #expect(throws: ThreadStartError.self) { try refused.start() }
    #expect(!refused.isExecuting && !refused.isFinished)

    // As `start()` documents, a thread whose start failed may be reconfigured and started.
    refused.configuration.stackSize = 2 * 1024 * 1024
    try refused.start()
    #expect(ran.wait(timeout: .seconds(30)))
    #expect(stack.withLock { $0 } >= 2 * 1024 * 1024)
  }

  /// TestThread.test_mainThread: seen from another thread, the main thread object is the
  /// main thread and is executing.
  @Test func theMainThreadSeenFromAnotherThreadIsExecuting() throws {
    let worker = try Thread.spawn { () -> [Bool] in
      [Thread.main.isMainThread, Thread.main.isExecuting, !Thread.main.isFinished, !Thread.current.isMainThread]
    }
    #expect(worker.join() == [true, true, true, true])
  }
}

@Suite("Foundation scenarios: a serial operation queue", .timeLimit(.minutes(3)))
struct PeerFoundationSerialQueueTests {
  /// TestOperationQueue with `maxConcurrentOperationCount = 1`: operations of one priority
  /// run one at a time in the order they were added. A one-thread pool runs queued jobs of
  /// one priority level oldest first, never two at once.
  @Test func aOneThreadPoolRunsQueuedJobsOfOnePriorityInSubmissionOrder() async throws {
    let pool = makePool("serial", maximumThreads: 1)
    let release = TestLatch()
    let order = TestBox<[Int]>([])
    let running = TestBox(0)
    let overlapped = TestBox(false)
    let blocker = Task { try await pool.run { block(on: release) } }
    #expect(await eventually { pool.statistics.runningJobs == 1 })
    var jobs: [Task<Void, any Error>] = []
    for index in 0..<10 {
      jobs.append(
        Task {
          try await pool.run {
            running.update { $0 += 1 }
            if running.value != 1 { overlapped.value = true }
            order.update { $0.append(index) }
            running.update { $0 -= 1 }
          }
        })
      #expect(await eventually { pool.statistics.queuedJobs == index + 1 })
    }
    release.open()
    try await blocker.value
    for job in jobs { try await job.value }
    #expect(order.value == Array(0..<10))
    #expect(!overlapped.value)
    await pool.shutDown()
  }
}
