import RunLoop
import Sync
import TestSupport
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Switches every detector off, then `kind` to report: an exit test's child inherits
/// THREADING_TOOLKIT_DIAGNOSTICS (CI runs the suite once with `all=stop`), and each test
/// watches one detector (the philosophers' forks are also a lock-order cycle).
private func onlyDetector(_ kind: Diagnostics.Kind) {
  for other in Diagnostics.Kind.all { Diagnostics.setMode(.off, for: other) }
  Diagnostics.setMode(.report, for: kind)
}

/// Standard error of an exit test, as text.
private func standardError(_ result: ExitTest.Result?) -> String {
  result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
}

/// The deadlock watchdog and the held-lock check of run-loop callbacks, with named toolkit
/// threads. Each test switches a process-wide detector on, so each runs as an exit test in a
/// fresh process; the child's findings go to standard error (the default handler).
@Suite("Lock diagnostics on threads and run loops", .timeLimit(.minutes(3)))
struct LockDiagnosticsRunLoopTests {
  @Test(
    "three threads in a lock cycle are found by the watchdog with their names, their waits marked timed", .runsExitTests
  )
  func watchdogFindsThreeThreadCycle() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      Diagnostics.deadlockCheckInterval = .milliseconds(20)
      onlyDetector(.deadlocks)
      let forks = (1...3).map { Condition(name: "fork \($0)") }
      let holding = Latch(count: 3)
      // Each philosopher takes its fork, then waits up to a second for its neighbour's: a
      // deadlock for that second (the watchdog needs two scans, 20 ms apart), ended by the
      // timed waits so the test finishes.
      let threads = (0..<3).map { index in
        TestThread.spawn(name: "philosopher \(index + 1)") {
          let mine = forks[index]
          let next = forks[(index + 1) % 3]
          mine.lock()
          holding.countDown()
          holding.wait()
          if next.lock(timeout: .seconds(1)) { next.unlock() }
          mine.unlock()
        }
      }
      for thread in threads { thread.join() }
    }
    let text = standardError(result)
    #expect(text.ranges(of: "threading-toolkit [deadlocks]").count == 1)
    #expect(text.contains("deadlock: 3 threads wait for each other"))
    #expect(text.contains("(some waits are timed and will give up)"))
    for index in 1...3 {
      let next = index % 3 + 1
      #expect(text.contains("\"philosopher \(index)\" (#"))
      #expect(text.contains("waits for \"fork \(next)\" (held by \"philosopher \(next)\""))
      #expect(text.contains("holds \"fork \(index)\""))
    }
    #expect(text.contains(", timed: gives up in "))
  }

  @Test(
    "a timer callback that returns holding a lock it took is reported naming the timer and the lock", .runsExitTests)
  func callbackReturningWithLockHeld() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      onlyDetector(.heldLockInCallback)
      let sessions = Condition(name: "session table")
      let other = Condition(name: "tidy lock")
      runOnThread(named: "held-lock-loop") {
        let runLoop = RunLoop.current
        // Takes and releases a lock: nothing to report.
        runLoop.add(RunLoopTimer(after: .zero, name: "tidy timer") { _ in other.withLock {} }, forMode: .default)
        // Takes the lock and returns without releasing it.
        runLoop.add(
          RunLoopTimer(after: .milliseconds(1), name: "leaky timer") { _ in sessions.lock() },
          forMode: .default)
        runLoop.add(
          RunLoopTimer(after: .milliseconds(5), name: "stopper") { _ in
            sessions.unlock()
            runLoop.stop()
          }, forMode: .default)
        _ = runLoop.run(mode: .default, timeout: .seconds(20))
      }
    }
    let text = standardError(result)
    #expect(text.ranges(of: "threading-toolkit [held-lock-in-callback]").count == 1)
    #expect(
      text.contains(
        "timer \"leaky timer\" returned holding lock \"session table\" on run loop of thread \"held-lock-loop\""))
    #expect(!text.contains("tidy"))
  }
}
