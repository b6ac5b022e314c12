import RunLoop
import Sync
import TestSupport
import Testing

/// Runs `body` when released: a capture whose deinit does something.
private final class OnDeinit: Sendable {
  let body: @Sendable () -> Void
  init(_ body: @escaping @Sendable () -> Void) { self.body = body }
  deinit { body() }
}

@Suite("Ports: invalidation handlers are run and released outside the port's locks", .timeLimit(.minutes(3)))
struct PortsCallbackReleaseTests {
  @Test("a handler set after the invalidation was reported runs at once, as the first one did")
  func handlerSetAfterReportedInvalidationRuns() throws {
    let port = try MessagePort.local(name: uniquePortName("late-handler")) { _ in nil }
    let first = PortsCounter()
    port.setInvalidationHandler { _ in first.increment() }
    port.invalidate()
    #expect(first.count == 1)
    let second = PortsCounter()
    port.setInvalidationHandler { _ in second.increment() }
    #expect(second.count == 1, "setting a handler on an invalid port runs it")
    #expect(first.count == 1)
  }

  @Test("a replaced invalidation handler is released with no port lock held")
  func replacedHandlerReleasedOutsideTheLock() throws {
    let port = try MessagePort.local(name: uniquePortName("replaced-handler")) { _ in nil }
    defer { port.invalidate() }
    // The replaced handler's capture asks another thread to set the port's handler and
    // waits for it: that setter needs the handler slot's lock.
    let otherSetterDone = Box(false)
    let setter = Box<TestThread?>(nil)
    let makeWatchdog = {
      OnDeinit {
        let done = Semaphore(value: 0)
        setter.value = TestThread.spawn {
          port.setInvalidationHandler(nil)
          done.signal()
        }
        otherSetterDone.value = done.wait(timeout: .seconds(10))
      }
    }
    port.setInvalidationHandler { [watchdog = makeWatchdog()] _ in withExtendedLifetime(watchdog) {} }
    port.setInvalidationHandler { _ in }
    // Joined only now: with the lock held across the release, the setter finishes only
    // once the release is over.
    setter.value?.join()
    #expect(otherSetterDone.value, "the replaced handler was released while the slot's lock was held")
  }

  @Test("releasing a Port without invalidate() releases its invalidation handler without running it")
  func releasedPortReleasesItsInvalidationHandlerUnrun() {
    let runs = PortsCounter()
    let releases = PortsCounter()
    do {
      let port = Port()
      port.setInvalidationHandler { [capture = OnDeinit { releases.increment() }] _ in
        withExtendedLifetime(capture) { runs.increment() }
      }
      #expect(releases.count == 0)
    }
    #expect(releases.count == 1, "the released port kept its invalidation handler")
    #expect(runs.count == 0, "documented: there is no port left to pass to the handler")
  }

  @Test("a Port whose queue holds a message replying to the port itself is released with its last reference")
  func portQueuedAsItsOwnReplyPortIsReleased() throws {
    let releases = PortsCounter()
    weak var released: Port?
    do {
      let port = Port()
      released = port
      port.setHandler { [capture = OnDeinit { releases.increment() }] _ in withExtendedLifetime(capture) {} }
      try port.send(PortMessage(msgid: 1, replyPort: .port(port)), timeout: .seconds(1))
      try port.send(PortMessage(msgid: 2, replyPort: .port(port)), timeout: .seconds(1))
    }
    #expect(released == nil, "the queued message kept its own port alive")
    #expect(releases.count == 1, "the released port kept its message handler")
  }

  @Test("a message replying to its own port is received with that port, directly and through a run loop")
  func messageReplyingToItsOwnPortKeepsItsReplyPort() throws {
    let port = Port()
    defer { port.invalidate() }
    let other = Port()
    try port.send(PortMessage(msgid: 1, replyPort: .port(port)), timeout: .seconds(1))
    try port.send(PortMessage(msgid: 2, replyPort: .port(other)), timeout: .seconds(1))
    try port.send(PortMessage(msgid: 3, payload: [7], replyPort: .port(port)), timeout: .seconds(1))
    let first = try port.receive(timeout: .seconds(1))
    #expect(first.msgid == 1 && first.replyPort?.port === port)
    let second = try port.tryReceive()
    #expect(second?.msgid == 2 && second?.replyPort?.port === other)
    let delivered = Box<[(Int32, [UInt8], Bool)]>([])
    port.setHandler { message in
      delivered.value.append((message.msgid, message.payload, message.replyPort?.port === port))
    }
    RunLoop.current.add(port, forMode: .default)
    defer { RunLoop.current.remove(port, forMode: .default) }
    _ = RunLoop.current.run(mode: .default, before: .after(.seconds(10)), returnAfterSourceHandled: true)
    #expect(delivered.value.count == 1)
    #expect(delivered.value.first?.0 == 3 && delivered.value.first?.1 == [7] && delivered.value.first?.2 == true)
  }
}
