import RunLoop
import Sync
import TestSupport
import Testing

// swift-corelibs-foundation's TestSocketPort scenario "sending one message remote to local",
// with the toolkit's in-process `Port` (the socket port's naming and uniquing scenarios are
// `MessagePort`'s, covered in PortsMessagePortInvalidationTests and PortsSelfServedTests).
// Foundation's `send(before:components:from:reserved:)` returns a Bool; the toolkit's
// `send(_:before:)` throws `PortError` with the guide's status instead.
@Suite("Foundation scenarios: in-process ports", .timeLimit(.minutes(3)))
struct PeerFoundationPortTests {
  /// A message sent from another thread reaches the handler of a port scheduled in the
  /// receiving thread's run loop, payload intact; a passed deadline still sends when the
  /// port has room (one attempt).
  @Test func aMessageSentFromAnotherThreadReachesTheRunLoopHandlerIntact() throws {
    let received = Recorder<[UInt8]>()
    let portBox = Box<Port?>(nil)
    let scheduled = Semaphore()
    let receiver = TestThread.spawn {
      let port = Port()
      port.setHandler { message in
        received.append(message.payload)
        if received.count == 2 { RunLoop.current.stop() }
      }
      RunLoop.current.add(port, forMode: .default)
      portBox.value = port
      scheduled.signal()
      let deadline = MonotonicInstant.after(.seconds(30))
      while received.count < 2 && !deadline.hasPassed {
        _ = RunLoop.current.run(mode: .default, before: deadline)
      }
      port.invalidate()
    }
    scheduled.wait()
    let port = try #require(portBox.value)
    let text = Array("I cannot weave".utf8)
    try port.send(PortMessage(msgid: 1, payload: text), timeout: .seconds(5))
    try port.send(PortMessage(msgid: 2, payload: [0, 255]), before: .now - .seconds(1))
    receiver.join()
    #expect(received.snapshot == [text, [0, 255]])
  }

  /// Foundation's send returns false when the message cannot go before the deadline; the
  /// toolkit throws `sendTimeout` for a full port (after the deadline, not before), and
  /// `receiveTimeout` for an empty one; a passed deadline makes one attempt and never blocks.
  @Test func aFullPortTimesTheSendOutAndAnEmptyOneTheReceive() {
    let port = Port(capacity: 1)
    #expect(throws: Never.self) { try port.send(PortMessage(msgid: 1), before: .now - .seconds(1)) }
    let passed = #expect(throws: PortError.self) { try port.send(PortMessage(msgid: 2), before: .now - .seconds(1)) }
    #expect(passed?.status == .sendTimeout)
    let start = MonotonicInstant.now
    let timed = #expect(throws: PortError.self) { try port.send(PortMessage(msgid: 3), timeout: .milliseconds(30)) }
    #expect(timed?.status == .sendTimeout)
    #expect(MonotonicInstant.now - start >= .milliseconds(30))
    #expect(port.pendingMessageCount == 1)
    #expect((try? port.receive(before: .now - .seconds(1)))?.msgid == 1)
    let empty = #expect(throws: PortError.self) { try port.receive(before: .now - .seconds(1)) }
    #expect(empty?.status == .receiveTimeout)
    let emptyTimed = #expect(throws: PortError.self) { try port.receive(timeout: .zero) }
    #expect(emptyTimed?.status == .receiveTimeout)
    #expect(port.invalidate())
    let invalid = #expect(throws: PortError.self) { try port.send(PortMessage(msgid: 4), before: .now) }
    #expect(invalid?.status == .invalid)
  }
}
