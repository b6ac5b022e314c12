import ProcessTestSupport
import Sync
import TestSupport
import Testing
import Threads

@testable import RunLoop

#if canImport(Glibc)
  import Glibc
#endif

// Audit round 6: environment failures under resource limits, for the RunLoop module. Each
// scenario lowers a limit for the whole process, so it runs in a child forked from an exit
// test's child (`runScenarioInForkedChild`), where only the forking thread exists.

/// What a perform request threw, as text ("noRunLoop" for the documented refusal).
private func round6PerformOutcome(_ request: () throws(PerformError) -> Void) -> String {
  do throws(PerformError) {
    try request()
    return "queued"
  } catch {
    return error == .noRunLoop ? "noRunLoop" : "\(error)"
  }
}

@Suite("Audit round 6: RunLoop under resource limits", .timeLimit(.minutes(3)))
struct AuditRound6RunLoopResourceLimitsTests {
  /// The `on: Thread` perform requests throw ``PerformError/noRunLoop`` when the target's run
  /// loop cannot be created. The main thread's run loop is made on first use by whichever
  /// thread asks: when its descriptors are refused (`EMFILE`), a request naming the main
  /// thread throws `noRunLoop` like any thread without a run loop (the process is not
  /// stopped), `runLoop(of:)` answers nil, and nothing is left open; once descriptors are
  /// free, the main run loop is made and the requests queue on it.
  @Test(
    .disabled(
      if: isRunningUnderSanitizer,
      "a sanitizer's runtime cannot start threads in a child forked from a multithreaded process: ThreadSanitizer refuses, and AddressSanitizer's thread registry can be copied locked (another thread of the exit test's child starting or ending a thread), which can hang the child"
    ), .runsExitTests)
  func requestsToAMainThreadWhoseRunLoopCannotBeMadeThrowNoRunLoop() async {
    await #expect(processExitsWith: .success) {
      runScenarioInForkedChild("perform on the main thread without descriptors") {
        blocking {
          TestThread.run {
            for free in 0..<3 {
              let before = ProcessFootprint()
              let outcomes: [String] = withFreeDescriptorCount(free) {
                [
                  round6PerformOutcome { () throws(PerformError) in try RunLoop.perform(on: Thread.main) {} },
                  round6PerformOutcome { () throws(PerformError) in try RunLoop.performAndWakeUp(on: Thread.main) {} },
                  round6PerformOutcome { () throws(PerformError) in
                    try RunLoop.performAndWait(on: Thread.main, timeout: .milliseconds(1)) {}
                  },
                  RunLoop.runLoop(of: Thread.main) == nil ? "noRunLoop" : "made",
                ]
              }
              precondition(
                outcomes == Array(repeating: "noRunLoop", count: 4), "with \(free) free descriptors: \(outcomes)")
              before.expectBack("refused requests to the main thread with \(free) free descriptors")
            }
            // Descriptors are free again: the main run loop is made and takes requests.
            let main = RunLoop.runLoop(of: Thread.main)
            precondition(main != nil && main === RunLoop.main)
            precondition(
              round6PerformOutcome { () throws(PerformError) in try RunLoop.perform(on: Thread.main) {} } == "queued")
          }
        }
      }
    }
  }

  /// A named port served by a run loop, out of descriptors when a client connects: the failed
  /// `accept` is reported once, the loop keeps running (it does not spin on the pending
  /// connection), and once descriptors are free again the client is accepted and answered.
  @Test(
    .disabled(
      if: isRunningUnderSanitizer,
      "a sanitizer's runtime cannot start threads in a child forked from a multithreaded process: ThreadSanitizer refuses, and AddressSanitizer's thread registry can be copied locked (another thread of the exit test's child starting or ending a thread), which can hang the child"
    ), .runsExitTests)
  func aPortServedByARunLoopAcceptsAgainOnceDescriptorsAreFree() async {
    await #expect(processExitsWith: .success) {
      runScenarioInForkedChild("a run-loop port out of descriptors") {
        blocking {
          let name = uniquePortName("round6-loop-emfile")
          let port = try! MessagePort.local(name: name) { message in [UInt8(truncatingIfNeeded: message.msgid)] }
          let reports = Recorder<String>()
          port.setPeerRejectionHandler { reports.append($0) }
          let serving = try! RunLoopThread.start(name: "round6-port")
          precondition(serving.runLoop.add(port, forMode: .default))
          let passes = AtomicInteger<Int>(0)
          let observer = RunLoopObserver(activities: .beforeWaiting, repeats: true) { _, _ in
            passes.fetchAdd(1, ordering: .relaxed)
          }
          serving.runLoop.add(observer, forMode: .default)
          // One descriptor free: the client's socket takes it, the port's accept finds none.
          let (remote, reported, passesWhileOut): (MessagePort?, Bool, Int) = withFreeDescriptorCount(1) {
            let remote = try? MessagePort.remote(name: name, connectTimeout: .seconds(10))
            let giveUp = MonotonicInstant.after(.seconds(10))
            while reports.count == 0 && !giveUp.hasPassed { sched_yield() }
            let start = passes.load(ordering: .relaxed)
            // 300 ms out of descriptors: a loop spinning on the pending connection would
            // make thousands of passes; a paused listener wakes for its back-off only.
            let until = MonotonicInstant.after(.milliseconds(300))
            while !until.hasPassed { sched_yield() }
            return (remote, reports.count == 1, passes.load(ordering: .relaxed) - start)
          }
          precondition(remote != nil, "the client could not connect")
          precondition(reported, "reports while out of descriptors: \(reports.snapshot)")
          precondition(reports.snapshot.first?.contains("accept failed") == true, "\(reports.snapshot)")
          precondition(passesWhileOut < 50, "the loop made \(passesWhileOut) passes in 300 ms out of descriptors")
          let reply = try! remote!.send(
            msgid: 9, sendTimeout: .seconds(10), receiveTimeout: .seconds(20), replyMode: .awaitReply)
          precondition(reply == [9], "reply \(String(describing: reply))")
          remote!.invalidate()
          observer.invalidate()
          port.invalidate()
          serving.stop()
        }
      }
    }
  }
}
