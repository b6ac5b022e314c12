import Sync
import TestSupport
import Testing
import Threads

@testable import RunLoop

/// A waker that hands a watching loop work on the loop's own CPU yields that CPU to it
/// (`wakeUpYieldingToWatcher`, an executor's enqueue): the loop runs the work before the
/// waker goes on, as a loop woken from a sleep would by preempting its waker.
@Suite("RunLoop: a waker on the loop's CPU yields to the watching loop", .serialized, .timeLimit(.minutes(3)))
struct WakerYieldsToWatcherTests {
  /// Both threads on one CPU; returns in how many of `rounds` the loop had run the source's
  /// handler by the time the waker's wake-up call returned, and how many were handled.
  private func pingPongOnOneCPU(rounds: Int, yielding: Bool) throws -> (ranFirst: Int, handled: Int) {
    let cpu = try #require(Thread.currentCPUAffinity().first)
    var configuration = ThreadConfiguration()
    configuration.cpuAffinity = [cpu]
    let worker = try RunLoopThread.start(name: "yield-watcher", configuration: configuration)
    let partner = AnsweringSource()
    #expect(worker.runLoop.add(partner.source, forMode: .default))
    let runLoop = worker.runLoop
    let ranFirst = AtomicInteger<Int>(0)
    let lost = AtomicBool(false)
    let waker = try Thread.spawn(name: "yield-waker", configuration: configuration) { () throws(Never) in
      for round in 0..<rounds {
        // Whether the loop ran the handler before the wake-up call returned is read between
        // the wake-up and the wait for the answer.
        let answered = partner.ping(runLoop) { runLoop in
          if yielding { runLoop.wakeUpYieldingToWatcher() } else { runLoop.wakeUp() }
          if partner.handledCount == round + 1 { _ = ranFirst.increment(ordering: .relaxed) }
        }
        if !answered {
          lost.store(true, ordering: .relaxed)
          return
        }
      }
    }
    waker.join()
    #expect(!lost.load(ordering: .relaxed), "a signal was not handled: the loop missed its wake-up")
    partner.source.invalidate()
    worker.stop()
    return (ranFirst.load(ordering: .relaxed), partner.handledCount)
  }

  /// The ping-pong rounds of each attempt.
  private let rounds = 200

  /// The count is a property of the scheduler, not only of the code: on a machine busy with
  /// other tests the waker's CPU may go to a third thread when it yields. So each test makes
  /// up to five independent attempts and needs one of them to show the behaviour (`shows`
  /// of the rounds in which the loop ran first); code without the yield (or yielding
  /// everywhere) fails every attempt. Returns the counts of the attempts made when none did.
  private func countsUnlessAnAttemptShows(yielding: Bool, _ shows: (Int) -> Bool) throws -> [Int]? {
    var counts: [Int] = []
    for _ in 0..<5 {
      let (ranFirst, handled) = try pingPongOnOneCPU(rounds: rounds, yielding: yielding)
      #expect(handled == rounds)
      if shows(ranFirst) { return nil }
      counts.append(ranFirst)
    }
    return counts
  }

  // The attempts run off the cooperative pool (`offPool`): they block their thread for as
  // long as the ping-pongs take, which on a machine busy with other tests (a sanitizer
  // pass) is most of a minute, and a pool thread held that long stalls the other tests.

  @Test("the loop runs the work before the waker goes on, and no wake-up is lost")
  func theWatchingLoopRunsBeforeTheWakerGoesOn() async throws {
    // Without the yield the loop cannot run before the waker blocks (one CPU); with it, it
    // does nearly every time (a loop not yet watching, or another thread scheduled first on
    // that CPU, accounts for the rest).
    let half = rounds / 2
    if let counts = try await offPool({ [self] in try countsUnlessAnAttemptShows(yielding: true, { $0 >= half }) }) {
      Issue.record("the loop ran first in fewer than half of \(rounds) rounds in every attempt: \(counts)")
    }
  }

  @Test("a plain wakeUp() does not yield: the waker goes on first")
  func aPlainWakeUpDoesNotYield() async throws {
    let half = rounds / 2
    if let counts = try await offPool({ [self] in try countsUnlessAnAttemptShows(yielding: false, { $0 < half }) }) {
      Issue.record("the loop ran first in at least half of \(rounds) rounds in every attempt: \(counts)")
    }
  }
}
