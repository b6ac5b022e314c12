import ProcessTestSupport
import Sync
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

// Audit round 6: environment failures of thread starts, in a child forked from an exit
// test's child (`runScenarioInForkedChild`), where only the forking thread exists, so giving
// up root there touches no thread of the test runtime.

@Suite("Audit round 6: thread starts refused by the environment", .timeLimit(.minutes(3)))
struct AuditRound6ThreadsResourceLimitsTests {
  /// A thread the process must wait for at exit (`finishBeforeExit`) whose raised priority
  /// the kernel refuses (`setpriority` `EACCES` without `CAP_SYS_NICE`, the new thread ends
  /// without running its body): the start throws, joinable or detached, the body never
  /// runs, no thread is left, and the refused thread is not counted, so `exit()` ends the
  /// process at once instead of waiting for it.
  @Test(
    .disabled(
      if: isRunningUnderSanitizer,
      "a sanitizer's runtime cannot start threads in a child forked from a multithreaded process: ThreadSanitizer refuses, and AddressSanitizer's thread registry can be copied locked (another thread of the exit test's child starting or ending a thread), which can hang the child"
    ), .runsExitTests)
  func criticalThreadsRefusedTheirPriorityAreNotWaitedForAtExit() async {
    await #expect(processExitsWith: .success) {
      runScenarioInForkedChild("critical threads refused their priority") {
        dropRoot()
        var configuration = ThreadConfiguration()
        configuration.finishBeforeExit = true
        configuration.relativePriority = 1.0  // nice -20: above the creator's
        let ran = AtomicBool(false)
        let before = ProcessFootprint()
        var outcomes: [String] = []
        for detached in [false, true] {
          do throws(ThreadStartError) {
            if detached {
              try Thread.detach(configuration: configuration) { ran.store(true, ordering: .releasing) }
            } else {
              try Thread.spawn(configuration: configuration) { ran.store(true, ordering: .releasing) }.join()
            }
            outcomes.append("started")
          } catch {
            let refused = error == .system(SystemCallError(call: "setpriority", code: .permissionDenied))
            outcomes.append(refused ? "EACCES" : "\(error)")
          }
        }
        precondition(outcomes == ["EACCES", "EACCES"], "starts: \(outcomes)")
        precondition(!ran.load(ordering: .acquiring), "a refused thread ran its body")
        before.expectBack("refused critical threads")
        // A count left behind would make exit() wait for ever (until the alarm).
        exit(0)
      }
    }
  }
}
