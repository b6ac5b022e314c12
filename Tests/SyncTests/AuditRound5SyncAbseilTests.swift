import Glibc
import ProcessTestSupport
import Sync
import Testing

// Audit round 5: scenarios of abseil's absl/synchronization/mutex_test.cc that no existing
// test covers, ported to the toolkit: Mutex -> Lock / ReadWriteLock, LockWhen / Await with
// a Condition -> LockedValue.withLock(when:) and Condition.wait(until:), the deadlock
// detector -> Diagnostics.Kind.lockOrder.

private func standardError(_ result: ExitTest.Result?) -> String {
  result.map { String(decoding: $0.standardErrorContent, as: UTF8.self) } ?? ""
}

private func occurrences(of needle: String, in text: String) -> Int {
  text.ranges(of: needle).count
}

/// An atomic flag on a raw word, independent of the primitives under test.
private final class Flag: @unchecked Sendable {
  private let word = UnsafeMutablePointer<UInt32>.allocate(capacity: 1)
  init() { word.initialize(to: 0) }
  deinit { word.deallocate() }
  func set() { UInt32.atomicStore(1, at: word, ordering: .releasing) }
  var isSet: Bool { UInt32.atomicLoad(at: word, ordering: .acquiring) == 1 }
}

@Suite("Audit round 5, abseil: lock-order detector", .timeLimit(.minutes(3)))
struct AuditRound5SyncAbseilOrderTests {
  @Test(
    "a lock taken by tryLock orders the locks taken under it; a tryLock against that order is quiet, a blocking lock reports once (DeadlockDetectorBazelWarning)",
    .runsExitTests
  )
  func tryLockOrders() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      onlyDetector(.lockOrder)
      let first = Lock(name: "mu0")
      let second = Lock(name: "mu1")
      blocking {
        let gotFirst = first.tryLock()
        guard gotFirst else { exit(2) }
        second.lock()  // mu1 while holding mu0: the order mu0 -> mu1
        first.unlock()
        if first.tryLock() { first.unlock() }  // a tryLock cannot deadlock: no report
        first.lock()  // mu0 while holding mu1: closes the cycle, one report
        first.unlock()
        second.unlock()
      }
    }
    let text = standardError(result)
    #expect(occurrences(of: "threading-toolkit [lock-order]", in: text) == 1, "\(text)")
    #expect(text.contains("takes \"mu0\" while holding \"mu1\""), "\(text)")
  }

  @Test(
    "2^17 locks taken five at a time in a sliding window: no report, fast, and the graph empties (DeadlockDetectorStessTest)",
    .runsExitTests
  )
  func slidingWindow() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      alarm(50)
      onlyDetector(.lockOrder)
      blocking {
        // abseil's 2^17; a sanitizer's slower locks get 2^14.
        let count = isRunningUnderThreadSanitizer || isRunningUnderAddressSanitizer ? 1 << 14 : 1 << 17
        do {
          let locks = (0..<count).map { _ in Lock() }
          let start = MonotonicInstant.now
          for index in 0..<count {
            let end = min(count, index + 5)
            for inner in index..<end { locks[inner].lock() }
            for inner in index..<end { locks[inner].unlock() }
          }
          let took = start.duration(to: .now)
          // abseil's point: a detector that walks a full graph on each order is too slow.
          if took > .seconds(30) { exit(3) }
        }
        guard LockDiagnostics.orderGraphSize() == 0 else { exit(4) }
      }
    }
    #expect(!standardError(result).contains("[lock-order]"))
  }
}

@Suite("Audit round 5, abseil: conditions of a LockedValue", .timeLimit(.minutes(3)))
struct AuditRound5SyncAbseilConditionTests {
  @Test(
    "a withLock(when:) condition may itself wait on another LockedValue; it is evaluated once at the start and once per withLock that ends (AcquireFromCondition)"
  )
  func conditionThatWaitsElsewhere() {
    let value = LockedValue(false)  // "done"
    let other = LockedValue(false)
    let evaluations = LockedValue(0)
    let waiting = Flag()
    runConcurrently(2) { index in
      if index == 0 {
        value.withLock(
          when: { _ in
            let count = evaluations.withLock { (number: inout Int) -> Int in
              number += 1
              return number
            }
            if count == 2 || count == 3 {
              // A timed wait on another lock from inside the condition, as abseil's
              // ConditionWithAcquire does; it times out.
              _ = other.withLock(when: { $0 }, timeout: .milliseconds(100)) { _ in () }
            }
            if count == 1 { waiting.set() }
            return count == 2 || count == 3
          }
        ) { $0 = true }
      } else {
        while !waiting.isSet { sched_yield() }
        // The waiter has evaluated its condition once (false): ending a withLock wakes it.
        value.withLock { _ in }
      }
    }
    #expect(value.withLock { $0 })
    // One evaluation at the start, one after the wake-up (true): never a fourth.
    let count = evaluations.withLock { $0 }
    #expect(count >= 2 && count <= 3, "evaluated \(count) times")
  }

  /// abseil's TimeoutTest table: (timeout, when the condition becomes true, expected result,
  /// expected delay). `nil` delay: never set. Finite = 100 ms; a row that expects the value
  /// in time gives a generous timeout so a loaded machine cannot make the setter late.
  static let rows:
    [(name: String, timeout: Duration?, satisfyAfter: Duration?, expected: Bool, minimumDelay: Duration)] = [
      ("passed deadline, already true", .seconds(-1_000_000), .zero, true, .zero),
      ("passed deadline, true later", .seconds(-1_000_000), .milliseconds(100), false, .zero),
      ("passed deadline, never true", .seconds(-1_000_000), nil, false, .zero),
      ("no deadline, already true", nil, .zero, true, .zero),
      ("no deadline, true later", nil, .milliseconds(100), true, .milliseconds(100)),
      ("finite, true before it", .seconds(20), .milliseconds(100), true, .milliseconds(100)),
      ("finite, true after it", .milliseconds(100), .milliseconds(400), false, .milliseconds(100)),
      ("finite, never true", .milliseconds(100), nil, false, .milliseconds(100)),
    ]

  @Test(
    "LockedValue.withLock(when:before:) and (when:timeout:) follow abseil's LockWhenWithDeadline/Timeout table",
    arguments: 0..<8)
  func lockWhenTable(row: Int) {
    let (name, timeout, satisfyAfter, expected, minimumDelay) = Self.rows[row]
    for useDeadline in [false, true] {
      let value = LockedValue(false)
      if satisfyAfter == .zero { value.withLock { $0 = true } }
      let start = MonotonicInstant.now
      let outcome = LockedValue<Bool?>(nil)
      // When the waiter returned and when the setter set the value (a loaded machine may
      // run the setter before a waiter whose deadline passed gets the processor back; the
      // waiter then rightly sees the value, as abseil's retried attempts allow).
      let returnedAt = LockedValue<MonotonicInstant?>(nil)
      let setAt = LockedValue<MonotonicInstant?>(nil)
      runConcurrently(2) { index in
        if index == 0 {
          let got: Bool?
          if let timeout {
            got =
              useDeadline
              ? value.withLock(when: { $0 }, before: start + timeout) { $0 }
              : value.withLock(when: { $0 }, timeout: timeout) { $0 }
          } else {
            got = value.withLock(when: { $0 }) { $0 }
          }
          returnedAt.withLock { $0 = .now }
          outcome.withLock { $0 = got ?? false }
        } else if let satisfyAfter, satisfyAfter > .zero {
          // The setter fires at its time unless the waiter already returned (a row whose
          // deadline passed at once).
          while start.duration(to: .now) < satisfyAfter, outcome.withLock({ $0 }) == nil {
            var pause = timespec(tv_sec: 0, tv_nsec: 1_000_000)
            _ = nanosleep(&pause, nil)
          }
          value.withLock { $0 = true }
          setAt.withLock { $0 = .now }
        }
      }
      let waited = start.duration(to: .now)
      let setBeforeReturn =
        setAt.withLock { $0 }.map { set in returnedAt.withLock { $0 }.map { set < $0 } ?? true } ?? false
      if expected || !setBeforeReturn {
        #expect(outcome.withLock { $0 } == expected, "\(name), deadline form \(useDeadline)")
      }
      #expect(waited >= minimumDelay, "\(name): returned after \(waited)")
    }
  }

  @Test("Condition.wait(until:before:) follows abseil's AwaitWithDeadline/Timeout table", arguments: 0..<8)
  func awaitTable(row: Int) {
    let (name, timeout, satisfyAfter, expected, minimumDelay) = Self.rows[row]
    for useDeadline in [false, true] {
      let condition = Condition()
      let state = GuardedValue(false)  // protected by condition
      let returned = Flag()
      if satisfyAfter == .zero { condition.withLock { state.value = true } }
      let start = MonotonicInstant.now
      let outcome = GuardedValue(false)  // written by the waiter, read after the join
      // As in the LockedValue table: whether the setter ran before the waiter returned.
      let returnedAt = GuardedValue(MonotonicInstant.distantFuture)  // written by the waiter
      let setAt = GuardedValue(MonotonicInstant.distantFuture)  // written by the setter
      runConcurrently(2) { index in
        if index == 0 {
          condition.withLock {
            if let timeout {
              outcome.value =
                useDeadline
                ? condition.wait(until: { state.value }, before: start + timeout)
                : condition.wait(until: { state.value }, timeout: timeout)
            } else {
              condition.wait(until: { state.value })
              outcome.value = true
            }
          }
          returnedAt.value = .now
          returned.set()
        } else if let satisfyAfter, satisfyAfter > .zero {
          while start.duration(to: .now) < satisfyAfter, !returned.isSet {
            var pause = timespec(tv_sec: 0, tv_nsec: 1_000_000)
            _ = nanosleep(&pause, nil)
          }
          condition.withLock {
            state.value = true
            setAt.value = .now
            condition.broadcast()
          }
        }
      }
      let waited = start.duration(to: .now)
      if expected || setAt.value >= returnedAt.value {
        #expect(outcome.value == expected, "\(name), deadline form \(useDeadline)")
      }
      #expect(waited >= minimumDelay, "\(name): returned after \(waited)")
    }
  }
}

@Suite("Audit round 5, abseil: readers queued behind a writer", .timeLimit(.minutes(3)))
struct AuditRound5SyncAbseilReaderTests {
  @Test("two readers blocked behind a writer both get in together when it unlocks (MutexReaderWakeupBug)")
  func readersWakeTogether() {
    let lock = ReadWriteLock()
    let inside = AtomicInteger<Int>(0)
    let bothInside = Flag()
    let writerHolds = Flag()
    let started = AtomicInteger<Int>(0)
    runConcurrently(3) { index in
      if index < 2 {
        while !writerHolds.isSet { sched_yield() }
        _ = started.fetchAdd(1, ordering: .relaxed)
        lock.readLock()
        // Hold the read lock until the other reader holds it too: if the unlock woke only
        // one of them, the other would wait for this release, and this loop for it.
        if inside.add(1, ordering: .full) == 2 { bothInside.set() }
        let giveUp = MonotonicInstant.after(.seconds(10))
        while !bothInside.isSet, !giveUp.hasPassed { sched_yield() }
        lock.unlock()
      } else {
        lock.writeLock()
        writerHolds.set()
        while started.load(ordering: .relaxed) < 2 { sched_yield() }
        // Best effort: let both readers reach their sleep (the check holds either way).
        var pause = timespec(tv_sec: 0, tv_nsec: 50_000_000)
        _ = nanosleep(&pause, nil)
        lock.unlock()
      }
    }
    #expect(bothInside.isSet, "the two readers never held the lock at the same time")
  }
}
