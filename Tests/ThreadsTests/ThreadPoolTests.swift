import ProcessTestSupport
import Sync
import Testing

@testable import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Waits (suspended, polling every millisecond) until `condition` holds, for at most 20 s
/// on the monotonic clock; returns whether it held. Waits on another thread's observable
/// state, never on elapsed time alone.
func eventually(_ condition: () -> Bool) async -> Bool {
  // Generous: Swift Testing runs synchronous test functions on the cooperative pool (one
  // thread per core), so while other suites' blocking tests hold both threads of a 2-core
  // machine, this task (and the tasks that submit the work it waits for) queue behind the
  // rest of the run's synchronous tests: seen past 20 s on a loaded machine. Still well
  // inside the suite's time limit, so a real hang fails with the test's name.
  let deadline = MonotonicInstant.after(isRunningUnderSanitizer ? .seconds(80) : .seconds(60))
  while !condition() {
    if MonotonicInstant.now >= deadline { return false }
    try? await Task.sleep(for: .milliseconds(1))
  }
  return true
}

/// A pool with small limits for one test.
func makePool(
  _ name: String, maximumThreads: Int = 4, minimumThreads: Int = 0, queueCapacity: Int = 4096,
  idleTimeout: Duration = .seconds(10)
) -> ThreadPool {
  var configuration = ThreadPool.Configuration()
  configuration.maximumThreads = maximumThreads
  configuration.minimumThreads = minimumThreads
  configuration.queueCapacity = queueCapacity
  configuration.idleTimeout = idleTimeout
  return ThreadPool(name: name, configuration: configuration)
}

/// Blocks the calling (pool) thread until `latch` opens.
func block(on latch: TestLatch) {
  latch.wait()
}

/// Whether a task's outcome is the pool's cancellation (for closures that cannot throw).
func isCancellation<Value>(_ outcome: Result<Value, any Error>) -> Bool {
  guard case .failure(let error) = outcome, let poolError = error as? ThreadPoolError<Never>,
    case .cancelled = poolError
  else { return false }
  return true
}

enum PoolTestError: Error, Equatable {
  case refused(Int)
}

@Suite("ThreadPool runs blocking work for async code", .timeLimit(.minutes(3)))
struct ThreadPoolTests {
  @Test func runReturnsTheValueComputedOnAPoolThreadNamedAfterThePool() async throws {
    let pool = makePool("tests")
    let caller = Thread.current
    let (value, name, isOtherThread) = try await pool.run {
      (6 * 7, Thread.current.name, Thread.current != caller)
    }
    #expect(value == 42)
    #expect(name == "tests-0")
    #expect(isOtherThread)
    await pool.shutDown()
  }

  @Test func theClosuresTypedErrorArrivesAsFailed() async {
    let pool = makePool("tests")
    do throws(ThreadPoolError<PoolTestError>) {
      _ = try await pool.run { () throws(PoolTestError) -> Int in throw .refused(7) }
      Issue.record("no error")
    } catch .failed(let error) {
      #expect(error == .refused(7))  // statically a PoolTestError
    } catch {
      Issue.record("unexpected \(error)")
    }
    await pool.shutDown()
  }

  @Test func longWorkerNamesKeepTheirIndexInTheKernelName() async throws {
    var configuration = ThreadPool.Configuration()
    configuration.threadConfiguration.stackSize = 1024 * 1024
    configuration.threadConfiguration.relativePriority = 0.25  // nice 10: lowering needs no permission
    let pool = ThreadPool(name: "image-decoders", configuration: configuration)
    let (name, kernelName, stack, nice) = try await pool.run { () throws(SystemCallError) in
      (
        Thread.current.name, try Thread.currentKernelName(), try Thread.currentStackSize().stackSize,
        try Thread.currentNiceValue()
      )
    }
    #expect(name == "image-decoders-0")
    #expect(kernelName == "image-decoder-0")
    #expect(stack >= 1024 * 1024)
    #expect(nice == 10)
    await pool.shutDown()
    #expect(ThreadPoolCore.kernelWorkerName(pool: "tests", index: 3) == "tests-3")
    #expect(ThreadPoolCore.kernelWorkerName(pool: "downloaders-grösse", index: 12) == "downloaders-12")
    #expect(ThreadPoolCore.kernelWorkerName(pool: "größengrößen", index: 7) == "größengrö-7")
  }

  @Test func aPoolNameWithANULKeepsTheIndexInTheKernelName() async throws {
    // The kernel name is a C string: a NUL in the pool's name would end it before `-<index>`.
    let pool = makePool("io\u{0}disk")
    let (name, kernelName) = try await pool.run { () throws(SystemCallError) in
      (Thread.current.name, try Thread.currentKernelName())
    }
    #expect(name == "io\u{0}disk-0")
    #expect(kernelName == "io-0")
    await pool.shutDown()
    #expect(ThreadPoolCore.kernelWorkerName(pool: "io-\u{0}disk", index: 1) == "io-1")
    #expect(ThreadPoolCore.kernelWorkerName(pool: "\u{0}", index: 2) == "-2")
  }

  @Test(.runsExitTests) func aMaximumOfIntMaxMeansNoLimitOfThePoolsOwn() async throws {
    // GLib's g_thread_pool_new(..., max_threads: -1, ...): no limit. Nothing may be sized by
    // the maximum up front (an idle stack reserved for `Int.max` workers overflowed its byte
    // count: a tiny buffer, overrun as workers went idle). In a child process: a heap
    // overrun would take the whole test run down.
    await #expect(processExitsWith: .success) {
      // Idle workers stay for the whole test (they are counted below).
      let pool = makePool("unbounded", maximumThreads: .max, idleTimeout: .seconds(300))
      let gate = TestLatch()
      let count = 8
      let started = AtomicInteger<Int>(0)
      let values = await withTaskGroup(of: Int.self) { group in
        for index in 0..<count {
          group.addTask {
            (try? await pool.run {
              _ = started.increment(ordering: .full)
              gate.wait()
              return index
            }) ?? -1
          }
        }
        // Every job holds its own thread, so all of them go idle together afterwards.
        while started.load(ordering: .full) < count { try? await Task.sleep(for: .milliseconds(1)) }
        gate.open()
        return await group.reduce(0, +)
      }
      guard values == (0..<count).reduce(0, +) else { exit(2) }
      guard await eventually({ pool.statistics.idleThreads == count }) else { exit(3) }
      for round in 0..<100 {
        _ = try? await pool.run { [UInt8](repeating: UInt8(truncatingIfNeeded: round), count: 64) }
      }
      await pool.shutDown()
      exit(0)
    }
  }

  @Test func everyJobRunsExactlyOnceAndItsResultReachesItsOwnTask() async throws {
    // 100,000 jobs from 8 tasks (10,000 under ThreadSanitizer).
    let perTask = isRunningUnderThreadSanitizer ? 1_250 : 12_500
    let pool = makePool("exactly-once", maximumThreads: 4)
    let runs = TestBox([Int](repeating: 0, count: 8 * perTask))
    try await withThrowingTaskGroup(of: Bool.self) { group in
      for task in 0..<8 {
        group.addTask {
          var allMatched = true
          for index in 0..<perTask {
            let id = task * perTask + index
            let echoed = try await pool.run { () -> Int in
              runs.update { $0[id] += 1 }
              return id
            }
            if echoed != id { allMatched = false }
          }
          return allMatched
        }
      }
      for try await allMatched in group { #expect(allMatched) }
    }
    #expect(runs.value.allSatisfy { $0 == 1 })
    await pool.shutDown()
  }

  @Test func aTaskCancelledWhileQueuedGetsCancelledAtOnceAndItsClosureNeverRuns() async throws {
    let pool = makePool("cancel-queued", maximumThreads: 1)
    let release = TestLatch()
    let ran = TestBox(false)
    let blocker = Task { try await pool.run { block(on: release) } }
    #expect(await eventually { pool.statistics.runningJobs == 1 })
    let queued = Task { try await pool.run { ran.value = true } }
    #expect(await eventually { pool.statistics.queuedJobs == 1 })
    queued.cancel()
    // The worker is still blocked, so only the cancellation can end this wait.
    let outcome = await queued.result
    #expect(pool.statistics.runningJobs == 1)
    #expect(isCancellation(outcome), "expected .cancelled, got \(outcome)")
    #expect(pool.statistics.queuedJobs == 0)
    release.open()
    try await blocker.value
    await pool.shutDown()
    #expect(ran.value == false)
  }

  @Test func aTaskCancelledBeforeSubmittingGetsCancelledWithoutTouchingThePool() async {
    let pool = makePool("cancel-early")
    let ran = TestBox(false)
    let task = Task {
      withUnsafeCurrentTask { $0?.cancel() }
      return try await pool.run { ran.value = true }
    }
    let outcome = await task.result
    #expect(isCancellation(outcome), "expected .cancelled, got \(outcome)")
    #expect(ran.value == false)
    #expect(pool.statistics.threads == 0)
    await pool.shutDown()
  }

  @Test func aTaskCancelledWhileItsClosureRunsSetsTheWorkersExitRequestAndGetsTheValue() async throws {
    let pool = makePool("cancel-running", maximumThreads: 1)
    let started = TestLatch()
    let firstThread = TestBox<UInt64>(0)
    let task = Task {
      try await pool.run { () -> Bool in
        let thread = Thread.current
        firstThread.value = thread.id
        let exitRequested = TestLatch()
        let token = thread.addExitRequestHandler { exitRequested.open() }
        started.open()
        exitRequested.wait()
        thread.removeExitRequestHandler(token)
        return thread.isExitRequested
      }
    }
    // Polled, not waited for: blocking a cooperative thread here could starve the task that
    // submits the job.
    #expect(await eventually { started.isOpen })
    task.cancel()
    #expect(try await task.value == true)
    // The worker does not take more work after a cancelled job: the next job runs on a new
    // thread, with no exit request.
    let (nextThread, nextExitRequested) = try await pool.run { (Thread.current.id, Thread.current.isExitRequested) }
    #expect(nextThread != firstThread.value)
    #expect(nextExitRequested == false)
    await pool.shutDown()
  }

  @Test func shutdownRunsQueuedWorkThenRejectsNewWorkAndJoinsEveryWorker() async throws {
    let pool = makePool("shutdown-queued", maximumThreads: 1)
    let release = TestLatch()
    let first = Task {
      try await pool.run { () -> Int in
        block(on: release)
        return 1
      }
    }
    #expect(await eventually { pool.statistics.runningJobs == 1 })
    let second = Task { try await pool.run { 2 } }
    let third = Task { try await pool.run { 3 } }
    #expect(await eventually { pool.statistics.queuedJobs == 2 })
    let shutdown = Task { await pool.shutDown() }
    #expect(await eventually { pool.statistics.isShutDown })
    do throws(ThreadPoolError<Never>) {
      _ = try await pool.run { 4 }
      Issue.record("work submitted during the shutdown ran")
    } catch {
      if case .shutDown = error {} else { Issue.record("expected .shutDown, got \(error)") }
    }
    release.open()
    #expect(try await first.value == 1)
    #expect(try await second.value == 2)
    #expect(try await third.value == 3)
    await shutdown.value
    #expect(pool.statistics.threads == 0)
  }

  @Test(
    "queued work still runs when the only worker retires after its job during a shutdown (its task cancelled, or the job asked its thread to exit)",
    arguments: [false, true])
  func queuedWorkRunsWhenTheOnlyWorkerRetiresDuringShutdown(jobAsksToExit: Bool) async throws {
    let pool = makePool("retire", maximumThreads: 1)
    let release = TestLatch()
    let first = Task {
      try await pool.run { () -> Int in
        block(on: release)
        if jobAsksToExit { Thread.current.requestExit() }
        return 1
      }
    }
    #expect(await eventually { pool.statistics.runningJobs == 1 })
    let second = Task { try await pool.run { 2 } }
    #expect(await eventually { pool.statistics.queuedJobs == 1 })
    let shutdown = Task { await pool.shutDown() }
    #expect(await eventually { pool.statistics.isShutDown })
    // Either way the worker retires after this job; the queued one needs a replacement.
    if !jobAsksToExit { first.cancel() }
    release.open()
    _ = await first.result
    await shutdown.value
    let stats = pool.statistics
    #expect(
      stats.queuedJobs == 0, "shutdown returned with \(stats.queuedJobs) job(s) queued and \(stats.threads) thread(s)")
    if stats.queuedJobs == 0 {
      #expect(try await second.value == 2)
    } else {
      // Frees the stranded task so the test ends.
      second.cancel()
      _ = await second.result
    }
  }

  @Test func workSubmittedAfterShutdownGetsShutDownAtOnce() async {
    let pool = makePool("after-shutdown")
    _ = try? await pool.run { 1 }
    await pool.shutDown()
    let ran = TestBox(false)
    do throws(ThreadPoolError<Never>) {
      try await pool.run { ran.value = true }
      Issue.record("ran after shutdown")
    } catch {
      if case .shutDown = error {} else { Issue.record("expected .shutDown, got \(error)") }
    }
    #expect(ran.value == false)
    await pool.shutDown()  // a second shutdown returns at once
  }

  @Test func aClosureBlockingPastShutdownKeepsShutdownWaitingAndStillDeliversItsValue() async throws {
    let pool = makePool("blocks-past", maximumThreads: 2)
    let release = TestLatch()
    let blocked = Task {
      try await pool.run { () -> String in
        block(on: release)
        return "done"
      }
    }
    #expect(await eventually { pool.statistics.runningJobs == 1 })
    let finished = TestBox(false)
    let shutdown = Task {
      await pool.shutDown()
      finished.value = true
    }
    #expect(await eventually { pool.statistics.isShutDown })
    // The closure still runs: shutdown cannot have finished.
    #expect(pool.statistics.runningJobs == 1)
    #expect(finished.value == false)
    release.open()
    #expect(try await blocked.value == "done")
    await shutdown.value
    #expect(finished.value)
    #expect(pool.statistics.threads == 0)
  }

  @Test func highPriorityWorkOvertakesAQueueOfLowPriorityWork() async throws {
    let pool = makePool("priority", maximumThreads: 1)
    let release = TestLatch()
    let order = TestBox<[String]>([])
    let blocker = Task { try await pool.run { block(on: release) } }
    #expect(await eventually { pool.statistics.runningJobs == 1 })
    var low: [Task<Void, any Error>] = []
    for index in 0..<20 {
      low.append(Task(priority: .background) { try await pool.run { order.update { $0.append("low\(index)") } } })
    }
    #expect(await eventually { pool.statistics.queuedJobs == 20 })
    let high = Task(priority: .high) { try await pool.run { order.update { $0.append("high") } } }
    #expect(await eventually { pool.statistics.queuedJobs == 21 })
    release.open()
    try await blocker.value
    try await high.value
    for task in low { try await task.value }
    #expect(order.value.first == "high")
    #expect(order.value.count == 21)
    await pool.shutDown()
  }

  @Test func aFullQueueSuspendsSubmittersWithoutBlockingThreadsAndAdmitsThemInTurn() async throws {
    let pool = makePool("back-pressure", maximumThreads: 1, queueCapacity: 2)
    let release = TestLatch()
    let blocker = Task { try await pool.run { block(on: release) } }
    #expect(await eventually { pool.statistics.runningJobs == 1 })
    // Far more waiting submitters than the cooperative pool has threads: if a submitter
    // blocked a thread, this task could not go on to check the counts.
    var submitters: [Task<Int, any Error>] = []
    for index in 0..<32 {
      submitters.append(Task { try await pool.run { index } })
    }
    #expect(await eventually { pool.statistics.queuedJobs == 2 && pool.statistics.waitingJobs == 30 })
    let waitingOne = submitters.removeLast()
    waitingOne.cancel()
    let outcome = await waitingOne.result
    #expect(isCancellation(outcome), "expected .cancelled, got \(outcome)")
    #expect(pool.statistics.waitingJobs == 29)
    release.open()
    try await blocker.value
    var results: [Int] = []
    for task in submitters { results.append(try await task.value) }
    #expect(results == Array(0..<31))
    await pool.shutDown()
  }

  @Test func idleThreadsRetireDownToTheMinimum() async throws {
    let pool = makePool("idle", maximumThreads: 4, minimumThreads: 1, idleTimeout: .milliseconds(50))
    let release = TestLatch()
    let started = TestBox(0)
    let jobs = (0..<4).map { _ in
      Task {
        try await pool.run {
          started.update { $0 += 1 }
          block(on: release)
        }
      }
    }
    #expect(await eventually { started.value == 4 })
    #expect(pool.statistics.threads == 4)
    release.open()
    for job in jobs { try await job.value }
    #expect(await eventually { pool.statistics.threads == 1 })
    #expect(pool.statistics.idleThreads == 1)
    // The remaining thread keeps serving work.
    #expect(try await pool.run { 5 } == 5)
    await pool.shutDown()
  }

  @Test func threadsStartOnDemandUpToTheMaximum() async throws {
    let pool = makePool("on-demand", maximumThreads: 3)
    #expect(pool.statistics.threads == 0)
    let release = TestLatch()
    let started = TestBox(0)
    let jobs = (0..<5).map { _ in
      Task {
        try await pool.run {
          started.update { $0 += 1 }
          block(on: release)
        }
      }
    }
    #expect(await eventually { started.value == 3 && pool.statistics.queuedJobs == 2 })
    #expect(pool.statistics.threads == 3)
    release.open()
    for job in jobs { try await job.value }
    #expect(started.value == 5)
    await pool.shutDown()
  }

  /// Jobs that each wait for all the others to start need every thread the maximum allows:
  /// a worker still starting must not count as free once it has taken a job.
  @Test func asManyBlockingJobsAsTheMaximumAllowsAllRunAtOnce() async throws {
    let count = 16
    let pool = makePool("all-at-once", maximumThreads: count)
    let started = TestBox(0)
    let everyoneStarted = TestLatch()
    // Held until the threads are counted: jobs that ended would leave their threads idle,
    // and a checking task delayed past the idle timeout (a busy cooperative pool under a
    // sanitizer) would count the retired threads as missing.
    let release = TestLatch()
    let jobs = (0..<count).map { _ in
      Task {
        try await pool.run {
          var isLast = false
          started.update {
            $0 += 1
            isLast = $0 == count
          }
          if isLast { everyoneStarted.open() }
          everyoneStarted.wait()
          release.wait()
        }
      }
    }
    #expect(await eventually { started.value == count })
    #expect(pool.statistics.threads == count, "\(pool.statistics) started \(started.value)")
    everyoneStarted.open()  // lets the jobs end even when the expectation failed
    release.open()
    for job in jobs { try await job.value }
    await pool.shutDown()
  }

  @Test func theSharedPoolIsReadyToUse() async throws {
    let name = try await ThreadPool.shared.run { Thread.current.name }
    #expect(name?.hasPrefix("blocking-") == true)
    #expect(ThreadPool.shared.configuration.maximumThreads == ThreadPool.defaultMaximumThreads)
  }
}

/// The names of the process's threads (`/proc/self/task/*/comm`) that start with `prefix`.
/// Used only in child processes (exit tests): a test process's other tests may exhaust
/// descriptors on purpose, and listing /proc can miss entries while threads come and go.
func threadNames(withPrefix prefix: String) -> [String] {
  guard let directory = opendir("/proc/self/task") else { return [] }
  defer { closedir(directory) }
  var names: [String] = []
  while let entry = readdir(directory) {
    let tid = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    if tid.hasPrefix(".") { continue }
    guard let comm = ProcessorLimits.readSmallFile("/proc/self/task/\(tid)/comm") else { continue }
    let name = String(comm.prefix { $0 != "\n" })
    if name.hasPrefix(prefix) { names.append(name) }
  }
  return names
}
