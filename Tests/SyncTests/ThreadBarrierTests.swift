import Glibc
import ProcessTestSupport
import Sync
import Testing

@Suite("ThreadBarrier", .timeLimit(.minutes(3)))
struct ThreadBarrierTests {
  @Test("stress: many threads, many rounds, exactly one last arrival per round, no overtaking")
  func rounds() {
    let parties = 8
    let rounds = 200
    let barrier = ThreadBarrier(parties: parties)
    #expect(barrier.parties == parties)
    let lastCount = AtomicInteger<Int>(0)
    let arrivals = UnsafeMutableBufferPointer<Int>.allocate(capacity: rounds)
    arrivals.initialize(repeating: 0)
    defer { arrivals.deallocate() }
    nonisolated(unsafe) let perRound = arrivals
    let mutex = Lock()
    let overtaken = AtomicInteger<Int>(0)
    runConcurrently(parties) { _ in
      for round in 0..<rounds {
        mutex.withLock { perRound[round] += 1 }
        if barrier.arriveAndWait() { lastCount.increment(ordering: .relaxed) }
        // Past the barrier, every party of this round has arrived.
        if mutex.withLock({ perRound[round] }) != parties { overtaken.increment(ordering: .relaxed) }
      }
    }
    #expect(lastCount.load(ordering: .relaxed) == rounds)
    #expect(overtaken.load(ordering: .relaxed) == 0)
    #expect(Array(arrivals) == Array(repeating: parties, count: rounds))
  }

  @Test("a barrier of one party never blocks and always reports last")
  func singleParty() {
    let barrier = ThreadBarrier(parties: 1)
    #expect(barrier.arriveAndWait())
    #expect(barrier.arriveAndWait())
  }

  @Test("a party count below one is reported", .runsExitTests)
  func invalidParties() async {
    await #expect(processExitsWith: .failure) {
      _ = ThreadBarrier(parties: 0)
    }
    await #expect(processExitsWith: .failure) {
      _ = ThreadBarrier(parties: -3)
    }
  }
}
