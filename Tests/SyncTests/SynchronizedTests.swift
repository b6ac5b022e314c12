import Glibc
import ProcessTestSupport
import Testing

@testable import Sync

@Suite("synchronized(obj)", .serialized, .timeLimit(.minutes(3)))
struct SynchronizedTests {
  final class Account: @unchecked Sendable {
    var balance = 0
  }

  @Test("excludes concurrent sections on the same object: exact count")
  func exclusion() {
    let account = Account()
    runConcurrently(4) { _ in
      for _ in 0..<10_000 {
        synchronized(account) { account.balance += 1 }
      }
    }
    #expect(account.balance == 40_000)
  }

  @Test("is recursive on the same thread")
  func recursive() {
    let account = Account()
    func deposit(_ depth: Int) {
      synchronized(account) {
        account.balance += 1
        if depth > 0 { deposit(depth - 1) }
      }
    }
    deposit(5)
    #expect(account.balance == 6)
  }

  @Test("returns the body's value and releases the lock when the body throws")
  func throwsAndReturns() {
    struct Failure: Error {}
    let account = Account()
    #expect(synchronized(account) { 5 } == 5)
    #expect(throws: Failure.self) {
      try synchronized(account) { () throws(Failure) -> Void in throw Failure() }
    }
    // If the section were still held, another thread could not enter it.
    let entered = GuardedValue(false)
    runConcurrently(1) { _ in
      synchronized(account) { entered.value = true }
    }
    #expect(entered.value)
  }

  @Test("different objects never block each other")
  func differentObjects() {
    let first = Account()
    let second = Account()
    let entered = Latch(count: 1)
    let sawEntry = GuardedValue(false)
    synchronized(first) {
      runConcurrently(1) { _ in
        synchronized(second) { entered.countDown() }
      }
      sawEntry.value = entered.wait(timeout: .seconds(30))
    }
    #expect(sawEntry.value)
  }

  @Test("nested sections on unrelated objects never deadlock, whatever their addresses", .runsExitTests)
  func unrelatedNestingNeverDeadlocks() async {
    await #expect(processExitsWith: .success) {
      blocking { nestUnrelatedObjectsOnTwoThreads() }
    }
  }

  // Not under ThreadSanitizer or AddressSanitizer: their runtimes support only async-signal-safe
  // calls in the child of a multithreaded fork, and the child here allocates table entries.
  // Exit status 2: a child hung (its 10 s alarm killed it); 3: a child failed otherwise.
  @Test(
    "a child forked while other threads enter sections can use synchronized on any object",
    .disabled(if: isRunningUnderThreadSanitizer, "ThreadSanitizer does not support allocating in a forked child"),
    .disabled(
      if: isRunningUnderAddressSanitizer,
      "AddressSanitizer's runtime can be copied mid-update into a multithreaded fork's child, which allocates here"),
    .runsExitTests)
  func usableInForkedChild() async {
    await #expect(processExitsWith: .success) {
      blocking { forkWhileAnotherThreadEntersSections() }
    }
  }

  @Test("an object's entry leaves the table when its last user leaves")
  func entriesAreRemoved() {
    let objects = (0..<100).map { _ in Account() }
    let before = SynchronizedTable.entriesInUse
    func nest(_ index: Int) {
      guard index < objects.count else {
        #expect(SynchronizedTable.entriesInUse == before + objects.count)
        return
      }
      synchronized(objects[index]) { synchronized(objects[index]) { nest(index + 1) } }
    }
    nest(0)
    #expect(SynchronizedTable.entriesInUse == before)
  }
}

/// A 128-way address hash (Fibonacci hashing, top 7 bits). Objects equal under it are the
/// ones a fixed table of 128 striped locks would make share a lock: the case where nesting
/// unrelated objects in opposite stripe orders deadlocks.
private func stripe(of object: AnyObject) -> Int {
  let address = UInt64(UInt(bitPattern: ObjectIdentifier(object)))
  return Int(truncatingIfNeeded: (address &* 0x9E37_79B9_7F4A_7C15) >> 57)
}

/// Exit-test body: one thread nests `a` then `b`, another `c` then `d`, where `a` and `d`
/// share a stripe and so do `b` and `c` (sixteen such sets of four distinct objects). A
/// watchdog ends the process with status 1 if the two threads have not finished within 20
/// seconds, so a deadlock fails the test instead of hanging it.
func nestUnrelatedObjectsOnTwoThreads() {
  final class Object: Sendable {}
  let pool = (0..<4_000).map { _ in Object() }
  var byStripe: [Int: [Object]] = [:]
  for object in pool { byStripe[stripe(of: object), default: []].append(object) }
  let crowded = byStripe.values.filter { $0.count >= 2 }
  precondition(crowded.count >= 2, "4000 objects over 128 stripes leave stripes with two objects")
  var sets: [(a: Object, b: Object, c: Object, d: Object)] = []
  for index in 0..<16 {
    let first = crowded[index % crowded.count]
    let second = crowded[(index + 1) % crowded.count]
    sets.append((a: first[0], b: second[0], c: second[1], d: first[1]))
  }
  let quadruples = sets
  let finished = Latch(count: 2)
  runConcurrently(3) { index in
    switch index {
    case 0:
      for _ in 0..<500 {
        for set in quadruples { synchronized(set.a) { synchronized(set.b) {} } }
      }
      finished.countDown()
    case 1:
      for _ in 0..<500 {
        for set in quadruples { synchronized(set.c) { synchronized(set.d) {} } }
      }
      finished.countDown()
    default:
      if !finished.wait(timeout: .seconds(20)) { _exit(1) }
    }
  }
}

/// Exit-test body: one thread enters and leaves sections on fresh objects without pause
/// (so some bucket of the side table is nearly always mid-update) while this thread forks
/// 30 children. Each child enters a section on each of 512 objects allocated before the fork
/// (they cover every bucket) and exits 0; an alarm kills a child stuck on a bucket lock that
/// the fork copied as held. Exits 0 if every child exited 0; otherwise 2 if a child was
/// killed by a signal (a hang its alarm ended), 3 if one exited with a non-zero status.
func forkWhileAnotherThreadEntersSections() {
  final class Object: Sendable {}
  let targets = (0..<512).map { _ in Object() }
  let stop = Gate()
  let started = Gate()
  let failures = AtomicInteger<Int>(0)
  // Every one-time initialization on these paths (Swift globals, type metadata, the fork
  // handlers) happens here, before any other thread runs: a fork that copied one in
  // progress on the other thread would leave the child waiting for it forever, whatever the
  // side table does. That hazard is the Swift runtime's, not the table's, and is not what
  // this test is about.
  for object in targets { synchronized(object) { synchronized(object) {} } }
  runConcurrently(2) { index in
    if index == 0 {
      started.open()
      while !stop.isOpen {
        for _ in 0..<64 {
          let object = Object()
          synchronized(object) { synchronized(object) {} }
        }
      }
      return
    }
    started.wait()
    var failed = 0
    for _ in 0..<30 {
      let child = fork()
      if child == 0 {
        armAlarm(seconds: 10)
        for object in targets { synchronized(object) {} }
        _exit(0)
      }
      precondition(child > 0, "fork failed: \(errno)")
      let status = waitForChild(child)
      // Exited normally (low 7 bits 0) with status 0. Otherwise remember why, so the
      // test's failure says it: 2 = killed by a signal (the alarm: a hang), 3 = exited
      // with a non-zero status (a crash report or a precondition).
      if status != 0 { failed = max(failed, status & 0x7F != 0 ? 2 : 3) }
    }
    failures.store(failed, ordering: .relaxed)
    stop.open()
  }
  _exit(Int32(failures.load(ordering: .relaxed)))
}
