import RunLoop
import Sync
import TestSupport
import Testing

/// Repeating timers at the edges of the interval range, and the order of timers due at the
/// same instant after a re-arm.
@Suite("RunLoop timer intervals and re-arm order", .timeLimit(.minutes(1)))
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
}
