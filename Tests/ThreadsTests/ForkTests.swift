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
@Suite("fork() children", .timeLimit(.minutes(3)))
struct ForkTests {
  @Test("exit() in a child forked while a finishBeforeExit thread runs does not wait for it", .runsExitTests)
  func childExitDoesNotWaitForParentsCriticalThreads() async {
    await #expect(processExitsWith: .success) {
      exit(forkWhileACriticalThreadRuns() == 0 ? 0 : 1)
    }
  }

  @Test("Thread.main.name set on the main thread before anything asked for Thread.current", .runsExitTests)
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

  @Test(
    "in a child forked from a toolkit thread, the parent's main thread is gone and the forking thread has the child's id",
    .runsExitTests
  )
  func childForkedFromASecondaryThread() async {
    await #expect(processExitsWith: .success) {
      exit(forkFromAToolkitThread() == 0 ? 0 : 1)
    }
  }

  @Test(
    "in a forked child, the forking thread's kernelThreadID is the child's pid, and Thread.main still runs there",
    .runsExitTests)
  func forkingThreadReportsTheChildsID() async {
    await #expect(processExitsWith: .success) {
      // Thread.main made before the fork; the forking thread is the main thread or one never
      // seen by the toolkit, so either way it is Thread.main in the child.
      _ = Thread.main.kernelThreadID
      exit(
        inForkedChild { () -> Int32 in
          let current = Thread.current
          var failures: Int32 = 0
          if current !== Thread.main { failures |= 1 }
          if current.kernelThreadID != getpid() { failures |= 2 }
          if !Thread.main.isExecuting || Thread.main.isFinished { failures |= 4 }
          return failures
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

/// Makes `Thread.main`, then forks from a toolkit thread; the child checks what the parent's
/// main thread and the forking thread report there. Returns the child's wait status.
func forkFromAToolkitThread() -> Int32 {
  let main = Thread.main
  _ = main.kernelThreadID
  guard
    let worker = try? Thread.spawn({ () -> Int32 in
      let forking = Thread.current
      return inForkedChild { () -> Int32 in
        var failures: Int32 = 0
        if main.isExecuting { failures |= 1 }
        if !main.isFinished { failures |= 2 }
        if main.kernelThreadID != nil { failures |= 4 }
        if forking.kernelThreadID != getpid() { failures |= 8 }
        if !forking.isExecuting || Thread.current !== forking { failures |= 16 }
        return failures
      }
    })
  else { return -1 }
  return worker.join()
}
