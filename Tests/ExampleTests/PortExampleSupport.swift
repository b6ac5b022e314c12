import RunLoop
import Sync
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Runs the current thread's run loop in `mode` until `done()` holds or 60 s pass (a
/// generous bound for a loaded machine; tests assert `done()` afterwards).
func portExampleRunUntil(_ mode: RunLoopMode = .default, _ done: () -> Bool) {
  let giveUp = MonotonicInstant.after(.seconds(60))
  while !done() && !giveUp.hasPassed {
    _ = RunLoop.current.run(mode: mode, before: giveUp, returnAfterSourceHandled: true)
  }
}
