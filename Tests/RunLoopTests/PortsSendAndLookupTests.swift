import CAllocationStats
import Glibc
import ProcessTestSupport
import RunLoop
import Sync
import TestSupport
import Testing

@Suite("Ports: send limits and failed lookups", .timeLimit(.minutes(3)))
struct PortsSendAndLookupTests {
  @Test(
    "the receive timeout is the wait for the reply: a handler slower than it times out however long the send timeout")
  func receiveTimeoutCountsFromTheSend() throws {
    let name = uniquePortName("reply-timeout")
    let release = Latch(count: 1)
    let port = try MessagePort.local(name: name) { _ in
      // Slower than the receive timeout, faster than the send timeout.
      _ = release.wait(timeout: .seconds(2))
      return [1]
    }
    let server = portsServeInBackground(port)
    defer {
      release.countDown()
      port.invalidate()
      precondition(pthread_join(server, nil) == 0)
    }
    let remote = try MessagePort.remote(name: name)
    let start = MonotonicInstant.now
    let error = #expect(throws: PortError.self) {
      try remote.send(
        msgid: 1, sendTimeout: .seconds(5), receiveTimeout: .milliseconds(100), replyMode: .awaitReply)
    }
    #expect(error?.status == .receiveTimeout)
    #expect(MonotonicInstant.now - start < .milliseconds(1_500), "the send timeout does not extend the wait")
    #expect(remote.isValid, "a receive timeout leaves the port usable")
  }

  @Test("one-way messages sent after a request timed out on a big reply are handled, not lost behind that reply")
  func messagesAfterAnAbandonedBigReplyAreHandled() throws {
    let name = uniquePortName("abandoned-reply")
    let handled = Recorder<Int32>()
    let release = Semaphore(value: 0)
    let port = try MessagePort.local(name: name) { message in
      if message.msgid == 1 {
        // Answers after the requester gave up, with more than a socket buffer holds.
        _ = release.wait(timeout: .seconds(10))
        handled.append(message.msgid)
        return [UInt8](repeating: 7, count: 1 << 20)
      }
      handled.append(message.msgid)
      return [UInt8(truncatingIfNeeded: message.msgid)]
    }
    let rejections = Recorder<String>()
    port.setPeerRejectionHandler { rejections.append($0) }
    let server = portsServeInBackground(port)
    defer {
      release.signal()
      port.invalidate()
      precondition(pthread_join(server, nil) == 0)
    }
    let remote = try MessagePort.remote(name: name)
    let timedOut = #expect(throws: PortError.self) {
      try remote.send(msgid: 1, sendTimeout: .seconds(5), receiveTimeout: .milliseconds(20), replyMode: .awaitReply)
    }
    #expect(timedOut?.status == .receiveTimeout)
    release.signal()
    waitUntil { handled.count == 1 }
    // Each send returns once the kernel has the message: from then on it must be handled.
    for msgid in Int32(2)...5 {
      try remote.send(msgid: msgid, sendTimeout: .seconds(5), receiveTimeout: .zero, replyMode: .oneWay)
    }
    let giveUp = MonotonicInstant.after(.seconds(5))
    while handled.count < 5 && !giveUp.hasPassed { sched_yield() }
    #expect(handled.snapshot == [1, 2, 3, 4, 5], "one-way messages waited behind the reply nobody reads")
    // The next request takes (and discards) the late reply, then gets its own.
    #expect(
      try remote.send(msgid: 6, sendTimeout: .seconds(5), receiveTimeout: .seconds(10), replyMode: .awaitReply) == [6])
    #expect(rejections.snapshot == [])
  }

  @Test("looking up a malformed or unregistered name leaves nothing allocated behind", .runsExitTests)
  func failedLookupsAllocateNothing() async throws {
    // The child prints what the lookups left allocated in each of three windows; the parent
    // judges the smallest, so a failure shows the figures. The statistics are process-wide:
    // a lookup that leaks shows in every window, another thread's one-time allocation (the
    // diagnostics watchdog's first scan, when the detectors are on) in one at most.
    let result = try await #require(processExitsWith: .success, observing: [\.standardOutputContent]) {
      blocking {
        let missing = "tk-test-missing-\(getpid())"
        func lookUp(_ count: Int) {
          for _ in 0..<count {
            _ = try? MessagePort.remote(name: "bad/name")
            _ = try? MessagePort.remote(name: missing)
          }
        }
        lookUp(100)  // first-use allocations (registries, the port directory)
        for _ in 0..<3 {
          let before = tk_test_allocated_bytes()
          lookUp(failedLookupRounds)
          let after = tk_test_allocated_bytes()
          print("left allocated: \(Int(after) - Int(before))")
        }
      }
    }
    let figures = printedFigures(result.standardOutputContent, after: "left allocated: ").compactMap(\.first)
    try #require(
      figures.count == 3, "the child printed \(String(decoding: result.standardOutputContent, as: UTF8.self))")
    // A lookup that kept its receive buffer would leave 16 KiB per call, any single
    // allocation 16 bytes; the bound is under one byte per lookup (the test library's threads
    // allocate a little meanwhile).
    #expect(
      figures.min()! < 2 * failedLookupRounds,
      "bytes left allocated by \(2 * failedLookupRounds) failed lookups, per window: \(figures)")
  }
}

/// Rounds of the failed-lookup allocation test (two lookups each).
private let failedLookupRounds = 500
