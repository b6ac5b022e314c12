// Compiles the ports' public types beside Foundation, which has classes of the same names
// (Port, MessagePort, PortMessage) and its own RunLoop. Module selectors pick ours.
import Foundation
import RunLoop
import Sync
import Testing

@Suite("Ports beside Foundation", .timeLimit(.minutes(3)))
struct PortsInteropTests {
  @Test("ports, messages, results and sources are usable with Foundation imported")
  func types() throws {
    let port = RunLoop::Port(capacity: 2)
    let message = RunLoop::PortMessage(msgid: 100, payload: [1], replyPort: .port(port))
    try port.send(message, timeout: .zero)
    #expect(try port.tryReceive()?.msgid == 100)
    #expect(port.invalidate())

    let status: PortStatus = .becameInvalid
    #expect(status.rawValue == -5)
    let error = PortError(.sendTimeout, detail: "interop")
    #expect(error.code == -1)
    #expect(PerformError.timedOut != .noRunLoop)

    let name = "interop-\(getpid())"
    let local = try RunLoop::MessagePort.local(name: name) { _ in nil }
    #expect(RunLoop::MessagePort.registered(name: name) === local)
    local.invalidate()

    var ends: [Int32] = [-1, -1]
    #expect(pipe(&ends) == 0)
    let source = FileDescriptorSource(descriptor: ends[0]) { _, _ in }
    let loop = RunLoop::RunLoop.current
    #expect(loop.add(source, forMode: .default))
    source.invalidate()
    #expect(close(ends[0]) == 0 && close(ends[1]) == 0)

    // The peers by their own names, in the same scope: distinct types.
    #expect(ObjectIdentifier(Foundation.Port.self) != ObjectIdentifier(RunLoop::Port.self))
  }
}
