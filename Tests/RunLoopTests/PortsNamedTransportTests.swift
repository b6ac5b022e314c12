import Glibc
import Sync
import TestSupport
import Testing

@testable import RunLoop

/// A listener in a private directory, served on its own thread until invalidated.
final class PortsServedListener: @unchecked Sendable {
  let directoryPath: String
  let directory: PortDirectory
  let listener: NamedPortListener
  let handled = Recorder<String>()
  let rejections = Recorder<String>()
  let servingThreadMismatches = PortsCounter()
  private let servingThread = UnsafeMutablePointer<pthread_t>.allocate(capacity: 1)

  init(
    name: String = "server", limits: Frame.Limits = .standard, serverLimits: MessagePort.ServerLimits = .standard,
    handler: @escaping @Sendable (Frame) -> [UInt8]?
  ) throws {
    directoryPath = makePortsTestDirectory()
    directory = try PortDirectory.prepare(path: directoryPath)
    let handledLog = handled
    let thread = servingThread
    let mismatches = servingThreadMismatches
    listener = try NamedPortListener(
      name: name, directory: directory, limits: limits, serverLimits: serverLimits
    ) { frame in
      if pthread_equal(pthread_self(), thread.pointee) == 0 { mismatches.increment() }
      handledLog.append("\(frame.kind):\(frame.msgid)")
      return handler(frame)
    }
    let rejectionLog = rejections
    listener.setRejectionHandler { rejectionLog.append($0.reason) }
  }

  deinit {
    servingThread.deallocate()
    removePortsTestDirectory(directoryPath)
  }

  /// Serves on a new thread while `body` runs on the calling one; invalidates and joins.
  func whileServing(_ body: () throws -> Void) throws {
    var thread = pthread_t()
    let context = Unmanaged.passRetained(self).toOpaque()
    let started = pthread_create(
      &thread, nil,
      { raw in
        let served = Unmanaged<PortsServedListener>.fromOpaque(raw!).takeRetainedValue()
        served.servingThread.pointee = pthread_self()
        while true {
          do { _ = try served.listener.serve(before: .after(.seconds(60))) } catch { return nil }
        }
      }, context)
    precondition(started == 0)
    defer {
      listener.invalidate()
      precondition(pthread_join(thread, nil) == 0)
    }
    try body()
  }

  /// Waits (yielding) until `condition` holds or 30 s pass; returns whether it held.
  func eventually(_ condition: () -> Bool) -> Bool {
    let giveUp = MonotonicInstant.after(.seconds(30))
    while !condition() {
      if giveUp.hasPassed { return false }
      sched_yield()
    }
    return true
  }

  func connect() throws -> NamedPortConnection { try NamedPortConnection(name: listener.name, directory: directory) }

  func rawPeer() throws -> UnixSocket {
    try UnixSocket.connect(to: directory.socketPath(for: listener.name), before: .after(.seconds(5)))
  }
}

extension NamedPortConnection {
  func request(_ msgid: Int32, _ payload: [UInt8] = [], receive: Duration = .seconds(30)) throws(PortError) -> [UInt8] {
    try send(
      msgid: msgid, payload: payload, replyPortName: nil, sendDeadline: .after(.seconds(10)), awaitReply: true,
      receiveTimeout: receive)!
  }

  func post(_ msgid: Int32, replyPortName: String? = nil) throws(PortError) {
    _ = try send(
      msgid: msgid, payload: [], replyPortName: replyPortName, sendDeadline: .after(.seconds(10)), awaitReply: false,
      receiveTimeout: .zero)
  }
}

@Suite("Ports: named transport", .timeLimit(.minutes(3)))
struct PortsNamedTransportTests {
  @Test("request/reply and one-way messages between two threads, handled on the serving thread")
  func requestReply() throws {
    let served = try PortsServedListener { frame in frame.payload.reversed() }
    try served.whileServing {
      let client = try served.connect()
      #expect(try client.request(1, [1, 2, 3]) == [3, 2, 1])
      try client.post(2, replyPortName: "com.MyApp.Thread-1")
      #expect(try client.request(3, Array(repeating: 9, count: 200_000)).count == 200_000)
      #expect(served.eventually { served.handled.snapshot.count == 3 })
    }
    #expect(served.handled.snapshot == ["request:1", "oneWay:2", "request:3"])
    #expect(served.servingThreadMismatches.count == 0)
    #expect(served.rejections.snapshot.isEmpty)
  }

  @Test("a peer sending a malformed frame is dropped and reported; earlier messages and other peers are served")
  func malformedPeer() throws {
    let served = try PortsServedListener { _ in [42] }
    try served.whileServing {
      let bad = try served.rawPeer()
      var bytes = Frame(kind: .oneWay, msgid: 10, sequence: 1, replyPortName: nil, payload: [1]).encoded()
      bytes += Array(repeating: 0xEE, count: 24)
      try bad.sendAll(bytes, before: .after(.seconds(10)))
      let good = try served.connect()
      #expect(try good.request(11) == [42])
      #expect(served.eventually { !served.rejections.snapshot.isEmpty })
      #expect(served.rejections.snapshot.first?.contains("bad frame magic") == true)
      // The bad peer sees its connection closed.
      try bad.waitUntil(.readable, before: .after(.seconds(30)))
      var scratch = [UInt8](repeating: 0, count: 16)
      #expect(throws: TransferFailure.peerClosed) {
        _ = try scratch.withUnsafeMutableBytes { buffer in
          Result { () throws(TransferFailure) in try bad.receiveAvailable(into: buffer) }
        }.get()
      }
      #expect(try good.request(12) == [42], "the port keeps serving others")
    }
    #expect(served.handled.snapshot.contains("oneWay:10"), "a message accepted before the bad frame is handled")
    #expect(served.handled.snapshot.filter { $0.hasPrefix("request") } == ["request:11", "request:12"])
  }

  @Test("an oversized frame is refused from its header, without waiting for the payload")
  func oversizedPeer() throws {
    let served = try PortsServedListener(limits: Frame.Limits(maximumPayload: 1_000)) { _ in nil }
    try served.whileServing {
      let bad = try served.rawPeer()
      var header = Frame(kind: .request, msgid: 1, sequence: 1, replyPortName: nil, payload: []).encoded()
      header[17] = 0x10  // declares 4096 bytes, sends none
      try bad.sendAll(header, before: .after(.seconds(10)))
      #expect(served.eventually { !served.rejections.snapshot.isEmpty })
      #expect(served.rejections.snapshot.first?.contains("exceeds the limit of 1000") == true)
      // The client side refuses to send what the limit forbids.
      let client = try NamedPortConnection(
        name: "server", directory: served.directory, limits: Frame.Limits(maximumPayload: 1_000))
      let error = #expect(throws: PortError.self) { try client.request(2, Array(repeating: 0, count: 1_001)) }
      #expect(error?.status == .transportError)
      #expect(error?.reason == .payloadTooLarge)
      #expect(client.isValid, "a refused payload leaves the connection usable")
    }
    #expect(served.handled.snapshot.isEmpty)
  }

  @Test("a reply that misses the receive deadline is discarded; the next request gets its own reply")
  func lateReply() throws {
    let gate = PortsCounter()
    let served = try PortsServedListener { frame in
      if frame.msgid == 1 {
        let giveUp = MonotonicInstant.after(.seconds(30))
        while gate.count == 0 && !giveUp.hasPassed { sched_yield() }
      }
      return [UInt8(frame.msgid)]
    }
    try served.whileServing {
      let client = try served.connect()
      let start = MonotonicInstant.now
      let error = #expect(throws: PortError.self) { try client.request(1, receive: .milliseconds(50)) }
      #expect(error?.status == .receiveTimeout)
      #expect(MonotonicInstant.now - start >= .milliseconds(50))
      gate.increment()
      #expect(try client.request(2) == [2])
      #expect(client.isValid)
    }
  }

  @Test("invalidating the port while a request is in progress ends the wait with became-invalid")
  func invalidatedMidRequest() throws {
    let entered = PortsCounter()
    let release = PortsCounter()
    let served = try PortsServedListener { _ in
      entered.increment()
      let giveUp = MonotonicInstant.after(.seconds(30))
      while release.count == 0 && !giveUp.hasPassed { sched_yield() }
      return [1]
    }
    let outcome = Recorder<String>()
    try served.whileServing {
      let client = try served.connect()
      runThreads(2) { index in
        if index == 0 {
          do { _ = try client.request(1, receive: .seconds(60)) } catch let error as PortError {
            outcome.append("\(error.status)")
          } catch {}
        } else {
          _ = served.eventually { entered.count == 1 }
          served.listener.invalidate()
          release.increment()
        }
      }
      #expect(!client.isValid)
      let again = #expect(throws: PortError.self) { try client.request(2) }
      #expect(again?.status == .invalid)
    }
    #expect(outcome.snapshot == ["becameInvalid (-5)"])
  }

  @Test("a name is claimed once; a dead owner's socket is replaced; a missing name is invalid")
  func names() throws {
    let path = makePortsTestDirectory()
    defer { removePortsTestDirectory(path) }
    let directory = try PortDirectory.prepare(path: path)
    // A leftover socket file with no claim (its owner died): registration replaces it.
    do { _ = try UnixSocket.listen(at: directory.socketPath(for: "stale")) }
    #expect(portsFileMode(directory.socketPath(for: "stale")) != nil)
    let listener = try NamedPortListener(name: "stale", directory: directory) { _ in nil }
    #expect(listener.isValid)
    // The claim is held: a second registration (another open file description, as another
    // process would have) is refused.
    let error = #expect(throws: PortError.self) {
      _ = try NamedPortListener(name: "stale", directory: directory) { _ in nil }
    }
    #expect(error?.status == .invalid)
    #expect(error?.cause?.code == .wouldBlock)
    // Invalidation removes the socket at once and frees the name.
    listener.invalidate()
    #expect(portsFileMode(directory.socketPath(for: "stale")) == nil)
    let lookup = #expect(throws: PortError.self) { _ = try NamedPortConnection(name: "stale", directory: directory) }
    #expect(lookup?.status == .invalid)
    let again = try NamedPortListener(name: "stale", directory: directory) { _ in nil }
    #expect(again.isValid)
  }
}

@Suite("Ports: name claim files", .timeLimit(.minutes(3)))
struct PortsClaimFileTests {
  /// The names directly inside `path`.
  func entries(_ path: String) -> [String] {
    guard let directory = opendir(path) else { return [] }
    var names: [String] = []
    while let entry = readdir(directory) {
      let name = withUnsafeBytes(of: entry.pointee.d_name) {
        String(cString: $0.bindMemory(to: CChar.self).baseAddress!)
      }
      if name != "." && name != ".." { names.append(name) }
    }
    precondition(closedir(directory) == 0)
    return names
  }

  @Test("registering and invalidating 1,000 names leaves the port directory empty")
  func invalidationRemovesClaimFiles() throws {
    let path = makePortsTestDirectory()
    defer { removePortsTestDirectory(path) }
    let directory = try PortDirectory.prepare(path: path)
    for index in 0..<1_000 {
      let listener = try NamedPortListener(name: "cycle-\(index)", directory: directory) { _ in nil }
      if index % 2 == 0 { listener.invalidate() }  // the others are released without it
    }
    #expect(entries(path).isEmpty)
    // A crashed owner's files (no lock held): the next owner takes them over, and its
    // invalidation removes them.
    do { _ = try UnixSocket.listen(at: directory.socketPath(for: "crashed")) }
    let leftover = open(directory.lockPath(for: "crashed"), O_CREAT | O_RDWR, 0o600)
    #expect(leftover >= 0 && close(leftover) == 0)
    let heir = try NamedPortListener(name: "crashed", directory: directory) { _ in nil }
    #expect(entries(path).sorted() == ["crashed.lock", "crashed.sock"])
    heir.invalidate()
    #expect(entries(path).isEmpty)
  }

  @Test("looking up the name of a port whose owner died removes its files")
  func lookupRemovesADeadOwnersFiles() throws {
    let path = makePortsTestDirectory()
    defer { removePortsTestDirectory(path) }
    let directory = try PortDirectory.prepare(path: path)
    // What a crashed owner leaves: a socket nobody listens on, a lock file nobody holds.
    do { _ = try UnixSocket.listen(at: directory.socketPath(for: "dead")) }
    let leftover = open(directory.lockPath(for: "dead"), O_CREAT | O_RDWR, 0o600)
    #expect(leftover >= 0 && close(leftover) == 0)
    let error = #expect(throws: PortError.self) { _ = try NamedPortConnection(name: "dead", directory: directory) }
    #expect(error?.status == .invalid)
    #expect(entries(path).isEmpty)
    // A live owner's files stay.
    let live = try NamedPortListener(name: "live", directory: directory) { _ in nil }
    _ = try NamedPortConnection(name: "live", directory: directory)
    #expect(entries(path).sorted() == ["live.lock", "live.sock"])
    live.invalidate()
  }

  @Test("threads racing to register and invalidate one name never hold it at once")
  func racingClaimsAreExclusive() throws {
    let path = makePortsTestDirectory()
    defer { removePortsTestDirectory(path) }
    let directory = try PortDirectory.prepare(path: path)
    let holders = AtomicInteger<Int>(0)
    let overlaps = PortsCounter()
    let claims = PortsCounter()
    let failures = Recorder<String>()
    runThreads(4) { _ in
      for _ in 0..<300 {
        do {
          let listener = try NamedPortListener(name: "contended", directory: directory) { _ in nil }
          claims.increment()
          if holders.increment(ordering: .full) != 1 { overlaps.increment() }
          sched_yield()
          _ = holders.decrement(ordering: .full)
          listener.invalidate()
        } catch let error as PortError where error.status == .invalid {
          // Held by another thread right now.
        } catch {
          failures.append("\(error)")
        }
      }
    }
    #expect(overlaps.count == 0)
    #expect(failures.snapshot.isEmpty)
    #expect(claims.count > 0)
    #expect(entries(path).isEmpty)
  }
}
