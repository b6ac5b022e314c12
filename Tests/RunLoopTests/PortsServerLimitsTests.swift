import Glibc
import ProcessTestSupport
import Sync
import TestSupport
import Testing

@testable import RunLoop

/// The bytes of a request frame for `msgid` (what a client that never reads sends).
func portsRequestBytes(_ msgid: Int32, sequence: UInt32 = 1, payload: [UInt8] = []) -> [UInt8] {
  Frame(kind: .request, msgid: msgid, sequence: sequence, replyPortName: nil, payload: payload).encoded()
}

/// Opens `/dev/null` until the process runs out of descriptors (`EMFILE`); returns them, for
/// the caller to close. Stops the process if opening fails another way.
func portsFillDescriptorTable() -> [Int32] {
  var fillers: [Int32] = []
  while true {
    let descriptor = open("/dev/null", O_RDONLY | O_CLOEXEC)
    if descriptor >= 0 {
      fillers.append(descriptor)
      continue
    }
    let code = errno
    precondition(code == EMFILE || code == ENFILE, "open(/dev/null) failed with errno \(code), not EMFILE")
    return fillers
  }
}

/// A handler that answers message 1 with 1 MiB (a big reply) and anything else with one byte.
let portsBigReplyHandler: @Sendable (Frame) -> [UInt8]? = { frame in
  frame.msgid == 1 ? [UInt8](repeating: 7, count: 1 << 20) : [UInt8(truncatingIfNeeded: frame.msgid)]
}

@Suite("Ports: server limits and peers that do not cooperate", .timeLimit(.minutes(3)))
struct PortsServerLimitsTests {
  @Test(
    "out of descriptors, a port stops accepting instead of spinning, reports it once, and accepts again later",
    .runsExitTests)
  func descriptorExhaustionPausesAccepting() async throws {
    let result = await #expect(
      processExitsWith: .success, observing: [\.standardOutputContent, \.standardErrorContent]
    ) {
      blocking {
        let path = makePortsTestDirectory()
        defer { removePortsTestDirectory(path) }
        let directory = try! PortDirectory.prepare(path: path)
        let listener = try! NamedPortListener(name: "exhausted", directory: directory) { _ in [7] }
        let rejections = Recorder<String>()
        listener.setRejectionHandler { rejections.append($0.reason) }
        // Connections wait in the backlog, made before the descriptor table is full.
        var clients: [UnixSocket] = []
        for _ in 0..<3 {
          clients.append(
            try! UnixSocket.connect(to: directory.socketPath(for: "exhausted"), before: .after(.seconds(5))))
        }
        // Fill the table up to a lowered soft limit (a child process: nothing else shares it).
        var original = rlimit()
        precondition(getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &original) == 0)
        var lowered = original
        lowered.rlim_cur = min(original.rlim_cur, 512)
        precondition(setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &lowered) == 0)
        var fillers = portsFillDescriptorTable()
        // Serving for 300 ms, and at least until the first failed accept is reported (a
        // loaded machine may not run this thread at all within the 300 ms): accept fails
        // with EMFILE for every pending connection. Each pass first takes any descriptor
        // another thread of the child (the runtime's) closed since, so the table stays full.
        var passes = 0
        let until = MonotonicInstant.after(.milliseconds(300))
        let reportBy = MonotonicInstant.after(.seconds(10))
        repeat {
          fillers += portsFillDescriptorTable()
          _ = try! listener.serveOnce(before: until.hasPassed ? reportBy : until)
          passes += 1
        } while !until.hasPassed || (rejections.count == 0 && !reportBy.hasPassed)
        let reportsWhileExhausted = rejections.count
        let acceptedWhileExhausted = listener.peerCount
        for descriptor in fillers { precondition(close(descriptor) == 0) }
        precondition(setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &original) == 0)
        // Descriptors are free again: the back-off ends and the waiting clients are accepted.
        let giveUp = MonotonicInstant.after(.seconds(10))
        while listener.peerCount < clients.count && !giveUp.hasPassed { _ = try! listener.serveOnce(before: giveUp) }
        print(
          "state: \(passes) \(reportsWhileExhausted) \(listener.peerCount) \(clients.count) \(rejections.count) "
            + "\(rejections.snapshot.first?.contains("accept failed") == true ? 1 : 0) \(acceptedWhileExhausted)")
        print("reports: \(rejections.snapshot.prefix(2))")
      }
    }
    // The child prints what it saw and the parent judges it (a failing exit test returns no
    // output: `#expect(processExitsWith:)` gives nil, having recorded the failure).
    guard let result else { return }
    let output = String(decoding: result.standardOutputContent, as: UTF8.self)
    let state = try #require(printedFigures(result.standardOutputContent, after: "state: ").last, "printed \(output)")
    try #require(state.count == 7, "printed \(output)")
    // A spinning server makes thousands of passes and reports each failed accept; with a
    // back-off from 50 ms it makes a handful in 300 ms.
    #expect(state[0] <= 20, "passes while out of descriptors: \(output)")
    // One report per run of failures: an accept that succeeds ends it (documented: further
    // failures are not reported until an accept succeeds). A descriptor that another thread
    // of the child (the runtime's) held while the table was filled and closed since lets
    // a client in meanwhile, so each client accepted while the table was full may start
    // one more run; nothing else may.
    #expect(state[1] >= 1 && state[1] <= 1 + state[6], "reports while out of descriptors: \(output)")
    #expect(state[2] == state[3], "clients accepted once descriptors were free: \(output)")
    #expect(state[4] == state[1], "no report once descriptors were free: \(output)")
    #expect(state[5] == 1, "the report names the failed accept: \(output)")
  }

  @Test("out of descriptors, a port accepts again as soon as one of its peers leaves", .runsExitTests)
  func peerLeavingResumesAccepting() async throws {
    // The child prints what it saw and the parent judges it: a failing exit test returns no
    // output (`#expect(processExitsWith:)` gives nil), and a loaded machine can hold the
    // child off its CPU for seconds, so each step has a deadline of its own and the figures
    // say which step ran out.
    let result = await #expect(
      processExitsWith: .success, observing: [\.standardOutputContent, \.standardErrorContent]
    ) {
      blocking {
        let path = makePortsTestDirectory()
        defer { removePortsTestDirectory(path) }
        let directory = try! PortDirectory.prepare(path: path)
        // A back-off far longer than the test: only a leaving peer can resume accepting.
        let listener = try! NamedPortListener(name: "resume", directory: directory, acceptBackoff: .seconds(60)) {
          _ in [7]
        }
        let rejections = Recorder<String>()
        listener.setRejectionHandler { rejections.append($0.reason) }
        let socketPath = directory.socketPath(for: "resume")
        let began = MonotonicInstant.now
        var leaving: UnixSocket? = try! UnixSocket.connect(to: socketPath, before: .after(.seconds(15)))
        let firstBy = MonotonicInstant.after(.seconds(15))
        while listener.peerCount == 0 && !firstBy.hasPassed { _ = try! listener.serveOnce(before: firstBy) }
        let firstAccepted = listener.peerCount == 1
        let waiting = try! UnixSocket.connect(to: socketPath, before: .after(.seconds(15)))
        var original = rlimit()
        precondition(getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &original) == 0)
        var lowered = original
        lowered.rlim_cur = min(original.rlim_cur, 512)
        precondition(setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &lowered) == 0)
        var fillers = portsFillDescriptorTable()
        // The waiting client cannot be accepted: one report, then the listener is paused.
        // Each pass first takes any descriptor another thread of the child (the runtime's)
        // closed since: one free descriptor would let the waiting client in before the first
        // peer leaves.
        let reportBy = MonotonicInstant.after(.seconds(15))
        while rejections.count == 0 && !reportBy.hasPassed {
          fillers += portsFillDescriptorTable()
          _ = try! listener.serveOnce(before: reportBy)
        }
        let reportsWhileExhausted = rejections.count
        // The first peer leaves: its descriptors free up, and accepting resumes at once. The
        // drop and the accept happen in two passes (the listener was out of the wait set).
        leaving = nil
        var dropped = false
        let resumeBy = MonotonicInstant.after(.seconds(15))
        while !resumeBy.hasPassed {
          _ = try! listener.serveOnce(before: resumeBy)
          if listener.peerCount == 0 { dropped = true }
          if dropped && listener.peerCount == 1 { break }
        }
        let accepted = dropped && listener.peerCount == 1
        withExtendedLifetime(leaving) {}
        withExtendedLifetime(waiting) {}
        for descriptor in fillers { precondition(close(descriptor) == 0) }
        precondition(setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &original) == 0)
        let milliseconds = (MonotonicInstant.now - began) / .milliseconds(1)
        func flag(_ value: Bool) -> Int { value ? 1 : 0 }
        print(
          "state: \(flag(firstAccepted)) \(fillers.count) \(reportsWhileExhausted) \(flag(dropped)) "
            + "\(flag(accepted)) \(rejections.count) \(Int(milliseconds))")
        print("reports: \(rejections.snapshot)")
      }
    }
    guard let result else { return }
    let output = String(decoding: result.standardOutputContent, as: UTF8.self)
    let state = try #require(printedFigures(result.standardOutputContent, after: "state: ").last, "printed \(output)")
    try #require(state.count == 7, "printed \(output)")
    // first peer accepted, descriptors filled, one report while exhausted, the first peer
    // dropped, the waiting client accepted, still one report in all (then milliseconds).
    #expect(state[0] == 1, "the first client was not accepted: \(output)")
    #expect(state[1] > 0, "no descriptor was left to fill: \(output)")
    #expect(state[2] == 1, "reports while out of descriptors: \(output)")
    #expect(state[3] == 1, "the leaving peer was not dropped: \(output)")
    #expect(state[4] == 1, "the waiting client was not accepted after the peer left: \(output)")
    #expect(state[5] == 1, "reports in all: \(output)")
  }

  @Test("clients that ask for a big reply and never read it do not delay another client")
  func nonReadersCostOnlyThemselves() throws {
    let served = try PortsServedListener(handler: portsBigReplyHandler)
    try served.whileServing {
      let stalled = try (0..<5).map { _ in try served.rawPeer() }
      for peer in stalled { try peer.sendAll(portsRequestBytes(1), before: .after(.seconds(5))) }
      #expect(served.eventually { served.handled.count >= 1 })
      let client = try served.connect()
      for msgid in Int32(2)...4 {
        let start = MonotonicInstant.now
        #expect(try client.request(msgid) == [UInt8(msgid)])
        // A serving thread that blocked writing to each stalled peer for a second would
        // make this wait seconds.
        #expect(MonotonicInstant.now - start < .milliseconds(750))
      }
      #expect(served.eventually { served.handled.count == 8 }, "every stalled peer's request was handled too")
      #expect(served.rejections.snapshot.isEmpty, "within the limits, nobody is dropped")
    }
  }

  @Test("connections over maximumPeers are closed at once and reported once; a leaving peer makes room")
  func peerLimit() throws {
    let served = try PortsServedListener(serverLimits: MessagePort.ServerLimits(maximumPeers: 2)) { _ in [1] }
    try served.whileServing {
      let first = try served.connect()
      let second = try served.connect()
      #expect(try first.request(1) == [1])
      #expect(try second.request(1) == [1])
      for _ in 0..<3 {
        let refused = try served.connect()
        let error = #expect(throws: PortError.self) { try refused.request(1) }
        #expect(error?.status == .becameInvalid)
      }
      #expect(served.rejections.snapshot.count == 1)
      #expect(served.rejections.snapshot.first?.contains("limit of 2 peers") == true)
      first.invalidate()
      #expect(served.eventually { served.listener.peerCount == 1 })
      let third = try served.connect()
      #expect(try third.request(1) == [1])
      #expect(try second.request(1) == [1])
    }
  }

  @Test("a peer holding more than maximumBufferedBytesPerPeer (reply not read, or input) is dropped")
  func perPeerBufferLimit() throws {
    let served = try PortsServedListener(
      serverLimits: MessagePort.ServerLimits(maximumBufferedBytesPerPeer: 64 << 10), handler: portsBigReplyHandler)
    try served.whileServing {
      let nonReader = try served.rawPeer()
      try nonReader.sendAll(portsRequestBytes(1), before: .after(.seconds(5)))
      #expect(served.eventually { served.rejections.count == 1 })
      #expect(served.rejections.snapshot.first?.contains("over the limit of 65536 per peer") == true)
      // An unfinished frame larger than the limit (its payload is under the frame limit).
      let sender = try served.rawPeer()
      var bytes = portsRequestBytes(2, payload: [UInt8](repeating: 1, count: 100 << 10))
      bytes.removeLast(10 << 10)
      try sender.sendAll(bytes, before: .after(.seconds(5)))
      #expect(served.eventually { served.rejections.count == 2 })
      #expect(served.rejections.snapshot.last?.contains("over the limit of 65536 per peer") == true)
      let client = try served.connect()
      #expect(try client.request(3) == [3])
    }
  }

  @Test("a peer that pipelines requests without reading is dropped at its limit, not answered for every request first")
  func pipelinedRequestsStopAtTheLimit() throws {
    let served = try PortsServedListener(
      serverLimits: MessagePort.ServerLimits(maximumBufferedBytesPerPeer: 64 << 10)
    ) { _ in [UInt8](repeating: 3, count: 16 << 10) }
    try served.whileServing {
      let nonReader = try served.rawPeer()
      // 1,000 requests (24 KB) in one write: one read of the port takes them all.
      let requests = (0..<1_000).flatMap { portsRequestBytes(Int32($0), sequence: UInt32($0) + 1) }
      try nonReader.sendAll(requests, before: .after(.seconds(5)))
      #expect(served.eventually { served.rejections.count == 1 })
      #expect(served.rejections.snapshot.first?.contains("over the limit of 65536 per peer") == true)
      // What the socket took, plus the limit, in 16 KiB replies: far fewer than 1,000.
      #expect(served.handled.count < 100, "the port answered \(served.handled.count) requests before dropping the peer")
      let client = try served.connect()
      #expect(try client.request(3).count == 16 << 10)
    }
  }

  @Test("the peer that takes the port past maximumBufferedBytesTotal is dropped; the others keep their replies")
  func totalBufferLimit() throws {
    let served = try PortsServedListener(
      serverLimits: MessagePort.ServerLimits(maximumBufferedBytesTotal: (1 << 20) + (256 << 10)),
      handler: portsBigReplyHandler)
    try served.whileServing {
      let first = try served.rawPeer()
      try first.sendAll(portsRequestBytes(1), before: .after(.seconds(5)))
      #expect(served.eventually { served.handled.count == 1 })
      let second = try served.rawPeer()
      try second.sendAll(portsRequestBytes(1), before: .after(.seconds(5)))
      #expect(served.eventually { served.rejections.count == 1 })
      #expect(served.rejections.snapshot.first?.contains("port's buffers") == true)
      #expect(served.listener.peerCount == 1, "the first non-reader keeps its place")
      // The first peer can still read its whole reply.
      var reply: [UInt8] = []
      var chunk = [UInt8](repeating: 0, count: 64 << 10)
      let giveUp = MonotonicInstant.after(.seconds(20))
      while reply.count < Frame.headerSize + (1 << 20) && !giveUp.hasPassed {
        try first.waitUntil(.readable, before: giveUp)
        let count = try chunk.withUnsafeMutableBytes { buffer in
          try Result { () throws(TransferFailure) in try first.receiveAvailable(into: buffer) }.get()
        }
        if let count { reply += chunk[0..<count] }
      }
      #expect(reply.count == Frame.headerSize + (1 << 20))
    }
  }

  @Test("slowPeerTimeout drops a peer that trickles a frame and one that never reads its reply, not an idle one")
  func slowPeerTimeout() throws {
    let served = try PortsServedListener(
      serverLimits: MessagePort.ServerLimits(slowPeerTimeout: .milliseconds(200)), handler: portsBigReplyHandler)
    try served.whileServing {
      let idle = try served.connect()
      #expect(try idle.request(2) == [2])
      let trickler = try served.rawPeer()
      try trickler.sendAll(Array(portsRequestBytes(3).prefix(10)), before: .after(.seconds(5)))
      let nonReader = try served.rawPeer()
      try nonReader.sendAll(portsRequestBytes(1), before: .after(.seconds(5)))
      #expect(served.eventually { served.rejections.count == 2 })
      let reasons = served.rejections.snapshot.joined(separator: "; ")
      #expect(reasons.contains("did not finish its frame"))
      #expect(reasons.contains("did not read its reply"))
      // Connected all along with nothing in flight: still served.
      #expect(try idle.request(4) == [4])
      #expect(served.listener.peerCount == 1)
    }
  }

  @Test("a port served by a run loop drops a slow peer when its deadline passes, with no other activity")
  func slowPeerDroppedInARunLoop() throws {
    let name = uniquePortName("slow-runloop")
    let ready = Latch(count: 1)
    let rejections = Recorder<String>()
    let server = TestThread.spawn {
      guard
        let port = try? MessagePort.local(
          name: name, limits: MessagePort.ServerLimits(slowPeerTimeout: .milliseconds(200)), handler: { _ in nil })
      else {
        ready.countDown()
        return
      }
      port.setPeerRejectionHandler { rejections.append($0) }
      #expect(RunLoop.current.add(port, forMode: .default))
      ready.countDown()
      // The loop wakes only when the port's descriptor is readable: for the peer's bytes,
      // then for the deadline (the port's timer), nothing else.
      let giveUp = MonotonicInstant.after(.seconds(30))
      while rejections.count == 0 && !giveUp.hasPassed {
        _ = RunLoop.current.run(mode: .default, before: giveUp, returnAfterSourceHandled: true)
      }
      port.invalidate()
    }
    ready.wait()
    let directory = try PortDirectory.prepare()
    let trickler = try UnixSocket.connect(to: directory.socketPath(for: name), before: .after(.seconds(5)))
    let start = MonotonicInstant.now
    try trickler.sendAll(Array(portsRequestBytes(1).prefix(10)), before: .after(.seconds(5)))
    server.join()
    #expect(rejections.snapshot.first?.contains("did not finish its frame") == true)
    #expect(MonotonicInstant.now - start < .seconds(10))
  }

  @Test("a limit that is not positive stops the process", .runsExitTests)
  func nonPositiveLimitIsMisuse() async {
    await #expect(processExitsWith: .failure) {
      _ = MessagePort.ServerLimits(maximumPeers: 0)
    }
    await #expect(processExitsWith: .failure) {
      var limits = MessagePort.ServerLimits()
      limits.slowPeerTimeout = .zero
      _ = try? MessagePort.local(name: "tk-test-bad-limits", limits: limits) { _ in nil }
    }
  }
}
