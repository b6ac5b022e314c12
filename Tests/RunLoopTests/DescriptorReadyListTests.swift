import RunLoop
import Sync
import TestSupport
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// A run loop finds ready descriptor sources through the list its epoll wait fills, not by
/// looking at every source: these tests pin down that nothing is missed or fired twice.
@Suite("RunLoop descriptor sources at scale", .timeLimit(.minutes(3)))
struct DescriptorReadyListTests {
  @Test("of 200 watched pipes, exactly the readable ones fire, each once per pass, in the order added")
  func onlyReadyOnesFire() {
    TestThread.run {
      let runLoop = RunLoop.current
      let pipes = (0..<200).map { _ in PortsPipe() }
      let fired = Recorder<Int>()
      var sources: [FileDescriptorSource] = []
      for (index, pipe) in pipes.enumerated() {
        let source = FileDescriptorSource(descriptor: pipe.readEnd, events: .readable) { _, _ in
          fired.append(index)
          _ = pipe.readAll()
        }
        runLoop.add(source, forMode: .default)
        sources.append(source)
      }
      #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
      #expect(fired.count == 0, "nothing readable, nothing fired")
      for index in [150, 7, 99] { pipes[index].write(1) }
      // The readiness may take a pass to be reported; every pass fires what it found.
      let giveUp = MonotonicInstant.after(.seconds(30))
      while fired.count < 3 && !giveUp.hasPassed {
        _ = runLoop.run(mode: .default, timeout: .zero)
      }
      #expect(fired.snapshot == [7, 99, 150], "one pass, in the order added")
      // Drained: further passes fire nothing.
      for _ in 0..<5 { _ = runLoop.run(mode: .default, timeout: .zero) }
      #expect(fired.count == 3)
      for source in sources { source.invalidate() }
    }
  }

  @Test("a descriptor that became ready while its mode was not running fires when that mode runs")
  func readinessWaitsForItsMode() {
    TestThread.run {
      let runLoop = RunLoop.current
      let other: RunLoopMode = "ready-list.other"
      let pipe = PortsPipe()
      let fired = Recorder<RunLoopMode?>()
      let source = FileDescriptorSource(descriptor: pipe.readEnd, events: .readable) { _, _ in
        fired.append(runLoop.currentMode)
        _ = pipe.readAll()
      }
      runLoop.add(source, forMode: other)
      let keepAlive = RunLoopTimer(fireAt: .distantFuture) { _ in }
      runLoop.add(keepAlive, forMode: .default)
      pipe.write(1)
      // Default mode: the loop's epoll set reports the pipe, but its source is not in this mode.
      for _ in 0..<5 { _ = runLoop.run(mode: .default, timeout: .milliseconds(1)) }
      #expect(fired.count == 0)
      #expect(runLoop.run(mode: other, timeout: .seconds(30), returnAfterSourceHandled: true) == .handledSource)
      #expect(fired.snapshot == [other])
      source.invalidate()
      keepAlive.invalidate()
    }
  }

  @Test("a disabled descriptor source on a hung-up pipe is never called and does not make the loop spin")
  func disabledHungUpSourceDoesNotSpin() {
    TestThread.run {
      let runLoop = RunLoop.current
      var ends: [Int32] = [-1, -1]
      #expect(pipe(&ends) == 0)
      let calls = AtomicInteger<Int>(0)
      let source = FileDescriptorSource(descriptor: ends[0], events: .readable) { _, _ in
        _ = calls.increment(ordering: .relaxed)
      }
      source.disable(.readable)
      runLoop.add(source, forMode: .default)
      // Hang up: epoll reports it whatever the interest.
      #expect(close(ends[1]) == 0)
      let wakes = AtomicInteger<Int>(0)
      let observer = RunLoopObserver(activities: .afterWaiting) { _, _ in _ = wakes.increment(ordering: .relaxed) }
      runLoop.add(observer, forMode: .default)
      #expect(runLoop.run(mode: .default, timeout: .milliseconds(200)) == .timedOut)
      #expect(calls.load(ordering: .relaxed) == 0, "a disabled source is never called")
      #expect(wakes.load(ordering: .relaxed) < 10, "woke \(wakes.load(ordering: .relaxed)) times with nothing to do")
      observer.invalidate()
      source.invalidate()
      #expect(close(ends[0]) == 0)
    }
  }

  @Test("a disabled descriptor source enabled again is called for data that arrived meanwhile")
  func disabledSourceEnabledAgainSeesWhatArrived() {
    TestThread.run {
      let runLoop = RunLoop.current
      let pipe = PortsPipe()
      let calls = AtomicInteger<Int>(0)
      let source = FileDescriptorSource(descriptor: pipe.readEnd, events: .readable) { _, _ in
        _ = calls.increment(ordering: .relaxed)
        _ = pipe.readAll()
      }
      source.disable(.readable)
      runLoop.add(source, forMode: .default)
      pipe.write(1)
      #expect(runLoop.run(mode: .default, timeout: .milliseconds(50)) == .timedOut)
      #expect(calls.load(ordering: .relaxed) == 0)
      source.enable(.readable)
      #expect(runLoop.run(mode: .default, timeout: .seconds(10), returnAfterSourceHandled: true) == .handledSource)
      #expect(calls.load(ordering: .relaxed) == 1)
      source.invalidate()
    }
  }

  @Test("a descriptor source invalidated while ready for a mode that is not running is let go of at once")
  func readySourceInvalidatedElsewhereIsReleased() {
    final class Capture: Sendable {}
    final class WeakCapture: @unchecked Sendable { weak var capture: Capture? }
    TestThread.run {
      let runLoop = RunLoop.current
      let other: RunLoopMode = "ready-list.released"
      let pipe = PortsPipe()
      let watched = WeakCapture()
      let keepAlive = RunLoopTimer(fireAt: .distantFuture) { _ in }
      runLoop.add(keepAlive, forMode: .default)
      do {
        let capture = Capture()
        watched.capture = capture
        let source = FileDescriptorSource(descriptor: pipe.readEnd, events: .readable) { _, _ in
          withExtendedLifetime(capture) {}
        }
        runLoop.add(source, forMode: other)
        pipe.write(1)
        // The default mode's passes find the pipe ready for a source of another mode.
        for _ in 0..<5 { _ = runLoop.run(mode: .default, timeout: .milliseconds(1)) }
        source.invalidate()
      }
      // More passes of the default mode: the loop must not keep the invalidated source.
      for _ in 0..<3 { _ = runLoop.run(mode: .default, timeout: .milliseconds(1)) }
      #expect(watched.capture == nil, "the loop still holds the invalidated source and its handler's captures")
      keepAlive.invalidate()
    }
  }
}
