import ProcessTestSupport
import Sync
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Standard error of an exit test, as text.
private func standardError(_ result: ExitTest.Result?) -> String {
  result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
}

/// Spawns a thread or ends the process with status 3 (exit-test bodies).
private func spawnOrExit(_ name: String, _ body: @escaping @Sendable () -> Void) -> JoinableThread<Void, Never> {
  do {
    return try Thread.spawn(name: name, body)
  } catch {
    exit(3)
  }
}

/// Spawns a thread running `body` and joins it (a synchronous function, so that a task can
/// call the `noasync` join on purpose).
private func spawnAndJoin(_ name: String, _ body: @escaping @Sendable () -> Void) {
  spawnOrExit(name, body).join()
}

/// Exit-test body: "joiner" holds "first" and joins "joined"; "joined" waits for "second",
/// held by "holder"; "holder" waits for "first". Only the join closes the cycle. The
/// watchdog (stop mode) ends the process; a missed deadlock ends it with status 0.
private func joinCycleScenario() {
  Diagnostics.deadlockCheckInterval = .milliseconds(20)
  for kind in Diagnostics.Kind.all { Diagnostics.setMode(.off, for: kind) }
  Diagnostics.setMode(.stop, for: .deadlocks)
  let first = Lock(name: "first")
  let second = Lock(name: "second")
  let secondTaken = Latch(count: 1)
  // "joiner" holds "first" and joins "joined"; "joined" waits for "second", held by
  // "holder"; "holder" waits for "first". Only the join closes the cycle.
  let joiner = spawnOrExit("joiner") {
    first.lock()
    let holder = spawnOrExit("holder") {
      second.lock()
      secondTaken.countDown()
      first.lock()
    }
    secondTaken.wait()
    let joined = spawnOrExit("joined") { second.lock() }
    joined.join()
    holder.detach()
  }
  joiner.detach()
  // The watchdog stops the process within a few check intervals; a missed deadlock
  // ends it with status 0, failing the expectation.
  _ = Semaphore().wait(timeout: .seconds(10))
  exit(0)
}

/// Exit-test body: a worker waits for a lock the main thread holds while the main thread
/// joins another thread that ends: waits, no cycle.
private func plainJoinScenario() {
  Diagnostics.deadlockCheckInterval = .milliseconds(5)
  for kind in Diagnostics.Kind.all { Diagnostics.setMode(.off, for: kind) }
  Diagnostics.setMode(.stop, for: .deadlocks)
  let lock = Lock(name: "shared")
  let worker = spawnOrExit("worker") {
    // Waits for the joiner's lock while the joiner is in join: a wait, not a cycle.
    lock.withLock {}
  }
  lock.lock()
  let unlocker = spawnOrExit("unlocker") {
    _ = Semaphore().wait(timeout: .milliseconds(50))
  }
  unlocker.join()
  lock.unlock()
  worker.join()
}

/// Joins in the ``Diagnostics/Kind/deadlocks`` watchdog's wait-for graph: a thread blocked in
/// `JoinableThread.join()` waits for the thread it joins. Each test switches a process-wide
/// detector on, so each runs as an exit test in a fresh process; findings go to standard
/// error.
@Suite("Join diagnostics", .timeLimit(.minutes(3)))
struct JoinDiagnosticsTests {
  @Test(
    "the watchdog finds three threads in a cycle whose one edge is a join, naming the joined thread", .runsExitTests)
  func joinClosesADeadlockCycle() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      joinCycleScenario()
    }
    let text = standardError(result)
    #expect(text.contains("threading-toolkit [deadlocks]"))
    #expect(text.contains("deadlock: 3 threads wait for each other"))
    #expect(text.contains("\"joiner\""))
    #expect(text.contains("joins thread \"joined\""))
    #expect(text.contains("\"joined\"") && text.contains("waits for \"second\" (held by \"holder\""))
    #expect(text.contains("waits for \"first\" (held by \"joiner\""))
  }

  @Test("a join of a thread that ends reports nothing, with the watchdog on", .runsExitTests)
  func plainJoinReportsNothing() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      plainJoinScenario()
    }
    #expect(!standardError(result).contains("[deadlocks]"))
  }

  @Test("a task joining a thread longer than the threshold is reported once, naming the thread", .runsExitTests)
  func taskJoiningAThreadIsReported() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      Diagnostics.blockingInTaskThreshold = .milliseconds(20)
      let reported = Semaphore()
      Diagnostics.reportHandler = { finding in
        Diagnostics.standardErrorHandler(finding)
        if finding.kind == .blockingInTask { reported.signal() }
      }
      for kind in Diagnostics.Kind.all { Diagnostics.setMode(.off, for: kind) }
      Diagnostics.setMode(.report, for: .blockingInTask)
      // The joined thread ends once the join was reported (after 10 s: a missed report). The
      // task is awaited, not waited for: this exit test's own task must not block.
      await Task.detached {
        spawnAndJoin("worker") { _ = reported.wait(timeout: .seconds(10)) }
      }.value
    }
    let text = standardError(result)
    #expect(text.ranges(of: "threading-toolkit [blocking-in-task]").count == 1)
    #expect(text.contains("waiting for the end of thread \"worker\""))
  }
}
