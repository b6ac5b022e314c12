import Glibc
import Sync
import TestSupport
import Testing
import Threads

@testable import RunLoop

@Suite("Ports: perform requests", .timeLimit(.minutes(3)))
struct PortsPerformTests {
  @Test("performAndWait on another thread: runs there, before the call returns")
  func performAndWaitRunsOnTheTargetBeforeReturning() throws {
    let worker = try RunLoopThread.start()  // stopped and joined at the end of the scope
    let ranOn = Box<UInt64?>(nil)
    try RunLoop.performAndWait(on: worker.thread) { ranOn.value = Thread.current.id }
    #expect(ranOn.value == worker.thread.id)
    let again = Box(0)
    try worker.runLoop.performAndWait { again.value = 7 }
    #expect(again.value == 7)
    try worker.runLoop.performAndWait(timeout: .seconds(60)) { again.value = 8 }
    #expect(again.value == 8)
    try RunLoop.performAndWait(on: worker.thread, timeout: .seconds(60)) { again.value = 9 }
    #expect(again.value == 9)
  }

  @Test("performAndWakeUp requests run later, in the order made, all of them")
  func performAndWakeUpRunsInOrder() throws {
    let worker = try RunLoopThread.start()  // stopped and joined at the end of the scope
    let order = Recorder<Int>()
    for index in 0..<100 {
      if index.isMultiple(of: 2) {
        try RunLoop.performAndWakeUp(on: worker.thread) { order.append(index) }
      } else {
        worker.runLoop.performAndWakeUp { order.append(index) }
      }
    }
    try worker.performAndWait {}
    #expect(order.snapshot == Array(0..<100))
  }

  @Test("perform(on:) queues without waking: a sleeping loop runs it only at its next pass")
  func performOnThreadDoesNotWakeTheLoop() throws {
    let worker = try RunLoopThread.start()  // stopped and joined at the end of the scope
    let log = Recorder<String>()
    waitUntil { worker.runLoop.isWaiting }
    try RunLoop.perform(on: worker.thread) { log.append("queued") }
    // Still asleep with the block queued: nothing woke it.
    #expect(worker.runLoop.isWaiting)
    #expect(log.snapshot.isEmpty)
    worker.runLoop.wakeUp()
    waitUntil { log.count == 1 }
    #expect(log.snapshot == ["queued"])
  }

  @Test("waiting on your own run loop runs the block at once")
  func performAndWaitOnSelfRunsAtOnce() throws {
    let ran = Box(false)
    try RunLoop.current.performAndWait { ran.value = true }
    #expect(ran.value)
    try RunLoop.performAndWait(on: Thread.current) { ran.value = false }
    #expect(!ran.value)
    try RunLoop.current.performAndWait(before: .distantPast) { ran.value = true }
    #expect(ran.value)
  }

  @Test("a thread whose loop does not run: the bounded variant times out, and the request is withdrawn")
  func performAndWaitTimesOutAndWithdrawsTheRequest() throws {
    let published = Box<RunLoop?>(nil)
    let release = Box(false)
    let worker = TestThread.spawn {
      published.value = RunLoop.current
      waitUntil { release.value }
      // Now run: the withdrawn request must not run.
      _ = RunLoop.current.run(mode: .default, timeout: .zero)
    }
    waitUntil { published.value != nil }
    let ran = Box(false)
    let start = MonotonicInstant.now
    #expect(throws: PerformError.timedOut) {
      try published.value!.performAndWait(before: start + .milliseconds(40)) { ran.value = true }
    }
    #expect(MonotonicInstant.now - start >= .milliseconds(40))
    release.value = true
    worker.join()
    #expect(!ran.value)
  }

  @Test("requests whose waiters gave up leave the queue: a loop that never runs does not pile them up")
  func withdrawnRequestsLeaveTheQueue() {
    let published = Box<RunLoop?>(nil)
    let release = Box(false)
    let worker = TestThread.spawn {
      published.value = RunLoop.current
      waitUntil { release.value }
    }
    waitUntil { published.value != nil }
    let runLoop = published.value!
    let ran = AtomicInteger<Int>(0)
    var timedOut = 0
    for _ in 0..<200 {
      do {
        try runLoop.performAndWait(timeout: .microseconds(50)) { _ = ran.increment(ordering: .relaxed) }
      } catch {
        if error == .timedOut { timedOut += 1 }
      }
    }
    #expect(timedOut == 200)
    #expect(runLoop.lock.withLock { runLoop.blocks.count } == 0, "every withdrawn request left the queue")
    release.value = true
    worker.join()
    #expect(ran.load(ordering: .relaxed) == 0)
  }

  @Test("a request withdrawn while a pass in another mode holds the queue leaves it too: its mode stays empty")
  func requestWithdrawnWhileAPassHoldsTheQueueLeavesIt() {
    TestThread.run {
      let runLoop = RunLoop.current
      let other = RunLoopMode("PortsPerformTests.withdrawnWhileTaken")
      let gaveUp = Box(false)
      // Holds the pass that took every queued block until the other thread has given up.
      runLoop.perform(inModes: [.default]) { waitUntil { gaveUp.value } }
      let waiter = TestThread.spawn {
        #expect(throws: PerformError.timedOut) {
          try runLoop.performAndWait(inModes: [other], timeout: .milliseconds(20)) {}
        }
        gaveUp.value = true
      }
      waitUntil { runLoop.lock.withLock { runLoop.blocks.count == 2 } }
      #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
      waiter.join()
      #expect(runLoop.lock.withLock { runLoop.blocks.isEmpty }, "the withdrawn request left the queue")
      // Nothing in `other`: a run in it has nothing to do (not one pass that times out).
      #expect(runLoop.run(mode: other, timeout: .zero) == .finished)
    }
  }

  @Test("a request withdrawn before its block is queued (an async waiter cancelled early) is never queued")
  func requestWithdrawnBeforeItIsQueuedIsRefused() {
    final class GaveUp: WithdrawableRequest {
      var isWithdrawn: Bool { true }
    }
    TestThread.run {
      let runLoop = RunLoop.current
      let other = RunLoopMode("PortsPerformTests.withdrawnBeforeQueued")
      let ran = Box(false)
      runLoop.performAndWakeUp(inModes: [other], request: GaveUp()) { ran.value = true }
      #expect(runLoop.lock.withLock { runLoop.blocks.isEmpty })
      #expect(runLoop.run(mode: other, timeout: .zero) == .finished)
      #expect(!ran.value)
    }
  }

  @Test("a thread that ends with a request queued: the unbounded waiter gets targetExited, never hangs")
  func performAndWaitThrowsTargetExited() {
    let published = Box<RunLoop?>(nil)
    let worker = TestThread.spawn {
      let runLoop = RunLoop.current
      published.value = runLoop
      waitUntil { runLoop.lock.withLock { !runLoop.blocks.isEmpty } }
      // Ends without running its loop.
    }
    waitUntil { published.value != nil }
    let outcome = Box<PerformError?>(nil)
    let runLoop = published.value!
    let waiter = TestThread.spawn {
      do throws(PerformError) {
        // Unbounded: the thread's end, not a deadline, ends the wait.
        try runLoop.performAndWait {}
      } catch {
        outcome.value = error
      }
    }
    worker.join()
    waiter.join()
    #expect(outcome.value == .targetExited)
  }

  @Test("a request that does not wait, naming the calling thread before it has a run loop, queues on its current one")
  func performOnTheCallingThreadWithoutARunLoopQueuesOnItsCurrentLoop() {
    TestThread.run {
      #expect(RunLoop.runLoop(of: Thread.current) == nil)
      let ran = Box(0)
      #expect(throws: Never.self) { try RunLoop.performAndWakeUp(on: Thread.current) { ran.value += 1 } }
      #expect(throws: Never.self) { try RunLoop.perform(on: Thread.current) { ran.value += 1 } }
      let runLoop = RunLoop.current
      #expect(RunLoop.runLoop(of: Thread.current) === runLoop)
      #expect(ran.value == 0, "queued, not run at once")
      #expect(runLoop.run(mode: .default, timeout: .seconds(10)) == .finished)
      #expect(ran.value == 2)
    }
  }

  @Test("a thread without a run loop is refused by every on: Thread request")
  func performOnAThreadWithoutARunLoopThrowsNoRunLoop() {
    let threadBox = Box<Thread?>(nil)
    let gate = Box(false)
    let worker = TestThread.spawn {
      threadBox.value = Thread.current
      waitUntil { gate.value }
    }
    waitUntil { threadBox.value != nil }
    let thread = threadBox.value!
    #expect(throws: PerformError.noRunLoop) { try RunLoop.performAndWait(on: thread) {} }
    #expect(throws: PerformError.noRunLoop) { try RunLoop.performAndWakeUp(on: thread) {} }
    #expect(throws: PerformError.noRunLoop) { try RunLoop.perform(on: thread) {} }
    #expect(RunLoop.runLoop(of: threadBox.value!) == nil)
    gate.value = true
    worker.join()
  }

  @Test("perform after a delay: never early; a cancelled request does not run")
  func performAfterDelayNeverEarlyAndCancelledByHandle() {
    let runLoop = RunLoop.current
    let fired = Recorder<String>()
    let start = MonotonicInstant.now
    let firedAt = Box<MonotonicInstant?>(nil)
    let kept = runLoop.perform(afterDelay: .milliseconds(30)) {
      fired.append("kept")
      firedAt.value = .now
    }
    let cancelled = runLoop.perform(afterDelay: .milliseconds(10)) { fired.append("cancelled") }
    #expect(kept.isPending && cancelled.isPending)
    #expect(kept.fireDate >= start + .milliseconds(30))
    cancelled.cancel()
    cancelled.cancel()  // harmless
    #expect(!cancelled.isPending)
    #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
    #expect(fired.snapshot == ["kept"])
    #expect(firedAt.value.map { $0 - start >= .milliseconds(30) } == true, "never early")
    #expect(!kept.isPending)
    kept.cancel()  // after it ran: harmless
  }

  @Test("cancelling a delayed request releases its block at once")
  func cancellingADelayedPerformReleasesTheBlock() {
    final class Capture: Sendable {
      let released: Box<Bool>
      init(_ released: Box<Bool>) { self.released = released }
      deinit { released.value = true }
    }
    let released = Box(false)
    let request: DelayedPerform
    do {
      let capture = Capture(released)
      request = RunLoop.current.perform(afterDelay: .seconds(3600)) { _ = capture }
    }
    #expect(!released.value)
    request.cancel()
    #expect(released.value)
  }
}
