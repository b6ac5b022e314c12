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
