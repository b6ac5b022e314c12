import Glibc
@testable import RunLoop
import Sync
import Testing
import Threads
import TestSupport

/// A worker thread running its run loop in the default mode until told to stop.
final class PortsLoopThread: @unchecked Sendable {
  let thread: TestThread
  private let published = Box<RunLoop?>(nil)
  private let threadObject = Box<Thread?>(nil)
  private let done = Box(false)

  init() {
    let published = published
    let threadObject = threadObject
    let done = done
    thread = TestThread.spawn {
      let runLoop = RunLoop.current
      // Keeps the default mode non-empty so runs wait instead of finishing.
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)
      threadObject.value = Thread.current
      published.value = runLoop
      let giveUp = MonotonicInstant.after(.seconds(120))
      while !done.value && !giveUp.hasPassed {
        _ = runLoop.run(mode: .default, before: giveUp)
      }
    }
    waitUntil { published.value != nil }
  }

  var runLoop: RunLoop { published.value! }
  var toolkitThread: Thread { threadObject.value! }

  /// Ends the worker's loop through a request: a `stop()` that arrives between two runs
  /// would be lost, a queued request never is.
  func stop() {
    runLoop.perform(waitUntilDone: false) { [done] in
      done.value = true
      RunLoop.current.stop()
    }
    thread.join()
  }
}

@Suite("Ports: perform requests", .timeLimit(.minutes(2)))
struct PortsPerformTests {
  @Test("perform on another thread, waiting until done: runs there, before the call returns")
  func waitUntilDone() throws {
    let worker = PortsLoopThread()
    defer { worker.stop() }
    let ranOn = Box<UInt64?>(nil)
    try RunLoop.perform(on: worker.toolkitThread, waitUntilDone: true) { ranOn.value = Thread.current.id }
    #expect(ranOn.value == worker.toolkitThread.id)
    let again = Box(0)
    worker.runLoop.perform(waitUntilDone: true) { again.value = 7 }
    #expect(again.value == 7)
  }

  @Test("requests without waiting run later, in the order made, all of them")
  func fifo() throws {
    let worker = PortsLoopThread()
    defer { worker.stop() }
    let order = Recorder<Int>()
    for index in 0..<100 {
      try RunLoop.perform(on: worker.toolkitThread, waitUntilDone: false) { order.append(index) }
    }
    worker.runLoop.perform(waitUntilDone: true) {}
    #expect(order.snapshot == Array(0..<100))
  }

  @Test("waiting on your own run loop runs the block at once")
  func onSelf() throws {
    let ran = Box(false)
    RunLoop.current.perform(waitUntilDone: true) { ran.value = true }
    #expect(ran.value)
    try RunLoop.perform(on: Thread.current, waitUntilDone: true) { ran.value = false }
    #expect(!ran.value)
  }

  @Test("a thread whose loop does not run: the deadline variant times out, and the request is withdrawn")
  func notRunning() throws {
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
      try published.value!.perform(waitUntilDoneBefore: start + .milliseconds(40)) { ran.value = true }
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
        try runLoop.perform(waitUntilDoneBefore: .after(.microseconds(50))) { _ = ran.increment(ordering: .relaxed) }
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

  @Test("a thread that ends with a request queued: the waiter learns it, never hangs")
  func targetExits() {
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
      do {
        try runLoop.perform(waitUntilDoneBefore: .after(.seconds(60))) {}
      } catch {
        outcome.value = error as? PerformError
      }
    }
    worker.join()
    waiter.join()
    #expect(outcome.value == .targetExited)
  }

  @Test("a thread without a run loop is refused")
  func noRunLoop() {
    let threadBox = Box<Thread?>(nil)
    let gate = Box(false)
    let worker = TestThread.spawn {
      threadBox.value = Thread.current
      waitUntil { gate.value }
    }
    waitUntil { threadBox.value != nil }
    #expect(throws: PerformError.noRunLoop) {
      try RunLoop.perform(on: threadBox.value!, waitUntilDone: true) {}
    }
    #expect(RunLoop.runLoop(of: threadBox.value!) == nil)
    gate.value = true
    worker.join()
  }

  @Test("perform after a delay: never early; cancellation by target, and by target, action and argument")
  func afterDelay() {
    final class Target: Sendable {}
    let runLoop = RunLoop.current
    let target = Target()
    let other = Target()
    let fired = Recorder<String>()
    let start = MonotonicInstant.now
    let firedAt = Box<MonotonicInstant?>(nil)
    runLoop.perform(afterDelay: .milliseconds(30), target: target, action: "a", argument: 1) { fired.append("a1") }
    runLoop.perform(afterDelay: .milliseconds(30), target: target, action: "a", argument: 2) { fired.append("a2") }
    runLoop.perform(afterDelay: .milliseconds(30), target: target, action: "b") { fired.append("b") }
    runLoop.perform(afterDelay: .milliseconds(30), target: other, action: "a", argument: 1) {
      fired.append("other")
      firedAt.value = .now
    }
    runLoop.cancelPerformRequests(target: target, action: "a", argument: 1)
    runLoop.perform(afterDelay: .milliseconds(10), target: target) { fired.append("plain") }
    runLoop.cancelPerformRequests(target: target, action: "b", argument: nil)
    let giveUp = MonotonicInstant.after(.seconds(60))
    while fired.count < 3 && !giveUp.hasPassed {
      _ = runLoop.run(mode: .default, before: giveUp, returnAfterSourceHandled: true)
    }
    #expect(Set(fired.snapshot) == ["a2", "other", "plain"])
    #expect(firedAt.value.map { $0 - start >= .milliseconds(30) } == true, "never early")
    // Cancelling by target alone.
    runLoop.perform(afterDelay: .milliseconds(5), target: target) { fired.append("late") }
    runLoop.cancelPerformRequests(target: target)
    #expect(runLoop.run(mode: .default, timeout: .milliseconds(20)) == .finished || fired.count == 3)
    #expect(!fired.snapshot.contains("late"))
  }
}
