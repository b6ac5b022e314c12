import CAllocationStats
import RunLoop
import Sync
import TestSupport
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Every public lifecycle, repeated: whatever a cycle creates (heap memory, descriptors,
/// threads) is gone when the cycle ends, so the process's totals stay flat.
///
/// Each lifecycle runs in an exit test, a process of its own: the totals are process-wide,
/// and the tests of other suites running beside this one in the runner would move them.
/// In the child, a warm-up makes the one-time allocations (run-loop tables, thread caches,
/// the allocator's own bookkeeping), then the totals are read, the cycles run, and the
/// totals are read again: descriptors and threads must be back to the same count, and live
/// heap bytes within `allocationTolerance`, which is below one leaked allocation per cycle.
/// A failing child prints the three totals.
@Suite("Leak loops", .timeLimit(.minutes(3)))
struct LeakLoopTests {
  @Test("threads: spawn (with an exit-request handler capturing the thread) and join", .runsExitTests)
  func threads() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      exitFlat(threadsLifecycle)
    }
    expectNothingPrinted(result)
  }

  @Test("run-loop threads: start, perform, stop", .runsExitTests)
  func runLoopThreads() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      exitFlat(runLoopThreadsLifecycle)
    }
    expectNothingPrinted(result)
  }

  @Test("in-process ports: create, handle in a run loop, send, invalidate", .runsExitTests)
  func ports() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      exitFlat(portsLifecycle)
    }
    expectNothingPrinted(result)
  }

  @Test("named ports: register, connect, request and reply, invalidate", .runsExitTests)
  func namedPorts() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      exitFlat(namedPortsLifecycle)
    }
    expectNothingPrinted(result)
  }

  @Test("timers: add, fire; add, invalidate", .runsExitTests)
  func timers() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      exitFlat(timersLifecycle)
    }
    expectNothingPrinted(result)
  }

  @Test("delayed performs: fired, cancelled", .runsExitTests)
  func delayedPerforms() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      exitFlat(delayedPerformsLifecycle)
    }
    expectNothingPrinted(result)
  }

  @Test("descriptor sources: watch a pipe, fire, invalidate, close", .runsExitTests)
  func descriptorSources() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      exitFlat(descriptorSourcesLifecycle)
    }
    expectNothingPrinted(result)
  }

  @Test("process locks: take, read the owner, release", .runsExitTests)
  func processLocks() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      exitFlat(processLocksLifecycle)
    }
    expectNothingPrinted(result)
  }
}

/// threads: spawn and join.
private func threadsLifecycle(_ count: Int) {
  cycles(count) {
    let thread = try! Thread.spawn { () throws(Never) -> Int in
      // The guide's Listing 2-3: a handler that captures its own thread object.
      let me = Thread.current
      me.addExitRequestHandler { me.threadDictionary["exitNow"] = true }
      return 1
    }
    _ = thread.join()
  }
}

/// run-loop threads: start, perform, stop.
private func runLoopThreadsLifecycle(_ count: Int) {
  // Each cycle creates a thread and a run loop's three descriptors; a tenth of the
  // cycles keeps the loop under ten seconds.
  cycles(count / 10) {
    let worker = try! RunLoopThread.start()
    try! worker.runLoop.performAndWait {}
    worker.stop()
  }
}

/// in-process ports: create, handle in a run loop, send, invalidate.
private func portsLifecycle(_ count: Int) {
  let runLoop = RunLoop.current
  cycles(count) {
    let port = Port()
    let received = Box(0)
    // The handler captures its port: invalidation must end the cycle.
    port.setHandler { _ in
      withExtendedLifetime(port) { received.value += 1 }
    }
    runLoop.add(port, forMode: .default)
    try! port.send(PortMessage(msgid: 1, payload: [1, 2, 3]), timeout: .zero)
    _ = runLoop.run(mode: .default, timeout: .zero)
    precondition(received.value == 1)
    port.invalidate()
  }
}

/// named ports: register, connect, request and reply, invalidate.
private func namedPortsLifecycle(_ count: Int) {
  // One name for every cycle: each registration takes it anew. Sockets, an epoll set and
  // the serving thread's work make a cycle dear: a tenth of the cycles.
  let name = "tk-test-leakloop-\(getpid())"
  let server = try! RunLoopThread.start()
  let serverLoop = server.runLoop
  cycles(count / 10) {
    let local = try! MessagePort.local(name: name) { message in message.payload }
    try! serverLoop.performAndWait { serverLoop.add(local, forMode: .default) }
    let remote = try! MessagePort.remote(name: name)
    let reply = try! remote.send(
      msgid: 7, data: [9, 8], sendTimeout: .seconds(10), receiveTimeout: .seconds(10), replyMode: .awaitReply)
    precondition(reply == [9, 8])
    remote.invalidate()
    local.invalidate()
  }
  server.stop()
}

/// timers: add, fire; add, invalidate.
private func timersLifecycle(_ count: Int) {
  let runLoop = RunLoop.current
  cycles(count) {
    let payload = [UInt8](repeating: 1, count: 256)
    let fired = RunLoopTimer(after: .zero) { _ in _ = payload.count }
    runLoop.add(fired, forMode: .default)
    let cancelled = RunLoopTimer(after: .seconds(3_600)) { _ in _ = payload.count }
    runLoop.add(cancelled, forMode: .default)
    cancelled.invalidate()
    _ = runLoop.run(mode: .default, timeout: .seconds(10))
    precondition(!fired.isValid)
  }
}

/// delayed performs: fired, cancelled.
private func delayedPerformsLifecycle(_ count: Int) {
  let runLoop = RunLoop.current
  cycles(count) {
    let payload = [UInt8](repeating: 1, count: 256)
    let ran = Box(false)
    runLoop.perform(afterDelay: .zero, inModes: [.default]) { ran.value = payload.count > 0 }
    runLoop.perform(afterDelay: .seconds(3_600)) { _ = payload.count }.cancel()
    _ = runLoop.run(mode: .default, timeout: .seconds(10))
    precondition(ran.value)
  }
}

/// descriptor sources: watch a pipe, fire, invalidate, close.
private func descriptorSourcesLifecycle(_ count: Int) {
  let runLoop = RunLoop.current
  cycles(count) {
    var ends: [Int32] = [0, 0]
    precondition(pipe(&ends) == 0)
    let source = FileDescriptorSource(descriptor: ends[0]) { source, _ in
      var byte: UInt8 = 0
      _ = read(source.descriptor, &byte, 1)
      source.invalidate()
    }
    runLoop.add(source, forMode: .default)
    var byte: UInt8 = 1
    precondition(write(ends[1], &byte, 1) == 1)
    _ = runLoop.run(mode: .default, timeout: .seconds(10))
    precondition(!source.isValid)
    close(ends[0])
    close(ends[1])
  }
}

/// process locks: take, read the owner, release.
private func processLocksLifecycle(_ count: Int) {
  let path = "/tmp/tk-leakloop-\(getpid()).lock"
  cycles(count) {
    let lock = try! ProcessLock(path: path)
    precondition(try! lock.tryLockBreakingStaleLock())
    precondition(try! lock.owner() != nil)
    try! lock.unlock()
  }
  unlink(path)
  unlink(path + ".break")
}

/// 10,000 cycles; a tenth under a sanitizer, which slows every cycle down about tenfold
/// (the plain run and LeakSanitizer's exit-time check cover the rest).
private let leakLoopCycles = isRunningUnderSanitizer ? 1_000 : 10_000

/// Live heap bytes allowed to differ: below one leaked allocation (32 bytes at least in
/// glibc's accounting) per cycle of the loops that run a tenth of the cycles, several times
/// the allocator's own bookkeeping noise seen here (a few KiB).
private let allocationTolerance = 16 * 1024

/// Runs `body` `count` times.
private func cycles(_ count: Int, _ body: () -> Void) {
  for _ in 0..<count { body() }
}

/// In an exit test's process: runs `lifecycle` twice, a warm-up of a tenth of the cycles,
/// then `leakLoopCycles` measured, and checks that descriptors came back to their count,
/// that no thread was left behind (the test runner's own threads may end meanwhile), and
/// that live heap bytes stayed within `allocationTolerance` (not under a sanitizer, whose
/// allocator glibc's statistics do not see: LeakSanitizer checks the heap under
/// AddressSanitizer). Prints a `leak loop:` line with the totals when they moved (the parent
/// finds it in standard error: a failed exit expectation would return no output), then
/// exits 0.
private func exitFlat(_ lifecycle: (_ cycles: Int) -> Void) -> Never {
  blocking {
    lifecycle(leakLoopCycles / 10)
    let before = Totals()
    lifecycle(leakLoopCycles)
    // Threads that ended are joined, but the kernel may take a moment to reap them.
    let giveUp = MonotonicInstant.after(.seconds(10))
    var after = Totals()
    while after.threads > before.threads && !giveUp.hasPassed {
      sched_yield()
      after = Totals()
    }
    var bytes = after.heapBytes - before.heapBytes
    if !isRunningUnderSanitizer, bytes >= allocationTolerance {
      // One more loop, judged alone: a table of the runtime or of the diagnostics that grew
      // once during the first does not grow again, a leak of this lifecycle does.
      let again = Totals()
      lifecycle(leakLoopCycles)
      after = Totals()
      bytes = after.heapBytes - again.heapBytes
    }
    let flat =
      after.descriptors == before.descriptors && after.threads <= before.threads
      && (isRunningUnderSanitizer || bytes < allocationTolerance)
    if !flat {
      printToStandardError(
        "leak loop: descriptors \(before.descriptors) -> \(after.descriptors), threads \(before.threads) -> "
          + "\(after.threads), live heap bytes \(before.heapBytes) -> \(after.heapBytes) (\(bytes))")
    }
    exit(0)
  }
  fatalError("unreachable")
}

/// Fails the test with the child's `leak loop:` line, if it printed one.
private func expectNothingPrinted(_ result: ExitTest.Result?) {
  let output = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
  let report = output.split(separator: "\n").filter { $0.contains("leak loop:") }
  #expect(report.isEmpty, "\(report.joined(separator: "\n"))")
}

/// Writes `line` to standard error (where the exit test collects it).
private func printToStandardError(_ line: String) {
  let text = line + "\n"
  _ = text.withCString { write(2, $0, strlen($0)) }
}

/// The process's open descriptors, threads and live heap bytes.
private struct Totals {
  let descriptors: Int
  let threads: Int
  let heapBytes: Int

  init() {
    descriptors = entries(in: "/proc/self/fd")
    threads = entries(in: "/proc/self/task")
    heapBytes = Int(tk_test_allocated_bytes())
  }
}

/// How many entries `directory` has (besides `.` and `..`; the directory's own descriptor
/// is counted in every reading alike).
private func entries(in directory: String) -> Int {
  guard let handle = opendir(directory) else { fatalError("opendir(\(directory)): errno \(errno)") }
  defer { closedir(handle) }
  var count = 0
  while let entry = readdir(handle) {
    let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
      String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
    }
    if name != "." && name != ".." { count += 1 }
  }
  return count
}
