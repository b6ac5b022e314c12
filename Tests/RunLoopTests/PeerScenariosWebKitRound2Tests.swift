import TestSupport
import Testing
import Threads

@testable import RunLoop
@testable import Sync

// A second round of WebKit WTF scenarios (RunLoop.cpp, WorkQueue.cpp, ThreadMessages.cpp)
// translated to the toolkit: WTF's `RunLoop::dispatch` is `performAndWakeUp`, a serial
// `WorkQueue` a `RunLoopThread`, `dispatchSync` / `callOnMainThreadAndWait` a
// `performAndWait`, and `RunLoop::Timer` a `RunLoopTimer`.

private let scale = isRunningUnderSanitizer ? 10 : 1

@Suite("WebKit WTF scenarios, round 2: messages, sync dispatch, timers", .timeLimit(.minutes(3)))
struct PeerWebKitRunLoopRound2Tests {
  @Test(
    "several threads each sending many waited-for messages to one thread: every one ran there, once (ThreadMessages)")
  func manySendersWaitForTheirMessages() throws {
    let worker = try RunLoopThread.start(name: "peer-messages")
    let thread = worker.thread
    let senders = 4
    let perSender = 1_000 / scale
    let ran = AtomicInteger<Int>(0)
    let elsewhere = AtomicInteger<Int>(0)
    let loop = worker.runLoop
    runThreads(senders) { _ in
      for _ in 0..<perSender {
        do throws(PerformError) {
          let before = ran.load(ordering: .relaxed)
          try loop.performAndWait {
            if Thread.current != thread { _ = elsewhere.increment(ordering: .relaxed) }
            _ = ran.increment(ordering: .relaxed)
          }
          // The send returns only after its block ran.
          #expect(ran.load(ordering: .relaxed) > before)
        } catch {
          Issue.record("unexpected \(error)")
        }
      }
    }
    #expect(ran.load(ordering: .relaxed) == senders * perSender)
    #expect(elsewhere.load(ordering: .relaxed) == 0)
    worker.stop()
  }

  @Test("a waited-for dispatch from a queue's own thread runs at once instead of deadlocking (dispatchSync on self)")
  func waitedDispatchFromTheQueuesOwnThreadRunsAtOnce() throws {
    let worker = try RunLoopThread.start(name: "peer-sync-self")
    let loop = worker.runLoop
    let order = Recorder<String>()
    try worker.performAndWait {
      order.append("outer-before")
      do throws(PerformError) {
        // The guide's rule, documented on the perform requests: waiting on the caller's own
        // loop runs the block at once.
        try loop.performAndWait { order.append("inner") }
      } catch {
        Issue.record("unexpected \(error)")
      }
      order.append("outer-after")
    }
    #expect(order.snapshot == ["outer-before", "inner", "outer-after"])
    worker.stop()
  }

  @Test("a dispatch queued behind waited-for dispatches runs after them, in queue order (dispatch then dispatchSync)")
  func asyncThenSyncDispatchesKeepOrder() throws {
    let worker = try RunLoopThread.start(name: "peer-order-sync")
    let order = Recorder<Int>()
    for index in 0..<(100 / scale) {
      if index % 2 == 0 {
        worker.performAndWakeUp { order.append(index) }
      } else {
        try worker.performAndWait { order.append(index) }
      }
    }
    try worker.performAndWait {}
    #expect(order.snapshot == Array(0..<(100 / scale)))
    worker.stop()
  }

  @Test("one-shot timers added out of order fire in the order of their fire dates, each once")
  func timersFireInFireDateOrder() throws {
    let worker = try RunLoopThread.start(name: "peer-timer-order")
    let order = Recorder<Int>()
    let done = Semaphore(value: 0)
    let start = MonotonicInstant.now
    let delays = [50, 10, 40, 20, 30]
    for delay in delays {
      let timer = RunLoopTimer(fireAt: start + .milliseconds(delay)) { _ in
        order.append(delay)
        if delay == 50 { done.signal() }
      }
      #expect(worker.runLoop.add(timer, forMode: .default))
    }
    #expect(done.wait(timeout: .seconds(20)))
    // Every timer has fired: the latest one last.
    try worker.performAndWait {}
    #expect(order.snapshot == delays.sorted())
    worker.stop()
  }

  @Test("a timer invalidated before the loop looked at it never fires, even past its fire date (Timer stop)")
  func timerInvalidatedBeforeTheLoopLookedNeverFires() throws {
    let worker = try RunLoopThread.start(name: "peer-timer-stop")
    let fired = AtomicInteger<Int>(0)
    let stopped = RunLoopTimer(after: .zero) { _ in _ = fired.increment(ordering: .relaxed) }
    let later = Semaphore(value: 0)
    let witness = RunLoopTimer(after: .milliseconds(10)) { _ in later.signal() }
    let loop = worker.runLoop
    let added = AtomicBool(false)
    // Added and invalidated inside one block on the loop's thread: the loop cannot look at
    // its timers in between, however late the block runs.
    try worker.performAndWait {
      added.store(loop.add(stopped, forMode: .default) && loop.add(witness, forMode: .default), ordering: .relaxed)
      stopped.invalidate()
    }
    #expect(added.load(ordering: .relaxed))
    #expect(!stopped.isValid)
    // The later timer firing shows the loop passed the stopped timer's fire date.
    #expect(later.wait(timeout: .seconds(20)))
    try worker.performAndWait {}
    #expect(fired.load(ordering: .relaxed) == 0)
    worker.stop()
  }

  @Test(
    "a repeating timer counts its firings on the loop's thread until invalidated from there (RepeatingTimer, N times)")
  func repeatingTimerFiresNTimes() throws {
    let worker = try RunLoopThread.start(name: "peer-repeat-n")
    let thread = worker.thread
    let count = AtomicInteger<Int>(0)
    let wrongThread = AtomicBool(false)
    let done = Semaphore(value: 0)
    let timer = RunLoopTimer(after: .milliseconds(1), interval: .milliseconds(2)) { timer in
      if Thread.current != thread { wrongThread.store(true, ordering: .relaxed) }
      if count.increment(ordering: .relaxed) == 5 {
        timer.invalidate()
        done.signal()
      }
    }
    #expect(worker.runLoop.add(timer, forMode: .default))
    #expect(done.wait(timeout: .seconds(20)))
    try worker.performAndWait {}
    #expect(count.load(ordering: .relaxed) == 5)
    #expect(!wrongThread.load(ordering: .relaxed))
    #expect(!timer.isValid)
    worker.stop()
  }
}
