import ProcessTestSupport
import Sync
import Testing

@testable import Threads

// A second round of SwiftNIO NIOThreadPool scenarios (NIOThreadPoolTest,
// BlockingIOThreadPoolTest), asked of the toolkit's ``ThreadPool``. As in the first round:
// NIO's `runIfActive` is `run`, its `.cancelled` work-item state is
// ``ThreadPoolError/cancelled`` or ``ThreadPoolError/shutDown``, and the pool has no
// `start()` (threads start on demand, documented on ``ThreadPool``'s Threads section).

private final class Tracked: Sendable {
  let released: AtomicInteger<Int>
  init(_ released: AtomicInteger<Int>) { self.released = released }
  func touch() {}
  deinit { released.increment(ordering: .releasing) }
}

@Suite("SwiftNIO thread-pool scenarios, round 2", .timeLimit(.minutes(3)))
struct PeerScenariosNIOThreadPoolRound2Tests {
  @Test func aPoolNeverGivenWorkStartsNoThreadAndItsShutdownReturnsAtOnce() async {
    // NIO's testAsyncShutdownWorks: a 17-thread pool started and shut down; work submitted
    // after the shutdown is refused without running. Here nothing starts before work comes.
    let pool = makePool("nio-idle-shutdown", maximumThreads: 17)
    #expect(pool.statistics.threads == 0)
    await pool.shutDown()
    let statistics = pool.statistics
    #expect(statistics.threads == 0 && statistics.isShutDown)
    let ran = AtomicBool(false)
    do throws(ThreadPoolError<Never>) {
      try await pool.run { ran.store(true, ordering: .relaxed) }
      Issue.record("ran after shutdown")
    } catch .shutDown {
    } catch {
      Issue.record("unexpected \(error)")
    }
    #expect(!ran.load(ordering: .relaxed))
  }

  @Test func aClosureThatThrowsIsReleasedBeforeRunRethrowsItsError() async throws {
    // NIO's testClosureReferenceDroppedAfterSingleWorkItemExecution, with a failing closure.
    let pool = makePool("nio-throw-release", maximumThreads: 1)
    let released = AtomicInteger<Int>(0)
    do throws(ThreadPoolError<PoolTestError>) {
      try await pool.run { [tracked = Tracked(released)] () throws(PoolTestError) in
        tracked.touch()
        throw PoolTestError.refused(3)
      }
      Issue.record("no error")
    } catch .failed(let error) {
      #expect(error == .refused(3))
    } catch {
      Issue.record("unexpected \(error)")
    }
    #expect(released.load(ordering: .acquiring) == 1)
    await pool.shutDown()
  }

  @Test func aTaskCancelledWhileItsClosureRunsStillGetsTheClosuresValue() async throws {
    // NIO runs a work item that is already active to its end; so does this pool, and it sets
    // the worker's exit request (documented on ``ThreadPool``'s Cancellation section).
    let pool = makePool("nio-cancel-running", maximumThreads: 1)
    let worker = TestBox<Thread?>(nil)
    let release = TestLatch()
    let job = Task {
      try await pool.run { () -> Int in
        worker.update { $0 = Thread.current }
        block(on: release)
        return Thread.current.isExitRequested ? 42 : 0
      }
    }
    #expect(await eventually { worker.value != nil })
    job.cancel()
    // The cancellation sets the running worker's exit request; the closure goes on.
    #expect(await eventually { worker.value?.isExitRequested == true })
    release.open()
    #expect(try await job.value == 42)
    await pool.shutDown()
    #expect(pool.statistics.threads == 0)
  }

  @Test func manyTasksThroughASmallQueueAllGetTheirOwnValues() async throws {
    // NIO's pools run any number of submitted items; this pool's back-pressure parks the
    // surplus (queueCapacity 2) and still runs every one, each returning its own value.
    let pool = makePool("nio-many", maximumThreads: 3, queueCapacity: 2)
    let count = isRunningUnderSanitizer ? 50 : 300
    let sum = try await withThrowingTaskGroup(of: Int.self) { group in
      for index in 0..<count {
        group.addTask { try await pool.run { index } }
      }
      var sum = 0
      for try await value in group { sum += value }
      return sum
    }
    #expect(sum == count * (count - 1) / 2)
    await pool.shutDown()
    #expect(pool.statistics.threads == 0)
  }

  @Test func shutdownWithWorkWaitingForQueueSpaceRunsThatWorkToo() async throws {
    // NIO's shutdown cancels what is pending; this pool runs queued and waiting work
    // (documented on ``ThreadPool/shutDown()``).
    let pool = makePool("nio-waiting-shutdown", maximumThreads: 1, queueCapacity: 1)
    let release = TestLatch()
    let ran = AtomicInteger<Int>(0)
    let blocker = Task { try await pool.run { block(on: release) } }
    #expect(await eventually { pool.statistics.runningJobs == 1 })
    let queued = Task { try await pool.run { _ = ran.increment(ordering: .relaxed) } }
    #expect(await eventually { pool.statistics.queuedJobs == 1 })
    let waiting = Task { try await pool.run { _ = ran.increment(ordering: .relaxed) } }
    #expect(await eventually { pool.statistics.waitingJobs == 1 })
    let shutdown = Task { await pool.shutDown() }
    #expect(await eventually { pool.statistics.isShutDown })
    release.open()
    await shutdown.value
    try await blocker.value
    try await queued.value
    try await waiting.value
    #expect(ran.load(ordering: .relaxed) == 2)
    #expect(pool.statistics.threads == 0)
  }

  @Test func workSubmittedConcurrentlyWithShutdownEitherRunsOrIsRejectedNeverLost() async throws {
    // NIO's runIfActive racing shutdownGracefully: each item either runs or is refused.
    let rounds = isRunningUnderSanitizer ? 5 : 20
    for _ in 0..<rounds {
      let pool = makePool("nio-race-shutdown", maximumThreads: 2)
      let ran = AtomicInteger<Int>(0)
      let outcomes = await withTaskGroup(of: Int.self) { group in
        for _ in 0..<8 {
          group.addTask {
            do throws(ThreadPoolError<Never>) {
              try await pool.run { _ = ran.increment(ordering: .relaxed) }
              return 1
            } catch .shutDown {
              return 0
            } catch {
              Issue.record("unexpected \(error)")
              return 0
            }
          }
        }
        group.addTask {
          await pool.shutDown()
          return 0
        }
        var succeeded = 0
        for await value in group { succeeded += value }
        return succeeded
      }
      await pool.shutDown()
      #expect(outcomes == ran.load(ordering: .relaxed))
      #expect(pool.statistics.threads == 0)
    }
  }
}
