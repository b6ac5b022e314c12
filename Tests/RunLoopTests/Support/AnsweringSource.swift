import RunLoop
import Sync

/// A run-loop source whose handler counts its calls and answers each one on a semaphore: the
/// partner of the tests that wake a loop from another thread and wait for it to act.
final class AnsweringSource: Sendable {
  let source: RunLoopSource
  /// Signalled once per handler call.
  let answered = Sync.Semaphore(value: 0)
  /// How many times the handler ran.
  let handled = AtomicInteger<Int>(0)

  init() {
    source = RunLoopSource(perform: { [handled, answered] in
      _ = handled.increment(ordering: .relaxed)
      answered.signal()
    })
  }

  /// How many times the handler ran so far.
  var handledCount: Int { handled.load(ordering: .relaxed) }

  /// Signals the source, wakes `runLoop` (or lets `wake` do it) and waits for the answer;
  /// false when none came within 10 s, a bound only a lost wake-up reaches.
  func ping(_ runLoop: RunLoop, wake: (RunLoop) -> Void = { $0.wakeUp() }) -> Bool {
    source.signal()
    wake(runLoop)
    return answered.wait(timeout: .seconds(10))
  }
}
