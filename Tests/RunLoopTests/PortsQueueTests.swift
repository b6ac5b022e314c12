import Glibc
import Sync
import TestSupport
import Testing

@testable import RunLoop

/// Whether `descriptor` is readable right now (poll with a zero timeout).
func portsIsReadable(_ descriptor: Int32) -> Bool {
  var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
  let ready = poll(&entry, 1, 0)
  precondition(ready >= 0)
  return ready == 1
}

@Suite("Ports: bounded in-process queue and Port", .timeLimit(.minutes(3)))
struct PortsQueueTests {
  @Test("messages come out in the order they went in")
  func fifo() throws {
    let port = Port(capacity: 8)
    for id in 0..<8 { try port.send(PortMessage(msgid: Int32(id), payload: [UInt8(id)]), timeout: .zero) }
    #expect(port.pendingMessageCount == 8)
    for id in 0..<8 {
      let message = try port.receive(before: .distantFuture)
      #expect(message.msgid == Int32(id) && message.payload == [UInt8(id)])
    }
    #expect(try port.tryReceive() == nil)
  }

  @Test("a full port makes a sender time out at its deadline, not earlier, without growing")
  func bound() throws {
    let port = Port(capacity: 4)
    for id in 0..<4 { try port.send(PortMessage(msgid: Int32(id)), timeout: .zero) }
    let start = MonotonicInstant.now
    let error = #expect(throws: PortError.self) { try port.send(PortMessage(msgid: 99), timeout: .milliseconds(50)) }
    let waited = MonotonicInstant.now - start
    #expect(error?.status == .sendTimeout)
    #expect(waited >= .milliseconds(50), "never early")
    #expect(waited < .seconds(30), "returns within a generous bound")
    #expect(port.pendingMessageCount == 4)
    // A zero deadline makes exactly one attempt.
    #expect(throws: PortError.self) { try port.send(PortMessage(msgid: 100), before: .distantPast) }
    #expect(try port.receive(before: .distantFuture).msgid == 0)
    try port.send(PortMessage(msgid: 101), before: .distantPast)
    #expect(port.pendingMessageCount == 4)
  }

  @Test("a receive with nothing to take times out at its deadline, not earlier")
  func receiveTimeout() throws {
    let port = Port()
    let start = MonotonicInstant.now
    let error = #expect(throws: PortError.self) { try port.receive(before: start + .milliseconds(30)) }
    #expect(error?.status == .receiveTimeout)
    #expect(MonotonicInstant.now - start >= .milliseconds(30))
  }

  @Test("a blocked sender proceeds when the owner drains")
  func blockedSenderProceeds() throws {
    let port = Port(capacity: 1)
    let total = 2_000
    let received = Recorder<String>()
    runThreads(2) { index in
      if index == 0 {
        for id in 0..<total {
          do { try port.send(PortMessage(msgid: Int32(id)), timeout: .seconds(60)) } catch {
            received.append("send failed: \(error)")
          }
        }
      } else {
        var expected: Int32 = 0
        while expected < Int32(total) {
          guard let message = try? port.receive(before: .after(.seconds(60))) else {
            received.append("receive failed")
            return
          }
          if message.msgid != expected { received.append("out of order: \(message.msgid)") }
          expected += 1
        }
      }
    }
    #expect(received.snapshot.isEmpty)
    #expect(port.pendingMessageCount == 0)
  }

  @Test("many senders, one owner: every message arrives once, in each sender's order")
  func stress() throws {
    let port = Port(capacity: 8)
    let senders = 4
    let perSender = 5_000
    let problems = Recorder<String>()
    let delivered = PortsCounter()
    runThreads(senders + 1) { index in
      if index < senders {
        for sequence in 0..<perSender {
          let message = PortMessage(msgid: Int32(index), payload: withUnsafeBytes(of: UInt32(sequence)) { Array($0) })
          do { try port.send(message, timeout: .seconds(60)) } catch { problems.append("\(error)") }
        }
      } else {
        var next = [UInt32](repeating: 0, count: senders)
        for _ in 0..<(senders * perSender) {
          guard let message = try? port.receive(before: .after(.seconds(60))) else {
            problems.append("receive failed")
            return
          }
          let sequence = message.payload.withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }
          let sender = Int(message.msgid)
          if sequence != next[sender] { problems.append("sender \(sender): \(sequence) after \(next[sender])") }
          next[sender] = sequence + 1
          delivered.increment()
        }
      }
    }
    #expect(problems.snapshot.isEmpty)
    #expect(delivered.count == senders * perSender)
  }

  @Test("invalidation wakes a blocked sender and a blocked receiver, and later sends fail")
  func invalidationWakesBothSides() throws {
    let full = Port(capacity: 1)
    try full.send(PortMessage(msgid: 1), timeout: .zero)
    let empty = Port()
    let outcomes = Recorder<String>()
    let ready = PortsCounter()
    runThreads(3) { index in
      switch index {
      case 0:
        ready.increment()
        do { try full.send(PortMessage(msgid: 2), timeout: .seconds(60)) } catch let error as PortError {
          outcomes.append("sender \(error.status)")
        } catch {}
      case 1:
        ready.increment()
        do { _ = try empty.receive(before: .after(.seconds(60))) } catch let error as PortError {
          outcomes.append("receiver \(error.status)")
        } catch {}
      default:
        while ready.count < 2 { sched_yield() }
        // Whether or not the others are asleep yet, they must end with an error.
        #expect(full.invalidate())
        #expect(empty.invalidate())
      }
    }
    #expect(Set(outcomes.snapshot).count == 2)
    #expect(
      outcomes.snapshot.contains { $0.hasPrefix("sender ") && ($0.contains("becameInvalid") || $0.contains("invalid")) }
    )
    #expect(outcomes.snapshot.contains("receiver becameInvalid (-5)"))
    #expect(!full.isValid && !empty.isValid)
    #expect(!full.invalidate(), "invalidation is idempotent")
    let late = #expect(throws: PortError.self) { try full.send(PortMessage(msgid: 3), timeout: .zero) }
    #expect(late?.status == .invalid)
    #expect(full.pendingMessageCount == 0, "queued messages are dropped")
  }

  @Test("the readiness descriptor is readable exactly while messages or the invalidation wait")
  func readiness() throws {
    let port = Port(capacity: 4)
    let early = Port(capacity: 1)
    try early.send(PortMessage(msgid: 1), timeout: .zero)
    #expect(portsIsReadable(try early.readinessDescriptor()), "created late, it still reports what waits")
    #expect(try early.readinessDescriptor() == early.readinessDescriptor(), "one descriptor per port")
    #expect(!portsIsReadable(try port.readinessDescriptor()))
    try port.send(PortMessage(msgid: 1), timeout: .zero)
    try port.send(PortMessage(msgid: 2), timeout: .zero)
    #expect(portsIsReadable(try port.readinessDescriptor()))
    _ = try port.tryReceive()
    #expect(portsIsReadable(try port.readinessDescriptor()))
    _ = try port.tryReceive()
    #expect(!portsIsReadable(try port.readinessDescriptor()))
    port.invalidate()
    #expect(portsIsReadable(try port.readinessDescriptor()))
  }

  @Test("the check-in pattern: a port travels inside a message")
  func checkIn() throws {
    let mainPort = Port()
    let log = Recorder<String>()
    runThreads(2) { index in
      do {
        if index == 0 {
          // Worker: create its own port, check in with it, wait for an order.
          let workerPort = Port()
          try mainPort.send(PortMessage(msgid: 100, replyPort: .port(workerPort)), timeout: .seconds(10))
          let order = try workerPort.receive(before: .after(.seconds(60)))
          log.append("worker got \(order.msgid)")
        } else {
          // Main side: take the check-in, keep the worker's port, talk to it.
          let checkIn = try mainPort.receive(before: .after(.seconds(60)))
          guard checkIn.msgid == 100, let workerPort = checkIn.replyPort?.port else {
            log.append("bad check-in")
            return
          }
          try workerPort.send(PortMessage(msgid: 7), timeout: .seconds(10))
        }
      } catch {
        log.append("failed: \(error)")
      }
    }
    #expect(log.snapshot == ["worker got 7"])
  }

  @Test("a capacity below one is misuse", .runsExitTests)
  func zeroCapacity() async {
    await #expect(processExitsWith: .failure) {
      _ = Port(capacity: 0)
    }
  }
}
