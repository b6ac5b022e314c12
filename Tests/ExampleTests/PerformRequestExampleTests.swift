import RunLoop
import Sync
import TestSupport
import Testing
import Threads

// The guide's Table 3-2: performing work on another thread through its run loop
// (performSelectorOnMainThread:, performSelector:onThread:, performSelector:afterDelay:,
// cancelPreviousPerformRequestsWithTarget:).

@Suite("Perform requests (Table 3-2)", .timeLimit(.minutes(3)))
struct PerformRequestExampleTests {
  @Test("performSelectorOnMainThread: workers hand results to the coordinating thread")
  func performOnMain() throws {
    // The test runner owns the process's main thread and never runs its run loop, so a
    // coordinator thread stands in for it (the main thread is RunLoop.main's thread, asked
    // the same way). What the real main thread would see is checked first: a time limit
    // turns "the main thread is not running its loop" into an error, never a hang.
    #expect(throws: PerformError.timedOut) {
      try RunLoop.main.performAndWait(timeout: .milliseconds(20)) {}
    }
    let coordinator = try RunLoopThread.start(name: "perform-example-worker")
    let coordinatorThread = coordinator.thread
    let log = Recorder<String>()
    let workers = (0..<3).map { index in
      TestThread.spawn {
        let result = "result \(index)"
        do {
          try RunLoop.performAndWait(on: coordinatorThread) {
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
    let worker = try RunLoopThread.start(name: "perform-example-worker")
    let log = Recorder<String>()
    for index in 0..<3 {
      try RunLoop.performAndWakeUp(on: worker.thread) {
        log.append("queued \(index) on \(Thread.current.name ?? "?")")
      }
    }
    try RunLoop.performAndWait(on: worker.thread) { log.append("waited") }
    // Requests run in the order made; the waiting one ran before the call returned.
    #expect(
      log.snapshot == [
        "queued 0 on perform-example-worker", "queued 1 on perform-example-worker",
        "queued 2 on perform-example-worker", "waited",
      ])
    // A time limit turns "the target is busy" into an error instead of a hang.
    let busy = Box(false)
    try RunLoop.performAndWakeUp(on: worker.thread) {
      busy.value = true
      waitUntil { !busy.value }
    }
    waitUntil { busy.value }
    #expect(throws: PerformError.timedOut) {
      try RunLoop.performAndWait(on: worker.thread, timeout: .milliseconds(20)) { log.append("withdrawn") }
    }
    busy.value = false
    try RunLoop.performAndWait(on: worker.thread) {}
    #expect(!log.snapshot.contains("withdrawn"))
    worker.stop()
  }

  @Test("performSelector:afterDelay:, cancelled through the request's handle")
  func afterDelay() {
    final class Redrawer: Sendable {
      let log = Recorder<String>()
      let pending = Box<DelayedPerform?>(nil)
      /// Coalesces redraw requests: each new one cancels the pending one.
      func setNeedsRedraw(_ reason: String) {
        pending.value?.cancel()
        pending.value = RunLoop.current.perform(afterDelay: .milliseconds(20)) { [self] in
          log.append("redraw after \(reason)")
        }
      }
    }
    let view = Redrawer()
    let start = MonotonicInstant.now
    view.setNeedsRedraw("a")
    view.setNeedsRedraw("b")
    view.setNeedsRedraw("c")
    RunLoop.current.perform(afterDelay: .milliseconds(10)) { view.log.append("other") }
    portExampleRunUntil { view.log.count == 2 }
    #expect(view.log.snapshot == ["other", "redraw after c"], "only the last redraw request ran")
    #expect(MonotonicInstant.now - start >= .milliseconds(20))
    let late = RunLoop.current.perform(afterDelay: .milliseconds(5)) { view.log.append("late") }
    late.cancel()
    #expect(RunLoop.current.run(mode: .default, timeout: .milliseconds(30)) == .finished)
    #expect(!view.log.snapshot.contains("late"))
  }
}
