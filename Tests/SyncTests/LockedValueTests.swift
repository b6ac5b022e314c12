import Glibc
import Sync
import Testing

@Suite("LockedValue", .timeLimit(.minutes(2)))
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

  @Test("withLock inside withLock on the same thread is reported as a self-deadlock")
  func nestedIsMisuse() async {
    await #expect(processExitsWith: .failure) {
      let locked = LockedValue(0)
      locked.withLock { _ in
        locked.withLock { $0 += 1 }
      }
    }
  }
}
