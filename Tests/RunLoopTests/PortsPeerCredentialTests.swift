import Glibc
import Sync
import TestSupport
import Testing

@testable import RunLoop

@Suite("Ports: peer credentials (SO_PEERCRED)", .timeLimit(.minutes(3)))
struct PortsPeerCredentialTests {
  @Test("a socket pair reports this process's pid, uid and gid")
  func ownCredentials() throws {
    let (left, right) = try UnixSocket.pair()
    let credentials = try left.peerCredentials()
    #expect(credentials == PeerCredentials(processID: getpid(), userID: geteuid(), groupID: getegid()))
    #expect(try right.peerCredentials() == credentials)
  }

  @Test("the default policy admits only the same user")
  func policy() {
    let me = PeerCredentials(processID: 1, userID: geteuid(), groupID: 0)
    let other = PeerCredentials(processID: 1, userID: geteuid() &+ 1, groupID: 0)
    #expect(PeerPolicy.sameUser.admits(me))
    #expect(!PeerPolicy.sameUser.admits(other))
    #expect(PeerPolicy.users([geteuid() &+ 1]).admits(other))
    #expect(!PeerPolicy.users([geteuid() &+ 1]).admits(me))
  }

  @Test("a listener refuses and reports a peer its policy does not admit")
  func listenerRefuses() throws {
    let path = makePortsTestDirectory()
    defer { removePortsTestDirectory(path) }
    let directory = try PortDirectory.prepare(path: path)
    let handled = PortsCounter()
    let listener = try NamedPortListener(
      name: "guarded", directory: directory, policy: .users([geteuid() &+ 1])
    ) { _ in
      handled.increment()
      return nil
    }
    let log = Recorder<String>()
    listener.setRejectionHandler { log.append($0.description) }
    let client = try NamedPortConnection(name: "guarded", directory: directory)
    // The listener accepts, reads the credentials and closes the connection.
    let giveUp = MonotonicInstant.after(.seconds(20))
    while log.snapshot.isEmpty && !giveUp.hasPassed { _ = try listener.serveOnce(before: giveUp) }
    #expect(log.snapshot.count == 1)
    #expect(log.snapshot.first?.contains("uid \(geteuid())") == true)
    #expect(log.snapshot.first?.contains("refused by the peer policy") == true)
    let error = #expect(throws: PortError.self) {
      try client.send(
        msgid: 1, payload: [], replyPortName: nil, sendDeadline: .after(.seconds(5)), awaitReply: true,
        receiveTimeout: .seconds(10))
    }
    #expect(error?.status == .becameInvalid)
    #expect(handled.count == 0)
    #expect(listener.peerCount == 0)
  }

  @Test("a client refuses a listener its policy does not admit")
  func clientRefuses() throws {
    let path = makePortsTestDirectory()
    defer { removePortsTestDirectory(path) }
    let directory = try PortDirectory.prepare(path: path)
    let listener = try NamedPortListener(name: "server", directory: directory) { _ in nil }
    let error = #expect(throws: PortError.self) {
      _ = try NamedPortConnection(name: "server", directory: directory, policy: .users([geteuid() &+ 1]))
    }
    #expect(error?.status == .transportError)
    #expect(error?.reason == .peerRefused)
    #expect(listener.isValid)
  }
}
