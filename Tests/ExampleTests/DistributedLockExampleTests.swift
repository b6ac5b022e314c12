import Glibc
import ProcessTestSupport
import Sync
import Testing

/// The guide's `NSDistributedLock` across two real processes. The second process is a
/// Swift Testing exit test: its body runs in a child process of the test runner.
///
/// 1. The child takes the lock and exits without unlocking (an owner that crashed).
/// 2. The parent's `tryLock` reports busy, without blocking; the owner record names the
///    child, and the child is no longer alive.
/// 3. The parent breaks the stale lock (only if it still records that owner) and takes it; a second child's `tryLock` now fails
///    (exit code 1), and after the parent's `unlock` a third child's succeeds (exit code 0).
@Suite("NSDistributedLock: two processes, try / unlock / break", .timeLimit(.minutes(3)))
struct DistributedLockExampleTests {
  @Test("a lock left by a dead process is seen as stale, broken, and re-taken", .runsExitTests)
  func listing() async throws {
    var template = Array("/tmp/tk-distributed-XXXXXX".utf8CString)
    let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
    try #require(made != nil)
    let directory = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    let path = directory + "/shared.lock"
    defer {
      _ = unlink(path)
      _ = rmdir(directory)
    }

    // Process 2 takes the lock and dies holding it.
    await #expect(processExitsWith: .exitCode(0)) { [path = path as String] in
      let lock = try ProcessLock(path: path)
      exit(try lock.tryLock() ? 0 : 1)  // no unlock: the owner "crashes"
    }

    // Process 1: try never blocks and reports busy.
    let lock = try ProcessLock(path: path)
    #expect(try !lock.tryLock())
    let owner = try #require(try lock.owner())
    #expect(owner.processID != getpid(), "the child owns it")
    // Gone: the exit test has observed its exit, but the process may linger a moment as a
    // zombie until it is reaped, and a zombie still answers kill(pid, 0).
    let reaped = MonotonicInstant.after(.seconds(10))
    while owner.isAlive == true && !reaped.hasPassed { try await Task.sleep(for: .milliseconds(5)) }
    #expect(owner.isAlive == false, "and the child is gone")
    #expect(try lock.lockDate() == owner.acquiredAt)

    // The owner is dead: break that owner's lock (and no later one) and take it.
    #expect(try lock.breakLock(ifOwnerIs: owner))
    #expect(try lock.tryLock())

    // Another process's try fails while we hold it...
    await #expect(processExitsWith: .exitCode(1)) { [path = path as String] in
      let lock = try ProcessLock(path: path)
      exit(try lock.tryLock() ? 0 : 1)
    }
    // ... and succeeds once we unlock.
    try lock.unlock()
    await #expect(processExitsWith: .exitCode(0)) { [path = path as String] in
      let lock = try ProcessLock(path: path)
      guard try lock.tryLock() else { exit(1) }
      try lock.unlock()
      exit(0)
    }
    #expect(try lock.owner() == nil, "the third process unlocked it")
  }
}
