import ProcessTestSupport
import Sync
import TestSupport
import Testing

@testable import RunLoop

#if canImport(Glibc)
  import Glibc
#endif

/// A child made by `fork()` and the run loops and ports it inherited: its first explicit use
/// of one stops it with a message, and nothing it does disturbs the parent's. Each test runs
/// in an exit test's process, which forks the child and reports 0 when the child stopped as
/// expected and the parent was not disturbed.
// Not under ThreadSanitizer: its runtime does not support allocating in the child of a
// multithreaded fork.
@Suite(
  "fork() children and inherited run loops", .timeLimit(.minutes(3)),
  .disabled(if: isRunningUnderThreadSanitizer, "ThreadSanitizer does not support allocating in a forked child"))
struct ForkedChildTests {
  @Test("running an inherited run loop stops the child; the parent's timer still fires on time", .runsExitTests)
  func runningAnInheritedRunLoopStopsTheChild() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      blocking {
        exit(parentTimerSurvives { runLoop in _ = runLoop.run(mode: .default, timeout: .seconds(5)) })
      }
    }
    let stderr = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
    #expect(stderr.contains("run: this run loop was created by process"), "\(stderr)")
  }

  @Test(
    "adding a timer to an inherited run loop stops the child; the parent's timer still fires on time", .runsExitTests)
  func addingATimerToAnInheritedRunLoopStopsTheChild() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      blocking {
        exit(
          parentTimerSurvives { runLoop in
            runLoop.add(RunLoopTimer(after: .seconds(30)) { _ in }, forMode: .default)
          })
      }
    }
    let stderr = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
    #expect(stderr.contains("add(timer): this run loop was created by process"), "\(stderr)")
  }

  @Test("releasing inherited sources and timers in the child leaves the parent's registrations alone", .runsExitTests)
  func releasingCopiesInTheChildIsHarmless() async {
    await #expect(processExitsWith: .success) {
      blocking {
        let runLoop = RunLoop.current
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { exit(2) }
        let readable = Box(false)
        let source = FileDescriptorSource(descriptor: ends[0]) { source, _ in
          readable.value = true
          source.invalidate()
        }
        runLoop.add(source, forMode: .default)
        let timer = RunLoopTimer(after: .milliseconds(200)) { _ in }
        runLoop.add(timer, forMode: .default)
        let child = fork()
        if child == 0 {
          armAlarm(seconds: 20)
          // The child's copies go: epoll_ctl(DEL), timerfd re-arms and wake-ups would all
          // reach the parent's kernel objects.
          source.invalidate()
          timer.invalidate()
          runLoop.wakeUp()
          _exit(0)
        }
        guard child > 0, waitForExitStatus(child) == 0 else { exit(3) }
        var byte: UInt8 = 1
        guard write(ends[1], &byte, 1) == 1 else { exit(4) }
        let result = runLoop.run(mode: .default, timeout: .seconds(10))
        exit(readable.value && result == .finished ? 0 : 1)
      }
    }
  }

  @Test("sending on an inherited port stops the child", .runsExitTests)
  func sendingOnAnInheritedPortStopsTheChild() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      blocking {
        let port = Port()
        let child = fork()
        if child == 0 {
          armAlarm(seconds: 20)
          try? port.send(PortMessage(msgid: 1), timeout: .zero)
          _exit(0)  // not reported: the test fails
        }
        exit(child > 0 && waitForExitStatus(child) != 0 && port.pendingMessageCount == 0 ? 0 : 1)
      }
    }
    let stderr = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
    #expect(stderr.contains("send: this port was created by process"), "\(stderr)")
  }
}

extension ForkedChildTests {
  @Test(
    "invalidating an inherited named port in the child leaves the parent's name, files and peers alone", .runsExitTests)
  func invalidatingAnInheritedNamedPortIsHarmless() async {
    await #expect(processExitsWith: .success) {
      blocking {
        exit(
          parentPortSurvives(reply: [7], childStops: false) { local, remote in
            // Both copies go: unlinking, a shutdown of the connection or an eventfd write
            // would all reach the parent's objects.
            remote.invalidate()
            local.invalidate()
          })
      }
    }
  }

  @Test(
    "sending on an inherited remote named port stops the child; the parent's connection still works", .runsExitTests)
  func sendingOnAnInheritedNamedPortStopsTheChild() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      blocking {
        exit(
          parentPortSurvives(reply: [9], childStops: true) { _, remote in
            _ = try? remote.send(msgid: 1, sendTimeout: .seconds(1), receiveTimeout: .seconds(1), replyMode: .oneWay)
          })
      }
    }
    let stderr = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
    #expect(stderr.contains("send: this message port was created by process"), "\(stderr)")
  }
}

/// Registers a named port answering `reply` and connects a remote port to it, forks a child
/// that calls `useInChild` with the inherited pair and exits 0, then checks in the parent
/// that the child stopped (`childStops`) or exited 0, that the port's files are still there
/// and that a request over the existing connection is answered. Returns 0 when all holds;
/// everything is released before it returns (a leak check at exit must see nothing).
private func parentPortSurvives(
  reply: [UInt8], childStops: Bool, _ useInChild: (MessagePort, MessagePort) -> Void
) -> Int32 {
  let name = uniquePortName("fork")
  guard let local = try? MessagePort.local(name: name, handler: { _ in reply }),
    let remote = try? MessagePort.remote(name: name)
  else { return 2 }
  defer {
    remote.invalidate()
    local.invalidate()
  }
  let child = fork()
  if child == 0 {
    armAlarm(seconds: 20)
    useInChild(local, remote)
    _exit(0)
  }
  guard child > 0 else { return 3 }
  guard (waitForExitStatus(child) != 0) == childStops else { return 4 }
  guard let directory = try? PortDirectory.prepare(),
    portsFileMode(directory.socketPath(for: name)) != nil,
    portsFileMode(directory.lockPath(for: name)) != nil
  else { return 5 }
  let serving = Box(true)
  let server = TestThread.spawn {
    while serving.value { _ = try? local.serve(timeout: .milliseconds(20)) }
  }
  defer {
    serving.value = false
    server.join()
  }
  let answer = try? remote.send(
    msgid: 2, sendTimeout: .seconds(5), receiveTimeout: .seconds(5), replyMode: .awaitReply)
  return local.isValid && remote.isValid && answer == reply ? 0 : 1
}

/// Schedules a 300 ms one-shot timer in the calling thread's run loop, forks a child that
/// calls `useInChild` with the inherited loop (and exits 0 if that returns), then runs the
/// loop in the parent. Returns 0 when the child did not exit 0 (its use was refused) and the
/// parent's timer fired without waiting for the run's 10-second deadline.
private func parentTimerSurvives(_ useInChild: (RunLoop) -> Void) -> Int32 {
  let runLoop = RunLoop.current
  let fired = Box(false)
  runLoop.add(RunLoopTimer(after: .milliseconds(300)) { _ in fired.value = true }, forMode: .default)
  let child = fork()
  if child == 0 {
    armAlarm(seconds: 20)
    useInChild(runLoop)
    _exit(0)
  }
  guard child > 0 else { return 2 }
  let start = MonotonicInstant.now
  let result = runLoop.run(mode: .default, timeout: .seconds(10))
  let elapsed = start.duration(to: .now)
  let childStatus = waitForExitStatus(child)
  // A child that took the timer's expiration from the shared timerfd would leave the parent
  // asleep until the run's deadline.
  return childStatus != 0 && fired.value && result == .finished && elapsed < .seconds(8) ? 0 : 1
}
