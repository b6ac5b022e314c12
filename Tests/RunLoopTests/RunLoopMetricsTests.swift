import RunLoop
import Sync
import TestSupport
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

@Suite(.timeLimit(.minutes(3)))
struct RunLoopMetricsTests {
  @Test func metricsCountPassesSourcesTimersBlocksAndObserverCalls() {
    let metrics = Box<RunLoopMetrics?>(nil)
    TestThread.run {
      let runLoop = RunLoop.current
      runLoop.metricsEnabled = true
      let source = RunLoopSource(perform: {})
      runLoop.add(source, forMode: .default)
      source.signal()
      for _ in 0..<3 { runLoop.perform(inModes: [.default]) {} }
      runLoop.add(RunLoopTimer(after: .zero) { _ in }, forMode: .default)
      runLoop.add(RunLoopObserver(activities: .beforeSources, repeats: false) { _, _ in }, forMode: .default)
      _ = runLoop.run(mode: .default, timeout: .zero)
      _ = runLoop.run(mode: .default, timeout: .zero)
      metrics.value = runLoop.metrics
      source.invalidate()
    }
    let figures = metrics.value
    #expect(figures?.passes == 2)
    #expect(figures?.sourcesFired == 1)
    #expect(figures?.timersFired == 1)
    #expect(figures?.blocksRun == 3)
    #expect(figures?.observerCalls == 1)
  }

  @Test func metricsCountNothingWhileOffAndAreFrozenWhenSwitchedOff() {
    TestThread.run {
      let runLoop = RunLoop.current
      let source = RunLoopSource(perform: {})
      runLoop.add(source, forMode: .default)
      // Off (a run with `metrics` in THREADING_TOOLKIT_DIAGNOSTICS starts loops with them on).
      runLoop.metricsEnabled = false
      _ = runLoop.run(mode: .default, timeout: .zero)
      #expect(!runLoop.metricsEnabled)
      #expect(runLoop.metrics.passes == 0, "a loop counts nothing while metrics are off")
      runLoop.metricsEnabled = true
      _ = runLoop.run(mode: .default, timeout: .zero)
      runLoop.metricsEnabled = false
      let frozen = runLoop.metrics
      #expect(frozen.passes == 1)
      _ = runLoop.run(mode: .default, timeout: .zero)
      #expect(runLoop.metrics == frozen, "switched off, the figures stay as they were")
      runLoop.metricsEnabled = true
      #expect(runLoop.metrics.passes == 0, "switched on again, every figure starts from zero")
      source.invalidate()
    }
  }

  @Test func aSleepInProgressCountsAsAsleepForAReaderOnAnotherThread() {
    let shared = Box<RunLoop?>(nil)
    let stop = RunLoopSource(perform: { RunLoop.current.stop() })
    let loopThread = TestThread.spawn {
      let runLoop = RunLoop.current
      runLoop.metricsEnabled = true
      runLoop.add(stop, forMode: .default)
      shared.value = runLoop
      _ = runLoop.run(mode: .default, timeout: .seconds(30))
    }
    waitUntil { shared.value?.isWaiting == true }
    let runLoop = shared.value!
    let first = runLoop.metrics
    // A window of 20 ms, not two back-to-back reads: in a window of microseconds the reader's
    // own preemption or the loop's last busy instants can outweigh the sleep.
    let windowEnd = MonotonicInstant.after(.milliseconds(20))
    waitUntil { windowEnd.hasPassed }
    let second = runLoop.metrics
    stop.signalAndWakeUp()
    loopThread.join()
    #expect(second.timeAsleep > first.timeAsleep, "the sleep in progress grows between two snapshots")
    #expect(second.timeAsleep + second.timeBusy == second.end - second.start)
    let window = second.changes(since: first)
    #expect(window.utilization < 0.5, "the loop slept through the window between the two snapshots")
    stop.invalidate()
  }

  @Test func aTimedSleepCountsAsAsleepAndUtilizationStaysBelowOne() {
    let metrics = Box<RunLoopMetrics?>(nil)
    TestThread.run {
      let runLoop = RunLoop.current
      runLoop.metricsEnabled = true
      runLoop.add(RunLoopTimer(after: .milliseconds(30)) { _ in }, forMode: .default)
      _ = runLoop.run(mode: .default, timeout: .seconds(10))  // finished once the timer fired
      metrics.value = runLoop.metrics
    }
    let figures = metrics.value!
    #expect(figures.timersFired == 1)
    #expect(figures.timeAsleep >= .milliseconds(15), "\(figures)")
    #expect(figures.utilization < 1 && figures.utilization > 0)
    #expect(figures.timeAsleep + figures.timeBusy == figures.end - figures.start)
  }

  @Test func aWindowBetweenTwoSnapshotsHasTheDifferencesAndItsOwnUtilization() {
    let start = MonotonicInstant(nanoseconds: 1_000)
    let earlier = RunLoopMetrics(
      passes: 10, sourcesFired: 4, timeAsleep: .milliseconds(50), timeBusy: .milliseconds(50), start: start,
      end: start + .milliseconds(100))
    let later = RunLoopMetrics(
      passes: 30, sourcesFired: 9, timeAsleep: .milliseconds(80), timeBusy: .milliseconds(120), start: start,
      end: start + .milliseconds(200))
    let window = later.changes(since: earlier)
    #expect(window.passes == 20 && window.sourcesFired == 5)
    #expect(window.timeAsleep == .milliseconds(30) && window.timeBusy == .milliseconds(70))
    #expect(window.start == earlier.end && window.end == later.end)
    #expect(abs(window.utilization - 0.7) < 1e-9)
    #expect(abs(later.utilization - 0.6) < 1e-9)
    #expect(
      "\(window)"
        == "passes 20, sources 5, timers 0, blocks 0, observers 0, asleep 30 ms, busy 70 ms, utilization 70.0%")
  }

  @Test(.runsExitTests) func theMetricsSwitchOfTheEnvironmentTurnsMetricsOnInNewLoops() async {
    await #expect(processExitsWith: .success) {
      setenv(Diagnostics.environmentVariable, "metrics", 1)
      blocking {
        guard RunLoop.current.metricsEnabled else { exit(1) }
        Diagnostics.collectsRunLoopMetrics = false
        let later = Box(true)
        TestThread.run { later.value = RunLoop.current.metricsEnabled }
        guard !later.value else { exit(2) }
      }
    }
  }
}
