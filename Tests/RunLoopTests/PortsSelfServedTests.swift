import Glibc
import RunLoop
import Sync
import TestSupport
import Testing

/// Requests to a named port that only the sending thread serves: answered at once on that
/// thread instead of waiting for a reply only it could produce.
@Suite("Ports: MessagePort served by the sending thread", .timeLimit(.minutes(3)))
struct PortsSelfServedTests {
  @Test("a request to a port scheduled in the sender's own run loop is answered at once")
  func scheduledInOwnRunLoop() {
    let outcome = Box<String>("not run")
    TestThread.run {
      do {
        let name = uniquePortName("own-loop")
        let local = try MessagePort.local(name: name) { message in
          [UInt8(message.msgid)] + message.payload
        }
        RunLoop.current.add(local, forMode: .default)
        let remote = try MessagePort.remote(name: name)
        // The loop is not running: without the direct answer this would end with a
        // receive timeout after 5 s.
        let reply = try remote.send(
          msgid: 7, data: [1, 2], sendTimeout: .seconds(5), receiveTimeout: .seconds(5), replyMode: .awaitReply)
        outcome.value = "\(reply ?? [])"
        remote.invalidate()
        local.invalidate()
      } catch {
        outcome.value = "\(error)"
      }
    }
    #expect(outcome.value == "[7, 1, 2]")
  }

  @Test("a reply the handler gives after the receive timeout is a receive timeout, as over the socket")
  func slowHandlerTimesOut() {
    let outcome = Box<String>("not run")
    TestThread.run {
      do {
        let name = uniquePortName("own-loop-slow")
        let slow = AtomicBool(true)
        let local = try MessagePort.local(name: name) { message in
          if slow.load(ordering: .relaxed) {
            // Slower than the 20 ms receive timeout below (a busy wait: the handler runs on
            // this thread, so nothing else could mark the time).
            let until = MonotonicInstant.after(.milliseconds(60))
            while !until.hasPassed {}
          }
          return [UInt8(message.msgid)]
        }
        RunLoop.current.add(local, forMode: .default)
        let remote = try MessagePort.remote(name: name)
        var first = "no error"
        do throws(PortError) {
          _ = try remote.send(
            msgid: 1, sendTimeout: .seconds(5), receiveTimeout: .milliseconds(20), replyMode: .awaitReply)
        } catch {
          first = "\(error.status)"
        }
        slow.store(false, ordering: .relaxed)
        // The port stays usable, and the next request gets its own reply.
        let second = try remote.send(
          msgid: 2, sendTimeout: .seconds(5), receiveTimeout: .seconds(5), replyMode: .awaitReply)
        outcome.value = "\(first) \(second ?? []) \(remote.isValid)"
        remote.invalidate()
        local.invalidate()
      } catch {
        outcome.value = "\(error)"
      }
    }
    #expect(outcome.value == "receiveTimeout (-2) [2] true")
  }

  @Test("a one-way message to a port in the sender's own loop still travels and is handled when the loop runs")
  func oneWayStillQueued() {
    let outcome = Box<String>("not run")
    TestThread.run {
      do {
        let name = uniquePortName("own-loop-oneway")
        let handled = Recorder<String>()
        let local = try MessagePort.local(name: name) { message in
          handled.append("\(message.msgid)")
          return nil
        }
        let runLoop = RunLoop.current
        runLoop.add(local, forMode: .default)
        let remote = try MessagePort.remote(name: name)
        _ = try remote.send(msgid: 3, sendTimeout: .seconds(5), receiveTimeout: .zero, replyMode: .oneWay)
        let before = handled.snapshot
        // Serve until the message arrived (the connection is accepted in one pass, the
        // frame read in the same or the next).
        let giveUp = MonotonicInstant.after(.seconds(30))
        while handled.snapshot.isEmpty && !giveUp.hasPassed {
          _ = runLoop.run(mode: .default, before: giveUp, returnAfterSourceHandled: true)
        }
        outcome.value = "\(before) \(handled.snapshot)"
        remote.invalidate()
        local.invalidate()
      } catch {
        outcome.value = "\(error)"
      }
    }
    #expect(outcome.value == "[] [\"3\"]", "not handled during the send, handled by the loop")
  }

  @Test("a handler sending a request to its own port gets the answer from a nested call")
  func handlerToItsOwnPort() throws {
    let name = uniquePortName("own-handler")
    let inner = Recorder<String>()
    let local = try MessagePort.local(name: name) { message in
      guard message.msgid == 1 else { return [2] }
      do {
        // The process's remote port for the name: the one whose request is being handled
        // (shared, so not invalidated here).
        let me = try MessagePort.remote(name: name)
        let nested = try me.send(
          msgid: 2, sendTimeout: .seconds(5), receiveTimeout: .seconds(5), replyMode: .awaitReply)
        inner.append("\(nested ?? [])")
        return (nested ?? []) + [9]
      } catch {
        inner.append("\(error)")
        return nil
      }
    }
    let server = portsServeInBackground(local)
    let remote = try MessagePort.remote(name: name)
    let reply = try portsSend(remote, msgid: 1)
    #expect(reply == [2, 9])
    #expect(inner.snapshot == ["[2]"])
    remote.invalidate()
    local.invalidate()
    #expect(pthread_join(server, nil) == 0)
  }
}

/// A request with generous timeouts, from a synchronous context.
private func portsSend(_ port: MessagePort, msgid: Int32) throws(PortError) -> [UInt8]? {
  try port.send(msgid: msgid, sendTimeout: .seconds(10), receiveTimeout: .seconds(10), replyMode: .awaitReply)
}
