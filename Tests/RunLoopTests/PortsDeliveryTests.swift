import Sync
import TestSupport
import Testing

@testable import RunLoop

@Suite("Ports: messages that wait are delivered", .timeLimit(.minutes(3)))
struct PortsDeliveryTests {
  @Test("a message sent before the port is added to a run loop is delivered by the loop's next run")
  func messageSentBeforeAddIsDelivered() throws {
    let runLoop = RunLoop.current
    let mode: RunLoopMode = "ports.delivery.before-add"
    let port = Port()
    let received = Recorder<Int32>()
    port.setHandler { received.append($0.msgid) }
    try port.send(PortMessage(msgid: 7), timeout: .zero)
    runLoop.add(port, forMode: mode)
    defer { runLoop.remove(port, forMode: mode) }
    let result = runLoop.run(mode: mode, timeout: .seconds(20), returnAfterSourceHandled: true)
    #expect(result == .handledSource)
    #expect(received.snapshot == [7])
  }

  @Test("adding a port with a waiting message from another thread wakes the sleeping loop")
  func addFromAnotherThreadWakesTheLoop() throws {
    let mode: RunLoopMode = "ports.delivery.add-elsewhere"
    let published = Box<RunLoop?>(nil)
    let result = Box<RunLoopRunResult?>(nil)
    let received = Recorder<Int32>()
    let worker = TestThread.spawn {
      let runLoop = RunLoop.current
      // Something to keep the mode running (and asleep) until the port arrives.
      let keepAlive = RunLoopSource(perform: {})
      runLoop.add(keepAlive, forMode: mode)
      published.value = runLoop
      result.value = runLoop.run(mode: mode, timeout: .seconds(20), returnAfterSourceHandled: true)
      runLoop.remove(keepAlive, forMode: mode)
    }
    waitUntil { published.value != nil }
    let runLoop = try #require(published.value)
    let port = Port()
    port.setHandler { received.append($0.msgid) }
    try port.send(PortMessage(msgid: 3), timeout: .zero)
    waitUntil { runLoop.isWaiting }
    runLoop.add(port, forMode: mode)
    worker.join()
    runLoop.remove(port, forMode: mode)
    #expect(result.value == .handledSource)
    #expect(received.snapshot == [3])
  }

  @Test("a second receiver is woken for a message left behind while the first one was on its way")
  func secondReceiverTakesTheMessageLeftBehind() throws {
    let port = Port(capacity: 8)
    let registered = Semaphore(value: 0)
    let heldBack = Semaphore(value: 0)
    let release = Semaphore(value: 0)
    let firstWake = AtomicInteger<Int>(0)
    port.queue.setTestHooks(
      MessageQueue.TestHooks(
        receiverWillWait: { registered.signal() },
        receiverWoke: {
          // Only the first wake-up is held: until the second message is queued.
          if firstWake.exchange(1, ordering: .full) == 0 {
            heldBack.signal()
            release.wait()
          }
        }))
    let received = Recorder<Int32>()
    let failures = Recorder<PortStatus>()
    let finished = Semaphore(value: 0)
    // A receiver that slept past its message would still take it at its deadline: the
    // deadline is far beyond the time the test allows for the receives.
    let receivers = (0..<2).map { _ in
      TestThread.spawn {
        switch Result(catching: { () throws(PortError) in try port.receive(before: .after(.seconds(40))) }) {
        case .success(let message): received.append(message.msgid)
        case .failure(let error): failures.append(error.status)
        }
        finished.signal()
      }
    }
    registered.wait()
    registered.wait()
    try port.send(PortMessage(msgid: 1), timeout: .zero)
    heldBack.wait()
    // One receiver was woken and is on its way; the other sleeps. A second message now.
    try port.send(PortMessage(msgid: 2), timeout: .zero)
    release.signal()
    #expect(finished.wait(timeout: .seconds(10)))
    #expect(finished.wait(timeout: .seconds(10)), "a receiver slept while a message waited")
    for receiver in receivers { receiver.join() }
    #expect(failures.snapshot.isEmpty)
    #expect(received.snapshot.sorted() == [1, 2])
    port.queue.setTestHooks(nil)
  }

  @Test("many receivers and senders on one port: every message is received exactly once")
  func manyReceiversDrainEverything() throws {
    let port = Port(capacity: 4)
    let total = 2000
    let received = Recorder<Int32>()
    let receivedCount = AtomicInteger<Int>(0)
    let senders = (0..<2).map { sender in
      TestThread.spawn {
        for index in 0..<(total / 2) {
          try? port.send(PortMessage(msgid: Int32(sender * total / 2 + index)), timeout: .seconds(20))
        }
      }
    }
    let receivers = (0..<3).map { _ in
      TestThread.spawn {
        while let message = try? port.receive(before: .after(.seconds(20))) {
          received.append(message.msgid)
          if receivedCount.increment(ordering: .full) == total { port.invalidate() }
        }
      }
    }
    for sender in senders { sender.join() }
    for receiver in receivers { receiver.join() }
    #expect(received.snapshot.sorted() == (0..<Int32(total)).map { $0 })
  }
}
