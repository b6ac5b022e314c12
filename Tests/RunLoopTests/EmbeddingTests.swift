import RunLoop
import Sync
import TestSupport
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// What a foreign loop saw while it drove a run loop.
struct ForeignLoopReport {
  /// Polls that returned because the descriptor was readable.
  var readableWakes = 0
  /// Polls that gave up after `ForeignLoop.pollLimit`: the descriptor never became readable
  /// for work that was due (there is no tickler to hide it).
  var timedOutPolls = 0
}

/// Stands in for a foreign event loop (GTK's, libuv's) owning a thread: it sleeps in `poll()`
/// on the run loop's descriptor alone, without a timeout that could tickle the loop, and
/// calls `runDueWork()` whenever the descriptor is readable, until `finished` holds.
enum ForeignLoop {
  /// Long enough never to expire for work that is due (so an expiry means a lost wake-up),
  /// short enough that a lost one fails the test instead of hanging it.
  static let pollLimit: Int32 = 20_000

  /// Starts a thread whose run loop `setup` fills, hands the loop to its descriptor, and
  /// calls `whileDriven(loop)` on the caller's thread while the foreign loop drives it.
  /// Returns what the foreign loop saw once `finished` held (checked after each pass).
  static func drive(
    setup: @escaping @Sendable (RunLoop) -> Void,
    finished: @escaping @Sendable () -> Bool,
    whileDriven: (RunLoop) -> Void = { _ in }
  ) -> ForeignLoopReport {
    let started = Latch(count: 1)
    let loopBox = Box<RunLoop?>(nil)
    let report = Box(ForeignLoopReport())
    let thread = TestThread.spawn(name: "foreign loop") {
      let loop = RunLoop.current
      setup(loop)
      _ = loop.runDueWork()
      loopBox.value = loop
      started.countDown()
      var watched = pollfd(fd: loop.pollDescriptor, events: Int16(POLLIN), revents: 0)
      while !finished() {
        watched.revents = 0
        let count = poll(&watched, 1, pollLimit)
        if count < 0 {
          precondition(errno == EINTR, "poll failed: errno \(errno)")
          continue
        }
        if count == 0 {
          report.update { $0.timedOutPolls += 1 }
          break
        }
        report.update { $0.readableWakes += 1 }
        _ = loop.runDueWork()
      }
    }
    started.wait()
    whileDriven(loopBox.value!)
    thread.join()
    return report.value
  }
}

@Suite(.timeLimit(.minutes(3))) struct EmbeddingTests {
  @Test func aTimerFiresWhenDueWithoutATickler() {
    let fired = Box<MonotonicInstant?>(nil)
    let fireDate = Box(MonotonicInstant.distantFuture)
    let report = ForeignLoop.drive(
      setup: { loop in
        let date = MonotonicInstant.after(.milliseconds(30))
        fireDate.value = date
        loop.add(RunLoopTimer(fireAt: date) { _ in fired.value = .now }, forMode: .default)
      },
      finished: { fired.value != nil })
    #expect(report.timedOutPolls == 0)
    #expect(fired.value! >= fireDate.value)
    // Readable when the timer was due, not polled for it: a handful of wakes, not one per
    // millisecond.
    #expect(report.readableWakes <= 3)
  }

  @Test func aTimerAddedByAnotherThreadWhileHandedToTheDescriptorFires() {
    let fired = Box<MonotonicInstant?>(nil)
    let fireDate = Box(MonotonicInstant.distantFuture)
    let report = ForeignLoop.drive(
      // A source keeps the default mode from being empty until the timer arrives.
      setup: { loop in loop.add(RunLoopSource(perform: {}), forMode: .default) },
      finished: { fired.value != nil },
      whileDriven: { loop in
        waitUntil { loop.isWaiting }
        let date = MonotonicInstant.after(.milliseconds(20))
        fireDate.value = date
        loop.add(RunLoopTimer(fireAt: date) { _ in fired.value = .now }, forMode: .default)
      })
    #expect(report.timedOutPolls == 0)
    #expect(fired.value! >= fireDate.value)
  }

  @Test func aSourceSignalledFromAnotherThreadFires() {
    let fires = Box(0)
    let source = RunLoopSource(perform: { fires.update { $0 += 1 } })
    let report = ForeignLoop.drive(
      setup: { loop in loop.add(source, forMode: .default) },
      finished: { fires.value == 3 },
      whileDriven: { _ in
        for expected in 1...3 {
          source.signalAndWakeUp()
          waitUntil { fires.value == expected }
        }
      })
    #expect(report.timedOutPolls == 0)
    #expect(fires.value == 3)
    source.invalidate()
  }

  @Test func performRequestsFromAnotherThreadRun() throws {
    let ran = Recorder<String>()
    let failure = Box<PerformError?>(nil)
    let report = ForeignLoop.drive(
      setup: { loop in loop.add(RunLoopSource(perform: {}), forMode: .default) },
      finished: { ran.count == 4 },
      whileDriven: { loop in
        do throws(PerformError) {
          // Each returns once the foreign loop's thread ran the block.
          for index in 1...3 {
            try loop.performAndWait(timeout: .seconds(20)) { ran.append("wait \(index)") }
          }
        } catch {
          failure.value = error
        }
        loop.performAndWakeUp { ran.append("wake up") }
      })
    #expect(failure.value == nil)
    #expect(report.timedOutPolls == 0)
    #expect(ran.snapshot == ["wait 1", "wait 2", "wait 3", "wake up"])
  }

  @Test func aDescriptorSourceFiresWhenItsDescriptorIsReady() throws {
    var ends: [Int32] = [-1, -1]
    try #require(pipe(&ends) == 0)
    defer {
      close(ends[0])
      close(ends[1])
    }
    let readEnd = ends[0]
    let received = Box<UInt8?>(nil)
    let source = FileDescriptorSource(descriptor: readEnd) { _, _ in
      var byte: UInt8 = 0
      if read(readEnd, &byte, 1) == 1 { received.value = byte }
    }
    let report = ForeignLoop.drive(
      setup: { loop in loop.add(source, forMode: .default) },
      finished: { received.value != nil },
      whileDriven: { loop in
        waitUntil { loop.isWaiting }
        var byte: UInt8 = 42
        _ = write(ends[1], &byte, 1)
      })
    #expect(report.timedOutPolls == 0)
    #expect(received.value == 42)
    source.invalidate()
  }

  @Test func messagesSentToAPortFromAnotherThreadAreDelivered() {
    let received = Recorder<Int32>()
    let port = Port()
    port.setHandler { message in received.append(message.msgid) }
    let failure = Box<PortError?>(nil)
    let report = ForeignLoop.drive(
      setup: { loop in loop.add(port, forMode: .default) },
      finished: { received.count == 3 },
      whileDriven: { loop in
        waitUntil { loop.isWaiting }
        do throws(PortError) {
          for id in Int32(1)...3 { try port.send(PortMessage(msgid: id), timeout: .seconds(20)) }
        } catch {
          failure.value = error
        }
      })
    #expect(failure.value == nil)
    #expect(report.timedOutPolls == 0)
    #expect(received.snapshot == [1, 2, 3])
    port.invalidate()
  }

  @Test func workLeftByAPassMakesTheDescriptorReadableAgain() {
    let ran = Recorder<Int>()
    /// Queues a plain block (which wakes nothing) that records `step` and queues the next:
    /// a pass runs blocks twice at most, so later steps are left for later passes, and only
    /// the descriptor can bring the foreign loop back for them.
    @Sendable func chain(_ step: Int) {
      RunLoop.current.perform(inModes: [.default]) {
        ran.append(step)
        if step < 4 { chain(step + 1) }
      }
    }
    let report = ForeignLoop.drive(
      setup: { loop in loop.add(RunLoopSource(perform: {}), forMode: .default) },
      finished: { ran.count == 4 },
      whileDriven: { loop in loop.performAndWakeUp { chain(1) } })
    #expect(report.timedOutPolls == 0)
    #expect(ran.snapshot == [1, 2, 3, 4])
  }

  @Test func theLoopCountsAsWaitingBetweenCallsAndADirectRunTakesItBack() {
    let result = Box<RunLoopRunResult?>(nil)
    let waitingBetweenCalls = Box(false)
    TestThread.run {
      let loop = RunLoop.current
      let timer = RunLoopTimer(after: .milliseconds(10)) { _ in }
      loop.add(timer, forMode: .default)
      let pass = loop.runDueWork()
      waitingBetweenCalls.value = loop.isWaiting && pass.nextTimerDeadline != nil
      // A direct run sleeps on its own and wakes for the timer (the descriptor's eventfd
      // state does not confuse its wait).
      result.value = loop.run(mode: .default, timeout: .seconds(20))
    }
    #expect(waitingBetweenCalls.value)
    #expect(result.value == .finished)
  }

  @Test func aPassReportsTheNextTimerDeadline() {
    let reported = Box<RunLoopDueWorkResult?>(nil)
    let fireDate = MonotonicInstant.after(.seconds(30))
    TestThread.run {
      let loop = RunLoop.current
      let timer = RunLoopTimer(fireAt: fireDate, tolerance: .milliseconds(5)) { _ in }
      loop.add(timer, forMode: .default)
      reported.value = loop.runDueWork()
      timer.invalidate()
    }
    #expect(reported.value?.result == .timedOut)
    #expect(reported.value?.nextTimerDeadline == fireDate.advanced(by: .milliseconds(5)))
  }

  @Test(.runsExitTests) func runningDueWorkFromAnotherThreadIsRefused() async {
    await #expect(processExitsWith: .failure) {
      let loop = Box<RunLoop?>(nil)
      let keep = Latch(count: 1)
      let thread = TestThread.spawn {
        loop.value = RunLoop.current
        keep.wait()
      }
      waitUntil { loop.value != nil }
      blocking { _ = loop.value!.runDueWork() }
      keep.countDown()
      thread.join()
    }
  }

  @Test(.runsExitTests) func runningDueWorkInTheCommonPseudoModeIsRefused() async {
    await #expect(processExitsWith: .failure) {
      blocking { _ = RunLoop.current.runDueWork(mode: .common) }
    }
  }
}
