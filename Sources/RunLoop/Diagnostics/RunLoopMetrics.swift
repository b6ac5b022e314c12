import Sync

/// A snapshot of one run loop's work and sleep since its metrics were switched on (see
/// ``RunLoop/metrics``): what libuv's `uv_metrics_info` and idle time, and Node's event-loop
/// utilization, give for their loops.
///
/// **Time.** ``timeAsleep`` is the time the loop's thread spent sleeping in the loop's waits
/// (`epoll_wait` or its futex); ``timeBusy`` is the rest of the time since ``start``:
/// running callbacks and the loop's own bookkeeping, and also whatever the thread did
/// outside its runs (libuv and Node count the same way: everything but the wait is work).
/// A loop driven by a foreign event loop (``RunLoop/runDueWork(mode:)``) never sleeps in
/// its own waits, so all its time counts as busy: the foreign loop's idle time is the
/// measure there.
/// ``utilization`` is busy time over elapsed time; ``changes(since:)`` gives the figures of
/// a window between two snapshots, so `later.changes(since: earlier).utilization` is the
/// utilization over that window.
///
/// ```swift
/// runLoop.metricsEnabled = true
/// let before = runLoop.metrics
/// // ... a second later, from any thread:
/// let window = runLoop.metrics.changes(since: before)
/// print(window)   // "passes 1204, sources 1200, timers 4, blocks 0, observers 0, asleep 912 ms, busy 88 ms, utilization 8.8%"
/// ```
public struct RunLoopMetrics: Hashable, Sendable, CustomStringConvertible {
  /// Passes made (including zero-timeout runs: each makes one).
  public var passes: Int = 0
  /// Custom, descriptor and port sources fired (whose handler ran).
  public var sourcesFired: Int = 0
  /// Timer callbacks run.
  public var timersFired: Int = 0
  /// Queued blocks run (`perform`, perform requests).
  public var blocksRun: Int = 0
  /// Observer callbacks run.
  public var observerCalls: Int = 0
  /// Time the loop's thread slept in the loop's waits.
  public var timeAsleep: Duration = .zero
  /// Time since ``start`` not spent asleep.
  public var timeBusy: Duration = .zero
  /// Where the figures start: when metrics were switched on (or the earlier snapshot, for a
  /// window from ``changes(since:)``).
  public var start: MonotonicInstant
  /// When the snapshot was taken (when metrics were switched off, for a frozen snapshot).
  public var end: MonotonicInstant

  /// A snapshot with the given figures.
  public init(
    passes: Int = 0, sourcesFired: Int = 0, timersFired: Int = 0, blocksRun: Int = 0, observerCalls: Int = 0,
    timeAsleep: Duration = .zero, timeBusy: Duration = .zero, start: MonotonicInstant, end: MonotonicInstant
  ) {
    self.passes = passes
    self.sourcesFired = sourcesFired
    self.timersFired = timersFired
    self.blocksRun = blocksRun
    self.observerCalls = observerCalls
    self.timeAsleep = timeAsleep
    self.timeBusy = timeBusy
    self.start = start
    self.end = end
  }

  /// Busy time over elapsed time (busy plus asleep), from 0 (always asleep) to 1 (never
  /// asleep); 0 when no time elapsed.
  public var utilization: Double {
    let busy = Double(MonotonicInstant.nanoseconds(of: timeBusy))
    let total = busy + Double(MonotonicInstant.nanoseconds(of: timeAsleep))
    return total > 0 ? busy / total : 0
  }

  /// The figures of the window from `earlier` to this snapshot: every counter and time
  /// minus `earlier`'s, starting at `earlier.end`. Both must come from the same run loop
  /// with metrics on in between (negative differences are clamped to zero).
  public func changes(since earlier: RunLoopMetrics) -> RunLoopMetrics {
    RunLoopMetrics(
      passes: Swift.max(0, passes - earlier.passes), sourcesFired: Swift.max(0, sourcesFired - earlier.sourcesFired),
      timersFired: Swift.max(0, timersFired - earlier.timersFired),
      blocksRun: Swift.max(0, blocksRun - earlier.blocksRun),
      observerCalls: Swift.max(0, observerCalls - earlier.observerCalls),
      timeAsleep: Swift.max(.zero, timeAsleep - earlier.timeAsleep),
      timeBusy: Swift.max(.zero, timeBusy - earlier.timeBusy), start: earlier.end, end: end)
  }

  /// `"passes 12, sources 3, timers 1, blocks 4, observers 0, asleep 1204 ms, busy 3 ms,
  /// utilization 0.2%"`.
  public var description: String {
    let percent = (utilization * 1000).rounded() / 10
    return
      "passes \(passes), sources \(sourcesFired), timers \(timersFired), blocks \(blocksRun), observers \(observerCalls), asleep \(ItemName.describe(timeAsleep)), busy \(ItemName.describe(timeBusy)), utilization \(percent)%"
  }
}
