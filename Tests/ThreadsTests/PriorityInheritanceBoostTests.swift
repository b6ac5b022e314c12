import Sync
import Testing

@testable import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Priority inheritance seen from the kernel: `/proc/self/task/<tid>/stat` field 18 is a
/// thread's effective priority (20 + nice for a normal thread, -1 - priority for a
/// real-time one), which the kernel raises while a real-time thread waits for a lock the
/// thread holds; field 41 is its own scheduling policy, which boosting leaves alone.
///
/// Starting a real-time thread needs `CAP_SYS_NICE` or a non-zero `RLIMIT_RTPRIO`. Without
/// either, the boost test says so on standard output and checks what an unprivileged process
/// can: the lock works and a normal waiter boosts nobody.
@Suite("PriorityInheritanceLock boosting", .timeLimit(.minutes(3)))
struct PriorityInheritanceBoostTests {
  @Test("a normal holder runs at a real-time waiter's priority while it waits, and at its own after unlock")
  func realTimeWaiterBoostsNormalHolder() throws {
    var realTime = ThreadConfiguration()
    realTime.schedulingPolicy = .fifo(priority: 10)
    let lock = try PriorityInheritanceLock()
    guard try realTimeThreadsAllowed(realTime) else {
      print(
        "PriorityInheritanceLock boosting: no real-time threads without CAP_SYS_NICE or RLIMIT_RTPRIO; boost not tested"
      )
      #expect(lock.withLock { lock.isHeldByCurrentThread })
      return
    }
    let holder = HeldLock(lock)
    let before = try statField(18, of: holder.threadID)
    let waiter = try Thread.spawn(configuration: realTime) { () -> Bool in
      lock.lock()
      let mine = lock.isHeldByCurrentThread
      lock.unlock()
      return mine
    }
    waitUntil("the waiter asleep in the kernel") { lock.hasWaiters }
    // The kernel sets the waiters bit just before it boosts the holder: wait for the boost.
    waitUntil("the holder boosted") { (try? statField(18, of: holder.threadID)) == -11 }
    #expect(try statField(18, of: holder.threadID) == -1 - 10, "boosted to the waiter's real-time priority 10")
    #expect(try statField(41, of: holder.threadID) == Int64(SCHED_OTHER), "its own policy stays normal")
    #expect(lock.ownerThreadID == holder.threadID)
    #expect(try holder.unlockAndReadPriority() == before, "unlock() ends the boost")
    let waiterGotTheLock = waiter.join()
    #expect(waiterGotTheLock, "the kernel handed the lock to the waiter")
  }

  @Test("a normal waiter leaves the holder's priority alone")
  func normalWaiterDoesNotBoost() throws {
    let lock = try PriorityInheritanceLock()
    let holder = HeldLock(lock)
    let before = try statField(18, of: holder.threadID)
    var niceButNormal = ThreadConfiguration()
    niceButNormal.schedulingPolicy = .normal
    let waiter = try Thread.spawn(configuration: niceButNormal) {
      lock.withLock { lock.isHeldByCurrentThread }
    }
    waitUntil("the waiter asleep in the kernel") { lock.hasWaiters }
    #expect(try statField(18, of: holder.threadID) == before)
    #expect(try holder.unlockAndReadPriority() == before)
    let waiterGotTheLock = waiter.join()
    #expect(waiterGotTheLock)
  }
}

/// Whether this process may start a thread with `configuration`'s real-time policy (false:
/// `EPERM`, no `CAP_SYS_NICE` and no `RLIMIT_RTPRIO`).
private func realTimeThreadsAllowed(_ configuration: ThreadConfiguration) throws(ThreadStartError) -> Bool {
  do throws(ThreadStartError) {
    try Thread.spawn(configuration: configuration) {}.join()
    return true
  } catch {
    if error == .system(SystemCallError(call: "pthread_create", code: .operationNotPermitted)) { return false }
    throw error
  }
}

/// A normal thread that takes `lock` and holds it until ``unlockAndReadPriority()``.
private struct HeldLock: ~Copyable {
  let threadID: Int32
  private let release = TestLatch()
  private let thread: JoinableThread<Int64, SystemCallError>

  init(_ lock: PriorityInheritanceLock) {
    let held = TestLatch()
    let release = self.release
    let id = AtomicInteger<Int32>(0)
    thread = try! Thread.spawn { () throws(SystemCallError) -> Int64 in
      id.store(Thread.current.kernelThreadID ?? -1, ordering: .relaxed)
      lock.lock()
      held.open()
      release.wait()
      lock.unlock()
      return try statField(18, of: Thread.current.kernelThreadID ?? -1)
    }
    held.wait()
    threadID = id.load(ordering: .relaxed)
  }

  /// Lets the thread unlock and end; returns its effective priority read after the unlock.
  consuming func unlockAndReadPriority() throws(SystemCallError) -> Int64 {
    release.open()
    return try thread.join()
  }
}

/// Field `index` (1-based, as proc(5) numbers them) of `/proc/self/task/<thread>/stat`.
private func statField(_ index: Int, of thread: Int32) throws(SystemCallError) -> Int64 {
  let descriptor = open("/proc/self/task/\(thread)/stat", O_RDONLY | O_CLOEXEC)
  if descriptor < 0 { throw SystemCallError(call: "open", code: SystemErrorCode(rawValue: errno)) }
  defer { close(descriptor) }
  var bytes = [UInt8](repeating: 0, count: 1024)
  let count = read(descriptor, &bytes, bytes.count)
  if count < 0 { throw SystemCallError(call: "read", code: SystemErrorCode(rawValue: errno)) }
  let line = String(decoding: bytes[..<count], as: UTF8.self)
  // Field 2, the name, is in parentheses and may hold spaces: count from the last ')'.
  guard let close = line.lastIndex(of: ")") else { fatalError("unexpected stat line: \(line)") }
  let fields = line[line.index(after: close)...].split(separator: " ")
  guard index >= 3, index - 3 < fields.count, let value = Int64(fields[index - 3]) else {
    fatalError("no field \(index) in stat line: \(line)")
  }
  return value
}

/// Polls until `condition()` holds; stops the test process after 20 s. For states only the
/// kernel changes (a thread asleep in it, a boosted priority), which nothing can signal.
private func waitUntil(_ what: String, _ condition: () -> Bool) {
  let giveUp = MonotonicInstant.after(.seconds(20))
  while !condition() {
    if giveUp.hasPassed { fatalError("waitUntil: \(what) not reached within 20 s") }
    sched_yield()
  }
}
