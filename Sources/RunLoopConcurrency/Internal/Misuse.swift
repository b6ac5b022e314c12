/// Stops the process naming a programming error, in debug and release alike: the
/// RunLoopConcurrency module's counterpart of the other modules' misuse reports.
func concurrencyMisuse(_ typeName: String, _ what: String) -> Never {
  fatalError("\(typeName) misuse: \(what)")
}
