import ProcessTestSupport
import Testing

@testable import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Errors escaping detached threads, and critical threads at process exit.
@Suite("Detached errors and critical threads", .serialized, .timeLimit(.minutes(3)))
struct ProcessExitTests {
  struct DiskFull: Error {}

  @Test func applicationHandlerReceivesTheErrorAndTheThread() throws {
    let latch = TestLatch()
    let seen = TestBox<(String, String?)?>(nil)
    Thread.detachedErrorHandler = { error, thread in
      seen.value = ("\(error)", thread.name)
      latch.open()
    }
    defer { Thread.resetDetachedErrorHandler() }
    try Thread.detach(name: "saver") { throw DiskFull() }
    latch.wait()
    #expect(seen.value?.0 == "DiskFull()")
    #expect(seen.value?.1 == "saver")
  }

  @Test func errorOfAJoinableThreadDetachedLaterIsReported() throws {
    let latch = TestLatch()
    let seen = TestBox<String?>(nil)
    Thread.detachedErrorHandler = { _, thread in
      seen.value = thread.name
      latch.open()
    }
    defer { Thread.resetDetachedErrorHandler() }
    let worker = try Thread.spawn(name: "late") { () throws(DiskFull) in throw DiskFull() }
    worker.detach()
    latch.wait()
    #expect(seen.value == "late")
  }

  @Test func droppingAnUnjoinedHandleDetachesAndReportsTheError() throws {
    let latch = TestLatch()
    let seen = TestBox<String?>(nil)
    Thread.detachedErrorHandler = { _, thread in
      seen.value = thread.name
      latch.open()
    }
    defer { Thread.resetDetachedErrorHandler() }
    do {
      _ = try Thread.spawn(name: "dropped") { () throws(DiskFull) in throw DiskFull() }
    }
    latch.wait()
    #expect(seen.value == "dropped")
  }

  @Test(.runsExitTests) func criticalThreadThatCallsExitItselfDoesNotWaitForItself() async {
    await #expect(processExitsWith: .exitCode(7)) {
      childCriticalThreadCallsExit()
    }
  }

  @Test(.runsExitTests) func criticalThreadCallingExitWhileItsDictionaryIsEmptiedDoesNotWaitForItself() async throws {
    // The thread is still counted while its dictionary's values are released (after its
    // body and exit handlers): exit() from one of their deinitializers must not wait for the
    // calling thread. The alarm turns a hang into a failure.
    let result = try await #require(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      armAlarm(seconds: 10)
      childCriticalThreadExitsFromADictionaryValue()
    }
    // Under ThreadSanitizer, exit() from inside a deinitializer (a region the sanitizer
    // ignores) ends with the sanitizer's own exit code and this note instead of 7.
    let text = String(decoding: result.standardErrorContent, as: UTF8.self)
    let endedBySanitizer = result.exitStatus == .exitCode(66) && text.contains("finished with ignores enabled")
    #expect(result.exitStatus == .exitCode(7) || endedBySanitizer)
  }

  @Test(.runsExitTests) func defaultHandlerPrintsTheThreadsNameToStandardError() async throws {
    let result = try await #require(processExitsWith: .success, observing: [\.standardErrorContent]) {
      childThrowingFromACriticalDetachedThread()
      exit(0)
    }
    let text = String(decoding: result.standardErrorContent, as: UTF8.self)
    #expect(text.contains("Thread \"archiver\""))
    #expect(text.contains("DiskFull"))
  }

  @Test(.runsExitTests) func criticalThreadFinishesWritingBeforeTheProcessExits() async throws {
    let path = "/tmp/threads-critical-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).txt"
    defer { unlink(path) }
    await #expect(processExitsWith: .success) { [path = path as String] in
      childStartsCriticalWriterThenExits(path: path)
      exit(0)  // runs atexit handlers: the toolkit waits for the writer
    }
    let contents = try #require(readWholeFile(path))
    let lines = contents.split(separator: "\n")
    #expect(lines.count == criticalLineCount)
    #expect(lines.last == "line \(criticalLineCount - 1)")
  }

  @Test(.runsExitTests) func criticalThreadReleasesItsBodysCapturesBeforeTheProcessExits() async throws {
    let path = "/tmp/threads-capture-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).txt"
    defer { unlink(path) }
    await #expect(processExitsWith: .success) { [path = path as String] in
      childCriticalThreadWithFlushingCapture(path: path)
      exit(0)  // the toolkit's atexit handler waits for the critical thread
    }
    #expect(readWholeFile(path) == "flushed\n", "the capture's deinitializer was cut off by exit()")
  }
}

/// Writes "flushed" to `path` when released, after slow work (a buffered writer that flushes
/// when released).
final class FlushesWhenReleased: Sendable {
  let path: String
  init(path: String) { self.path = path }
  func use() {}
  deinit {
    Thread.sleep(for: .milliseconds(200))  // slow work the exit must not cut off; not synchronization
    let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    precondition(descriptor >= 0)
    var text = "flushed\n"
    text.withUTF8 { bytes in precondition(write(descriptor, bytes.baseAddress, bytes.count) == bytes.count) }
    precondition(close(descriptor) == 0)
  }
}

/// Child body: a critical detached thread whose body captures a writer that flushes when
/// released; the caller exits at once.
func childCriticalThreadWithFlushingCapture(path: String) {
  var configuration = ThreadConfiguration()
  configuration.finishBeforeExit = true
  let writer = FlushesWhenReleased(path: path)
  do {
    try Thread.detach(name: "flusher", configuration: configuration) { writer.use() }
  } catch {
    exit(3)
  }
}

let criticalLineCount = 50

/// Child body: a critical detached thread throws after the child's main code has moved on.
func childThrowingFromACriticalDetachedThread() {
  var configuration = ThreadConfiguration()
  configuration.finishBeforeExit = true
  _ = try? Thread.detach(name: "archiver", configuration: configuration) {
    Thread.sleep(for: .milliseconds(20))  // makes it outlive the caller; not synchronization
    throw ProcessExitTests.DiskFull()
  }
}

/// Child body: a critical thread ends the process with exit(7) while it is still counted.
func childCriticalThreadCallsExit() {
  var configuration = ThreadConfiguration()
  configuration.finishBeforeExit = true
  let worker = try? Thread.spawn(configuration: configuration) { exit(7) }
  worker?.join()  // never returns: the worker's exit ends the process
  exit(1)
}

/// Child body: a critical thread's dictionary holds a value whose deinitializer ends the
/// process with exit(7), released as the thread ends.
func childCriticalThreadExitsFromADictionaryValue() {
  var configuration = ThreadConfiguration()
  configuration.finishBeforeExit = true
  let worker = try? Thread.spawn(configuration: configuration) {
    Thread.current.threadDictionary["exits"] = ExitsWhenReleased(code: 7)
  }
  worker?.join()  // never returns: the value's deinitializer ends the process
  exit(1)
}

/// Calls `exit(code)` from its deinitializer.
final class ExitsWhenReleased: Sendable {
  let code: Int32
  init(code: Int32) { self.code = code }
  deinit { exit(code) }
}

/// Child body: starts a slow critical writer and returns at once.
func childStartsCriticalWriterThenExits(path: String) {
  var configuration = ThreadConfiguration()
  configuration.finishBeforeExit = true
  do {
    try Thread.detach(name: "writer", configuration: configuration) {
      let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
      precondition(descriptor >= 0)
      for index in 0..<criticalLineCount {
        var line = "line \(index)\n"
        line.withUTF8 { bytes in precondition(write(descriptor, bytes.baseAddress, bytes.count) == bytes.count) }
        Thread.sleep(for: .milliseconds(2))  // slow work the exit must not cut off
      }
      precondition(close(descriptor) == 0)
    }
  } catch {
    exit(3)
  }
}

func readWholeFile(_ path: String) -> String? {
  let descriptor = open(path, O_RDONLY)
  guard descriptor >= 0 else { return nil }
  defer { close(descriptor) }
  var bytes: [UInt8] = []
  var buffer = [UInt8](repeating: 0, count: 4096)
  while true {
    let count = read(descriptor, &buffer, buffer.count)
    if count <= 0 { break }
    bytes += buffer[0..<count]
  }
  return String(decoding: bytes, as: UTF8.self)
}
