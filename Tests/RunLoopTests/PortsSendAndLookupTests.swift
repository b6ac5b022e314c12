import CAllocationStats
import Glibc
import RunLoop
import Sync
import TestSupport
import Testing

@Suite("Ports: send limits and failed lookups", .timeLimit(.minutes(1)))
struct PortsSendAndLookupTests {
  @Test(
    "the receive timeout is the wait for the reply: a handler slower than it times out however long the send timeout")
  func receiveTimeoutCountsFromTheSend() throws {
    let name = uniquePortName("reply-timeout")
    let release = Latch(count: 1)
    let port = try MessagePort.local(name: name) { _ in
      // Slower than the receive timeout, faster than the send timeout.
      _ = release.wait(timeout: .seconds(2))
      return [1]
    }
    let server = portsServeInBackground(port)
    defer {
      release.countDown()
      port.invalidate()
      precondition(pthread_join(server, nil) == 0)
    }
    let remote = try MessagePort.remote(name: name)
    let start = MonotonicInstant.now
    let error = #expect(throws: PortError.self) {
      try remote.send(
        msgid: 1, sendTimeout: .seconds(5), receiveTimeout: .milliseconds(100), replyMode: .awaitReply)
    }
    #expect(error?.status == .receiveTimeout)
    #expect(MonotonicInstant.now - start < .milliseconds(1_500), "the send timeout does not extend the wait")
    #expect(remote.isValid, "a receive timeout leaves the port usable")
  }

  @Test("looking up a malformed or unregistered name leaves nothing allocated behind")
  func failedLookupsAllocateNothing() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardOutputContent]) {
      blocking {
        let missing = "tk-test-missing-\(getpid())"
        func lookUp(_ count: Int) {
          for _ in 0..<count {
            _ = try? MessagePort.remote(name: "bad/name")
            _ = try? MessagePort.remote(name: missing)
          }
        }
        lookUp(100)  // first-use allocations (registries, the port directory)
        let count = 500
        let before = tk_test_allocated_bytes()
        lookUp(count)
        let after = tk_test_allocated_bytes()
        // A lookup that kept its receive buffer would leave 16 KiB per call, any single
        // allocation 16 bytes; the bound is under one byte per lookup (the statistics are
        // process-wide, and the test library's threads allocate a little meanwhile).
        if Int(after) - Int(before) >= 2 * count {
          print("\(Int(after) - Int(before)) bytes left allocated by \(2 * count) failed lookups")
          exit(1)
        }
      }
    }
    if let result, case .exitCode(1) = result.exitStatus {
      Issue.record("\(String(decoding: result.standardOutputContent, as: UTF8.self))")
    }
  }
}
