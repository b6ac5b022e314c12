import ProcessTestSupport
import Testing

@testable import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Calls that must work in a child made by `fork()`, whose only thread is the process's
/// main thread (its kernel id is the child's pid). Each test runs in an exit test, which
/// forks; the grandchild arms `alarm` so a hang ends it with SIGALRM instead of hanging the
/// test, and the exit test's process reports the grandchild's wait status.
@Suite("fork() children", .timeLimit(.minutes(1)))
struct ForkTests {
  @Test("exit() in a child forked while a finishBeforeExit thread runs does not wait for it")
  func childExitDoesNotWaitForParentsCriticalThreads() async {
    await #expect(processExitsWith: .success) {
      exit(forkWhileACriticalThreadRuns() == 0 ? 0 : 1)
    }
  }

  @Test("Thread.main.name set on the main thread before anything asked for Thread.current")
  func mainThreadNamesItselfFirstThing() async {
    await #expect(processExitsWith: .success) {
      exit(
        inForkedChild { () -> Int32 in
          Thread.main.name = "renamed"
          let kernelName = try? Thread.currentKernelName()
          let named = Thread.main.name == "renamed" && kernelName == "renamed"
          return named && Thread.current === Thread.main ? 0 : 2
        } == 0 ? 0 : 1)
    }
  }
}

/// Forks; the child arms a 20-second alarm, runs `body` and leaves with `exit(body())`
/// (atexit handlers included). Returns the child's wait status (0: exited with 0).
func inForkedChild(_ body: () -> Int32) -> Int32 {
  let pid = fork()
  if pid == 0 {
    armAlarm(seconds: 20)
    exit(body())
  }
  precondition(pid > 0, "fork failed: errno \(errno)")
  return waitForChild(pid)
}

/// Starts a critical (finishBeforeExit) thread that waits to be released, forks a child that
/// calls `exit(0)` at once, then releases and joins the thread. Returns the child's status.
func forkWhileACriticalThreadRuns() -> Int32 {
  var configuration = ThreadConfiguration()
  configuration.finishBeforeExit = true
  let started = TestLatch()
  let release = TestLatch()
  guard
    let worker = try? Thread.spawn(
      configuration: configuration,
      {
        started.open()
        release.wait()
      })
  else { return -1 }
  started.wait()
  let status = inForkedChild { 0 }
  release.open()
  worker.join()
  return status
}
