import CAllocationStats
import RunLoop
import Sync
import TestSupport
import Testing
import Threads

/// Counts its deinitializations: stands for a user object captured by a request's block or
/// a handler.
private final class CountedCapture: Sendable {
  let deinits: AtomicInteger<Int>
  init(_ deinits: AtomicInteger<Int>) { self.deinits = deinits }
  deinit { _ = deinits.increment(ordering: .relaxed) }
}

/// What the toolkit keeps of a user's blocks and handlers once they can no longer run: a
/// delayed perform after it fired, was cancelled or its timer invalidated; a port's handlers
/// after invalidation; a thread's exit-request handlers after the thread ended.
@Suite("Retained handlers and blocks", .timeLimit(.minutes(3)))
struct RetainedHandlerTests {
  /// 1,000 requests each way (fewer under a sanitizer, which slows each one down).
  private static let requests = isRunningUnderSanitizer ? 200 : 1_000

  @Test("delayed performs release their blocks and captures when fired, cancelled or invalidated")
  func delayedPerformsReleaseTheirBlocks() {
    TestThread.run {
      let runLoop = RunLoop.current
      let deinits = AtomicInteger<Int>(0)
      let ran = AtomicInteger<Int>(0)
      var cancelled: [DelayedPerform] = []
      for _ in 0..<Self.requests {
        let fired = CountedCapture(deinits)
        runLoop.perform(afterDelay: .zero, inModes: [.default]) {
          withExtendedLifetime(fired) { _ = ran.increment(ordering: .relaxed) }
        }
        let toCancel = CountedCapture(deinits)
        cancelled.append(runLoop.perform(afterDelay: .seconds(3_600)) { withExtendedLifetime(toCancel) {} })
      }
      for request in cancelled { request.cancel() }
      #expect(deinits.load(ordering: .relaxed) == Self.requests)
      // Fire every zero-delay request (a pass fires all that are due).
      while ran.load(ordering: .relaxed) < Self.requests {
        _ = runLoop.run(mode: .default, timeout: .seconds(10))
      }
      #expect(deinits.load(ordering: .relaxed) == 2 * Self.requests)
      #expect(cancelled.allSatisfy { !$0.isPending })
    }
  }

  @Test("a run loop's thread ending releases the delayed performs it never ran")
  func endedThreadReleasesItsDelayedPerforms() {
    let deinits = AtomicInteger<Int>(0)
    TestThread.run {
      for _ in 0..<Self.requests {
        let capture = CountedCapture(deinits)
        RunLoop.current.perform(afterDelay: .seconds(3_600)) { withExtendedLifetime(capture) {} }
      }
    }
    #expect(deinits.load(ordering: .relaxed) == Self.requests)
  }

  @Test("invalidating a port releases a handler that captures the port, so the port is freed")
  func invalidatedPortReleasesItsHandlers() {
    weak var weakPort: Port?
    let deinits = AtomicInteger<Int>(0)
    do {
      let port = Port()
      weakPort = port
      let capture = CountedCapture(deinits)
      port.setHandler { _ in withExtendedLifetime((port, capture)) {} }
      port.setInvalidationHandler { _ in withExtendedLifetime((port, capture)) {} }
      #expect(port.invalidate())
    }
    #expect(weakPort == nil)
    #expect(deinits.load(ordering: .relaxed) == 1)
  }

  @Test("a handler set on an invalidated port is not kept")
  func handlerSetOnAnInvalidPortIsNotKept() {
    let port = Port()
    port.invalidate()
    let deinits = AtomicInteger<Int>(0)
    do {
      let capture = CountedCapture(deinits)
      port.setHandler { _ in withExtendedLifetime(capture) {} }
      port.setInvalidationHandler { _ in withExtendedLifetime(capture) {} }
    }
    #expect(deinits.load(ordering: .relaxed) == 1)
  }

  @Test("exit-request handlers that capture the thread and stop its run loop are released when it ends")
  func exitRequestHandlersAreReleasedWhenTheThreadEnds() throws {
    // The guide's Listing 2-3 with a run loop: the handler captures the thread object and
    // stops the loop the thread runs.
    weak var weakThread: Thread?
    let deinits = AtomicInteger<Int>(0)
    let ready = Latch(count: 1)
    let worker = try Thread.spawn { () throws(Never) -> Void in
      let me = Thread.current
      let runLoop = RunLoop.current
      let capture = CountedCapture(deinits)
      me.addExitRequestHandler {
        withExtendedLifetime((me, capture)) { runLoop.stop() }
      }
      runLoop.add(RunLoopSource(perform: {}), forMode: .default)  // keeps the run going
      ready.countDown()
      while !me.isExitRequested { _ = runLoop.run(mode: .default, timeout: .seconds(30)) }
    }
    weakThread = worker.thread
    ready.wait()
    worker.thread.requestExit()
    worker.join()
    #expect(weakThread == nil)
    #expect(deinits.load(ordering: .relaxed) == 1)
  }

  @Test("an exit-request handler of a thread that ends without a request is released at its end")
  func unrequestedExitHandlersAreReleasedAtTheEnd() throws {
    weak var weakThread: Thread?
    let deinits = AtomicInteger<Int>(0)
    let worker = try Thread.spawn { () throws(Never) -> Void in
      let me = Thread.current
      let capture = CountedCapture(deinits)
      me.addExitRequestHandler { withExtendedLifetime((me, capture)) {} }
    }
    weakThread = worker.thread
    worker.join()
    #expect(weakThread == nil)
    #expect(deinits.load(ordering: .relaxed) == 1)
  }

  @Test("a port's capacity is not allocated up front: Port(capacity: 10_000_000) costs a few KiB")
  func largeCapacityIsNotAllocatedUpFront() {
    // glibc's counters are the process's: tests running beside this one allocate too, so
    // the least of five tries is the port's own cost (a port that allocated its capacity up
    // front would cost megabytes in every try).
    var least = Int.max
    for _ in 0..<5 {
      let before = tk_test_allocated_bytes()
      let port = Port(capacity: 10_000_000)
      let after = tk_test_allocated_bytes()
      withExtendedLifetime(port) {}
      #expect(port.capacity == 10_000_000)
      least = min(least, after - before)
    }
    // glibc's statistics do not see AddressSanitizer's allocator; LeakSanitizer and the
    // plain run cover this there.
    if !isRunningUnderAddressSanitizer {
      #expect(least < 64 * 1024, "allocated \(least) bytes in the least of five tries")
    }
  }

  @Test("a port grows past its first buffer in order, also with the ring wrapped around")
  func portGrowsInOrder() throws {
    let port = Port(capacity: 1_000)
    var next = 0
    var expected = 0
    // Wrap the ring first: 40 in, 30 out, then 500 more so it grows with its head inside.
    for _ in 0..<40 {
      try port.send(PortMessage(msgid: Int32(next)), timeout: .zero)
      next += 1
    }
    for _ in 0..<30 {
      #expect(try port.tryReceive()?.msgid == Int32(expected))
      expected += 1
    }
    for _ in 0..<(1_000 - 10) {
      try port.send(PortMessage(msgid: Int32(next)), timeout: .zero)
      next += 1
    }
    #expect(port.pendingMessageCount == 1_000)
    #expect(throws: PortError.self) { try port.send(PortMessage(msgid: -1), timeout: .zero) }
    while let message = try port.tryReceive() {
      #expect(message.msgid == Int32(expected))
      expected += 1
    }
    #expect(expected == next)
  }

  @Test("a capacity above Port.maximumCapacity is misuse, named in the message", .runsExitTests)
  func capacityAboveTheMaximumIsMisuse() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      _ = Port(capacity: Port.maximumCapacity + 1)
    }
    let stderr = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
    #expect(stderr.contains("Port.maximumCapacity"), "\(stderr)")
  }

  @Test("Port(capacity: Int.max) is misuse with a message, not an allocator abort", .runsExitTests)
  func capacityIntMaxIsMisuse() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      _ = Port(capacity: Int.max)
    }
    let stderr = result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
    #expect(stderr.contains("capacity must be from 1 through"), "\(stderr)")
  }
}
