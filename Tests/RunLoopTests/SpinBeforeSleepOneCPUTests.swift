import Sync
import TestSupport
import Testing
import Threads

@testable import RunLoop

/// The watch before a short futex sleep pauses when a partner on the loop's own CPU answers
/// only through the watch's yields (there a futex sleep and a kernel wake-up are cheaper),
/// and resumes after a number of sleeps. Whether it watches, pauses or resumes, no wake-up
/// may be lost.
@Suite("RunLoop: the watch before a short sleep with the partner on the loop's CPU", .timeLimit(.minutes(1)))
struct SpinBeforeSleepOneCPUTests {
  @Test("a ping-pong on one CPU pauses the watch, resumes it, and loses no wake-up")
  func oneCPUPingPongPausesTheWatchAndLosesNothing() throws {
    let cpu = try #require(Thread.currentCPUAffinity().first)
    var configuration = ThreadConfiguration()
    configuration.cpuAffinity = [cpu]
    let worker = try RunLoopThread.start(name: "watch-one-cpu", configuration: configuration)
    let answered = Sync.Semaphore(value: 0)
    let handled = AtomicInteger<Int>(0)
    let source = RunLoopSource(perform: {
      _ = handled.increment(ordering: .relaxed)
      answered.signal()
    })
    #expect(worker.runLoop.add(source, forMode: .default))
    // Several pause cycles (a pause begins after a few catches and lasts a few hundred
    // sleeps), each answered by a partner pinned to the loop's CPU.
    let rounds = RunLoop.watchPauseLength * 4
    let lost = AtomicInteger<Int>(0)
    let runLoop = worker.runLoop
    let partner = try Thread.spawn(name: "watch-partner", configuration: configuration) { () throws(Never) in
      for _ in 0..<rounds {
        source.signal()
        runLoop.wakeUp()
        // A bound only a lost wake-up reaches.
        if !answered.wait(timeout: .seconds(10)) {
          _ = lost.increment(ordering: .relaxed)
          return
        }
      }
    }
    partner.join()
    #expect(lost.load(ordering: .relaxed) == 0, "a signal was not handled: the loop missed its wake-up")
    #expect(handled.load(ordering: .relaxed) == rounds)
    // Read on the loop's thread, which alone writes it.
    let pauses = LockedValue(0)
    try worker.performAndWait { pauses.withLock { $0 = runLoop.watchPauseCount } }
    // Two pauses: the watch resumed after the first and paused again.
    #expect(
      pauses.withLock { $0 } >= 2, "the watch did not pause, or did not resume, with its partner on the loop's CPU")
    source.invalidate()
    worker.stop()
  }

  @Test("a loop with the watch switched off never pauses it")
  func switchedOffNeverPauses() throws {
    let cpu = try #require(Thread.currentCPUAffinity().first)
    var configuration = ThreadConfiguration()
    configuration.cpuAffinity = [cpu]
    let worker = try RunLoopThread.start(name: "watch-off-one-cpu", configuration: configuration)
    worker.runLoop.spinsBeforeSleeping = false
    let answered = Sync.Semaphore(value: 0)
    let source = RunLoopSource(perform: { answered.signal() })
    #expect(worker.runLoop.add(source, forMode: .default))
    let runLoop = worker.runLoop
    let answeredAll = AtomicBool(true)
    let partner = try Thread.spawn(name: "watch-partner", configuration: configuration) { () throws(Never) in
      for _ in 0..<200 {
        source.signal()
        runLoop.wakeUp()
        if !answered.wait(timeout: .seconds(10)) {
          answeredAll.store(false, ordering: .relaxed)
          return
        }
      }
    }
    partner.join()
    #expect(answeredAll.load(ordering: .relaxed))
    let pauses = LockedValue(-1)
    try worker.performAndWait { pauses.withLock { $0 = runLoop.watchPauseCount } }
    #expect(pauses.withLock { $0 } == 0)
    source.invalidate()
    worker.stop()
  }
}
