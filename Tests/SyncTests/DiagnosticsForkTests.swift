import Glibc
import ProcessTestSupport
import Sync
import Testing

/// The lock detectors across `fork()`: their internal locks may be copied held by a thread
/// the child does not have, so the child runs with them off.
@Suite("Diagnostics across fork", .timeLimit(.minutes(3)))
struct DiagnosticsForkTests {
  // Not under ThreadSanitizer or AddressSanitizer: their runtimes support only
  // async-signal-safe calls in the child of a multithreaded fork (a child hung here under
  // AddressSanitizer only), and the children here take locks and allocate.
  @Test(
    "children forked while another thread takes diagnosed locks run with the lock detectors off and can use every lock",
    .disabled(if: isRunningUnderThreadSanitizer, "ThreadSanitizer does not support a multithreaded fork's child"),
    .disabled(
      if: isRunningUnderAddressSanitizer,
      "AddressSanitizer's runtime can be copied mid-update into a multithreaded fork's child, which allocates here"),
    .runsExitTests)
  func childrenRunWithLockDetectorsOff() async {
    await #expect(processExitsWith: .success) {
      blocking { forkWhileLockDetectorsWork() }
    }
  }

  // Forks a process with a thread (the watchdog): not under the sanitizers, as above.
  @Test(
    "a child forked with blocking-in-task on runs with it off: no lock is tracked there",
    .disabled(if: isRunningUnderThreadSanitizer, "ThreadSanitizer does not support a multithreaded fork's child"),
    .disabled(
      if: isRunningUnderAddressSanitizer,
      "AddressSanitizer's runtime can be copied mid-update into a multithreaded fork's child, which allocates here"),
    .runsExitTests)
  func childRunsWithBlockingInTaskOff() async {
    await #expect(processExitsWith: .success) {
      onlyDetector(nil)
      Diagnostics.setMode(.report, for: .blockingInTask)
      let lock = Lock(name: "parent")
      // Tracked in the parent: the detector keeps the held list it needs.
      guard lock.withLock({ LockDiagnostics.heldCount() }) == 1 else { exit(2) }
      let status = inForkedChild { () -> Int32 in
        guard !Diagnostics.isOn(.blockingInTask), !LockDiagnostics.trackingIsOn else { return 3 }
        // Nothing is tracked: the lock paths take none of the detectors' internal locks.
        let fresh = Lock(name: "child")
        return fresh.withLock { LockDiagnostics.heldCount() } == 0 ? 0 : 4
      }
      exit(status == 0 ? 0 : 1)
    }
  }

  // Forks a process with a thread (the watchdog): not under the sanitizers, as above.
  @Test(
    "children forked while the watchdog makes its first scans can use types the parent never used",
    .disabled(if: isRunningUnderThreadSanitizer, "ThreadSanitizer does not support a multithreaded fork's child"),
    .disabled(
      if: isRunningUnderAddressSanitizer,
      "AddressSanitizer's runtime can be copied mid-update into a multithreaded fork's child, which allocates here"),
    .runsExitTests,
    arguments: 0..<4)
  func childrenForkedDuringWatchdogScansAreNotStuckInTheRuntime(run: Int) async {
    await #expect(processExitsWith: .success) {
      blocking { exit(forkWhileTheWatchdogStartsScanning()) }
    }
  }
}

/// A value of a type nothing in the parent uses, so each child instantiates its metadata and
/// conformances for the first time (through the Swift runtime's caches and their locks).
private struct FreshInChild: Hashable {
  let value: Int
}

/// Exit-test body: the deadlock and blocking-in-task detectors on with 1 ms periods, so the
/// watchdog thread starts and makes its first scans (instantiating its types through the
/// Swift runtime's locks) while this thread forks 30 children. Each child uses generic types
/// the parent never made. A fork that copied the watchdog in the middle of a scan would
/// leave a runtime lock held in the child for ever; an alarm ends such a child. Returns 0 if
/// every child exited 0, 2 if one hung, 3 otherwise.
private func forkWhileTheWatchdogStartsScanning() -> Int32 {
  onlyDetector(nil)
  let lock = Lock(name: "held while forking")
  Diagnostics.deadlockCheckInterval = .milliseconds(1)
  Diagnostics.blockingInTaskThreshold = .milliseconds(1)
  Diagnostics.setMode(.report, for: .deadlocks)
  Diagnostics.setMode(.report, for: .blockingInTask)
  var worst: Int32 = 0
  for index in 0..<30 {
    // Held across the fork: the watchdog's scans walk this thread's held locks.
    lock.lock()
    let child = fork()
    if child == 0 {
      armAlarm(seconds: 10)
      let values = [FreshInChild(value: index), FreshInChild(value: index + 1)]
      let set = Set(values)
      let lookup = Dictionary(uniqueKeysWithValues: values.map { ($0, [$0]) })
      _exit(set.count == 2 && lookup.count == 2 && (set as Any) is any Collection ? 0 : 4)
    }
    lock.unlock()
    precondition(child > 0, "fork failed: \(errno)")
    let status = waitForChild(child)
    if status != 0 { worst = max(worst, status & 0x7F != 0 ? 2 : 3) }
  }
  return worst
}

/// Forks; the child arms an alarm, runs `body` and leaves with `_exit(body())`. Returns the
/// child's wait status (0: exited with 0).
private func inForkedChild(_ body: () -> Int32) -> Int32 {
  let child = fork()
  if child == 0 {
    armAlarm(seconds: 10)
    _exit(body())
  }
  precondition(child > 0, "fork failed: \(errno)")
  return waitForChild(child)
}

/// Exit-test body: lock order, the deadlock watchdog and contention statistics on, one
/// thread nesting diagnosed locks without pause while this thread forks 20 children. Each
/// child checks that the lock detectors are off and stay off (the environment or an API call
/// cannot turn them on), then nests new locks of every kind; an alarm ends a child that
/// hangs.
/// Exits 0 if every child exited 0, 2 if one hung (killed by its alarm), 3 otherwise.
func forkWhileLockDetectorsWork() {
  Diagnostics.setMode(.report, for: .lockOrder)
  Diagnostics.setMode(.report, for: .deadlocks)
  Diagnostics.collectsLockContention = true
  let outer = Lock(name: "outer")
  let inner = RecursiveLock(name: "inner")
  let value = LockedValue(0, name: "value")
  let object = Lock(name: "synchronized key")
  // Every one-time initialization on these paths runs before the other thread starts.
  outer.withLock { inner.withLock { value.withLock { $0 += 1 } } }
  synchronized(object) {}
  let stop = Gate()
  let started = Gate()
  let worst = AtomicInteger<Int>(0)
  runConcurrently(2) { index in
    if index == 0 {
      started.open()
      while !stop.isOpen {
        outer.withLock { inner.withLock { value.withLock { $0 += 1 } } }
        synchronized(object) { value.withLock { $0 += 1 } }
      }
      return
    }
    started.wait()
    var failed = 0
    for _ in 0..<20 {
      let child = fork()
      if child == 0 {
        armAlarm(seconds: 10)
        guard !Diagnostics.isOn(.lockOrder), !Diagnostics.isOn(.deadlocks), !Diagnostics.collectsLockContention
        else { _exit(4) }
        Diagnostics.setMode(.report, for: .lockOrder)
        guard !Diagnostics.isOn(.lockOrder) else { _exit(5) }
        // Only locks the other thread never took: one it held at the fork stays held here.
        let fresh = Lock(name: "fresh")
        let freshValue = LockedValue(0, name: "fresh value")
        let freshRecursive = RecursiveLock(name: "fresh recursive")
        let key = Lock()
        for _ in 0..<100 {
          fresh.withLock { freshRecursive.withLock { freshValue.withLock { $0 += 1 } } }
          synchronized(key) {}
        }
        _exit(0)
      }
      precondition(child > 0, "fork failed: \(errno)")
      let status = waitForChild(child)
      if status != 0 { failed = max(failed, status & 0x7F != 0 ? 2 : 3) }
    }
    worst.store(failed, ordering: .relaxed)
    stop.open()
  }
  _exit(Int32(worst.load(ordering: .relaxed)))
}
