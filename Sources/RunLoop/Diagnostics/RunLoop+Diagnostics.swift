import Sync

extension RunLoop {
  // MARK: Metrics

  /// Whether the loop counts its passes and callbacks and times its sleeps (see
  /// ``metrics``). Starts true for loops created while
  /// ``/Sync/Diagnostics/collectsRunLoopMetrics`` is on (`metrics` in
  /// `THREADING_TOOLKIT_DIAGNOSTICS`), false otherwise. Settable from any thread: switching
  /// on starts every figure from zero, now; switching off freezes them. The cost while on:
  /// a relaxed load and store per pass and per callback, and two clock reads per sleep.
  public var metricsEnabled: Bool {
    get { diagnostics.metricsAreOn }
    set { diagnostics.setMetricsEnabled(newValue) }
  }

  /// The loop's metrics since they were switched on, as one value; readable from any
  /// thread at any time, without stopping the loop (each counter is exact at some instant
  /// of the call; the snapshot may mix instants by a callback or two). While metrics are off:
  /// the figures frozen when they were switched off, or all zero if they never were on.
  public var metrics: RunLoopMetrics {
    diagnostics.metrics()
  }

  // MARK: Callbacks, as diagnostics see them

  /// Fires `source` (claimed) as a callback of `mode`. Returns whether a handler ran.
  @inline(__always)
  func fire(_ source: RunLoopSource, in mode: ModeItems) -> Bool {
    let probe = diagnostics.callbackWillRun(.source, source, mode)
    let handled = source.fire()
    diagnostics.callbackDidRun(probe, source, mode, ran: handled)
    return handled
  }

  /// Fires `timer` if it is still due, as a callback of `mode`.
  @inline(__always)
  func fire(_ timer: RunLoopTimer, in mode: ModeItems) {
    let probe = diagnostics.callbackWillRun(.timer, timer, mode)
    let fired = timer.fireIfDue()
    diagnostics.callbackDidRun(probe, timer, mode, ran: fired)
  }

  /// Calls `observer` for `activity`, as a callback of `mode`.
  @inline(__always)
  func fire(_ observer: RunLoopObserver, _ activity: RunLoopActivity, in mode: ModeItems) {
    let probe = diagnostics.callbackWillRun(.observer, observer, mode, activity: activity.rawValue)
    let called = observer.fire(activity)
    diagnostics.callbackDidRun(probe, observer, mode, ran: called)
  }

  /// Runs a queued block, as a callback of `mode`.
  @inline(__always)
  func run(_ item: QueuedBlock, in mode: ModeItems) {
    let probe = diagnostics.callbackWillRun(.block, nil, mode)
    item.block()
    diagnostics.callbackDidRun(probe, nil, mode, ran: true)
  }
}
