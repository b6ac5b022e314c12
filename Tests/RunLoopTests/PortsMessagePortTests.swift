import Glibc
import Sync
import TestSupport
import Testing

@testable import RunLoop

/// Serves `port` on a new thread until it is invalidated; returns the thread to join.
func portsServeInBackground(_ port: MessagePort) -> pthread_t {
  final class Box: @unchecked Sendable {
    let port: MessagePort
    init(_ port: MessagePort) { self.port = port }
  }
  var thread = pthread_t()
  let box = Unmanaged.passRetained(Box(port)).toOpaque()
  let result = pthread_create(
    &thread, nil,
    { raw in
      let port = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue().port
      while true {
        do { try port.serve(before: .after(.seconds(60))) } catch { return nil }
      }
    }, box)
  precondition(result == 0)
  return thread
}

/// The child side of the two-process tests: registers `name`, echoes requests reversed,
/// exits 0 on message 999, calls `_exit(0)` without replying on message 666 (a peer dying
/// mid-request), and exits 1 if nobody talks to it within a minute.
func portsChildServer(_ name: String) {
  let port: MessagePort
  do {
    port = try MessagePort.local(name: name) { message in
      if message.msgid == 999 { exit(0) }
      if message.msgid == 666 { _exit(0) }
      return message.payload.reversed()
    }
  } catch {
    exit(2)
  }
  let giveUp = MonotonicInstant.after(.seconds(60))
  while !giveUp.hasPassed {
    _ = try? port.serve(before: giveUp)
  }
  exit(1)
}

@Suite("Ports: MessagePort", .timeLimit(.minutes(3)))
struct PortsMessagePortTests {
  @Test("creating a local port under a registered name returns the existing port")
  func existingName() throws {
    let name = uniquePortName("existing")
    let first = try MessagePort.local(name: name) { _ in [1] }
    let second = try MessagePort.local(name: name) { _ in [2] }
    #expect(first === second)
    #expect(MessagePort.registered(name: name) === first)
    #expect(!first.isRemote && first.isValid)
    first.invalidate()
    #expect(MessagePort.registered(name: name) == nil)
    let third = try MessagePort.local(name: name) { _ in [3] }
    #expect(third !== first, "after invalidation the name is free again")
    third.invalidate()
  }

  @Test("request/reply and one-way between two threads; the handler sees the reply-port name")
  func requestReply() throws {
    let name = uniquePortName("echo")
    let seen = Recorder<String>()
    let local = try MessagePort.local(name: name) { message in
      seen.append("\(message.msgid) \(message.replyPort?.name ?? "-")")
      return message.payload.reversed()
    }
    let thread = portsServeInBackground(local)
    defer {
      local.invalidate()
      #expect(pthread_join(thread, nil) == 0)
    }
    let remote = try MessagePort.remote(name: name)
    #expect(remote.isRemote)
    let reply = try remote.send(
      msgid: 1, data: [1, 2, 3], sendTimeout: .seconds(10), receiveTimeout: .seconds(30), replyMode: .awaitReply)
    #expect(reply == [3, 2, 1])
    let none = try remote.send(
      msgid: 100, replyPortName: "com.MyApp.Thread-9", sendTimeout: .seconds(10), receiveTimeout: .zero,
      replyMode: .oneWay)
    #expect(none == nil)
    _ = try remote.send(msgid: 2, sendTimeout: .seconds(10), receiveTimeout: .seconds(30), replyMode: .awaitReply)
    #expect(seen.snapshot == ["1 -", "100 com.MyApp.Thread-9", "2 -"])
  }

  @Test("invalidation: the handler runs once; the remote side learns at its next send")
  func invalidation() throws {
    let name = uniquePortName("invalidation")
    let local = try MessagePort.local(name: name) { _ in [] }
    let localInvalidations = PortsCounter()
    local.setInvalidationHandler { _ in localInvalidations.increment() }
    let thread = portsServeInBackground(local)
    let remote = try MessagePort.remote(name: name)
    let remoteInvalidations = PortsCounter()
    remote.setInvalidationHandler { port in
      #expect(port.isRemote)
      remoteInvalidations.increment()
    }
    _ = try remote.send(msgid: 1, sendTimeout: .seconds(10), receiveTimeout: .seconds(30), replyMode: .awaitReply)
    local.invalidate()
    local.invalidate()
    #expect(pthread_join(thread, nil) == 0)
    #expect(localInvalidations.count == 1)
    #expect(!local.isValid)
    let error = #expect(throws: PortError.self) {
      try remote.send(msgid: 2, sendTimeout: .seconds(10), receiveTimeout: .seconds(30), replyMode: .awaitReply)
    }
    #expect(error?.status == .becameInvalid)
    #expect(!remote.isValid)
    #expect(remoteInvalidations.count == 1)
    let again = #expect(throws: PortError.self) {
      try remote.send(msgid: 3, sendTimeout: .seconds(10), receiveTimeout: .seconds(30), replyMode: .oneWay)
    }
    #expect(again?.status == .invalid)
    #expect(remoteInvalidations.count == 1, "the handler runs once")
  }

  @Test("looking up a name nobody registered is invalid")
  func missing() {
    let error = #expect(throws: PortError.self) { _ = try MessagePort.remote(name: uniquePortName("nobody")) }
    #expect(error?.status == .invalid)
    let bad = #expect(throws: PortError.self) { _ = try MessagePort.remote(name: "../escape") }
    #expect(bad?.status == .invalid)
  }

  @Test("sending on a local port is misuse", .runsExitTests)
  func sendOnLocal() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        let port = try? MessagePort.local(name: "tk-test-misuse-send-local-\(getpid())") { _ in nil }
        _ = try? port?.send(msgid: 1, sendTimeout: .zero, receiveTimeout: .zero, replyMode: .oneWay)
      }
    }
  }

  @Test("request/reply between two processes of the same user", .runsExitTests)
  func twoProcesses() async throws {
    final class Outcome: @unchecked Sendable { var log: [String] = [] }
    let outcome = Outcome()
    var client = pthread_t()
    let box = Unmanaged.passRetained(outcome).toOpaque()
    // The parent's client runs on its own thread while the child process serves.
    #expect(
      pthread_create(
        &client, nil,
        { raw in
          let outcome = Unmanaged<Outcome>.fromOpaque(raw!).takeRetainedValue()
          do {
            let remote = try remotePortEventually("tk-test-xproc-echo-\(getpid())")
            for round in 0..<10 {
              let reply = try remote.send(
                msgid: Int32(round), data: [UInt8(round), 0, 1], sendTimeout: .seconds(10),
                receiveTimeout: .seconds(30), replyMode: .awaitReply)
              outcome.log.append(reply == [1, 0, UInt8(round)] ? "ok" : "bad reply \(String(describing: reply))")
            }
            try remote.send(msgid: 999, sendTimeout: .seconds(10), receiveTimeout: .zero, replyMode: .oneWay)
          } catch {
            outcome.log.append("\(error)")
          }
          return nil
        }, box) == 0)
    await #expect(processExitsWith: .success) {
      portsChildServer("tk-test-xproc-echo-\(getppid())")
    }
    #expect(pthread_join(client, nil) == 0)
    #expect(outcome.log == Array(repeating: "ok", count: 10))
  }

  @Test("a peer process that dies mid-request yields became-invalid, not a hang", .runsExitTests)
  func peerDies() async throws {
    final class Outcome: @unchecked Sendable { var log: [String] = [] }
    let outcome = Outcome()
    var client = pthread_t()
    let box = Unmanaged.passRetained(outcome).toOpaque()
    #expect(
      pthread_create(
        &client, nil,
        { raw in
          let outcome = Unmanaged<Outcome>.fromOpaque(raw!).takeRetainedValue()
          do {
            let remote = try remotePortEventually("tk-test-xproc-dying-\(getpid())")
            let echoed = try remote.send(
              msgid: 1, data: [1, 2], sendTimeout: .seconds(10), receiveTimeout: .seconds(30), replyMode: .awaitReply)
            outcome.log.append(echoed == [2, 1] ? "echo" : "bad echo")
            let start = MonotonicInstant.now
            do {
              _ = try remote.send(
                msgid: 666, sendTimeout: .seconds(10), receiveTimeout: .seconds(120), replyMode: .awaitReply)
              outcome.log.append("unexpected reply")
            } catch {
              outcome.log.append("\((error as? PortError)?.status.description ?? "\(error)")")
              if MonotonicInstant.now - start >= .seconds(120) { outcome.log.append("waited for the timeout") }
            }
          } catch {
            outcome.log.append("\(error)")
          }
          return nil
        }, box) == 0)
    await #expect(processExitsWith: .success) {
      portsChildServer("tk-test-xproc-dying-\(getppid())")
    }
    #expect(pthread_join(client, nil) == 0)
    #expect(outcome.log == ["echo", "becameInvalid (-5)"])
  }
}

/// Open descriptors of this process (entries of /proc/self/fd, minus the one opendir uses).
private func openDescriptorCount() -> Int {
  guard let directory = opendir("/proc/self/fd") else { return -1 }
  var count = 0
  while readdir(directory) != nil { count += 1 }
  closedir(directory)
  return count - 3  // ".", "..", and the directory's own descriptor
}

@Suite("Ports: MessagePort registration failures, send timeouts, remote validity", .timeLimit(.minutes(3)))
struct PortsMessagePortEdgeTests {
  // A stale directory (anything unlink refuses) at the socket's path makes registration fail
  // after the listener opened its descriptors: it closes them once, and leaves the claim.
  @Test("a stale socket path that cannot be removed fails registration cleanly (no crash, no leak)", .runsExitTests)
  func staleSocketPathThatIsADirectory() async {
    await #expect(processExitsWith: .success) {
      let name = uniquePortName("stale-dir")
      let directory = try! PortDirectory.prepare()
      let socketPath = directory.socketPath(for: name)
      precondition(mkdir(socketPath, 0o700) == 0)
      precondition(mkdir(socketPath + "/keep", 0o700) == 0)
      // The fewest descriptors seen: a background thread of the process (the diagnostics'
      // reporter, say) may hold one for a moment.
      let before = (0..<3).map { _ in
        sched_yield()
        return openDescriptorCount()
      }.min()!
      var code: Int32 = 0
      do throws(PortError) {
        _ = try MessagePort.local(name: name) { _ in nil }
        code = 3  // registration should have failed
      } catch {
        if error.status != .transportError { code = 4 }
      }
      // Every descriptor the failed registration opened is closed: the count comes back
      // down (a leak never does, and waitUntil then stops the child with a message).
      waitUntil(within: .seconds(10)) { openDescriptorCount() <= before }
      _ = rmdir(socketPath + "/keep")
      _ = rmdir(socketPath)
      exit(code)
    }
  }

  // Only a frame cut short breaks the stream; one of which no byte went out leaves it in
  // sync, so the port stays usable (as Core Foundation's).
  @Test("a send timeout that wrote nothing leaves the remote port valid and usable")
  func sendTimeoutWithNothingWrittenKeepsThePort() throws {
    let name = uniquePortName("send-timeout-clean")
    let received = PortsCounter()
    let local = try MessagePort.local(name: name) { _ in
      received.increment()
      return nil
    }
    defer { local.invalidate() }
    let remote = try MessagePort.remote(name: name)
    defer { remote.invalidate() }
    let invalidations = PortsCounter()
    remote.setInvalidationHandler { _ in invalidations.increment() }
    // Nobody serves: fill the connection with small one-way messages until one times out.
    var sent = 0
    var timeout: PortError?
    while timeout == nil && sent < 1_000_000 {
      do {
        try remote.send(msgid: 1, sendTimeout: .zero, receiveTimeout: .zero, replyMode: .oneWay)
        sent += 1
      } catch {
        timeout = error
      }
    }
    #expect(timeout?.status == .sendTimeout)
    #expect(remote.isValid, "no byte of the timed-out frame was sent: the stream is still in sync")
    #expect(invalidations.count == 0)
    // Drain what was sent, then the port must carry messages again.
    while received.count < sent {
      _ = try local.serve(timeout: .seconds(5))
    }
    try remote.send(msgid: 2, sendTimeout: .seconds(5), receiveTimeout: .zero, replyMode: .oneWay)
    _ = try local.serve(timeout: .seconds(5))
    #expect(received.count == sent + 1)
  }

  // A remote port whose peer went away says so before a send fails, so remote(name:) does
  // not hand out the dead connection once the name is registered again.
  @Test("after the local port is invalidated and registered again, remote(name:) reaches the new one")
  func remoteLookupAfterReRegistration() throws {
    let name = uniquePortName("reregister")
    let first = try MessagePort.local(name: name) { _ in [1] }
    let firstServer = portsServeInBackground(first)
    let remote = try MessagePort.remote(name: name)
    #expect(
      try remote.send(msgid: 1, sendTimeout: .seconds(5), receiveTimeout: .seconds(5), replyMode: .awaitReply) == [1])
    first.invalidate()
    #expect(pthread_join(firstServer, nil) == 0)
    let second = try MessagePort.local(name: name) { _ in [2] }
    let secondServer = portsServeInBackground(second)
    defer {
      second.invalidate()
      #expect(pthread_join(secondServer, nil) == 0)
    }
    #expect(!remote.isValid, "its peer went away")
    let again = try MessagePort.remote(name: name)
    let reply = try? again.send(msgid: 2, sendTimeout: .seconds(5), receiveTimeout: .seconds(5), replyMode: .awaitReply)
    #expect(reply == [2], "remote(name:) handed out the connection to the invalidated port")
  }
}
