/// Runs `body(index)` on `count` toolkit threads and joins them all before returning.
func syncExamplesRunThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
  let threads = (0..<count).map { index in runLoopExampleSpawn { body(index) } }
  for thread in threads { thread.join() }
}
