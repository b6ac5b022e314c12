import Glibc
import Sync
import Testing

@Suite("AtomicBool", .timeLimit(.minutes(3)))
struct AtomicBoolTests {
  @Test("operations return the value before, compare-exchange reports what it saw")
  func operations() {
    let flag = AtomicBool(false)
    #expect(flag.load(ordering: .relaxed) == false)
    flag.store(true, ordering: .releasing)
    #expect(flag.load(ordering: .acquiring))
    #expect(flag.exchange(false, ordering: .full) == true)
    #expect(flag.compareExchange(expected: true, desired: true, ordering: .full) == (false, false))
    #expect(flag.compareExchange(expected: false, desired: true, ordering: .acquiring) == (true, false))
    #expect(flag.fetchAnd(false, ordering: .full) == true)
    #expect(flag.fetchOr(true, ordering: .relaxed) == false)
    #expect(flag.fetchXor(true, ordering: .full) == true)
    #expect(flag.load(ordering: .full) == false)
    #expect(flag.fetchXor(true, ordering: .full) == false)
    #expect(flag.load(ordering: .full) == true)
  }

  @Test("of 4 threads racing to claim a flag exactly one wins, 200 times over")
  func exactlyOneClaims() {
    for _ in 0..<200 {
      let claimed = AtomicBool(false)
      let winners = AtomicInteger<Int>(0)
      runConcurrently(4) { _ in
        if claimed.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged {
          winners.increment(ordering: .relaxed)
        }
      }
      #expect(winners.load(ordering: .relaxed) == 1)
    }
  }

  @Test("a releasing store of true publishes the plain writes before it")
  func publication() {
    final class Payload: @unchecked Sendable { var value = 0 }
    let payload = Payload()
    let ready = AtomicBool(false)
    let seen = AtomicInteger<Int>(0)
    runConcurrently(2) { index in
      if index == 0 {
        payload.value = 42
        ready.store(true, ordering: .releasing)
      } else {
        while !ready.load(ordering: .acquiring) { sched_yield() }
        seen.store(payload.value, ordering: .relaxed)
      }
    }
    #expect(seen.load(ordering: .relaxed) == 42)
  }
}
