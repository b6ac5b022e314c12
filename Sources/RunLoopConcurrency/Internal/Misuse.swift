import RunLoop

/// Stops the process naming a programming error, in debug and release alike: the
/// RunLoopConcurrency module's counterpart of the other modules' misuse reports.
func concurrencyMisuse(_ typeName: String, _ what: String) -> Never {
  fatalError("\(typeName) misuse: \(what)")
}

/// Stops the process (misuse) when `modes` is empty: what `typeName` serves in no mode never
/// runs, and nothing tells it that the loop's thread ended. `consequence` says what is lost.
func checkModesNotEmpty(_ modes: [RunLoopMode], _ typeName: String, _ consequence: String) {
  if modes.isEmpty { concurrencyMisuse(typeName, "created with no mode (inModes: []): \(consequence)") }
}
