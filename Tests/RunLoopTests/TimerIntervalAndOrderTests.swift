import RunLoop
import Sync
import TestSupport
import Testing

/// Repeating timers at the edges of the interval range, and the order of timers due at the
/// same instant after a re-arm.
@Suite("RunLoop timer intervals and re-arm order", .timeLimit(.minutes(3)))
struct TimerIntervalAndOrderTests {
  /// Runs `timer` on the current thread's run loop until it invalidated itself.
  private static func runUntilInvalidated(_ timer: RunLoopTimer) -> RunLoopRunResult {
    RunLoop.current.add(timer, forMode: .default)
    return RunLoop.current.run(mode: .default, timeout: .seconds(10))
  }

  @Test("an interval below a nanosecond in seconds repeats every nanosecond")
  func subNanosecondSecondsIntervalRepeatsEveryNanosecond() throws {
    let fired = Box(0)
    let timer = try #require(
      RunLoopTimer(seconds: 0, intervalSeconds: 1e-10) { timer in
        fired.value += 1
        if fired.value == 3 { timer.invalidate() }
      })
    #expect(timer.interval == .nanoseconds(1))
    #expect(timer.isRepeating)
    TestThread.run {
      #expect(Self.runUntilInvalidated(timer) == .finished)
    }
    #expect(fired.value == 3)
  }

  @Test("a positive Duration interval below a nanosecond repeats every nanosecond")
  func subNanosecondDurationIntervalRepeatsEveryNanosecond() {
    let fired = Box(0)
    let timer = RunLoopTimer(after: .zero, interval: .nanoseconds(1) / 3) { timer in
      fired.value += 1
      if fired.value == 3 { timer.invalidate() }
    }
    #expect(timer.interval == .nanoseconds(1))
    TestThread.run {
      #expect(Self.runUntilInvalidated(timer) == .finished)
    }
    #expect(fired.value == 3)
    #expect(!RunLoopTimer(after: .zero, interval: .zero - .nanoseconds(1) / 3) { _ in }.isRepeating)
  }

  @Test("a repeating timer first due at the distant past keeps repeating on its grid")
  func repeatingTimerFromTheDistantPastKeepsRepeating() {
    let dates = Recorder<MonotonicInstant>()
    let timer = RunLoopTimer(fireAt: .distantPast, interval: .milliseconds(1)) { timer in
      dates.append(timer.nextFireDate)
      if dates.count == 3 { timer.invalidate() }
    }
    TestThread.run {
      #expect(Self.runUntilInvalidated(timer) == .finished)
    }
    let fires = dates.snapshot
    #expect(fires.count == 3)
    // Grid points of distantPast + k * 1 ms (the distance from it needs 64 unsigned bits).
    let origin = UInt64(bitPattern: MonotonicInstant.distantPast.nanoseconds)
    #expect(fires.dropFirst().allSatisfy { (UInt64(bitPattern: $0.nanoseconds) &- origin) % 1_000_000 == 0 })
  }

  @Test("a huge interval fires once and saturates the next fire date at the distant future")
  func hugeIntervalSaturates() {
    let fired = Box(0)
    let timer = RunLoopTimer(after: .zero, interval: .seconds(Int64.max)) { _ in fired.value += 1 }
    TestThread.run {
      RunLoop.current.add(timer, forMode: .default)
      #expect(RunLoop.current.run(mode: .default, timeout: .zero) == .timedOut)
    }
    #expect(fired.value == 1)
    #expect(timer.isValid)
    #expect(timer.nextFireDate == .distantFuture)
    timer.invalidate()
  }

  @Test("timers re-armed to one instant fire in the order re-armed, after a timer already due there")
  func reArmedTimersFireInReArmOrder() {
    TestThread.run {
      let runLoop = RunLoop.current
      let order = Recorder<String>()
      let date = MonotonicInstant.after(.milliseconds(5))
      var timers: [String: RunLoopTimer] = [:]
      for name in ["A", "B", "C"] {
        let timer = RunLoopTimer(fireAt: .distantFuture) { _ in order.append(name) }
        runLoop.add(timer, forMode: .default)
        timers[name] = timer
      }
      // Added last but never re-armed: already at `date` before the others move there.
      runLoop.add(RunLoopTimer(fireAt: date) { _ in order.append("D") }, forMode: .default)
      for name in ["C", "A", "B"] { timers[name]!.setNextFireDate(date) }
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(order.snapshot == ["D", "C", "A", "B"])
    }
  }

  @Test("a repeating timer moved to its next period fires after a timer already due then")
  func repeatingTimerGoesAfterTimersAlreadyAtItsNextPeriod() {
    TestThread.run {
      let runLoop = RunLoop.current
      let order = Recorder<String>()
      let start = MonotonicInstant.after(.milliseconds(2))
      let interval = Duration.milliseconds(20)
      let repeating = RunLoopTimer(fireAt: start, interval: interval) { timer in
        order.append("repeating")
        if order.count > 1 { timer.invalidate() }
      }
      runLoop.add(repeating, forMode: .default)
      runLoop.add(RunLoopTimer(fireAt: start + interval) { _ in order.append("one-shot") }, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(order.snapshot == ["repeating", "one-shot", "repeating"])
    }
  }

  @Test("changing the tolerance does not move a timer behind others due at the same instant")
  func toleranceChangeKeepsTheOrder() {
    TestThread.run {
      let runLoop = RunLoop.current
      let order = Recorder<String>()
      let date = MonotonicInstant.after(.milliseconds(5))
      let first = RunLoopTimer(fireAt: date) { _ in order.append("first") }
      runLoop.add(first, forMode: .default)
      runLoop.add(RunLoopTimer(fireAt: date) { _ in order.append("second") }, forMode: .default)
      first.tolerance = .microseconds(1)
      #expect(runLoop.run(mode: .default, timeout: .seconds(30)) == .finished)
      #expect(order.snapshot == ["first", "second"])
    }
  }
}
