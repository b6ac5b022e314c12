import RunLoop
import Sync
import TestSupport
import Testing
import Threads

// Listings 3-12..3-15: configuring an NSMachPort between the main thread and a worker. The
// main thread creates a port, installs it in its run loop and hands it to a new worker; the
// worker creates its own port, installs it in its own run loop, and sends a check-in message
// (id 100) carrying that port, so both sides can talk. (The test's thread plays the main
// thread: the test runner owns the process's real main thread.)

private let checkinMessage: Int32 = 100  // Listing 3-13's kCheckinMessage
private let workMessage: Int32 = 200
private let resultMessage: Int32 = 201
private let exitMessage: Int32 = 300

/// The worker object of Listings 3-14 and 3-15.
private final class MyWorkerClass: Sendable {
  private let remotePort = Box<Port?>(nil)
  private let exitFlag = Box(false)

  var shouldExit: Bool { exitFlag.value }

  /// Listing 3-14: the worker thread's entry routine.
  static func launchThread(with distantPort: Port) {
    let worker = MyWorkerClass()
    worker.sendCheckinMessage(distantPort)
    // Let the run loop process things (runMode:beforeDate: returns after each source).
    let giveUp = MonotonicInstant.after(.seconds(60))
    repeat {
      _ = RunLoop.current.run(mode: .default, before: giveUp, returnAfterSourceHandled: true)
    } while !worker.shouldExit && !giveUp.hasPassed
  }

  /// Listing 3-15: create and install the worker's port, then check in with it.
  func sendCheckinMessage(_ outPort: Port) {
    remotePort.value = outPort
    let myPort = Port()
    myPort.setHandler { [self] message in handlePortMessage(message) }
    RunLoop.current.add(myPort, forMode: .default)
    do {
      // sendBeforeDate:[NSDate date]: one attempt, no waiting.
      try outPort.send(PortMessage(msgid: checkinMessage, replyPort: .port(myPort)), before: .now)
    } catch {
      Issue.record("check-in failed: \(error)")
    }
  }

  /// The worker's delegate method: do work and answer, or leave.
  private func handlePortMessage(_ message: PortMessage) {
    switch message.msgid {
    case workMessage:
      let doubled = message.payload.map { $0 &* 2 }
      try? remotePort.value?.send(PortMessage(msgid: resultMessage, payload: doubled), timeout: .seconds(10))
    case exitMessage:
      exitFlag.value = true
    default:
      break
    }
  }
}

/// The main thread's side: Listing 3-12 (launchThread) and 3-13 (handlePortMessage).
private final class MainThreadController: Sendable {
  let myPort = Box<Port?>(nil)
  let distantPort = Box<Port?>(nil)
  let results = Recorder<[UInt8]>()

  /// Listing 3-12.
  func launchThread() throws -> JoinableThread<Void, Never> {
    let myPort = Port()
    self.myPort.value = myPort
    // This object handles incoming port messages.
    myPort.setHandler { [self] message in handlePortMessage(message) }
    // Install the port as an input source on the current run loop.
    RunLoop.current.add(myPort, forMode: .default)
    // Start the worker, handing it the port.
    return try Thread.spawn { () throws(Never) in MyWorkerClass.launchThread(with: myPort) }
  }

  /// Listing 3-13: store the worker's port from the check-in message.
  func handlePortMessage(_ message: PortMessage) {
    if message.msgid == checkinMessage {
      distantPort.value = message.replyPort?.port
    } else if message.msgid == resultMessage {
      results.append(message.payload)
    }
  }
}

@Suite("Listings 3-12..3-15: port check-in between the main thread and a worker", .timeLimit(.minutes(3)))
struct Listing3_12_3_15Tests {
  @Test("the worker checks in with its own port; the main thread then talks to it")
  func checkIn() throws {
    let controller = MainThreadController()
    let worker = try controller.launchThread()
    portExampleRunUntil { controller.distantPort.value != nil }
    let workerPort = try #require(
      controller.distantPort.value, "check-in message 100 arrived, carrying the worker's port")
    try workerPort.send(PortMessage(msgid: workMessage, payload: [1, 2, 3]), timeout: .seconds(10))
    portExampleRunUntil { controller.results.count == 1 }
    #expect(controller.results.snapshot == [[2, 4, 6]])
    try workerPort.send(PortMessage(msgid: exitMessage), timeout: .seconds(10))
    worker.join()
    // The ports refer to each other through their handlers: invalidating them ends the
    // cycle and takes the main port out of this thread's run loop.
    workerPort.invalidate()
    controller.myPort.value?.invalidate()
    #expect(!RunLoop.current.contains(controller.myPort.value!, inMode: .default))
  }
}
