import Glibc
import RunLoop
import Sync
import TestSupport
import Testing
import Threads

/// A pipe whose ends close on deinit.
final class PortsPipe: @unchecked Sendable {
  let readEnd: Int32
  let writeEnd: Int32
  init() {
    var ends: [Int32] = [-1, -1]
    precondition(pipe(&ends) == 0)
    for end in ends { precondition(fcntl(end, F_SETFL, O_NONBLOCK) == 0) }
    readEnd = ends[0]
    writeEnd = ends[1]
  }
  deinit {
    _ = close(readEnd)
    _ = close(writeEnd)
  }
  func write(_ byte: UInt8) {
    var value = byte
    precondition(Glibc.write(writeEnd, &value, 1) == 1)
  }
  func readAll() -> [UInt8] {
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 64)
    while true {
      let count = buffer.withUnsafeMutableBytes { read(readEnd, $0.baseAddress!, 64) }
      if count <= 0 { return bytes }
      bytes += buffer[0..<count]
    }
  }
}

@Suite("Ports: in run loops", .timeLimit(.minutes(3)))
struct PortsRunLoopTests {
  @Test("a port scheduled in a run loop delivers every message, in order, on the loop's thread")
  func portDelivers() throws {
    let published = Box<Port?>(nil)
    let received = Recorder<Int32>()
    let wrongThread = PortsCounter()
    let total: Int32 = 500
    let worker = TestThread.spawn {
      let port = Port(capacity: 8)
      let me = Thread.current.id
      port.setHandler { message in
        if Thread.current.id != me { wrongThread.increment() }
        received.append(message.msgid)
        if message.msgid == total - 1 { RunLoop.current.stop() }
      }
      RunLoop.current.add(port, forMode: .default)
      published.value = port
      _ = RunLoop.current.run(mode: .default, before: .after(.seconds(60)))
    }
    waitUntil { published.value != nil }
    let port = try #require(published.value)
    for id in 0..<total { try port.send(PortMessage(msgid: id), timeout: .seconds(30)) }
    worker.join()
    #expect(received.snapshot == Array(0..<total))
    #expect(wrongThread.count == 0)
  }

  @Test("a delivered message is released before the next one of the same pass is delivered")
  func deliveredMessageIsReleasedBeforeTheNext() throws {
    final class WeakPort: @unchecked Sendable { weak var port: Port? }
    let carried = WeakPort()
    let releasedInTime = LockedValue<Bool?>(nil)
    TestThread.run {
      let port = Port(capacity: 8)
      port.setHandler { message in
        // The second message's handler (which could run the loop nested, or for long)
        // finds the first one, and the reply port only it held, gone.
        if message.msgid == 2 {
          releasedInTime.withLock { $0 = carried.port == nil }
          RunLoop.current.stop()
        }
      }
      RunLoop.current.add(port, forMode: .default)
      do {
        let replyPort = Port()
        carried.port = replyPort
        try? port.send(PortMessage(msgid: 1, replyPort: .port(replyPort)), timeout: .seconds(5))
      }
      try? port.send(PortMessage(msgid: 2), timeout: .seconds(5))
      #expect(carried.port != nil, "held by the queued message")
      _ = RunLoop.current.run(mode: .default, before: .after(.seconds(30)))
      port.invalidate()
    }
    #expect(releasedInTime.withLock { $0 } == true)
  }

  @Test("a port delivers only in its modes; a zero-timeout run in its mode delivers what waits")
  func portModes() throws {
    let runLoop = RunLoop.current
    let port = Port()
    let received = Recorder<Int32>()
    port.setHandler { received.append($0.msgid) }
    let other: RunLoopMode = "ports.other"
    runLoop.add(port, forMode: other)
    #expect(runLoop.contains(port, inMode: other))
    #expect(!runLoop.contains(port, inMode: .default))
    try port.send(PortMessage(msgid: 1), timeout: .zero)
    let keepAlive = RunLoopSource(perform: {})
    runLoop.add(keepAlive, forMode: .default)
    #expect(runLoop.run(mode: .default, timeout: .milliseconds(20)) == .timedOut)
    #expect(received.snapshot.isEmpty, "not delivered in a mode the port is not in")
    #expect(runLoop.run(mode: other, timeout: .zero) == .timedOut)
    #expect(received.snapshot == [1])
    runLoop.remove(port, forMode: other)
    runLoop.remove(keepAlive, forMode: .default)
    #expect(!runLoop.contains(port, inMode: other))
  }

  @Test("invalidating a scheduled port from another thread wakes the loop and runs the handler")
  func portInvalidation() throws {
    let runLoop = RunLoop.current
    let port = Port()
    port.setHandler { _ in }
    let invalidations = PortsCounter()
    port.setInvalidationHandler { _ in invalidations.increment() }
    runLoop.add(port, forMode: .default)
    let killer = TestThread.spawn {
      waitUntil { runLoop.isWaiting }
      port.invalidate()
    }
    // The port is the mode's only item: once it is gone the run finishes.
    #expect(runLoop.run(mode: .default, before: .after(.seconds(60))) == .finished)
    killer.join()
    #expect(invalidations.count == 1)
    #expect(!runLoop.contains(port, inMode: .default))
    #expect(!runLoop.add(port, forMode: .default), "an invalid port is not added")
  }

  @Test("a descriptor source reports readability in one pass, level-triggered, only in its modes")
  func descriptorSource() {
    let runLoop = RunLoop.current
    let pipe = PortsPipe()
    let reports = Recorder<String>()
    let source = FileDescriptorSource(descriptor: pipe.readEnd, events: .readable) { _, events in
      reports.append(events.contains(.readable) ? "readable" : "other \(events.rawValue)")
    }
    runLoop.add(source, forMode: .default)
    pipe.write(1)
    #expect(runLoop.run(mode: .default, timeout: .zero, returnAfterSourceHandled: true) == .handledSource)
    #expect(reports.snapshot == ["readable"])
    // Not drained: reported again in the next pass.
    #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
    #expect(reports.snapshot == ["readable", "readable"])
    _ = pipe.readAll()
    #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
    #expect(reports.count == 2, "nothing to read, nothing reported")
    // Disabled: not reported even when readable.
    source.disable(.readable)
    pipe.write(2)
    #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
    #expect(reports.count == 2)
    source.enable(.readable)
    #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
    #expect(reports.count == 3)
    // Another mode: the ready descriptor neither fires nor keeps the loop busy.
    let other: RunLoopMode = "ports.other"
    let keepAlive = RunLoopSource(perform: {})
    runLoop.add(keepAlive, forMode: other)
    let passes = PortsCounter()
    let observer = RunLoopObserver(activities: .beforeWaiting) { _, _ in passes.increment() }
    runLoop.add(observer, forMode: other)
    #expect(runLoop.run(mode: other, timeout: .milliseconds(30)) == .timedOut)
    #expect(reports.count == 3)
    #expect(passes.count <= 3, "the loop slept instead of spinning (\(passes.count) passes)")
    source.invalidate()
    #expect(!source.isValid)
    #expect(!runLoop.contains(source, inMode: .default))
    #expect(runLoop.run(mode: .default, timeout: .zero) == .finished)
    runLoop.remove(keepAlive, forMode: other)
    runLoop.remove(observer, forMode: other)
  }

  @Test("many descriptors ready at once are all handled in one pass")
  func manyDescriptors() {
    let runLoop = RunLoop.current
    let pipes = (0..<40).map { _ in PortsPipe() }
    let handled = Recorder<Int>()
    let sources = pipes.enumerated().map { index, pipe in
      FileDescriptorSource(descriptor: pipe.readEnd) { _, _ in
        _ = pipe.readAll()
        handled.append(index)
      }
    }
    for source in sources { runLoop.add(source, forMode: .default) }
    for pipe in pipes { pipe.write(9) }
    #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
    #expect(Set(handled.snapshot) == Set(0..<40), "one zero-timeout run (one pass) handled every descriptor")
    for source in sources { source.invalidate() }
  }

  @Test("a writable descriptor source fires until disabled")
  func writable() {
    let runLoop = RunLoop.current
    let pipe = PortsPipe()
    let reports = PortsCounter()
    let source = FileDescriptorSource(descriptor: pipe.writeEnd, events: .writable) { source, events in
      if events.contains(.writable) { reports.increment() }
      source.disable(.writable)
    }
    runLoop.add(source, forMode: .common)
    #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
    #expect(runLoop.run(mode: .default, timeout: .zero) == .timedOut)
    #expect(reports.count == 1)
    #expect(source.enabledEvents.isEmpty)
    source.invalidate()
  }

  @Test("a named port served by a run loop answers requests from another thread")
  func messagePortInRunLoop() throws {
    let name = uniquePortName("runloop")
    let served = Recorder<String>()
    let ready = Box(false)
    let stop = Box(false)
    let server = TestThread.spawn {
      guard
        let port = try? MessagePort.local(
          name: name,
          handler: { message in
            served.append("\(message.msgid)")
            if message.msgid == 99 { stop.value = true }
            return message.payload.reversed()
          })
      else { return }
      #expect(RunLoop.current.add(port, forMode: .default))
      ready.value = true
      let giveUp = MonotonicInstant.after(.seconds(60))
      while !stop.value && !giveUp.hasPassed {
        _ = RunLoop.current.run(mode: .default, before: giveUp, returnAfterSourceHandled: true)
      }
      port.invalidate()
    }
    waitUntil { ready.value }
    let remote = try MessagePort.remote(name: name)
    for round in 0..<20 {
      let reply = try remote.send(
        msgid: Int32(round), data: [1, UInt8(round)], sendTimeout: .seconds(10), receiveTimeout: .seconds(30),
        replyMode: .awaitReply)
      #expect(reply == [UInt8(round), 1])
    }
    let second = try MessagePort.remote(name: name)
    #expect(
      try second.send(
        msgid: 50, data: [7], sendTimeout: .seconds(10), receiveTimeout: .seconds(30), replyMode: .awaitReply) == [7])
    try remote.send(msgid: 99, sendTimeout: .seconds(10), receiveTimeout: .zero, replyMode: .oneWay)
    server.join()
    #expect(served.count == 22)
    let after = #expect(throws: PortError.self) {
      try remote.send(msgid: 1, sendTimeout: .seconds(10), receiveTimeout: .seconds(10), replyMode: .awaitReply)
    }
    #expect(after?.status == .becameInvalid || after?.status == .invalid)
  }
}

@Suite("Ports: run-loop edge cases", .timeLimit(.minutes(3)))
struct PortsRunLoopEdgeTests {
  @Test("a descriptor source's handler runs on the thread of the loop that watches it")
  func handlerThread() {
    let pipe = PortsPipe()
    let published = Box<UInt64?>(nil)
    let handledOn = Box<UInt64?>(nil)
    let worker = TestThread.spawn {
      let source = FileDescriptorSource(descriptor: pipe.readEnd) { source, _ in
        _ = pipe.readAll()
        handledOn.value = Thread.current.id
        source.invalidate()
      }
      RunLoop.current.add(source, forMode: .default)
      published.value = Thread.current.id
      // Returns finished once the handler invalidated the mode's only item.
      _ = RunLoop.current.run(mode: .default, before: .after(.seconds(60)))
    }
    waitUntil { published.value != nil }
    pipe.write(1)
    worker.join()
    #expect(handledOn.value != nil)
    #expect(handledOn.value == published.value)
  }

  @Test("invalidating a served message port from another thread wakes its loop")
  func messagePortInvalidationWakes() throws {
    let runLoop = RunLoop.current
    let port = try MessagePort.local(name: uniquePortName("wake")) { _ in nil }
    let invalidations = PortsCounter()
    port.setInvalidationHandler { _ in invalidations.increment() }
    #expect(runLoop.add(port, forMode: .default))
    let killer = TestThread.spawn {
      waitUntil { runLoop.isWaiting }
      port.invalidate()
    }
    #expect(runLoop.run(mode: .default, before: .after(.seconds(60))) == .finished)
    killer.join()
    #expect(invalidations.count == 1)
    #expect(!runLoop.add(port, forMode: .default), "an invalid port is not added")
  }

  @Test("a remote port has nothing to serve in a run loop")
  func remoteNotScheduled() throws {
    let name = uniquePortName("remote-schedule")
    let local = try MessagePort.local(name: name) { _ in nil }
    defer { local.invalidate() }
    let remote = try MessagePort.remote(name: name)
    #expect(!RunLoop.current.add(remote, forMode: .default))
    #expect(!RunLoop.current.contains(remote, inMode: .default))
  }

  @Test(
    "a named port scheduled in the run loops of two threads serves every request (no double-serve stop)", .runsExitTests
  )
  func messagePortInTwoThreadsRunLoops() async {
    await #expect(processExitsWith: .success) {
      blocking {
        let name = "tk-test-two-loops-\(getpid())"
        guard
          let port = try? MessagePort.local(
            name: name, handler: { message in [UInt8(truncatingIfNeeded: message.msgid)] })
        else { exit(2) }
        let stop = Box(false)
        let ready = PortsCounter()
        let loops = (0..<2).map { _ in
          TestThread.spawn {
            precondition(RunLoop.current.add(port, forMode: .default))
            ready.increment()
            while !stop.value {
              _ = RunLoop.current.run(
                mode: .default, before: .after(.milliseconds(50)), returnAfterSourceHandled: true)
            }
          }
        }
        waitUntil { ready.count == 2 }
        let wrong = PortsCounter()
        let senders = (0..<4).map { _ in
          TestThread.spawn {
            for round in 0..<200 {
              let reply = try? MessagePort.remote(name: name).send(
                msgid: Int32(round), sendTimeout: .seconds(10), receiveTimeout: .seconds(10), replyMode: .awaitReply)
              if reply != [UInt8(truncatingIfNeeded: round)] { wrong.increment() }
            }
          }
        }
        for sender in senders { sender.join() }
        stop.value = true
        for loop in loops { loop.join() }
        port.invalidate()
        exit(wrong.count == 0 ? 0 : 1)
      }
    }
  }

  @Test("serving one port from two places at once is misuse", .runsExitTests)
  func doubleServe() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        guard let port = try? MessagePort.local(name: "tk-test-double-serve-\(getpid())", handler: { _ in nil }) else {
          return
        }
        let started = PortsCounter()
        let other = TestThread.spawn {
          started.increment()
          _ = try? port.serve(before: .after(.seconds(30)))
        }
        waitUntil { started.count == 1 }
        // Whichever call comes second stops the process.
        let giveUp = MonotonicInstant.after(.seconds(30))
        while !giveUp.hasPassed { _ = try? port.serve(before: .after(.milliseconds(1))) }
        other.join()
      }
    }
  }

  @Test("watching a regular file is misuse", .runsExitTests)
  func regularFile() async {
    await #expect(processExitsWith: .failure) {
      let descriptor = open("/proc/self/exe", O_RDONLY)
      let source = FileDescriptorSource(descriptor: descriptor) { _, _ in }
      RunLoop.current.add(source, forMode: .default)
    }
  }
}
