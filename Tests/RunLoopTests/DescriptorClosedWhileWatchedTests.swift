import RunLoop
import Sync
import TestSupport
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// A descriptor closed while a run loop watches it, with a duplicate keeping its file open
/// (epoll's "closed but duplicated" trap): the kernel keeps reporting the file under the
/// source's registration, and the number may name another file meanwhile. The toolkit stops
/// with a misuse message instead of calling the handler with a closed number's `POLLNVAL` or
/// another file's readiness.
@Suite("Descriptors closed while watched", .timeLimit(.minutes(3)))
struct DescriptorClosedWhileWatchedTests {
  @Test("a watched descriptor closed while a duplicate stays open is reported, the handler not called", .runsExitTests)
  func closedWithADuplicateOpenIsReported() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      blocking { watchThenClose(reuseNumber: false) }
    }
    let stderr = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
    // Closed (POLLNVAL), or already reused by a file another thread opened meanwhile (the
    // diagnostics' monitor thread, say): the same misuse, reported either way.
    #expect(stderr.contains("was closed while a run loop watched it"), "\(stderr)")
  }

  @Test(
    "checked mode: a watched number reused by another file is reported before the handler sees that file",
    .runsExitTests)
  func reusedNumberIsReportedBeforeTheHandlerInCheckedMode() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      MisuseChecking.mode = .checked
      blocking { watchThenClose(reuseNumber: true) }
    }
    let stderr = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
    #expect(stderr.contains("now names another file"), "\(stderr)")
  }

  @Test(
    "unchecked mode: a watched number reused by another file is reported at the re-arm after the handler",
    .runsExitTests)
  func reusedNumberIsReportedInUncheckedMode() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      MisuseChecking.mode = .unchecked
      blocking { watchThenClose(reuseNumber: true, handlerEndsTheProcess: false) }
    }
    let stderr = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
    #expect(stderr.contains("now names another file"), "\(stderr)")
  }

  @Test("a source invalidated before its descriptor is closed never fires for a duplicate")
  func invalidatedBeforeClosingIsQuiet() throws {
    TestThread.run {
      var ends: [Int32] = [0, 0]
      #expect(pipe(&ends) == 0)
      let duplicate = dup(ends[0])
      let fired = Box(false)
      let source = FileDescriptorSource(descriptor: ends[0]) { _, _ in fired.value = true }
      let runLoop = RunLoop.current
      runLoop.add(source, forMode: .default)
      source.invalidate()
      close(ends[0])
      var byte: UInt8 = 1
      #expect(write(ends[1], &byte, 1) == 1)
      runLoop.add(RunLoopTimer(after: .milliseconds(20)) { _ in }, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .seconds(10)) == .finished)
      #expect(!fired.value)
      close(duplicate)
      close(ends[1])
    }
  }
}

/// Watches a pipe's read end, keeps a duplicate of it, closes it (and, with `reuseNumber`,
/// puts another pipe's read end at the same number), makes both files readable and runs the
/// loop. The handler ends the process with status 0 when `handlerEndsTheProcess`: the test
/// expects a failure, so a handler call fails it.
private func watchThenClose(reuseNumber: Bool, handlerEndsTheProcess: Bool = true) {
  var watched: [Int32] = [0, 0]
  var other: [Int32] = [0, 0]
  guard pipe(&watched) == 0, pipe(&other) == 0 else { exit(0) }
  let duplicate = dup(watched[0])
  let source = FileDescriptorSource(descriptor: watched[0]) { _, _ in
    if handlerEndsTheProcess { _exit(0) }
  }
  let runLoop = RunLoop.current
  runLoop.add(source, forMode: .default)
  close(watched[0])
  if reuseNumber { guard dup2(other[0], watched[0]) == watched[0] else { exit(0) } }
  var byte: UInt8 = 1
  _ = write(watched[1], &byte, 1)
  _ = write(other[1], &byte, 1)
  _ = runLoop.run(mode: .default, timeout: .seconds(10))
  withExtendedLifetime((source, duplicate)) {}
  exit(0)  // nothing reported: the test fails
}
