import ProcessTestSupport
import Sync
import Testing

@testable import Threads

// Scenarios of SwiftNIO's NIOThreadPool tests (NIOThreadPoolTest, BlockingIOThreadPoolTest),
// asked of the toolkit's ``ThreadPool``. The toolkit's pool has no `start()` (threads start on
// demand) and no work-item state: NIO's `runIfActive` is `run`, its `.cancelled` work-item
// state is ``ThreadPoolError/cancelled`` or ``ThreadPoolError/shutDown``.

/// An object a closure captures, to see where and when the pool releases the closure. Its
/// deinitializer reads the pool's statistics, which takes the pool's lock: released while
/// the pool holds its lock, it would deadlock.
private final class Capture: Sendable {
  let pool: ThreadPool
  let released: AtomicInteger<Int>
  init(pool: ThreadPool, released: AtomicInteger<Int>) {
    self.pool = pool
    self.released = released
  }
  func touch() {}
  deinit {
    _ = pool.statistics
    released.increment(ordering: .releasing)
  }
}

private struct NIOStyleError: Error {}

@Suite("SwiftNIO thread-pool scenarios", .timeLimit(.minutes(3)))
struct PeerScenariosNIOThreadPoolTests {
  @Test func everyWorkerOfABusyPoolIsNamedAfterThePoolWithItsOwnIndex() async throws {
    let count = 11
    let pool = makePool("nio-names", maximumThreads: count)
    let release = TestLatch()
    let names = TestBox(Set<String>())
    try await withThrowingTaskGroup(of: Void.self) { group in
      for _ in 0..<count {
        group.addTask {
          try await pool.run {
            let name = Thread.current.name ?? "unnamed"
            names.update { $0.insert(name) }
            block(on: release)
          }
        }
      }
      // Every job holds its thread until all have recorded their names: 11 threads at once.
      #expect(await eventually { names.value.count == count })
      release.open()
      try await group.waitForAll()
    }
    #expect(names.value == Set((0..<count).map { "nio-names-\($0)" }))
    await pool.shutDown()
  }

  @Test func consecutiveJobsOfAOneThreadPoolRunOnTheSameThread() async throws {
    let pool = makePool("nio-reuse", maximumThreads: 1, minimumThreads: 1)
    let first = try await pool.run { ObjectIdentifier(Thread.current) }
    let second = try await pool.run { ObjectIdentifier(Thread.current) }
    #expect(first == second)
    #expect(pool.statistics.threads == 1)
    await pool.shutDown()
  }

  @Test func runReturnsAfterItsClosureRanAndPassesOnItsError() async {
    let pool = makePool("nio-async", maximumThreads: 1)
    let hit = AtomicBool(false)
    do throws(ThreadPoolError<Never>) {
      try await pool.run { hit.store(true, ordering: .relaxed) }
    } catch {
      Issue.record("unexpected \(error)")
    }
    #expect(hit.load(ordering: .relaxed))
    do throws(ThreadPoolError<NIOStyleError>) {
      try await pool.run { () throws(NIOStyleError) in throw NIOStyleError() }
      Issue.record("no error")
    } catch .failed(let error) {
      _ = error as NIOStyleError  // statically the closure's own error type
    } catch {
      Issue.record("unexpected \(error)")
    }
    await pool.shutDown()
  }

  @Test func workAfterShutdownOfABusyPoolIsRejectedAsShutDownWithoutRunning() async throws {
    // NIO's pool answers a closed pool with CancellationError; this one with `.shutDown`,
    // which is not a cancellation (`cancellationError` is nil).
    let count = 17
    let pool = makePool("nio-shutdown", maximumThreads: count)
    let release = TestLatch()
    try await withThrowingTaskGroup(of: Void.self) { group in
      for _ in 0..<count { group.addTask { try await pool.run { block(on: release) } } }
      #expect(await eventually { pool.statistics.runningJobs == count })
      release.open()
      try await group.waitForAll()
    }
    await pool.shutDown()
    #expect(pool.statistics.threads == 0)
    let ran = AtomicBool(false)
    do throws(ThreadPoolError<Never>) {
      try await pool.run { ran.store(true, ordering: .relaxed) }
      Issue.record("ran after shutdown")
    } catch .shutDown {
      #expect(ThreadPoolError<Never>.shutDown.cancellationError == nil)
    } catch {
      Issue.record("unexpected \(error)")
    }
    #expect(!ran.load(ordering: .relaxed))
  }

  @Test func aChildOfACancelledTaskGroupGetsCancelledAndItsClosureNeverRuns() async {
    let pool = makePool("nio-cancel", maximumThreads: 1)
    let ran = AtomicBool(false)
    await withTaskGroup(of: (any Error)?.self) { group in
      group.cancelAll()
      group.addTask {
        do throws(ThreadPoolError<Never>) {
          try await pool.run { ran.store(true, ordering: .relaxed) }
          return nil
        } catch {
          return error.cancellationError ?? error
        }
      }
      let error = await group.next() ?? nil
      #expect(error is CancellationError, "got \(String(describing: error))")
    }
    #expect(!ran.load(ordering: .relaxed))
    await pool.shutDown()
  }

  @Test func shutdownMayBeCalledTwiceInARowAndFromSeveralTasksAtOnce() async throws {
    let pool = makePool("nio-twice", maximumThreads: 4)
    _ = try await pool.run { 1 }
    await pool.shutDown()
    await pool.shutDown()
    let busy = makePool("nio-together", maximumThreads: 2)
    let release = TestLatch()
    let job = Task { try await busy.run { block(on: release) } }
    #expect(await eventually { busy.statistics.runningJobs == 1 })
    await withTaskGroup(of: Void.self) { group in
      for _ in 0..<3 { group.addTask { await busy.shutDown() } }
      #expect(await eventually { busy.statistics.isShutDown })
      release.open()
    }
    try await job.value
    #expect(busy.statistics.threads == 0)
  }

  @Test func aPoolDroppedWhileItsWorkRunsFinishesTheWorkAndItsShutdownReturns() async throws {
    let release = TestLatch()
    let started = AtomicBool(false)
    let shuttingDown = AtomicBool(false)
    let value = await withTaskGroup(of: Int?.self) { group in
      do {
        let pool = makePool("nio-dropped", maximumThreads: 2)
        group.addTask {
          try? await pool.run { () -> Int in
            started.store(true, ordering: .releasing)
            block(on: release)
            return 7
          }
        }
        group.addTask {
          _ = await eventually { started.load(ordering: .acquiring) }
          shuttingDown.store(true, ordering: .releasing)
          await pool.shutDown()
          return nil
        }
      }
      // Only the tasks hold the pool now; its work is still blocked.
      _ = await eventually { shuttingDown.load(ordering: .acquiring) }
      release.open()
      var value: Int?
      for await result in group where result != nil { value = result }
      return value
    }
    #expect(value == 7)
  }

  @Test func aShutDownPoolIsReleasedWithItsLastReference() async throws {
    weak var weakPool: ThreadPool?
    do {
      let pool = makePool("nio-release", maximumThreads: 1)
      weakPool = pool
      let release = TestLatch()
      try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await pool.run { block(on: release) } }
        #expect(await eventually { pool.statistics.runningJobs == 1 })
        group.addTask { await pool.shutDown() }
        #expect(await eventually { pool.statistics.isShutDown })
        #expect(weakPool != nil)
        release.open()
        try await group.waitForAll()
      }
    }
    #expect(weakPool == nil, "something still holds the shut-down pool")
  }

  @Test func aPoolReleasedWithoutShutdownEndsItsIdleThreadsKeptByTheMinimum() async throws {
    // NIO asserts that a pool is shut down before it is released; this pool shuts itself
    // down without waiting (documented on ``ThreadPool``'s Shutdown).
    var threads: [Thread] = []
    do {
      let pool = makePool("nio-unreleased", maximumThreads: 2, minimumThreads: 2)
      let release = TestLatch()
      try await withThrowingTaskGroup(of: Thread.self) { group in
        for _ in 0..<2 {
          group.addTask {
            try await pool.run { () -> Thread in
              block(on: release)
              return Thread.current
            }
          }
        }
        #expect(await eventually { pool.statistics.runningJobs == 2 })
        release.open()
        for try await thread in group { threads.append(thread) }
      }
      #expect(await eventually { pool.statistics.idleThreads == 2 })
    }
    #expect(threads.count == 2)
    #expect(await eventually { threads.allSatisfy(\.isFinished) })
  }

  @Test func aClosuresCapturesAreReleasedBeforeRunReturns() async throws {
    let pool = makePool("nio-captures", maximumThreads: 1)
    let released = AtomicInteger<Int>(0)
    try await pool.run { [capture = Capture(pool: pool, released: released)] in capture.touch() }
    #expect(released.load(ordering: .acquiring) == 1)
    // Two jobs queued back to back on the one thread: each closure is gone when its run returns.
    try await withThrowingTaskGroup(of: Void.self) { group in
      for _ in 0..<2 {
        group.addTask {
          try await pool.run { [capture = Capture(pool: pool, released: released)] in capture.touch() }
        }
      }
      try await group.waitForAll()
    }
    #expect(released.load(ordering: .acquiring) == 3)
    await pool.shutDown()
  }

  @Test func closuresCancelledWhileQueuedOrWaitingOrRejectedAreReleasedOutsideThePoolsLock() async throws {
    // NIO calls a cancelled work item with `.cancelled`, and that callback may call the pool
    // again. Here the closure never runs, but its release runs the captures' deinitializers,
    // which take the pool's lock: released under it, they would deadlock.
    let pool = makePool("nio-release-lock", maximumThreads: 1, queueCapacity: 1)
    let released = AtomicInteger<Int>(0)
    let release = TestLatch()
    let blocker = Task { try await pool.run { block(on: release) } }
    #expect(await eventually { pool.statistics.runningJobs == 1 })
    let queued = Task {
      try await pool.run { [capture = Capture(pool: pool, released: released)] in capture.touch() }
    }
    #expect(await eventually { pool.statistics.queuedJobs == 1 })
    let waiting = Task {
      try await pool.run { [capture = Capture(pool: pool, released: released)] in capture.touch() }
    }
    #expect(await eventually { pool.statistics.waitingJobs == 1 })
    waiting.cancel()
    #expect(isCancellation(await waiting.result))
    #expect(released.load(ordering: .acquiring) == 1)
    queued.cancel()
    #expect(isCancellation(await queued.result))
    #expect(released.load(ordering: .acquiring) == 2)
    release.open()
    try await blocker.value
    await pool.shutDown()
    do throws(ThreadPoolError<Never>) {
      try await pool.run { [capture = Capture(pool: pool, released: released)] in capture.touch() }
      Issue.record("ran after shutdown")
    } catch {
      guard case .shutDown = error else {
        Issue.record("unexpected \(error)")
        return
      }
    }
    #expect(released.load(ordering: .acquiring) == 3)
  }

  @Test func shutdownWithWorkQueuedRunsThatWorkThenReturns() async throws {
    // NIO's shutdown cancels the queued work items; this pool's runs them (documented on
    // ``ThreadPool``'s Shutdown).
    let pool = makePool("nio-pending", maximumThreads: 1)
    let release = TestLatch()
    let ran = AtomicInteger<Int>(0)
    let blocker = Task { try await pool.run { block(on: release) } }
    #expect(await eventually { pool.statistics.runningJobs == 1 })
    let queued = (0..<5).map { _ in Task { try await pool.run { _ = ran.increment(ordering: .relaxed) } } }
    #expect(await eventually { pool.statistics.queuedJobs == 5 })
    let shutdown = Task { await pool.shutDown() }
    #expect(await eventually { pool.statistics.isShutDown })
    release.open()
    await shutdown.value
    #expect(ran.load(ordering: .relaxed) == 5)
    for task in queued { try await task.value }
    try await blocker.value
    #expect(pool.statistics.threads == 0)
  }

  @Test func manyCreateRunShutdownCyclesEachEndWithNoThreadLeft() async throws {
    for cycle in 0..<(isRunningUnderSanitizer ? 10 : 50) {
      let pool = makePool("nio-cycle", maximumThreads: 2)
      #expect(try await pool.run { cycle } == cycle)
      await pool.shutDown()
      let statistics = pool.statistics
      #expect(statistics.threads == 0 && statistics.isShutDown)
    }
  }
}
