import Sync
import TestSupport
import Testing

@testable import RunLoop

#if canImport(Glibc)
  import Glibc
#endif

// Audit round 5: GLib mainloop.c scenarios not ported before (test_unix_fd,
// test_mainloop_overflow), in the toolkit's vocabulary: g_main_context_iteration(FALSE) ->
// run(mode:timeout: .zero, returnAfterSourceHandled: true); priorities -> source orders;
// g_unix_fd_add -> FileDescriptorSource; a source returning FALSE -> invalidate() in its
// handler.

@Suite("Audit round 5: GLib mainloop scenarios", .timeLimit(.minutes(3)))
struct AuditRound5RunLoopPeerTests {
  @Test(
    "test_unix_fd: a pipe pumped by a writer and a reader source; each one-source pass runs exactly one handler, all bytes arrive"
  )
  func pipePumpedByTwoDescriptorSources() {
    var ends: [Int32] = [0, 0]
    #expect(pipe(&ends) == 0)
    for end in ends { _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK) }
    let (readEnd, writeEnd) = (ends[0], ends[1])
    defer {
      close(readEnd)
      close(writeEnd)
    }
    let total = 8 * 1024 * 1024
    let toWrite = Box(total)
    let toRead = Box(total)
    let calls = Box<[Character]>([])
    let wrongRuns = Recorder<String>()
    TestThread.run {
      let runLoop = RunLoop.current
      // The writer is added first and watches the write end; the reader has the lower order
      // (GLib: the reader at higher priority would starve nothing either way).
      let writer = FileDescriptorSource(descriptor: writeEnd, events: .writable) { source, events in
        calls.update { $0.append("w") }
        if !events.contains(.writable) { wrongRuns.append("the writer was called for \(events)") }
        var chunk = [UInt8](repeating: 0, count: 1024)
        let limit = min(toWrite.value, chunk.count)
        let written = write(writeEnd, &chunk, limit)
        if written > 0 { toWrite.update { $0 -= written } }
        if toWrite.value == 0 { source.invalidate() }
      }
      let reader = FileDescriptorSource(descriptor: readEnd, events: .readable) { _, events in
        calls.update { $0.append("r") }
        if !events.contains(.readable) { wrongRuns.append("the reader was called for \(events)") }
        var buffer = [UInt8](repeating: 0, count: 1024)
        let count = read(readEnd, &buffer, buffer.count)
        if count > 0 { toRead.update { $0 -= count } }
      }
      runLoop.add(writer, forMode: .default)
      runLoop.add(reader, forMode: .default)
      var passes = 0
      while true {
        let before = calls.value.count
        let result = runLoop.run(mode: .default, timeout: .zero, returnAfterSourceHandled: true)
        let ran = calls.value.count - before
        if result != .handledSource {
          if ran != 0 { wrongRuns.append("a run that returned \(result) ran \(ran) handlers") }
          break
        }
        // Only one source runs in a run that returns after one.
        if ran != 1 {
          wrongRuns.append("a run with returnAfterSourceHandled ran \(ran) handlers")
          break
        }
        passes += 1
        if passes > 100_000 { break }
      }
      reader.invalidate()
      writer.invalidate()
    }
    #expect(wrongRuns.snapshot == [])
    #expect(toWrite.value == 0, "left to write: \(toWrite.value)")
    #expect(toRead.value == 0, "left to read: \(toRead.value)")
  }

  @Test(
    "g_main_context_iteration with two ready descriptors: each run that returns after one source calls one handler"
  )
  func twoReadyDescriptorsOneHandlerPerRun() {
    var first: [Int32] = [0, 0]
    var second: [Int32] = [0, 0]
    #expect(pipe(&first) == 0 && pipe(&second) == 0)
    defer { for end in first + second { close(end) } }
    var byte: UInt8 = 1
    #expect(write(first[1], &byte, 1) == 1 && write(second[1], &byte, 1) == 1)
    let (a, b) = (first[0], second[0])
    let calls = Recorder<String>()
    let perRun = Recorder<(RunLoopRunResult, Int)>()
    TestThread.run {
      let runLoop = RunLoop.current
      // Never drained: both stay readable, so each is ready in every pass.
      let sourceA = FileDescriptorSource(descriptor: a) { _, _ in calls.append("a") }
      let sourceB = FileDescriptorSource(descriptor: b) { _, _ in calls.append("b") }
      runLoop.add(sourceA, forMode: .default)
      runLoop.add(sourceB, forMode: .default)
      for _ in 0..<6 {
        let before = calls.count
        let result = runLoop.run(mode: .default, timeout: .seconds(5), returnAfterSourceHandled: true)
        perRun.append((result, calls.count - before))
      }
      sourceA.invalidate()
      sourceB.invalidate()
    }
    for (index, (result, handlers)) in perRun.snapshot.enumerated() {
      #expect(result == .handledSource)
      #expect(
        handlers == 1, "run \(index) with returnAfterSourceHandled called \(handlers) handlers: \(calls.snapshot)")
    }
    // Both are served over the runs (neither starves).
    #expect(Set(calls.snapshot) == ["a", "b"])
  }

  @Test(
    "a signalled custom source and a ready descriptor: a run that returns after one source fires one, the next run the other"
  )
  func aCustomSourceAndADescriptorOneHandlerPerRun() {
    // Core Foundation may handle a version-0 source and a port message in one iteration of a
    // run that returns after one source; the toolkit's run fires one source (its doc).
    var ends: [Int32] = [0, 0]
    #expect(pipe(&ends) == 0)
    defer { for end in ends { close(end) } }
    var byte: UInt8 = 1
    #expect(write(ends[1], &byte, 1) == 1)
    let readEnd = ends[0]
    let calls = Recorder<String>()
    let perRun = Recorder<(RunLoopRunResult, [String])>()
    TestThread.run {
      let runLoop = RunLoop.current
      let custom = RunLoopSource { calls.append("custom") }
      let descriptor = FileDescriptorSource(descriptor: readEnd) { source, _ in
        calls.append("descriptor")
        source.disable(.readable)
      }
      runLoop.add(custom, forMode: .default)
      runLoop.add(descriptor, forMode: .default)
      custom.signal()
      for _ in 0..<2 {
        let before = calls.count
        let result = runLoop.run(mode: .default, timeout: .seconds(5), returnAfterSourceHandled: true)
        perRun.append((result, Array(calls.snapshot[before...])))
      }
      custom.invalidate()
      descriptor.invalidate()
    }
    let runs = perRun.snapshot
    #expect(runs.map(\.0) == [.handledSource, .handledSource])
    #expect(runs.map(\.1) == [["custom"], ["descriptor"]], "handlers per run: \(runs.map(\.1))")
  }

  @Test(
    "test_mainloop_overflow: 53 signalled sources that invalidate themselves each fire once, and the run then finishes"
  )
  func selfRemovingSourcesEachFireOnce() {
    let fired = Recorder<Int>()
    let wrong = Recorder<String>()
    let result = Box<RunLoopRunResult?>(nil)
    TestThread.run {
      let runLoop = RunLoop.current
      var sources: [RunLoopSource] = []
      for index in 0..<53 {
        let slot = Box<RunLoopSource?>(nil)
        let source = RunLoopSource {
          fired.append(index)
          if !runLoop.contains(slot.value!, inMode: .default) { wrong.append("\(index) not in its mode when it fired") }
          slot.value!.invalidate()
          if runLoop.contains(slot.value!, inMode: .default) { wrong.append("\(index) still in its mode") }
          slot.value = nil
        }
        slot.value = source
        runLoop.add(source, forMode: .default)
        source.signal()
        sources.append(source)
      }
      result.value = runLoop.run(mode: .default, before: .after(.seconds(30)))
      if !sources.allSatisfy({ !$0.isValid }) { wrong.append("a source is still valid") }
    }
    #expect(result.value == .finished)
    #expect(fired.snapshot.sorted() == Array(0..<53))
    #expect(wrong.snapshot == [])
  }
}
