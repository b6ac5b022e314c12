import RunLoop
import Sync
import TestSupport
import Testing

#if canImport(Glibc)
  import Glibc
#endif

// Listing 3-16: registering a message port under a name. The local port is created,
// installed in the current run loop, and registered with a name that must be unique (per
// user); other threads and processes find it by that name.

@Suite("Listing 3-16: registering a message port", .timeLimit(.minutes(3)))
struct Listing3_16Tests {
  @Test("a local port registered by name is found by name; the name is unique")
  func register() throws {
    let received = Recorder<Int32>()
    // Register the port using a specific name. The name must be unique.
    let localPortName = "MyPortName-\(getpid())"
    let localPort = try MessagePort.local(name: localPortName) { message in
      received.append(message.msgid)
      return nil
    }
    // Configure the object and add it to the current run loop.
    #expect(RunLoop.current.add(localPort, forMode: .default))
    defer { localPort.invalidate() }

    // The name finds the same port in this process...
    #expect(MessagePort.registered(name: localPortName) === localPort)
    #expect(
      try MessagePort.local(name: localPortName) { _ in nil } === localPort,
      "an existing name returns the existing port")
    // ...and a sender anywhere (here: this thread) reaches it by name.
    let remote = try MessagePort.remote(name: localPortName)
    try remote.send(msgid: 7, sendTimeout: .seconds(10), receiveTimeout: .zero, replyMode: .oneWay)
    portExampleRunUntil { received.count == 1 }
    #expect(received.snapshot == [7])
  }
}
