// `@MainActor` code on the process's real main thread, inside passes of the main run loop:
// `MainRunLoopExecutor` makes `RunLoop.main` the main actor's executor. The program shows
// `@MainActor` code, a run-loop timer and an actor pinned to a worker run-loop thread working
// together, and checks after every kind of `await` (a sleep, actor hops, a continuation
// resumed from another thread, a detached task calling back) that `@MainActor` code is on the
// main thread. It prints one line per check ("ok: ..." or "FAILED: ...") and exits 0 when
// every check passed.
//
//   swift run MainActorOnRunLoopExample                 # the switch, RunLoop.main running
//   swift run MainActorOnRunLoopExample --foreign-loop  # the switch, the main thread owned by a
//                                                       # hand-written poll() loop (GTK, libuv)
//   swift run MainActorOnRunLoopExample --not-installed # without the switch: nothing changes
//   swift run MainActorOnRunLoopExample --short-of-descriptors N
//                                                       # install() with only N descriptors free:
//                                                       # it throws, never stops the process
//
// `Tests/ExampleTests` runs all three as child processes (a test runner's main thread never
// runs a run loop).

import RunLoop
import RunLoopConcurrency
import Sync
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// The checks' outcome, printed as they are made.
enum Report {
  private static let failures = AtomicInteger<Int>(0)

  static func check(_ condition: Bool, _ what: String) {
    print(condition ? "ok: \(what)" : "FAILED: \(what)")
    if !condition { _ = failures.fetchAdd(1, ordering: .relaxed) }
  }

  /// Prints the summary, and exits 1 (on the main thread: output is flushed) when a check
  /// failed.
  static func summarize() {
    let failed = failures.load(ordering: .relaxed)
    print(failed == 0 ? "all checks passed" : "\(failed) check(s) failed")
    if failed != 0 { exit(1) }
  }

  /// Prints the summary and exits: 0 when every check passed, 1 otherwise.
  static func finish() -> Never {
    summarize()
    exit(0)
  }
}

/// An actor pinned to a worker run-loop thread: one line (`unownedExecutor`) puts all of its
/// code on that thread.
actor Sensor {
  private let executor: RunLoopExecutor
  private var readings = 0
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

  init(on runLoop: RunLoop) { executor = RunLoopExecutor(runLoop: runLoop) }

  /// Takes a reading on the sensor's thread; says which thread that was.
  func read() -> (value: Int, threadName: String?) {
    readings += 1
    return (readings, Thread.current.name)
  }

  /// Sleeps in the actor; returns how long the sleep took and whether the actor's code came
  /// back to its own thread.
  func settle(for duration: Duration) async -> (elapsed: Duration, onOwnThread: Bool) {
    let start = ContinuousClock.now
    try? await Task.sleep(for: duration)
    let elapsed = ContinuousClock.now - start
    return (elapsed, Thread.current.name == "sensor")
  }
}

/// A default actor (the platform's executor).
actor Tally {
  private var total = 0
  func add(_ value: Int) -> Int {
    total += value
    return total
  }
}

@MainActor func isOnMainThread() -> Bool { Thread.isMainThread }

@MainActor enum Demo {
  /// The `@MainActor` part of the program: `sensorLoop` is the worker thread's run loop.
  static func run(sensorLoop: RunLoop) async {
    Report.check(Thread.isMainThread, "@MainActor code starts on the main thread")

    // A run-loop timer on the main run loop fires between main-actor jobs, on the main thread.
    let timerOnMain: Bool = await withCheckedContinuation { continuation in
      let timer = RunLoopTimer(after: .milliseconds(10)) { _ in
        continuation.resume(returning: Thread.isMainThread && MainActor.assumeIsolated { isOnMainThread() })
      }
      RunLoop.main.add(timer, forMode: .common)
    }
    Report.check(timerOnMain, "a timer on the main run loop fires on the main thread (MainActor.assumeIsolated passes)")
    Report.check(Thread.isMainThread, "back on the main thread after awaiting the timer")

    let requested = Duration.milliseconds(30)
    var start = ContinuousClock.now
    try? await Task.sleep(for: requested)
    Report.check(ContinuousClock.now - start >= requested, "Task.sleep on @MainActor is never early")
    Report.check(Thread.isMainThread, "back on the main thread after Task.sleep")

    start = ContinuousClock.now
    try? await Task.sleep(for: requested, tolerance: .milliseconds(10))
    Report.check(ContinuousClock.now - start >= requested, "Task.sleep with a tolerance is never early")

    let sensor = Sensor(on: sensorLoop)
    let reading = await sensor.read()
    Report.check(reading.threadName == "sensor", "the pinned actor runs on its run-loop thread")
    Report.check(Thread.isMainThread, "back on the main thread after a hop to the pinned actor")

    let settled = await sensor.settle(for: .milliseconds(20))
    Report.check(
      settled.elapsed >= .milliseconds(20) && settled.onOwnThread,
      "Task.sleep in the pinned actor is never early and resumes on its thread")
    Report.check(Thread.isMainThread, "back on the main thread after the pinned actor slept")

    let total = await Tally().add(reading.value)
    Report.check(total == 1 && Thread.isMainThread, "back on the main thread after a hop to a default actor")

    // Resumed by a block on the sensor's thread (not through the actor).
    let value: Int = await withCheckedContinuation { continuation in
      sensorLoop.performAndWakeUp { continuation.resume(returning: 7) }
    }
    Report.check(
      value == 7 && Thread.isMainThread, "back on the main thread after a continuation resumed from another thread")

    let fromDetached = await Task.detached { await isOnMainThread() }.value
    Report.check(fromDetached, "a @MainActor function called from a detached task runs on the main thread")
    Report.check(Thread.isMainThread, "back on the main thread after awaiting the detached task")
  }
}

/// Without the switch: the toolkit changes nothing. `RunLoop.main` holds no executor source,
/// and tasks, actors and sleeps use the platform's executors as before.
enum NotInstalled {
  static func run() -> Never {
    Report.check(!MainRunLoopExecutor.isInstalled, "the switch is off unless installed")
    Report.check(
      RunLoop.main.run(mode: .default, timeout: .zero) == .finished,
      "the main run loop is untouched (nothing in its default mode)")
    let done = Latch(count: 1)
    let outcome = LockedValue<(Duration, Int)?>(nil)
    Task.detached {
      let start = ContinuousClock.now
      try? await Task.sleep(for: .milliseconds(10))
      let elapsed = ContinuousClock.now - start
      let total = await Tally().add(5)
      outcome.withLock { $0 = (elapsed, total) }
      done.countDown()
    }
    done.wait()
    let (elapsed, total) = outcome.withLock { $0 }!
    Report.check(elapsed >= .milliseconds(10) && total == 5, "tasks, sleeps and default actors work as before")
    Report.finish()
  }
}

/// The main thread owned by a hand-written `poll()` loop, standing in for GTK's or libuv's:
/// it drives the main run loop through its descriptor, with no timeout of its own (no
/// tickler), until the `@MainActor` part is done.
enum ForeignLoop {
  static func run(sensorLoop: RunLoop) -> Never {
    do {
      try MainRunLoopExecutor.install()
    } catch {
      print("FAILED: install: \(error)")
      exit(1)
    }
    let done = AtomicBool(false)
    Task { @MainActor in
      await Demo.run(sensorLoop: sensorLoop)
      done.store(true, ordering: .releasing)
    }
    let loop = RunLoop.main
    var watched = pollfd(fd: loop.pollDescriptor, events: Int16(POLLIN), revents: 0)
    var timedOut = false
    loop.runDueWork()
    while !done.load(ordering: .acquiring) {
      watched.revents = 0
      // The limit only turns a lost wake-up into a failure instead of a hang.
      let count = poll(&watched, 1, 20_000)
      if count == 0 {
        timedOut = true
        break
      }
      if count > 0 { loop.runDueWork() }
    }
    Report.check(!timedOut, "the foreign loop was woken for every piece of work (no tickler)")
    Report.finish()
  }
}

/// `--exit-request`: another thread asks the main thread to exit while `@MainActor` code
/// awaits something that never comes; the main run loop's runs stop, so `runMain` ends the
/// program (status 0) instead of waiting, or spinning on runs that return at once.
enum ExitRequest {
  static func run() -> Never {
    MainRunLoopExecutor.runMain {
      Report.check(Thread.isMainThread, "@MainActor code starts on the main thread")
      print("asking the main thread to exit")
      do {
        let asker = try Thread.spawn(name: "asker") { Thread.main.requestExit() }
        // Never resumed: once the request is made, the main run loop runs no more of the
        // main actor's jobs.
        await asker.value()
        try? await Task.sleep(for: .seconds(3600))
        Report.check(false, "the program ended at the exit request")
      } catch {
        Report.check(false, "the asking thread started: \(error)")
      }
      Report.finish()
    }
  }
}

/// `install()` when the process may open only `free` more descriptors (the main run loop and
/// the timer thread's loop need three each): it either installs or throws a
/// `ThreadStartError`, and never stops the process. Prints "installed" or "threw: <error>".
enum ShortOfDescriptors {
  static func run(free: Int) -> Never {
    var highest: Int32 = -1
    for descriptor in 0..<Int32(4096) where fcntl(descriptor, F_GETFD) != -1 { highest = descriptor }
    // Descriptors are allocated lowest first: with the gaps below `highest` filled (with
    // /dev/null), exactly `free` more fit under a limit of `highest + 1 + free`.
    while true {
      let filler = open("/dev/null", O_RDONLY)
      if filler < 0 || filler > highest {
        if filler >= 0 { close(filler) }
        break
      }
    }
    var limit = rlimit()
    _ = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    var original = limit
    limit.rlim_cur = rlim_t(Int(highest) + 1 + free)
    guard highest >= 0, setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else {
      print("FAILED: cannot set the descriptor limit")
      exit(1)
    }
    do throws(ThreadStartError) {
      try MainRunLoopExecutor.install()
      print("installed")
    } catch {
      print("threw: \(error)")
    }
    // The limit back for what runs at exit (a leak checker reads /proc).
    _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &original)
    exit(0)
  }
}

@main struct MainActorOnRunLoopExample {
  static func main() {
    let arguments = CommandLine.arguments.dropFirst()
    if arguments.contains("--not-installed") { NotInstalled.run() }
    if arguments.contains("--exit-request") { ExitRequest.run() }
    if let flag = arguments.firstIndex(of: "--short-of-descriptors"), flag + 1 < arguments.endIndex,
      let free = Int(arguments[flag + 1])
    {
      ShortOfDescriptors.run(free: free)
    }
    let sensorThread: RunLoopThread
    do {
      sensorThread = try RunLoopThread.start(name: "sensor")
    } catch {
      print("FAILED: cannot start the sensor thread: \(error)")
      exit(1)
    }
    let sensorLoop = sensorThread.runLoop
    if arguments.contains("--foreign-loop") { ForeignLoop.run(sensorLoop: sensorLoop) }
    // The usual shape: one call installs the switch and runs the main run loop until the
    // @MainActor body returns, then exits with status 0.
    MainRunLoopExecutor.runMain {
      await Demo.run(sensorLoop: sensorLoop)
      Report.summarize()
    }
  }
}
