import RunLoop
import Sync
import TestSupport
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

// Listings 3-17..3-19: Core Foundation message ports between the main thread and a worker.
// The main thread registers a local port with a name and passes the *name* to the worker;
// the worker looks the main port up by name, registers its own port under a name of its own,
// and checks in (message 100) with that name as the data; the main thread's handler looks
// the worker's port up by name and keeps it. Then both sides can talk. The same exchange is
// run between two threads and between two real processes.

private let kCheckinMessage: Int32 = 100
private let kWorkMessage: Int32 = 200
private let kExitMessage: Int32 = 300

/// The main thread's list of worker ports (Listing 3-18's AddPortToListOfActiveThreads).
private final class ActiveThreads: Sendable {
  let ports = Recorder<MessagePort>()
}

/// Listing 3-18: the main thread's handler; on check-in, obtains the worker's port by name.
private func mainThreadResponseHandler(_ message: PortMessage, _ active: ActiveThreads) -> [UInt8]? {
  if message.msgid == kCheckinMessage {
    let threadPortName = String(decoding: message.payload, as: UTF8.self)
    // You must obtain a remote message port by name.
    if let messagePort = try? MessagePort.remote(name: threadPortName) {
      active.ports.append(messagePort)
    }
  }
  return nil
}

/// Listing 3-17: create the main port, install it, start the worker with the port's name.
private func mySpawnThread(_ active: ActiveThreads, portName: String) throws -> SpawnedServer {
  let myPort = try MessagePort.local(name: portName) { message in mainThreadResponseHandler(message, active) }
  // Create a run loop source for it and add it to the current run loop.
  RunLoop.current.add(myPort, forMode: .default)
  // Create the thread and continue processing; the guide's kThreadStackSize is 32 KiB.
  var configuration = ThreadConfiguration()
  configuration.stackSize = 256 * 1024
  let thread = try Thread.spawn(configuration: configuration) { () throws(Never) in
    serverThreadEntryPoint(mainPortName: portName, myPortName: "com.MyApp.Thread-\(Thread.current.id)-\(getpid())")
  }
  return SpawnedServer(port: myPort, thread: thread)
}

/// The main port and the worker's handle (a tuple cannot hold the noncopyable handle).
private struct SpawnedServer: ~Copyable {
  let port: MessagePort
  let thread: JoinableThread<Void, Never>
}

/// Listing 3-19: the worker's entry point (a thread here; a process below).
func serverThreadEntryPoint(mainPortName: String, myPortName: String) {
  // Create the remote port to the main thread.
  guard let mainThreadPort = try? remotePortEventually(mainPortName) else { return }
  let shouldExit = Box(false)
  // Create a port for the worker thread (ProcessClientRequest answers requests).
  guard
    let myPort = try? MessagePort.local(
      name: myPortName,
      handler: { message in
        switch message.msgid {
        case kWorkMessage: return message.payload.reversed()
        case kExitMessage:
          shouldExit.value = true
          return nil
        default: return nil
        }
      })
  else { return }
  // Add the source to the current run loop.
  RunLoop.current.add(myPort, forMode: .default)
  // Package up the port name and send the check-in message.
  do {
    try mainThreadPort.send(
      msgid: kCheckinMessage, data: Array(myPortName.utf8), sendTimeout: .milliseconds(100),
      receiveTimeout: .zero, replyMode: .oneWay)
  } catch {
    return
  }
  // Enter the run loop.
  let giveUp = MonotonicInstant.after(.seconds(60))
  while !shouldExit.value && !giveUp.hasPassed {
    _ = RunLoop.current.run(mode: .default, before: giveUp, returnAfterSourceHandled: true)
  }
  myPort.invalidate()
}

@Suite("Listings 3-17..3-19: named message ports, check-in by name", .timeLimit(.minutes(3)))
struct Listing3_17_3_19Tests {
  @Test("between the main thread and a worker thread")
  func twoThreads() throws {
    let active = ActiveThreads()
    let spawned = try mySpawnThread(active, portName: "com.myapp.MainThread-\(getpid())")
    let myPort = spawned.port
    let worker = spawned.thread
    defer { myPort.invalidate() }
    portExampleRunUntil { active.ports.count == 1 }
    let workerPort = try #require(active.ports.snapshot.first, "the worker checked in with its port name")
    #expect(workerPort.name.hasPrefix("com.MyApp.Thread-"))
    let reply = try workerPort.send(
      msgid: kWorkMessage, data: [1, 2, 3], sendTimeout: .seconds(10), receiveTimeout: .seconds(30),
      replyMode: .awaitReply)
    #expect(reply == [3, 2, 1])
    try workerPort.send(msgid: kExitMessage, sendTimeout: .seconds(10), receiveTimeout: .zero, replyMode: .oneWay)
    worker.join()
  }

  @Test("between two processes of the same user", .runsExitTests)
  func twoProcesses() async throws {
    let outcome = Recorder<String>()
    // The parent's "main thread" (a thread of its own, since this test awaits the child).
    let parent = TestThread.spawn {
      let active = ActiveThreads()
      guard
        let myPort = try? MessagePort.local(
          name: "com.myapp.MainProcess-\(getpid())",
          handler: { message in
            mainThreadResponseHandler(message, active)
          })
      else {
        outcome.append("cannot register")
        return
      }
      RunLoop.current.add(myPort, forMode: .default)
      portExampleRunUntil { active.ports.count == 1 }
      guard let workerPort = active.ports.snapshot.first else {
        outcome.append("no check-in")
        return
      }
      outcome.append(workerPort.name.hasPrefix("com.MyApp.Process-") ? "checked in" : "bad name \(workerPort.name)")
      do {
        let reply = try workerPort.send(
          msgid: kWorkMessage, data: [4, 5, 6], sendTimeout: .seconds(10), receiveTimeout: .seconds(30),
          replyMode: .awaitReply)
        outcome.append(reply == [6, 5, 4] ? "reply" : "bad reply")
        try workerPort.send(msgid: kExitMessage, sendTimeout: .seconds(10), receiveTimeout: .zero, replyMode: .oneWay)
      } catch {
        outcome.append("\(error)")
      }
      myPort.invalidate()
    }
    // The worker process: Listing 3-19 with the parent's port name (derived from its pid).
    await #expect(processExitsWith: .success) {
      blocking {
        serverThreadEntryPoint(
          mainPortName: "com.myapp.MainProcess-\(getppid())", myPortName: "com.MyApp.Process-\(getpid())")
      }
    }
    blocking { parent.join() }
    #expect(outcome.snapshot == ["checked in", "reply"])
  }
}
