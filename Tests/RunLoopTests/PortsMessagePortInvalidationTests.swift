import Glibc
import RunLoop
import Sync
import TestSupport
import Testing

/// A local port whose handler, for message 1, announces itself and then waits until the
/// test releases it: a handler busy for as long as the test wants.
private final class BusyServer: Sendable {
  let name = uniquePortName("busy")
  let port: MessagePort
  let entered = Semaphore(value: 0)
  let release = Semaphore(value: 0)
  let serving: TestThread

  init() throws {
    let entered = self.entered
    let release = self.release
    let port = try MessagePort.local(name: name) { message in
      if message.msgid == 1 {
        entered.signal()
        release.wait()
      }
      return [UInt8(truncatingIfNeeded: message.msgid)]
    }
    self.port = port
    serving = TestThread.spawn {
      while true {
        do { try port.serve(before: .after(.seconds(60))) } catch { return }
      }
    }
  }

  /// Lets the busy handler return, invalidates the port and joins the serving thread.
  func finish() {
    release.signal()
    port.invalidate()
    serving.join()
  }
}

/// A request on its own thread, its outcome readable once `done` is signalled.
private final class PendingRequest: Sendable {
  let done = Semaphore(value: 0)
  let outcome = Box<Result<[UInt8]?, PortError>?>(nil)
  let thread: TestThread

  init(_ remote: MessagePort, msgid: Int32) {
    let done = self.done
    let outcome = self.outcome
    thread = TestThread.spawn {
      outcome.value = Result { () throws(PortError) -> [UInt8]? in
        try remote.send(msgid: msgid, sendTimeout: .seconds(30), receiveTimeout: .seconds(30), replyMode: .awaitReply)
      }
      done.signal()
    }
  }

  /// The status the request failed with, nil if it succeeded.
  var failureStatus: PortStatus? {
    if case .failure(let error)? = outcome.value { return error.status }
    return nil
  }
}

@Suite("Ports: MessagePort invalidation is prompt, remote ports are shared", .timeLimit(.minutes(3)))
struct PortsMessagePortInvalidationTests {
  /// How long a step that must not wait for the busy handler may take before the test
  /// calls it blocked (the handler stays busy until the test ends it, so a blocked step
  /// would wait for ever).
  static let prompt: Duration = .seconds(10)

  @Test("invalidating a local port releases its message handler and what it captures, as Port and Core Foundation do")
  func localInvalidationReleasesTheHandler() throws {
    final class Capture: Sendable {}
    weak var weakCapture: Capture?
    let port: MessagePort
    do {
      let capture = Capture()
      weakCapture = capture
      port = try MessagePort.local(name: uniquePortName("release-handler")) { _ in
        withExtendedLifetime(capture) {}
        return nil
      }
    }
    #expect(weakCapture != nil, "held by the valid port's handler")
    port.invalidate()
    #expect(!port.isValid)
    #expect(weakCapture == nil, "the invalidated port still holds its message handler and its captures")
    withExtendedLifetime(port) {}
  }

  @Test("invalidating a local port whose handler is busy ends its clients' requests at once with becameInvalid")
  func localInvalidationEndsPendingRequests() throws {
    let server = try BusyServer()
    defer { server.finish() }
    let remote = try MessagePort.remote(name: server.name)
    let busy = PendingRequest(remote, msgid: 1)
    server.entered.wait()
    server.port.invalidate()
    #expect(busy.done.wait(timeout: Self.prompt), "the request waited for the busy handler")
    server.release.signal()
    busy.thread.join()
    #expect(busy.failureStatus == .becameInvalid)
    #expect(!remote.isValid)
  }

  @Test("the name of a local port invalidated while its handler is busy is free at once")
  func localInvalidationFreesTheName() throws {
    let server = try BusyServer()
    defer { server.finish() }
    let remote = try MessagePort.remote(name: server.name)
    let busy = PendingRequest(remote, msgid: 1)
    server.entered.wait()
    server.port.invalidate()
    let successor = try MessagePort.local(name: server.name) { _ in [42] }
    #expect(successor !== server.port)
    successor.invalidate()
    server.release.signal()
    busy.thread.join()
  }

  @Test(
    "a remote port answers isValid and description, invalidates and is released without waiting for its request in flight"
  )
  func remoteDoesNotBlockOnItsRequestInFlight() throws {
    let server = try BusyServer()
    defer { server.finish() }
    let remote = try MessagePort.remote(name: server.name)
    let busy = PendingRequest(remote, msgid: 1)
    server.entered.wait()
    let answered = Semaphore(value: 0)
    let observations = Box<(Bool, String, Bool)?>(nil)
    let observer = TestThread.spawn {
      let valid = remote.isValid
      let description = remote.description
      remote.invalidate()
      observations.value = (valid, description, remote.isValid)
      answered.signal()
    }
    #expect(answered.wait(timeout: Self.prompt), "isValid, description or invalidate() waited for the request")
    #expect(busy.done.wait(timeout: Self.prompt), "the request in flight did not end with the invalidation")
    server.release.signal()
    observer.join()
    busy.thread.join()
    let (valid, description, validAfter) = try #require(observations.value)
    #expect(valid)
    #expect(description == "MessagePort(remote \"\(server.name)\")")
    #expect(!validAfter)
    #expect(busy.failureStatus == .becameInvalid)
  }

  @Test("remote(name:) twice gives the same port while it is valid, a new one after")
  func remoteIsShared() throws {
    let name = uniquePortName("shared")
    let local = try MessagePort.local(name: name) { message in [UInt8(truncatingIfNeeded: message.msgid)] }
    let serving = TestThread.spawn {
      while true {
        do { try local.serve(before: .after(.seconds(60))) } catch { return }
      }
    }
    defer {
      local.invalidate()
      serving.join()
    }
    let first = try MessagePort.remote(name: name)
    let second = try MessagePort.remote(name: name)
    #expect(first === second)
    #expect(first == second)
    #expect(
      try second.send(msgid: 5, sendTimeout: .seconds(10), receiveTimeout: .seconds(30), replyMode: .awaitReply) == [5])
    first.invalidate()
    #expect(!second.isValid, "one port: invalidating it ends it for every user")
    let third = try MessagePort.remote(name: name)
    #expect(third !== first)
    #expect(third.isValid)
    #expect(
      try third.send(msgid: 6, sendTimeout: .seconds(10), receiveTimeout: .seconds(30), replyMode: .awaitReply) == [6])
    third.invalidate()
  }

  @Test("threads looking up one name at once all get the same remote port")
  func concurrentLookupsShareOnePort() throws {
    let name = uniquePortName("racing")
    let local = try MessagePort.local(name: name) { _ in nil }
    defer { local.invalidate() }
    let found = Recorder<ObjectIdentifier>()
    let keep = Recorder<MessagePort>()
    runThreads(4) { _ in
      guard let port = try? MessagePort.remote(name: name) else { return }
      keep.append(port)
      found.append(ObjectIdentifier(port))
    }
    #expect(found.snapshot.count == 4)
    #expect(Set(found.snapshot).count == 1)
    for port in keep.snapshot { port.invalidate() }
  }

  @Test("a remote port whose isValid finds its peer gone runs its invalidation handler then, once")
  func remoteIsValidRunsTheInvalidationHandler() throws {
    let name = uniquePortName("isvalid-peer-gone")
    let local = try MessagePort.local(name: name) { _ in [1] }
    let server = TestThread.spawn {
      while true {
        do { try local.serve(before: .after(.seconds(60))) } catch { return }
      }
    }
    let remote = try MessagePort.remote(name: name)
    let invalidations = PortsCounter()
    let reported = Box<MessagePort?>(nil)
    remote.setInvalidationHandler { port in
      reported.value = port
      invalidations.increment()
    }
    #expect(
      try remote.send(msgid: 1, sendTimeout: .seconds(10), receiveTimeout: .seconds(30), replyMode: .awaitReply) == [1])
    local.invalidate()
    server.join()
    #expect(!remote.isValid, "its peer went away")
    #expect(invalidations.count == 1, "isValid found the port invalid but did not run its invalidation handler")
    #expect(reported.value === remote)
    reported.value = nil
    let error = #expect(throws: PortError.self) {
      try remote.send(msgid: 2, sendTimeout: .seconds(10), receiveTimeout: .seconds(30), replyMode: .awaitReply)
    }
    #expect(error?.status == .invalid, "the port was invalid before this send")
    #expect(!remote.isValid)
    remote.invalidate()
    #expect(invalidations.count == 1, "the handler runs once")
  }

  @Test("threads noticing a remote port's peer gone at once (isValid, send, invalidate, lookup) run its handler once")
  func remoteInvalidationIsReportedOnceUnderConcurrency() throws {
    let rounds = isRunningUnderSanitizer ? 10 : 50
    for round in 0..<rounds {
      let name = uniquePortName("concurrent-invalidation")
      let local = try MessagePort.local(name: name) { _ in [1] }
      let remote = try MessagePort.remote(name: name)
      let invalidations = PortsCounter()
      remote.setInvalidationHandler { _ in invalidations.increment() }
      local.invalidate()
      let start = Latch(count: 1)
      let threads = (0..<4).map { index in
        TestThread.spawn {
          start.wait()
          switch (index + round) % 4 {
          case 0: _ = remote.isValid
          case 1:
            _ = try? remote.send(msgid: 1, sendTimeout: .seconds(5), receiveTimeout: .seconds(5), replyMode: .oneWay)
          case 2: remote.invalidate()
          default: _ = try? MessagePort.remote(name: name)
          }
          _ = remote.isValid
        }
      }
      start.countDown()
      for thread in threads { thread.join() }
      #expect(!remote.isValid)
      #expect(invalidations.count == 1, "round \(round)")
    }
  }

  @Test("invalidate() returns after the invalidation handler ran on its thread, while other threads serve and send")
  func invalidateRunsTheHandlerBeforeItReturns() throws {
    let rounds = isRunningUnderSanitizer ? 20 : 150
    for round in 0..<rounds {
      let name = uniquePortName("handler-before-return")
      let local = try MessagePort.local(name: name) { _ in [1] }
      let server = TestThread.spawn {
        while true {
          do { try local.serve(before: .after(.seconds(60))) } catch { return }
        }
      }
      let remote = try MessagePort.remote(name: name)
      let answered = Latch(count: 1)
      let sender = TestThread.spawn {
        var first = true
        while true {
          do {
            _ = try remote.send(
              msgid: 1, sendTimeout: .seconds(10), receiveTimeout: .seconds(30), replyMode: .awaitReply)
          } catch {
            if first { answered.countDown() }
            return
          }
          if first { answered.countDown() }
          first = false
        }
      }
      let localRuns = Recorder<pthread_t>()
      let remoteRuns = Recorder<pthread_t>()
      local.setInvalidationHandler { _ in localRuns.append(pthread_self()) }
      remote.setInvalidationHandler { _ in remoteRuns.append(pthread_self()) }
      answered.wait()
      let me = pthread_self()
      if round % 2 == 0 {
        remote.invalidate()
        #expect(remoteRuns.snapshot == [me], "round \(round): remote handler not run by invalidate()")
        local.invalidate()
        #expect(localRuns.snapshot == [me], "round \(round): local handler not run by invalidate()")
      } else {
        local.invalidate()
        #expect(localRuns.snapshot == [me], "round \(round): local handler not run by invalidate()")
      }
      server.join()
      sender.join()
      remote.invalidate()
    }
  }
}
