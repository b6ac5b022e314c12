import RunLoop
import Sync
import Testing
import Threads
import TestSupport

// The guide's Table 3-2: performing work on another thread through its run loop
// (performSelectorOnMainThread:, performSelector:onThread:, performSelector:afterDelay:,
// cancelPreviousPerformRequestsWithTarget:).

/// A worker thread that runs its run loop until asked to stop.
private final class PerformExampleWorker: Sendable {
  let handle: JoinableThread<Void, Never>
  private let runLoopBox: Box<RunLoop?>
  private let stopFlag: Box<Bool>

  init() throws {
    let runLoopBox = Box<RunLoop?>(nil)
    let stopFlag = Box(false)
    handle = try Thread.spawn(name: "perform-example-worker") { () throws(Never) in
      runLoopBox.value = RunLoop.current
      // Something in the mode, so runs wait for requests instead of returning finished.
      RunLoop.current.add(RunLoopSource(perform: {}), forMode: .default)
      let giveUp = MonotonicInstant.after(.seconds(60))
      while !stopFlag.value && !giveUp.hasPassed {
        _ = RunLoop.current.run(mode: .default, before: giveUp, returnAfterSourceHandled: true)
      }
    }
    self.runLoopBox = runLoopBox
    self.stopFlag = stopFlag
    waitUntil { runLoopBox.value != nil }
  }

  var thread: Thread { handle.thread }

  /// Ends the worker's loop. Sent as a request rather than `stop()` from outside: a stop
  /// that arrives between two runs would be lost, a queued request never is.
  func stop() {
    runLoopBox.value?.perform(waitUntilDone: false) { [stopFlag] in
      stopFlag.value = true
      RunLoop.current.stop()
    }
    handle.join()
  }
}

@Suite("Perform requests (Table 3-2)", .timeLimit(.minutes(2)))
struct PerformRequestExampleTests {
  @Test("performSelectorOnMainThread: workers hand results to the coordinating thread")
  func performOnMain() throws {
    // The test runner owns the process's main thread and never runs its run loop, so a
    // coordinator thread stands in for it (RunLoop.performOnMain is perform(on:) aimed at
    // RunLoop.main). What the real main thread would see is checked first: a deadline turns
    // "the main thread is not running its loop" into an error, never a hang.
    #expect(throws: PerformError.timedOut) {
      try RunLoop.performOnMain(waitUntilDoneBefore: .after(.milliseconds(20))) {}
    }
    let coordinator = try PerformExampleWorker()
    let log = Recorder<String>()
    let workers = try (0..<3).map { index in
      try Thread.spawn { () throws(Never) in
        let result = "result \(index)"
        do {
          try RunLoop.perform(on: coordinator.thread, waitUntilDone: true) {
            log.append("\(result) handled on \(Thread.current.name ?? "?")")
          }
        } catch {
          log.append("\(error)")
        }
      }
    }
    for worker in workers { worker.join() }
    coordinator.stop()
    #expect(Set(log.snapshot) == Set((0..<3).map { "result \($0) handled on perform-example-worker" }))
  }

  @Test("performSelectorOnMainThread: with the real main thread of a process (Examples/PerformOnMain)")
  func performOnTheRealMainThread() throws {
    let run = try #require(
      runExampleProgram("PerformOnMainExample"),
      "the PerformOnMainExample program is built beside the tests (swift build --build-tests)")
    #expect(run.status == 0, "the program reports what went wrong in its output: \(run.output)")
    #expect(
      run.output.split(separator: "\n") == [
        "result 1 handled on the main thread: true",
        "result 2 handled on the main thread: true",
        "result 3 handled on the main thread: true",
        "stop requested",
      ])
  }

  @Test("performSelector:onThread: with and without waiting")
  func performOnThread() throws {
    let worker = try PerformExampleWorker()
    defer { worker.stop() }
    let log = Recorder<String>()
    for index in 0..<3 {
      try RunLoop.perform(on: worker.thread, waitUntilDone: false) {
        log.append("queued \(index) on \(Thread.current.name ?? "?")")
      }
    }
    try RunLoop.perform(on: worker.thread, waitUntilDone: true) { log.append("waited") }
    // Requests run in the order made; the waiting one ran before the call returned.
    #expect(log.snapshot == [
      "queued 0 on perform-example-worker", "queued 1 on perform-example-worker",
      "queued 2 on perform-example-worker", "waited",
    ])
    // A deadline turns "the target is busy" into an error instead of a hang.
    let busy = Box(false)
    try RunLoop.perform(on: worker.thread, waitUntilDone: false) {
      busy.value = true
      waitUntil { !busy.value }
    }
    waitUntil { busy.value }
    #expect(throws: PerformError.timedOut) {
      try RunLoop.perform(on: worker.thread, waitUntilDoneBefore: .after(.milliseconds(20))) { log.append("withdrawn") }
    }
    busy.value = false
    try RunLoop.perform(on: worker.thread, waitUntilDone: true) {}
    #expect(!log.snapshot.contains("withdrawn"))
  }

  @Test("performSelector:afterDelay: and cancelPreviousPerformRequestsWithTarget:")
  func afterDelay() {
    final class Redrawer: Sendable {
      let log = Recorder<String>()
      /// Coalesces redraw requests: each new one cancels the pending one.
      func setNeedsRedraw(_ reason: String) {
        RunLoop.current.cancelPerformRequests(target: self, action: "redraw", argument: nil)
        RunLoop.current.perform(afterDelay: .milliseconds(20), target: self, action: "redraw") { [self] in
          log.append("redraw after \(reason)")
        }
      }
    }
    let view = Redrawer()
    let start = MonotonicInstant.now
    view.setNeedsRedraw("a")
    view.setNeedsRedraw("b")
    view.setNeedsRedraw("c")
    RunLoop.current.perform(afterDelay: .milliseconds(10), target: view, action: "other") { view.log.append("other") }
    portExampleRunUntil { view.log.count == 2 }
    #expect(view.log.snapshot == ["other", "redraw after c"], "only the last redraw request ran")
    #expect(MonotonicInstant.now - start >= .milliseconds(20))
    RunLoop.current.perform(afterDelay: .milliseconds(5), target: view, action: "late") { view.log.append("late") }
    RunLoop.current.cancelPerformRequests(target: view)
    #expect(RunLoop.current.run(mode: .default, timeout: .milliseconds(30)) == .finished)
    #expect(!view.log.snapshot.contains("late"))
  }
}
