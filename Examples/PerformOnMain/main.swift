// The guide's performSelectorOnMainThread: (Table 3-2) with the process's real main thread:
// the main thread runs its run loop; a worker hands it three results, waiting until each
// was handled, then asks it to stop without waiting. Prints what the main thread did, one
// line per request, and exits 0 when everything happened on the main thread in order.
//
// Run it with `swift run PerformOnMainExample`; `Tests/ExampleTests` runs it as a test
// (a test runner's own main thread never runs a run loop, so this needs its own process).

import RunLoop
import Sync
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// What the main thread did, in order (written on the main thread, read after it stopped).
let log = LockedValue([String]())
let mainLoop = RunLoop.current
guard Thread.current.isMainThread, mainLoop === RunLoop.main else {
  print("error: not started on the main thread")
  exit(2)
}
// A run in a mode with nothing in it returns at once: keep the default mode alive.
let keepAlive = RunLoopSource(perform: {})
mainLoop.add(keepAlive, forMode: .default)

let worker: JoinableThread<Void, PerformError>
do {
  worker = try Thread.spawn(name: "worker") { () throws(PerformError) in
    for index in 1...3 {
      // Blocks until the main thread ran the block (Cocoa's waitUntilDone:YES); the
      // time limit turns a main thread that never runs its loop into an error, not a hang.
      try RunLoop.main.performAndWait(timeout: .seconds(60)) {
        log.withLock { $0.append("result \(index) handled on the main thread: \(Thread.current.isMainThread)") }
      }
    }
    RunLoop.main.performAndWakeUp {
      log.withLock { $0.append("stop requested") }
      RunLoop.current.stop()
    }
  }
} catch {
  print("error: cannot start the worker: \(error)")
  exit(2)
}

mainLoop.run()  // until the worker's last request stops it
let failure: PerformError?
do {
  try worker.join()
  failure = nil
} catch {
  failure = error
}
keepAlive.invalidate()

let lines = log.withLock { $0 }
for line in lines { print(line) }
let expected = (1...3).map { "result \($0) handled on the main thread: true" } + ["stop requested"]
if let failure {
  print("error: \(failure)")
  exit(1)
}
exit(lines == expected ? 0 : 1)
