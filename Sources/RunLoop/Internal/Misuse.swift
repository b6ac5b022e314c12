/// Stops the process naming a programming error, in debug and release alike: the RunLoop
/// module's counterpart of Sync's internal `reportMisuse`.
func runLoopMisuse(_ typeName: String, _ what: String) -> Never {
  fatalError("\(typeName) misuse: \(what)")
}

/// A weak reference to a run loop, so items that remember where they are scheduled do not
/// keep a finished thread's run loop alive.
struct WeakRunLoop {
  weak var value: RunLoop?
}

/// The whole nanoseconds of `duration`, saturated to `Int64`.
func wholeNanoseconds(of duration: Duration) -> Int64 {
  let (seconds, attoseconds) = duration.components
  let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
  if overflow { return seconds > 0 ? .max : .min }
  let (total, overflow2) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000)
  if overflow2 { return seconds > 0 ? .max : .min }
  return total
}
