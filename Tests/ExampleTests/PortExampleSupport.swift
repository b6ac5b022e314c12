import RunLoop
import Sync
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Runs `body` synchronously: exit-test bodies are async, where the toolkit's blocking calls
/// are unavailable (`noasync`); wrapping states that blocking is intended.
func portExampleBlocking(_ body: () -> Void) {
  body()
}

/// Runs the current thread's run loop in `mode` until `done()` holds or 60 s pass (a
/// generous bound for a loaded machine; tests assert `done()` afterwards).
func portExampleRunUntil(_ mode: RunLoopMode = .default, _ done: () -> Bool) {
  let giveUp = MonotonicInstant.after(.seconds(60))
  while !done() && !giveUp.hasPassed {
    _ = RunLoop.current.run(mode: mode, before: giveUp, returnAfterSourceHandled: true)
  }
}

/// Connects to a named port that another thread or process is about to register.
func portExampleRemote(_ name: String) throws(PortError) -> MessagePort {
  let giveUp = MonotonicInstant.after(.seconds(60))
  while true {
    do {
      return try MessagePort.remote(name: name)
    } catch where error.status == .invalid && !giveUp.hasPassed {
      var pause = timespec(tv_sec: 0, tv_nsec: 2_000_000)
      _ = nanosleep(&pause, nil)
    }
  }
}
