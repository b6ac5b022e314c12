import ProcessTestSupport
import Sync
import TestSupport
import Testing
import Threads

@testable import RunLoop

#if canImport(Glibc)
  import Glibc
#endif

// Audit round 5: every blocking call of the RunLoop module, on a thread that receives
// SIGUSR1 over and over through a handler installed WITHOUT SA_RESTART (sa_flags = 0), so
// each delivery interrupts the system call the thread sleeps in (EINTR). A timed wait must
// neither return early nor report its timeout early; an untimed wait must not return before
// the event that ends it; no wake-up may be lost. Each scenario runs alone in a child
// process (an exit test): the handler is process-wide.

/// How many SIGUSR1 the handler saw. Initialized before the handler is installed (the
/// handler must not run a lazy global initializer).
let round5SignalCount = AtomicInteger<Int>(0)

/// Installs a SIGUSR1 handler without SA_RESTART that only counts.
func round5InstallInterruptingHandler() {
  _ = round5SignalCount.load(ordering: .relaxed)
  var action = sigaction()
  action.__sigaction_handler.sa_handler = { _ in _ = round5SignalCount.fetchAdd(1, ordering: .relaxed) }
  sigemptyset(&action.sa_mask)
  action.sa_flags = 0
  precondition(sigaction(SIGUSR1, &action, nil) == 0, "sigaction: errno \(errno)")
}

/// Lets SIGUSR1 through on the calling thread (the test runner's threads block it).
func round5UnblockInterrupts() {
  var set = sigset_t()
  sigemptyset(&set)
  sigaddset(&set, SIGUSR1)
  precondition(pthread_sigmask(SIG_UNBLOCK, &set, nil) == 0)
}

/// Runs `body` on a new thread that is sent SIGUSR1 about every 500 us until `body` returns.
/// When `releaseAfter` is given, `release` is called once that long after `body` started
/// (from the signalling thread), and `body` returning before it counts as an early return.
/// Checks that signals were delivered (the scenario interrupted something) and that `body`
/// did not return before its release. Call it in an exit test only.
func round5Interrupted(
  releaseAfter: Duration? = nil, release: @escaping @Sendable () -> Void = {},
  _ body: @escaping @Sendable () -> Void
) {
  round5InstallInterruptingHandler()
  let target = Box<pthread_t?>(nil)
  let done = AtomicBool(false)
  let released = AtomicBool(false)
  let returnedEarly = AtomicBool(false)
  let thread = TestThread.spawn {
    round5UnblockInterrupts()
    target.value = pthread_self()
    body()
    if releaseAfter != nil && !released.load(ordering: .acquiring) { returnedEarly.store(true, ordering: .releasing) }
    done.store(true, ordering: .releasing)
  }
  waitUntil { target.value != nil }
  let start = MonotonicInstant.now
  let first = round5SignalCount.load(ordering: .relaxed)
  while !done.load(ordering: .acquiring) {
    // The thread is joined only below, so its pthread_t stays valid.
    precondition(pthread_kill(target.value!, SIGUSR1) == 0)
    if let releaseAfter, !released.load(ordering: .relaxed), start.duration(to: .now) >= releaseAfter {
      released.store(true, ordering: .releasing)
      release()
    }
    var pause = timespec(tv_sec: 0, tv_nsec: 500_000)
    _ = nanosleep(&pause, nil)
  }
  let lasted = start.duration(to: .now)
  thread.join()
  precondition(!returnedEarly.load(ordering: .acquiring), "the untimed wait returned before its release")
  precondition(
    isRunningUnderThreadSanitizer || lasted < .milliseconds(100)
      || round5SignalCount.load(ordering: .relaxed) - first > 10,
    "too few signals were delivered: \(round5SignalCount.load(ordering: .relaxed) - first)")
}

/// Stops the child when `start` is less than `limit` before now.
func round5RequireNotEarly(_ start: MonotonicInstant, _ limit: Duration, _ what: String) {
  let elapsed = start.duration(to: .now)
  precondition(elapsed >= limit, "\(what) returned after \(elapsed), before its \(limit)")
}

@Suite("Audit round 5: RunLoop blocking calls interrupted by signals", .timeLimit(.minutes(3)))
struct AuditRound5RunLoopSignalTests {
  @Test("a run with a deadline (epoll sleep) times out at its deadline, not at the first signal", .runsExitTests)
  func aTimedRunIsNotShortenedBySignals() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        round5Interrupted {
          let runLoop = RunLoop.current
          let source = RunLoopSource {}
          runLoop.add(source, forMode: .default)
          let start = MonotonicInstant.now
          let result = runLoop.run(mode: .default, timeout: .milliseconds(300))
          precondition(result == .timedOut, "run returned \(result)")
          round5RequireNotEarly(start, .milliseconds(300), "run(timeout:)")
          source.invalidate()
        }
      }
    }
  }

  @Test(
    "a run without a deadline (futex sleep) does not return for a signal, and a signal-and-wake-up ends it",
    .runsExitTests)
  func anUntimedFutexRunIgnoresSignals() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        let source = Box<RunLoopSource?>(nil)
        let fired = AtomicInteger<Int>(0)
        round5Interrupted(releaseAfter: .milliseconds(200), release: { source.value!.signalAndWakeUp() }) {
          let runLoop = RunLoop.current
          let made = RunLoopSource { _ = fired.fetchAdd(1, ordering: .relaxed) }
          runLoop.add(made, forMode: .default)
          source.value = made
          let result = runLoop.run(mode: .default, before: .distantFuture, returnAfterSourceHandled: true)
          precondition(result == .handledSource, "run returned \(result)")
          made.invalidate()
        }
        precondition(fired.load(ordering: .relaxed) == 1)
      }
    }
  }

  @Test(
    "a run without a deadline watching a descriptor (epoll sleep) returns only once the descriptor is readable",
    .runsExitTests)
  func anUntimedEpollRunIgnoresSignals() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        var ends: [Int32] = [0, 0]
        precondition(pipe(&ends) == 0)
        let (readEnd, writeEnd) = (ends[0], ends[1])
        let events = Box<FileDescriptorSource.Events>([])
        round5Interrupted(
          releaseAfter: .milliseconds(200),
          release: {
            var byte: UInt8 = 7
            precondition(write(writeEnd, &byte, 1) == 1)
          }
        ) {
          let runLoop = RunLoop.current
          let source = FileDescriptorSource(descriptor: readEnd) { _, ready in events.value = ready }
          runLoop.add(source, forMode: .default)
          let result = runLoop.run(mode: .default, before: .distantFuture, returnAfterSourceHandled: true)
          precondition(result == .handledSource, "run returned \(result)")
          source.invalidate()
        }
        precondition(events.value.contains(.readable))
        close(readEnd)
        close(writeEnd)
      }
    }
  }

  @Test(
    "a one-shot timer of a signalled loop fires once, not before its fire date, and the run then finishes",
    .runsExitTests)
  func aTimerIsNotFiredEarlyBySignals() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        round5Interrupted {
          let runLoop = RunLoop.current
          let fireDate = MonotonicInstant.after(.milliseconds(300))
          let firings = Recorder<MonotonicInstant>()
          runLoop.add(RunLoopTimer(fireAt: fireDate) { _ in firings.append(.now) }, forMode: .default)
          let result = runLoop.run(mode: .default, before: .distantFuture)
          precondition(result == .finished, "run returned \(result)")
          precondition(firings.count == 1 && firings.snapshot[0] >= fireDate, "firings \(firings.snapshot)")
        }
      }
    }
  }

  @Test("a repeating timer of a signalled loop keeps its grid: no firing ahead of it, none doubled", .runsExitTests)
  func aRepeatingTimerKeepsItsGridUnderSignals() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        round5Interrupted {
          let runLoop = RunLoop.current
          let first = MonotonicInstant.after(.milliseconds(50))
          let firings = Recorder<MonotonicInstant>()
          let timer = RunLoopTimer(fireAt: first, interval: .milliseconds(50)) { timer in
            firings.append(.now)
            if firings.count == 6 { timer.invalidate() }
          }
          runLoop.add(timer, forMode: .default)
          let result = runLoop.run(mode: .default, before: .after(.seconds(20)))
          precondition(result == .finished, "run returned \(result)")
          let times = firings.snapshot
          precondition(times.count == 6)
          // Firing k happens at or after its grid point, and never two for one grid point.
          for (index, time) in times.enumerated() {
            let gridPoint = MonotonicInstant(nanoseconds: first.nanoseconds + Int64(index) * 50_000_000)
            precondition(time >= gridPoint, "firing \(index) at \(time), before \(gridPoint)")
          }
        }
      }
    }
  }

  @Test(
    "Port.receive(timeout:) on a signalled thread throws receiveTimeout at the deadline, not earlier", .runsExitTests)
  func aTimedReceiveIsNotShortenedBySignals() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        let port = Port()
        round5Interrupted {
          let start = MonotonicInstant.now
          do throws(PortError) {
            _ = try port.receive(timeout: .milliseconds(300))
            preconditionFailure("a message arrived from nowhere")
          } catch {
            precondition(error.status == .receiveTimeout, "receive threw \(error)")
          }
          round5RequireNotEarly(start, .milliseconds(300), "Port.receive(timeout:)")
        }
      }
    }
  }

  @Test(
    "Port.receive(before: .distantFuture) on a signalled thread returns only the message sent later", .runsExitTests)
  func anUntimedReceiveIgnoresSignals() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        let port = Port()
        let received = Box<Int32?>(nil)
        round5Interrupted(
          releaseAfter: .milliseconds(200), release: { try! port.send(PortMessage(msgid: 77), timeout: .seconds(5)) }
        ) {
          received.value = try! port.receive(before: .distantFuture).msgid
        }
        precondition(received.value == 77)
      }
    }
  }

  @Test(
    "Port.send to a full port on a signalled thread throws sendTimeout at the deadline; an untimed one waits for room",
    .runsExitTests)
  func sendsToAFullPortIgnoreSignals() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        let port = Port(capacity: 1)
        try! port.send(PortMessage(msgid: 1), timeout: .zero)
        round5Interrupted {
          let start = MonotonicInstant.now
          do throws(PortError) {
            try port.send(PortMessage(msgid: 2), timeout: .milliseconds(300))
            preconditionFailure("a full port took a message")
          } catch {
            precondition(error.status == .sendTimeout, "send threw \(error)")
          }
          round5RequireNotEarly(start, .milliseconds(300), "Port.send(timeout:)")
        }
        round5Interrupted(releaseAfter: .milliseconds(200), release: { _ = try! port.tryReceive() }) {
          try! port.send(PortMessage(msgid: 3), before: .distantFuture)
        }
        precondition(try! port.tryReceive()?.msgid == 3)
      }
    }
  }

  @Test(
    "MessagePort.serve(timeout:) on a signalled thread returns 0 at the deadline, and serves what arrives",
    .runsExitTests)
  func servingIgnoresSignals() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        let name = uniquePortName("round5-serve-signals")
        let port = try! MessagePort.local(name: name) { message in [UInt8(truncatingIfNeeded: message.msgid)] }
        round5Interrupted {
          let start = MonotonicInstant.now
          let served = try! port.serve(timeout: .milliseconds(300))
          precondition(served == 0, "served \(served)")
          round5RequireNotEarly(start, .milliseconds(300), "MessagePort.serve(timeout:)")
        }
        // The client connects and sends 200 ms into the untimed serve: it returns only then,
        // with the message handled (never 0: serve waits for messages, not connections).
        let reply = Box<[UInt8]?>(nil)
        let client = Box<TestThread?>(nil)
        let served = Box(0)
        round5Interrupted(
          releaseAfter: .milliseconds(200),
          release: {
            client.value = TestThread.spawn {
              let remote = try! remotePortEventually(name)
              reply.value = try! remote.send(
                msgid: 9, sendTimeout: .seconds(10), receiveTimeout: .seconds(30), replyMode: .awaitReply)
            }
          }
        ) {
          served.value = try! port.serve(before: .distantFuture)
        }
        precondition(served.value == 1, "serve(before: .distantFuture) returned \(served.value)")
        client.value!.join()
        precondition(reply.value == [9])
        port.invalidate()
      }
    }
  }

  @Test(
    "MessagePort.send on a signalled thread waits receiveTimeout for a late reply, and gets a reply in time",
    .runsExitTests)
  func aRequestIgnoresSignals() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        let name = uniquePortName("round5-request-signals")
        let answer = Semaphore(value: 0)
        let port = try! MessagePort.local(name: name) { message in
          if message.msgid == 1 { answer.wait() }
          return [UInt8(truncatingIfNeeded: message.msgid)]
        }
        let stopServing = AtomicBool(false)
        let server = TestThread.spawn {
          while !stopServing.load(ordering: .acquiring) { _ = try? port.serve(timeout: .milliseconds(20)) }
        }
        let remote = try! remotePortEventually(name)
        round5Interrupted {
          let start = MonotonicInstant.now
          do throws(PortError) {
            _ = try remote.send(
              msgid: 1, sendTimeout: .seconds(5), receiveTimeout: .milliseconds(300), replyMode: .awaitReply)
            preconditionFailure("a reply arrived while the handler was held")
          } catch {
            precondition(error.status == .receiveTimeout, "send threw \(error)")
          }
          round5RequireNotEarly(start, .milliseconds(300), "MessagePort.send(receiveTimeout:)")
        }
        answer.signal()
        let reply = Box<[UInt8]?>(nil)
        round5Interrupted {
          reply.value = try! remote.send(
            msgid: 2, sendTimeout: .seconds(5), receiveTimeout: .seconds(30), replyMode: .awaitReply)
        }
        precondition(reply.value == [2], "reply \(String(describing: reply.value))")
        stopServing.store(true, ordering: .releasing)
        server.join()
        remote.invalidate()
        port.invalidate()
      }
    }
  }

  @Test(
    "MessagePort.send to a peer that reads nothing times out at sendTimeout on a signalled thread, not earlier",
    .runsExitTests)
  func aStuckSendIgnoresSignals() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        let name = uniquePortName("round5-stuck-send")
        // Never served: the connection is accepted by the kernel's backlog, nothing reads it.
        let port = try! MessagePort.local(name: name) { _ in nil }
        let remote = try! remotePortEventually(name)
        let payload = [UInt8](repeating: 7, count: 1 << 20)
        round5Interrupted {
          let start = MonotonicInstant.now
          do throws(PortError) {
            // The socket buffers hold far less than 1 MiB: the first send cannot finish.
            _ = try remote.send(
              msgid: 1, data: payload, sendTimeout: .milliseconds(300), receiveTimeout: .zero, replyMode: .oneWay)
            preconditionFailure("1 MiB went into a socket nobody reads")
          } catch {
            precondition(error.status == .sendTimeout, "send threw \(error)")
          }
          round5RequireNotEarly(start, .milliseconds(300), "MessagePort.send(sendTimeout:)")
        }
        port.invalidate()
      }
    }
  }

  @Test(
    "a run loop whose own thread is signalled throughout loses no wake-up: every waited-for request runs",
    .runsExitTests)
  func aSignalledLoopLosesNoWakeUp() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        let loop = Box<RunLoop?>(nil)
        let ran = AtomicInteger<Int>(0)
        let client = Box<TestThread?>(nil)
        // The client starts once the loop exists, and stops it when done; the signalled
        // thread is the loop's own, sleeping on its futex (no deadline, no descriptor) or
        // in epoll (a timer far ahead) in turn.
        round5Interrupted {
          let runLoop = RunLoop.current
          let keepAlive = RunLoopSource {}
          runLoop.add(keepAlive, forMode: .default)
          loop.value = runLoop
          client.value = TestThread.spawn {
            for index in 0..<2000 {
              let timer = index % 2 == 0 ? RunLoopTimer(after: .seconds(3600)) { _ in } : nil
              if let timer { runLoop.add(timer, forMode: .default) }
              do throws(PerformError) {
                try runLoop.performAndWait(inModes: [.default], timeout: .seconds(20)) {
                  _ = ran.fetchAdd(1, ordering: .relaxed)
                }
              } catch {
                preconditionFailure("request \(index) was not run: \(error)")
              }
              timer?.invalidate()
              // Pacing, not synchronization: the loop goes back to sleep between requests,
              // so signals land in its sleeps.
              var pause = timespec(tv_sec: 0, tv_nsec: 150_000)
              _ = nanosleep(&pause, nil)
            }
            runLoop.performAndWakeUp(inModes: [.default]) { RunLoop.current.stop() }
          }
          let result = runLoop.run(mode: .default, before: .distantFuture)
          precondition(result == .stopped, "the loop returned \(result)")
          keepAlive.invalidate()
        }
        client.value!.join()
        precondition(ran.load(ordering: .relaxed) == 2000)
      }
    }
  }

  @Test(
    "performAndWait on a signalled thread times out at its deadline, and an untimed one returns once the block ran",
    .runsExitTests)
  func performAndWaitIgnoresSignals() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        // A loop whose thread does not run it yet: the timed request is withdrawn.
        let loop = Box<RunLoop?>(nil)
        let goOn = Semaphore(value: 0)
        let ran = AtomicInteger<Int>(0)
        let owner = TestThread.spawn {
          loop.value = RunLoop.current
          goOn.wait()
          _ = RunLoop.current.run(mode: .default, before: .after(.seconds(30)), returnAfterSourceHandled: false)
        }
        waitUntil { loop.value != nil }
        round5Interrupted {
          let start = MonotonicInstant.now
          do throws(PerformError) {
            try loop.value!.performAndWait(timeout: .milliseconds(300)) { _ = ran.fetchAdd(1, ordering: .relaxed) }
            preconditionFailure("a request ran on a loop nobody runs")
          } catch {
            precondition(error == .timedOut, "performAndWait threw \(error)")
          }
          round5RequireNotEarly(start, .milliseconds(300), "performAndWait(timeout:)")
        }
        round5Interrupted(releaseAfter: .milliseconds(200), release: { goOn.signal() }) {
          try! loop.value!.performAndWait { _ = ran.fetchAdd(10, ordering: .relaxed) }
        }
        precondition(ran.load(ordering: .relaxed) == 10, "ran \(ran.load(ordering: .relaxed))")
        owner.join()
      }
    }
  }

  @Test("RunLoopThread.start and stop on a signalled thread start and join the thread", .runsExitTests)
  func runLoopThreadStartAndStopIgnoreSignals() async {
    await #expect(processExitsWith: .success) {
      armAlarm(seconds: 150)
      blocking {
        round5Interrupted {
          for _ in 0..<50 {
            let worker = try! RunLoopThread.start(name: "round5-sig")
            try! worker.runLoop.performAndWait {}
            worker.stop()
          }
        }
      }
    }
  }
}
