import RunLoop
import Sync
import TestSupport
import Testing
import Threads

/// Counts its deinit, so a test can tell when a callback's captures were released.
private final class Captured: @unchecked Sendable {
  let released: AtomicInteger<Int>
  init(_ released: AtomicInteger<Int>) { self.released = released }
  deinit { released.increment(ordering: .releasing) }
}

/// What a run loop releases when its items are invalidated, and what counts as a handled
/// source: callbacks and their captures are let go at invalidation (Core Foundation releases
/// an observer's context then), and a source whose work was already taken handles nothing.
/// Each test runs its loop on a toolkit thread and checks, on the test's thread, what that
/// thread recorded.
@Suite("RunLoop: invalidation releases, handled sources", .timeLimit(.minutes(3)))
struct InvalidationReleaseTests {
  @Test("an invalidated observer releases its callback's captures at once, though still referenced")
  func invalidatedObserverReleasesItsCallback() {
    let seen = Recorder<Int>()
    TestThread.run {
      let released = AtomicInteger<Int>(0)
      var capture: Captured? = Captured(released)
      let observer = RunLoopObserver(activities: [.entry]) { [capture] _, _ in _ = capture }
      capture = nil
      RunLoop.current.add(observer, forMode: .default)
      seen.append(released.load(ordering: .acquiring))
      observer.invalidate()
      seen.append(released.load(ordering: .acquiring))
      withExtendedLifetime(observer) {}
    }
    #expect(seen.snapshot == [0, 1])
  }

  @Test("an observer that invalidates itself in its callback releases the captures when the call returns")
  func selfInvalidatingObserverReleasesAfterItsCall() {
    let seen = Recorder<Int>()
    TestThread.run {
      let released = AtomicInteger<Int>(0)
      var capture: Captured? = Captured(released)
      let observer = RunLoopObserver(activities: [.beforeTimers]) { [capture] observer, _ in
        _ = capture
        observer.invalidate()
        // Still inside the call: the running callback keeps its captures alive.
        seen.append(released.load(ordering: .acquiring))
      }
      capture = nil
      let runLoop = RunLoop.current
      runLoop.add(observer, forMode: .default)
      let timer = RunLoopTimer(after: .seconds(3600)) { _ in }
      runLoop.add(timer, forMode: .default)
      _ = runLoop.run(mode: .default, timeout: .zero)
      seen.append(released.load(ordering: .acquiring))
      timer.invalidate()
      withExtendedLifetime(observer) {}
    }
    #expect(seen.snapshot == [0, 1])
  }

  @Test("a port signal whose message a blocking receive took first is not a handled source")
  func portEmptiedByReceiveIsNotAHandledSource() {
    let results = Recorder<String>()
    TestThread.run {
      let runLoop = RunLoop.current
      let port = Port(capacity: 4)
      let handled = AtomicInteger<Int>(0)
      port.setHandler { _ in handled.increment(ordering: .relaxed) }
      _ = runLoop.add(port, forMode: .default)
      do {
        try port.send(PortMessage(msgid: 7), timeout: .seconds(5))
        // The message is taken directly; the port's source stays signalled.
        results.append("received \(try port.receive(before: .after(.seconds(5))).msgid)")
        let first = runLoop.run(mode: .default, timeout: .milliseconds(20), returnAfterSourceHandled: true)
        results.append("\(first) handled \(handled.load(ordering: .relaxed))")
        // A message that is there is still delivered and counted.
        try port.send(PortMessage(msgid: 8), timeout: .seconds(5))
        let second = runLoop.run(mode: .default, timeout: .seconds(5), returnAfterSourceHandled: true)
        results.append("\(second) handled \(handled.load(ordering: .relaxed))")
      } catch {
        results.append("error \(error)")
      }
      _ = port.invalidate()
    }
    #expect(results.snapshot == ["received 7", "timedOut handled 0", "handledSource handled 1"])
  }
}
