// swift-format-ignore-file
// (Each test body is its README block verbatim, with the README's 4-space indentation.)
// The README's examples, compiled and run, so the front page never shows code that does not
// work. Keep each test body identical to its README block (plus the assertions).
import RunLoop
import RunLoopConcurrency
import Sync
import Testing
import Threads

@Suite("README examples", .timeLimit(.minutes(3)))
struct ReadmeExamplesTests {
  @Test("Sync in one minute")
  func syncExample() {
    final class Account: @unchecked Sendable { var balance = 0 }
    let account = Account()

    let lock = Lock()                   // futex-based; one atomic each way when uncontended
    lock.withLock { account.balance += 10 }     // released however the body exits

    if lock.lock(timeout: .milliseconds(5)) {    // monotonic clock, never the wall clock
        defer { lock.unlock() }
        account.balance -= 1
    }

    let hits = AtomicInteger<Int64>(0)
    hits.increment(ordering: .relaxed)           // no ordering is ever implied
    let flags = AtomicInteger<Int32>(0)
    flags.testAndSet(bit: 0, ordering: .full)    // the guide's bit numbering: flags == 128

    let visits = LockedValue([String: Int]())    // the state inside its lock's allocation
    visits.withLock { $0["/", default: 0] += 1 }  // reachable only while locked
    let seen = visits.withLock(when: { $0["/"] != nil }, timeout: .seconds(1)) { $0["/"] }
    // waits (at most a second) until a `withLock` elsewhere makes the condition true: Abseil's LockWhen

    #expect(account.balance == 9)
    #expect(hits.load(ordering: .relaxed) == 1)
    #expect(flags.load(ordering: .relaxed) == 128)
    #expect(visits.withLock { $0["/"] } == 1)
    #expect(seen == .some(.some(1)))
  }

  @Test("Threads in one minute")
  func threadsExample() throws {
    var configuration = ThreadConfiguration()
    configuration.stackSize = 1 << 20            // validated before start: typed errors, not crashes
    let worker = try Thread.spawn(name: "summer", configuration: configuration) {
        (1...100).reduce(0, +)
    }
    let sum = worker.join()                      // 5050; a thrown error would be rethrown here
                                                 // (join consumes the handle: a second join does not compile)
    let poller = try Thread.spawn(name: "poller") {
        Thread.current.onExit { print("poller done") }   // runs on the thread as it exits
        while !Thread.current.isExitRequested { Thread.yield() }
    }
    poller.thread.requestExit()                  // the guide's exit request, Listing 2-3
    poller.join()

    #expect(sum == 5050)  // and the poller ended: it saw the exit request
  }

  @Test("RunLoop in one minute")
  func runLoopExample() throws {
    let worker = try Thread.spawn(name: "loop") { () -> Int in
        let runLoop = RunLoop.current                 // one per thread, created on first use
        let ticks = AtomicInteger<Int>(0)
        let timer = RunLoopTimer(after: .milliseconds(10), interval: .milliseconds(10)) { timer in
            if ticks.increment(ordering: .relaxed) == 5 { timer.invalidate() }   // never early
        }
        runLoop.add(timer, forMode: .default)
        let sleeps = AtomicInteger<Int>(0)
        let observer = RunLoopObserver(activities: [.beforeWaiting]) { _, _ in
            sleeps.increment(ordering: .relaxed)      // see exactly what the loop does
        }
        runLoop.add(observer, forMode: .common)
        _ = runLoop.run(mode: .default, timeout: .seconds(5))   // .finished once the timer is gone
        return ticks.load(ordering: .relaxed)
    }
    #expect(worker.join() == 5)                       // 5

    let io = try RunLoopThread.start(name: "io")      // returns once its loop runs
    let served = LockedValue(0)
    try io.performAndWait(timeout: .seconds(1)) { served.withLock { $0 += 1 } }   // runs on "io"
    io.performAndWakeUp { served.withLock { $0 += 1 } }                            // never blocks
    io.stop()                                         // ends the loop and joins the thread

    #expect(served.withLock { $0 } >= 1)  // the second block may or may not have run before stop
  }

  @Test("Swift concurrency in one minute")
  func concurrencyExample() async throws {
    let worker = try startReadmeWorker()
    let counted = try await render(on: worker)
    #expect(counted == 2)
    #expect(await Renderer(on: worker.runLoop).draw())
    stopReadmeWorker(worker)
  }
}

// The README block, verbatim.
actor Renderer {                                  // pinned to a run-loop thread, in one line
    let executor: RunLoopExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    init(on runLoop: RunLoop) { executor = RunLoopExecutor(runLoop: runLoop) }
    func draw() -> Bool { RunLoop.current === executor.runLoop }   // always on that thread
}

func render(on worker: borrowing RunLoopThread) async throws -> Int {
    let renderer = Renderer(on: worker.runLoop)
    _ = await renderer.draw()                     // jobs run in the loop's passes, by priority
    let parser = try Thread.spawn(name: "parser") { "42".count }
    return await parser.value()                   // awaits the thread: no cooperative thread blocked
}

/// Starting and stopping a run-loop thread block briefly (`noasync`): done from synchronous code.
private func startReadmeWorker() throws -> RunLoopThread { try RunLoopThread.start(name: "render") }
private func stopReadmeWorker(_ worker: consuming RunLoopThread) { worker.stop() }
