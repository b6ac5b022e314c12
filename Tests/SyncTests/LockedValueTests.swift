import Glibc
import ProcessTestSupport
import Sync
import Testing

@Suite("LockedValue", .timeLimit(.minutes(3)))
struct LockedValueTests {
  @Test("withLock gives exclusive access to the value and returns the body's result")
  func basics() {
    let locked = LockedValue([Int]())
    let count = locked.withLock { values -> Int in
      values.append(1)
      values.append(2)
      return values.count
    }
    #expect(count == 2)
    #expect(locked.withLock { $0 } == [1, 2])
    #expect(locked.withLockIfAvailable { $0.reduce(0, +) } == 3, "free: the body runs")
  }

  @Test("withLockIfAvailable returns nil without running the body while another thread holds the lock")
  func ifAvailableWhileHeld() {
    let locked = LockedValue(0)
    let holding = Gate()
    let release = Gate()
    let ran = AtomicInteger<Int>(0)
    runConcurrently(2) { index in
      if index == 0 {
        locked.withLock { value in
          value = 1
          holding.open()
          release.wait()
        }
      } else {
        holding.wait()
        let result = locked.withLockIfAvailable { value -> Int in
          _ = ran.increment(ordering: .relaxed)
          return value
        }
        #expect(result == nil)
        release.open()
      }
    }
    #expect(ran.load(ordering: .relaxed) == 0)
    #expect(locked.withLockIfAvailable { $0 } == 1)
  }

  @Test("four threads incrementing a counter lose nothing")
  func contention() {
    let locked = LockedValue(0)
    runConcurrently(4) { _ in
      for _ in 0..<50_000 { locked.withLock { $0 += 1 } }
    }
    #expect(locked.withLock { $0 } == 200_000)
  }

  @Test("a typed error thrown by the body propagates and the lock is released")
  func throwingBody() {
    struct Refused: Error, Equatable {}
    let locked = LockedValue("ready")
    #expect(throws: Refused()) {
      try locked.withLock { (value: inout String) throws(Refused) -> Void in
        value = "changed before the throw"
        throw Refused()
      }
    }
    #expect(locked.withLockIfAvailable { $0 } == "changed before the throw", "unlocked again")
  }

  @Test("values of any size and alignment are stored intact, and released with the lock")
  func storage() {
    final class Tracked: Sendable {}
    weak var observed: Tracked?
    do {
      let tracked = Tracked()
      observed = tracked
      let locked = LockedValue((tracked, 1))
      #expect(locked.withLock { $0.0 === tracked && $0.1 == 1 })
    }
    #expect(observed == nil, "the value is released with the lock")
    let wide = LockedValue(SIMD16<Int64>(repeating: 7))  // 128 bytes, 16-byte aligned
    wide.withLock { $0[15] = 9 }
    #expect(wide.withLock { $0[0] == 7 && $0[15] == 9 })
    let empty = LockedValue(())
    #expect(empty.withLock { _ in 42 } == 42)
  }

  @Test("withLock inside withLock on the same thread is reported as a self-deadlock", .runsExitTests)
  func nestedIsMisuse() async {
    await #expect(processExitsWith: .failure) {
      let locked = LockedValue(0)
      locked.withLock { _ in
        locked.withLock { $0 += 1 }
      }
    }
  }
}

/// A non-copyable value that counts its own deinitializations.
struct UniqueToken: ~Copyable {
  let id: Int
  let deinits: AtomicInteger<Int>
  deinit { _ = deinits.increment(ordering: .relaxed) }
}

/// A non-copyable result, to check results are moved out rather than copied.
struct UniqueResult: ~Copyable {
  var value: Int
}

@Suite("LockedValue with non-copyable values and predicate waits", .timeLimit(.minutes(3)))
struct LockedValueWaitTests {
  @Test("a non-copyable value is stored in place, lent to bodies, and destroyed once with the lock")
  func nonCopyableValue() {
    let deinits = AtomicInteger<Int>(0)
    do {
      let locked = LockedValue(UniqueToken(id: 7, deinits: deinits))
      #expect(locked.withLock { $0.id } == 7)
      locked.withLock { token in
        token = UniqueToken(id: 8, deinits: deinits)  // the old token is destroyed here
      }
      #expect(deinits.load(ordering: .relaxed) == 1)
      let result = locked.withLock { token -> UniqueResult in UniqueResult(value: token.id * 2) }
      #expect(result.value == 16)
      let ready = locked.withLock(when: { $0.id == 8 }) { $0.id }
      #expect(ready == 8)
    }
    #expect(deinits.load(ordering: .relaxed) == 2, "the stored token is destroyed with the LockedValue")
  }

  @Test("withLock(when:) blocks until another thread's withLock makes the predicate true, and its body sees that value")
  func waitsForPredicate() {
    let locked = LockedValue(0)
    let waiting = Gate()
    let seen = AtomicInteger<Int>(-1)
    runConcurrently(2) { index in
      if index == 0 {
        waiting.open()
        let value = locked.withLock(when: { $0 >= 3 }) { value -> Int in
          value += 100
          return value - 100
        }
        seen.store(value, ordering: .relaxed)
      } else {
        waiting.wait()
        for _ in 0..<3 { locked.withLock { $0 += 1 } }
      }
    }
    #expect(seen.load(ordering: .relaxed) == 3, "the body runs on the value the predicate accepted")
    #expect(locked.withLock { $0 } == 103)
  }

  @Test("consumers waiting on a predicate take every produced item exactly once")
  func producerConsumers() {
    let queue = LockedValue([Int]())
    let taken = LockedValue([Int]())
    let consumers = 3
    let items = 3_000
    runConcurrently(consumers + 1) { index in
      if index == consumers {
        for item in 0..<items { queue.withLock { $0.append(item) } }
        // One stop marker per consumer.
        for _ in 0..<consumers { queue.withLock { $0.append(-1) } }
      } else {
        while true {
          let item = queue.withLock(when: { !$0.isEmpty }) { $0.removeFirst() }
          if item < 0 { break }
          taken.withLock { $0.append(item) }
        }
      }
    }
    #expect(taken.withLock { $0.sorted() } == Array(0..<items))
    #expect(queue.withLock { $0.isEmpty })
  }

  @Test("a timed predicate wait returns nil without running its body when the time is up, and leaves the lock free")
  func timedWaitTimesOut() {
    let locked = LockedValue(0)
    let ran = AtomicInteger<Int>(0)
    let start = MonotonicInstant.now
    let result: Int? = locked.withLock(when: { $0 > 0 }, timeout: .milliseconds(30)) { value in
      _ = ran.increment(ordering: .relaxed)
      return value
    }
    #expect(result == nil)
    #expect(start.duration(to: .now) >= .milliseconds(30), "it waited for the whole timeout")
    #expect(ran.load(ordering: .relaxed) == 0)
    #expect(locked.withLockIfAvailable { _ in true } == true, "the lock is free after the timeout")
    let past: Int? = locked.withLock(when: { $0 > 0 }, before: .distantPast) { $0 }
    #expect(past == nil)
  }

  @Test("a timed predicate wait runs its body when the predicate holds in time, even with a deadline already passed")
  func timedWaitSucceeds() {
    let locked = LockedValue(1)
    #expect(locked.withLock(when: { $0 == 1 }, before: .distantPast) { $0 + 1 } == 2)
    #expect(locked.withLock(when: { $0 == 1 }, timeout: .zero) { $0 + 2 } == 3)
    let waiting = Gate()
    let result = AtomicInteger<Int>(0)
    runConcurrently(2) { index in
      if index == 0 {
        waiting.open()
        let value = locked.withLock(when: { $0 == 5 }, timeout: .seconds(30)) { $0 }
        result.store(value ?? -1, ordering: .relaxed)
      } else {
        waiting.wait()
        // withLockIfAvailable also wakes waiters; retry until it gets the lock.
        while locked.withLockIfAvailable({ $0 = 5 }) == nil {}
      }
    }
    #expect(result.load(ordering: .relaxed) == 5)
  }

  @Test(
    "timed withLock runs the body when the lock is free and returns nil when another thread holds it past the deadline")
  func timedWithLock() {
    let locked = LockedValue(1)
    #expect(locked.withLock(before: .distantPast) { $0 + 1 } == 2, "free: one attempt succeeds")
    #expect(locked.withLock(timeout: .milliseconds(10)) { $0 + 2 } == 3)
    let holding = Gate()
    let release = Gate()
    let results = LockedValue([Int?]())
    runConcurrently(2) { index in
      if index == 0 {
        locked.withLock { _ in
          holding.open()
          release.wait()
        }
      } else {
        holding.wait()
        let timedOut = locked.withLock(timeout: .milliseconds(20)) { $0 }
        let passed = locked.withLock(before: .distantPast) { $0 }
        results.withLock { $0 = [timedOut, passed] }
        release.open()
      }
    }
    #expect(results.withLock { $0 } == [nil, nil])
  }

  @Test("a predicate that takes the same lock is reported as a self-deadlock", .runsExitTests)
  func reentrantPredicateIsMisuse() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        let locked = LockedValue(0)
        locked.withLock(when: { _ in locked.withLock { $0 == 0 } }) { $0 += 1 }
      }
    }
  }
}
