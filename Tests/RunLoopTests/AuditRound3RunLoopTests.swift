import RunLoop
import Sync
import TestSupport
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Runs `action` when released.
private final class AuditProbe: Sendable {
  let action: @Sendable () -> Void
  init(_ action: @escaping @Sendable () -> Void) { self.action = action }
  deinit { action() }
}

/// Audit round 3: promises of the RunLoop module's doc comments that no other test checked,
/// at edge inputs (embedding and exit requests, common modes, timer changes, huge values).
@Suite("Audit round 3: RunLoop", .timeLimit(.minutes(3)))
struct AuditRound3RunLoopTests {
  /// Polls `descriptor` for reading for at most `milliseconds`; true when it is readable.
  private static func isReadable(_ descriptor: Int32, within milliseconds: Int32) -> Bool {
    var watched = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
    while true {
      let count = poll(&watched, 1, milliseconds)
      if count < 0 && errno == EINTR { continue }
      return count > 0
    }
  }

  /// `pollDescriptor` is readable for "an exit request for its thread", and `runDueWork`
  /// answers `stopped` then. An exit request made while a `runDueWork` pass runs (here by
  /// a block of that pass) must still make the descriptor readable: the foreign loop only
  /// calls again when it is, so otherwise it would never learn that it must stop calling.
  @Test func anExitRequestedDuringADueWorkPassLeavesTheDescriptorReadable() {
    let outcome = Box<(RunLoopRunResult, Bool, RunLoopRunResult)?>(nil)
    TestThread.run {
      let loop = RunLoop.current
      loop.add(RunLoopSource(perform: {}), forMode: .default)
      loop.perform(inModes: [.default]) { Thread.current.requestExit() }
      let first = loop.runDueWork()
      let readable = Self.isReadable(loop.pollDescriptor, within: 5_000)
      let second = loop.runDueWork()
      // Reported: the descriptor is not made readable again for the same request.
      #expect(!Self.isReadable(loop.pollDescriptor, within: 0))
      outcome.value = (first.result, readable, second.result)
    }
    #expect(outcome.value?.0 == .timedOut)
    #expect(outcome.value?.1 == true)
    #expect(outcome.value?.2 == .stopped)
  }

  /// A callback that calls `stop()` during a `runDueWork` pass ends that pass early, but the
  /// call does not report `stopped`, which tells the foreign loop to stop calling (it is kept
  /// for exit requests): it reports `timedOut`, and the loop keeps working from the next call.
  @Test func aStopDuringADueWorkPassIsNotReportedAsStopped() {
    let outcome = Box<(RunLoopRunResult, RunLoopRunResult, Int)?>(nil)
    TestThread.run {
      let loop = RunLoop.current
      let ran = AtomicInteger<Int>(0)
      loop.add(RunLoopSource(perform: {}), forMode: .default)
      loop.perform(inModes: [.default]) { RunLoop.current.stop() }
      let first = loop.runDueWork()
      loop.perform(inModes: [.default]) { ran.increment(ordering: .relaxed) }
      #expect(Self.isReadable(loop.pollDescriptor, within: 5_000))
      let second = loop.runDueWork()
      outcome.value = (first.result, second.result, ran.load(ordering: .relaxed))
    }
    #expect(outcome.value?.0 == .timedOut)
    #expect(outcome.value?.1 == .timedOut)
    #expect(outcome.value?.2 == 1)
  }

  /// The same request made by another thread while the loop is handed to its descriptor
  /// (between two calls) makes the descriptor readable, and the next call says `stopped`.
  @Test func anExitRequestedBetweenDueWorkCallsMakesTheDescriptorReadable() {
    let parked = Latch(count: 1)
    let requested = Latch(count: 1)
    let outcome = Box<(Bool, RunLoopRunResult)?>(nil)
    let worker = TestThread.spawn {
      let loop = RunLoop.current
      loop.add(RunLoopSource(perform: {}), forMode: .default)
      _ = loop.runDueWork()
      parked.countDown()
      requested.wait()
      let readable = Self.isReadable(loop.pollDescriptor, within: 5_000)
      outcome.value = (readable, loop.runDueWork().result)
      #expect(!Self.isReadable(loop.pollDescriptor, within: 0), "readable again after reporting stopped")
    }
    parked.wait()
    worker.thread.requestExit()
    requested.countDown()
    worker.join()
    #expect(outcome.value?.0 == true)
    #expect(outcome.value?.1 == .stopped)
  }

  /// `runDueWork` in a mode with nothing in it (observers do not count) makes no pass:
  /// `finished`, no timer deadline, and no observer is notified.
  @Test func dueWorkInAModeWithOnlyObserversFinishesWithoutNotifying() {
    let notified = Recorder<RunLoopActivity>()
    let pass = Box<RunLoopDueWorkResult?>(nil)
    TestThread.run {
      let loop = RunLoop.current
      let observer = RunLoopObserver(activities: .allActivities) { _, activity in notified.append(activity) }
      loop.add(observer, forMode: .default)
      pass.value = loop.runDueWork()
      observer.invalidate()
    }
    #expect(pass.value?.result == .finished)
    #expect(pass.value?.nextTimerDeadline == nil)
    #expect(notified.snapshot.isEmpty)
  }

  /// `interval` set after a firing re-plans from the last scheduled date; a huge interval
  /// saturates at the distant future instead of overflowing, and the timer stays valid.
  @Test func aHugeIntervalSetAfterAFiringSaturatesTheNextFireDate() {
    let fired = Box(0)
    let timer = RunLoopTimer(after: .zero, interval: .seconds(3600)) { _ in fired.value += 1 }
    TestThread.run {
      RunLoop.current.add(timer, forMode: .default)
      #expect(RunLoop.current.run(mode: .default, timeout: .zero) == .timedOut)
      timer.interval = .seconds(Int64.max)
      #expect(timer.nextFireDate == .distantFuture)
      #expect(RunLoop.current.run(mode: .default, timeout: .zero) == .timedOut)
    }
    #expect(fired.value == 1)
    #expect(timer.isValid)
    timer.invalidate()
  }

  /// The tolerance of a repeating timer reads as at most half its interval, and the value
  /// set is kept: it applies in full once the timer becomes one-shot.
  @Test func aCappedToleranceIsKeptForAOneShotTimer() {
    let timer = RunLoopTimer(after: .seconds(60), interval: .seconds(10), tolerance: .seconds(8)) { _ in }
    #expect(timer.tolerance == .seconds(5))
    timer.interval = .seconds(20)
    #expect(timer.tolerance == .seconds(8))
    timer.interval = .zero
    #expect(timer.tolerance == .seconds(8))
    timer.tolerance = .seconds(-1)
    #expect(timer.tolerance == .zero)
    timer.invalidate()
  }

  /// A source added to `common` enters a mode made common later (its `schedule` is called
  /// once for it), and removing it from `common` takes it out of every common mode (one
  /// `cancel` per mode).
  @Test func aCommonSourceFollowsTheCommonSetAndLeavesItWhole() {
    let log = Recorder<String>()
    let extra = RunLoopMode("audit3.extra")
    TestThread.run {
      let loop = RunLoop.current
      let source = RunLoopSource(
        schedule: { _, mode in log.append("schedule \(mode)") },
        cancel: { _, mode in log.append("cancel \(mode)") },
        perform: {})
      loop.add(source, forMode: .common)
      loop.addCommonMode(extra)
      loop.addCommonMode(extra)
      #expect(loop.contains(source, inMode: extra))
      #expect(loop.contains(source, inMode: .common))
      loop.remove(source, forMode: .common)
      #expect(!loop.contains(source, inMode: extra))
      #expect(!loop.contains(source, inMode: .default))
      #expect(!loop.contains(source, inMode: .common))
      source.invalidate()
    }
    #expect(log.snapshot.count == 4)
    #expect(log.snapshot.prefix(2) == ["schedule \(RunLoopMode.default)", "schedule \(extra)"])
    #expect(Set(log.snapshot.suffix(2)) == ["cancel \(RunLoopMode.default)", "cancel \(extra)"])
  }

  /// A run with a huge timeout saturates its deadline (no trap) and ends as usual.
  @Test func aHugeTimeoutRunsUntilTheModeIsEmpty() {
    let result = Box<RunLoopRunResult?>(nil)
    TestThread.run {
      RunLoop.current.add(RunLoopTimer(after: .zero) { _ in }, forMode: .default)
      result.value = RunLoop.current.run(mode: .default, timeout: .seconds(Int64.max))
    }
    #expect(result.value == .finished)
  }

  /// A delayed perform with a negative delay runs at the next pass; afterwards it is no
  /// longer pending and a cancel is harmless.
  @Test func aDelayedPerformWithANegativeDelayRunsAtTheNextPass() {
    let ran = Box(0)
    let handle = Box<DelayedPerform?>(nil)
    TestThread.run {
      let loop = RunLoop.current
      handle.value = loop.perform(afterDelay: .seconds(-5), inModes: [.default]) { ran.value += 1 }
      #expect(handle.value?.isPending == true)
      #expect(loop.run(mode: .default, timeout: .seconds(20)) == .finished)
    }
    #expect(ran.value == 1)
    #expect(handle.value?.isPending == false)
    handle.value?.cancel()
  }

  /// `nextTimerFireDate(inMode:)` reports the earliest valid timer of a mode, and nil once
  /// they are all invalidated.
  @Test func nextTimerFireDateFollowsInvalidation() {
    TestThread.run {
      let loop = RunLoop.current
      let early = MonotonicInstant.after(.seconds(100))
      let late = MonotonicInstant.after(.seconds(200))
      let first = RunLoopTimer(fireAt: early) { _ in }
      let second = RunLoopTimer(fireAt: late) { _ in }
      loop.add(first, forMode: .default)
      loop.add(second, forMode: .default)
      #expect(loop.nextTimerFireDate(inMode: .default) == early)
      first.invalidate()
      #expect(loop.nextTimerFireDate(inMode: .default) == late)
      second.invalidate()
      #expect(loop.nextTimerFireDate(inMode: .default) == nil)
    }
  }

  /// `DelayedPerform.isPending` is "false once the run loop's thread has ended (the request
  /// is then withdrawn, its block released)". That holds for a request made after the
  /// thread ended too (on a loop kept from a stopped `RunLoopThread`): it can never run.
  @Test func aDelayedPerformOnALoopWhoseThreadEndedIsWithdrawnAtOnce() throws {
    let worker = try RunLoopThread.start(name: "audit3-ended")
    let loop = worker.runLoop
    worker.stop()
    let log = Recorder<String>()
    let handle: DelayedPerform
    do {
      let probe = AuditProbe { log.append("deinit") }
      handle = loop.perform(afterDelay: .milliseconds(1), inModes: [.default]) { withExtendedLifetime(probe) {} }
    }
    #expect(!handle.isPending, "a request on an ended thread's loop says it is pending")
    #expect(log.snapshot == ["deinit"], "the request's block is kept by a loop whose thread ended")
    handle.cancel()
  }

  /// A loop kept from a stopped thread never runs again: adding a source, timer, observer,
  /// port, message port or descriptor source to it adds nothing and returns false (Core
  /// Foundation ignores additions to a finished run loop), calls no `schedule` or `cancel`
  /// callback, and leaves the timer and observer free for a live loop.
  @Test func addingToALoopWhoseThreadEndedAddsNothing() throws {
    let worker = try RunLoopThread.start(name: "audit3-ended-add")
    let loop = worker.runLoop
    worker.stop()
    let calls = Recorder<String>()
    let source = RunLoopSource(
      schedule: { _, _ in calls.append("schedule") }, cancel: { _, _ in calls.append("cancel") }, perform: {})
    #expect(!loop.add(source, forMode: .default))
    #expect(!loop.add(source, forMode: .common))
    #expect(!loop.contains(source, inMode: .default))
    let timer = RunLoopTimer(after: .milliseconds(1)) { _ in calls.append("timer") }
    #expect(!loop.add(timer, forMode: .default))
    let observer = RunLoopObserver(activities: .entry, repeats: true) { _, _ in calls.append("observer") }
    #expect(!loop.add(observer, forMode: .default))
    let port = Port()
    #expect(!loop.add(port, forMode: .default))
    var ends: [Int32] = [0, 0]
    #expect(pipe(&ends) == 0)
    let descriptorSource = FileDescriptorSource(descriptor: ends[0]) { _, _ in }
    #expect(!loop.add(descriptorSource, forMode: .default))
    descriptorSource.invalidate()
    #expect(close(ends[0]) == 0 && close(ends[1]) == 0)
    source.invalidate()
    #expect(calls.snapshot.isEmpty, "callbacks ran for a loop whose thread ended: \(calls.snapshot)")
    // Neither the timer nor the observer was claimed by the ended loop.
    TestThread.run {
      let live = RunLoop.current
      #expect(live.add(timer, forMode: .default))
      #expect(live.add(observer, forMode: .default))
      #expect(live.run(mode: .default, timeout: .seconds(10)) != .timedOut)
      observer.invalidate()
    }
    #expect(calls.snapshot.contains("timer"))
  }

  /// "It wakes exactly when the loop would wake": once `runDueWork` handled what made the
  /// descriptor readable (a wake-up, a due timer, a ready descriptor source), the descriptor
  /// is quiet again, so a level-triggered foreign loop does not spin.
  @Test func theDescriptorIsQuietOnceItsWorkWasHandled() {
    TestThread.run {
      let loop = RunLoop.current
      let fd = loop.pollDescriptor
      loop.add(RunLoopSource(perform: {}), forMode: .default)
      _ = loop.runDueWork()
      #expect(!Self.isReadable(fd, within: 0), "readable with nothing to do")
      // A wake-up.
      let ran = Box(0)
      loop.performAndWakeUp(inModes: [.default]) { ran.value += 1 }
      #expect(Self.isReadable(fd, within: 5_000))
      _ = loop.runDueWork()
      #expect(ran.value == 1)
      #expect(!Self.isReadable(fd, within: 0), "still readable after the wake-up was handled")
      // A due timer.
      let timer = RunLoopTimer(after: .milliseconds(1)) { _ in ran.value += 1 }
      loop.add(timer, forMode: .default)
      #expect(Self.isReadable(fd, within: 5_000))
      _ = loop.runDueWork()
      #expect(ran.value == 2)
      #expect(!Self.isReadable(fd, within: 0), "still readable after the timer fired")
      // A ready descriptor source, drained by its handler.
      var ends: [Int32] = [0, 0]
      #expect(pipe(&ends) == 0)
      let readEnd = ends[0]
      let source = FileDescriptorSource(descriptor: readEnd, events: .readable) { _, _ in
        var byte: UInt8 = 0
        _ = read(readEnd, &byte, 1)
        ran.value += 1
      }
      loop.add(source, forMode: .default)
      _ = loop.runDueWork()
      var byte: UInt8 = 7
      #expect(write(ends[1], &byte, 1) == 1)
      #expect(Self.isReadable(fd, within: 5_000))
      _ = loop.runDueWork()
      #expect(ran.value == 3)
      #expect(!Self.isReadable(fd, within: 0), "still readable after the descriptor was drained")
      source.invalidate()
      close(ends[0])
      close(ends[1])
    }
  }

  /// Observers fire in increasing `order` and sources lowest `order` first, at the extremes
  /// of `Int` too.
  @Test func extremeOrdersSortObserversAndSources() {
    let log = Recorder<String>()
    TestThread.run {
      let loop = RunLoop.current
      var observers: [RunLoopObserver] = []
      var sources: [RunLoopSource] = []
      for order in [Int.max, 0, Int.min, -1] {
        let observer = RunLoopObserver(activities: .beforeSources, order: order) { _, _ in log.append("o\(order)") }
        observers.append(observer)
        loop.add(observer, forMode: .default)
        let source = RunLoopSource(order: order) { log.append("s\(order)") }
        sources.append(source)
        loop.add(source, forMode: .default)
        source.signal()
      }
      #expect(loop.run(mode: .default, timeout: .zero) == .timedOut)
      for observer in observers { observer.invalidate() }
      for source in sources { source.invalidate() }
    }
    #expect(
      log.snapshot == [
        "o\(Int.min)", "o-1", "o0", "o\(Int.max)", "s\(Int.min)", "s-1", "s0", "s\(Int.max)",
      ])
  }

  /// With `returnAfterSourceHandled`, only the lowest-order signalled source fires; the
  /// others keep their signal for the next run.
  @Test func returnAfterSourceHandledFiresOnlyTheLowestOrder() {
    let log = Recorder<Int>()
    TestThread.run {
      let loop = RunLoop.current
      let high = RunLoopSource(order: Int.max) { log.append(Int.max) }
      let low = RunLoopSource(order: Int.min) { log.append(Int.min) }
      loop.add(high, forMode: .default)
      loop.add(low, forMode: .default)
      high.signal()
      low.signal()
      #expect(loop.run(mode: .default, timeout: .seconds(10), returnAfterSourceHandled: true) == .handledSource)
      #expect(log.snapshot == [Int.min])
      #expect(high.isSignalled)
      #expect(loop.run(mode: .default, timeout: .seconds(10), returnAfterSourceHandled: true) == .handledSource)
      #expect(log.snapshot == [Int.min, Int.max])
      high.invalidate()
      low.invalidate()
    }
  }

  /// The seconds initializer clamps huge values instead of trapping: a huge delay is far in
  /// the future, a hugely negative one fires at once, a huge interval repeats.
  @Test func theSecondsInitializerClampsHugeValues() throws {
    let far = try #require(RunLoopTimer(seconds: 1e300, intervalSeconds: 1e300, toleranceSeconds: 1e300) { _ in })
    #expect(far.nextFireDate > MonotonicInstant.after(.seconds(8_000_000_000)))
    #expect(far.isRepeating)
    far.invalidate()
    let fired = Box(0)
    let past = try #require(RunLoopTimer(seconds: -1e300, intervalSeconds: -1e300) { _ in fired.value += 1 })
    #expect(!past.isRepeating)
    TestThread.run {
      RunLoop.current.add(past, forMode: .default)
      #expect(RunLoop.current.run(mode: .default, timeout: .seconds(10)) == .finished)
    }
    #expect(fired.value == 1)
    #expect(!past.isValid)
  }

  /// A due one-shot timer whose tolerance saturates the wake instant still fires when the
  /// loop wakes at its run's deadline ("fires every timer due by then"), never before its
  /// fire date.
  @Test func aTimerWithAHugeToleranceFiresWhenTheRunDeadlineWakesTheLoop() {
    let firedAt = Box<MonotonicInstant?>(nil)
    let fireDate = MonotonicInstant.after(.milliseconds(5))
    let timer = RunLoopTimer(fireAt: fireDate, tolerance: .seconds(Int64.max)) { _ in firedAt.value = .now }
    let result = Box<RunLoopRunResult?>(nil)
    TestThread.run {
      RunLoop.current.add(timer, forMode: .default)
      result.value = RunLoop.current.run(mode: .default, timeout: .milliseconds(30))
    }
    #expect(result.value == .timedOut)
    #expect(firedAt.value != nil)
    if let firedAt = firedAt.value { #expect(firedAt >= fireDate) }
    timer.invalidate()
  }

  /// `runDueWork`: "observers see an entry, one pass and an exit", a zero-timeout pass that
  /// never sleeps (no before-waiting or after-waiting), with the source and the due timer
  /// fired in their steps.
  @Test func aDueWorkPassShowsObserversOneZeroTimeoutPass() {
    let log = Recorder<String>()
    TestThread.run {
      let loop = RunLoop.current
      let observer = RunLoopObserver(activities: .allActivities) { _, activity in log.append("\(activity)") }
      loop.add(observer, forMode: .default)
      let source = RunLoopSource { log.append("source") }
      loop.add(source, forMode: .default)
      let timer = RunLoopTimer(fireAt: .distantPast) { _ in log.append("timer") }
      loop.add(timer, forMode: .default)
      source.signal()
      let pass = loop.runDueWork()
      #expect(pass.result == .timedOut)
      #expect(pass.nextTimerDeadline == nil)
      observer.invalidate()
      source.invalidate()
    }
    #expect(log.snapshot == ["entry", "beforeTimers", "beforeSources", "source", "timer", "exit"])
  }

  /// A scheduled port without a handler keeps its messages ("they wait in the port") and
  /// the loop does not spin on them; setting a handler from another thread while the loop
  /// sleeps delivers them, in order.
  @Test func messagesWaitingForAHandlerDoNotSpinTheLoopAndArriveOnceOneIsSet() throws {
    let received = Recorder<Int32>()
    let outcome = Box<(RunLoopRunResult, Int, Int, RunLoopRunResult)?>(nil)
    TestThread.run {
      let loop = RunLoop.current
      loop.metricsEnabled = true
      let port = Port()
      loop.add(port, forMode: .default)
      do {
        try port.send(PortMessage(msgid: 1), timeout: .seconds(5))
        try port.send(PortMessage(msgid: 2), timeout: .seconds(5))
      } catch {
        Issue.record("send failed: \(error)")
      }
      let first = loop.run(mode: .default, timeout: .milliseconds(100))
      let passes = loop.metrics.passes
      let pending = port.pendingMessageCount
      let setter = TestThread.spawn {
        waitUntil { loop.isWaiting }
        port.setHandler { message in received.append(message.msgid) }
      }
      let second = loop.run(mode: .default, timeout: .seconds(20), returnAfterSourceHandled: true)
      setter.join()
      outcome.value = (first, passes, pending, second)
      _ = port.invalidate()
    }
    #expect(outcome.value?.0 == .timedOut)
    #expect((outcome.value?.1 ?? .max) <= 4, "the loop spun on messages that wait for a handler")
    #expect(outcome.value?.2 == 2)
    #expect(outcome.value?.3 == .handledSource)
    #expect(received.snapshot == [1, 2])
  }

  /// A descriptor source with every event disabled is "never called", also when the
  /// descriptor reports a hang-up (which epoll reports whatever the mask), and the loop
  /// does not spin on it.
  @Test func aFullyDisabledDescriptorSourceIsNotCalledForAHangUpAndDoesNotSpin() {
    let calls = Box(0)
    let outcome = Box<(RunLoopRunResult, Int)?>(nil)
    var ends: [Int32] = [0, 0]
    #expect(pipe(&ends) == 0)
    let readEnd = ends[0]
    let writeEnd = ends[1]
    TestThread.run {
      let loop = RunLoop.current
      loop.metricsEnabled = true
      let source = FileDescriptorSource(descriptor: readEnd, events: .readable) { _, _ in calls.value += 1 }
      loop.add(source, forMode: .default)
      source.disable(.readable)
      close(writeEnd)
      let result = loop.run(mode: .default, timeout: .milliseconds(100))
      outcome.value = (result, loop.metrics.passes)
      source.invalidate()
    }
    close(readEnd)
    #expect(calls.value == 0)
    #expect(outcome.value?.0 == .timedOut)
    #expect((outcome.value?.1 ?? .max) <= 4, "the loop spun on a disabled descriptor's hang-up")
  }

  /// "Adding an invalid ... adds nothing and returns false", for every kind of item, and the
  /// mode stays empty (a run in it finishes at once).
  @Test func addingInvalidatedItemsOfEveryKindAddsNothing() throws {
    let name = uniquePortName("audit3-invalid-add")
    let messagePort = try MessagePort.local(name: name) { _ in nil }
    messagePort.invalidate()
    let port = Port()
    _ = port.invalidate()
    var ends: [Int32] = [0, 0]
    #expect(pipe(&ends) == 0)
    let descriptorSource = FileDescriptorSource(descriptor: ends[0], events: .readable) { _, _ in }
    descriptorSource.invalidate()
    let source = RunLoopSource(perform: {})
    source.invalidate()
    let timer = RunLoopTimer(after: .zero) { _ in }
    timer.invalidate()
    let observer = RunLoopObserver(activities: .allActivities) { _, _ in }
    observer.invalidate()
    let mode = RunLoopMode("audit3.invalid")
    TestThread.run {
      let loop = RunLoop.current
      #expect(!loop.add(messagePort, forMode: mode))
      #expect(!loop.add(port, forMode: mode))
      #expect(!loop.add(descriptorSource, forMode: mode))
      #expect(!loop.add(source, forMode: .common))
      #expect(!loop.add(timer, forMode: mode))
      #expect(!loop.add(observer, forMode: mode))
      #expect(!loop.contains(messagePort, inMode: mode))
      #expect(!loop.contains(port, inMode: mode))
      #expect(!loop.contains(descriptorSource, inMode: mode))
      #expect(loop.run(mode: mode, timeout: .seconds(20)) == .finished)
      #expect(loop.run(mode: .default, timeout: .seconds(20)) == .finished)
    }
    close(ends[0])
    close(ends[1])
  }

  /// The seconds initializer: "a zero or negative interval makes a one-shot timer, a positive
  /// one below a nanosecond repeats every nanosecond". That holds for positive intervals too
  /// small for `Duration` (below an attosecond), which must not turn into one-shot timers;
  /// a negative zero is zero.
  @Test func aPositiveIntervalBelowAnAttosecondStillRepeats() throws {
    for seconds in [1e-20, Double.leastNonzeroMagnitude, 1e-18] {
      let timer = try #require(RunLoopTimer(seconds: 0, intervalSeconds: seconds) { _ in })
      #expect(timer.isRepeating, "interval \(seconds) s")
      #expect(timer.interval == .nanoseconds(1), "interval \(seconds) s")
      timer.invalidate()
    }
    let negativeZero = try #require(RunLoopTimer(seconds: 0, intervalSeconds: -0.0) { _ in })
    #expect(!negativeZero.isRepeating)
    negativeZero.invalidate()
  }
}
