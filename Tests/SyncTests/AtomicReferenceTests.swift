import Glibc
import Sync
import Testing

/// An object that counts its live instances and carries plain (non-atomic) fields, so that
/// ThreadSanitizer checks their publication through ``AtomicReference``.
private final class Snapshot: @unchecked Sendable {
  var sequence: Int
  var payload: [Int]
  let live: AtomicInteger<Int>
  let onDeinit: (@Sendable () -> Void)?

  init(_ sequence: Int, live: AtomicInteger<Int>, onDeinit: (@Sendable () -> Void)? = nil) {
    self.sequence = sequence
    self.payload = [sequence, sequence * 2, sequence * 3]
    self.live = live
    self.onDeinit = onDeinit
    live.increment(ordering: .relaxed)
  }

  deinit {
    onDeinit?()
    live.decrement(ordering: .relaxed)
  }
}

@Suite("AtomicReference", .timeLimit(.minutes(3)))
struct AtomicReferenceTests {
  @Test("load, store, exchange and compare-exchange by identity, nil included")
  func operations() {
    let live = AtomicInteger<Int>(0)
    do {
      let first = Snapshot(1, live: live)
      let second = Snapshot(2, live: live)
      let equalButOther = Snapshot(1, live: live)
      let reference = AtomicReference<Snapshot>()
      #expect(reference.load() == nil)
      reference.store(first)
      #expect(reference.load() === first)
      #expect(reference.exchange(second) === first)
      // Identity, not value: a different object with equal fields does not match.
      let miss = reference.compareExchange(expected: equalButOther, desired: first)
      #expect(!miss.exchanged && miss.original === second)
      let hit = reference.compareExchange(expected: second, desired: nil)
      #expect(hit.exchanged && hit.original === second)
      #expect(reference.load() == nil)
      let fromNil = reference.compareExchange(expected: nil, desired: first)
      #expect(fromNil.exchanged && fromNil.original == nil)
      #expect(reference.load()?.sequence == 1)
    }
    #expect(live.load(ordering: .relaxed) == 0)  // every retain taken was given back
  }

  @Test("a replaced object is released, and the last one with the reference")
  func releases() {
    let live = AtomicInteger<Int>(0)
    let reference = AtomicReference(Snapshot(0, live: live))
    #expect(live.load(ordering: .relaxed) == 1)
    reference.store(Snapshot(1, live: live))
    #expect(live.load(ordering: .relaxed) == 1)
    _ = reference.exchange(Snapshot(2, live: live))
    #expect(live.load(ordering: .relaxed) == 1)
    do { _ = AtomicReference(Snapshot(3, live: live)) }
    #expect(live.load(ordering: .relaxed) == 1)
    reference.store(nil)
    #expect(live.load(ordering: .relaxed) == 0)
  }

  @Test("a replaced object's deinitializer may use the same reference (it runs after the lock)")
  func deinitOutsideTheLock() {
    let live = AtomicInteger<Int>(0)
    let reference = AtomicReference<Snapshot>()
    let seenFromDeinit = AtomicInteger<Int>(-1)
    reference.store(
      Snapshot(
        1, live: live,
        onDeinit: { [reference] in
          seenFromDeinit.store(reference.load()?.sequence ?? 0, ordering: .relaxed)
        }))
    reference.store(Snapshot(2, live: live))
    #expect(seenFromDeinit.load(ordering: .relaxed) == 2)
    reference.store(nil)
    #expect(live.load(ordering: .relaxed) == 0)
  }

  @Test("one writer publishing 5,000 objects to 3 readers: each sees whole objects, in order")
  func concurrentPublishAndRead() {
    let live = AtomicInteger<Int>(0)
    let count = 5_000
    do {
      let reference = AtomicReference(Snapshot(0, live: live))
      let failures = AtomicInteger<Int>(0)
      runConcurrently(4) { index in
        if index == 0 {
          for sequence in 1...count {
            // Plain writes in the initializer, published by the store.
            reference.store(Snapshot(sequence, live: live))
          }
        } else {
          var last = 0
          while last < count {
            guard let snapshot = reference.load() else {
              failures.increment(ordering: .relaxed)
              return
            }
            let sequence = snapshot.sequence
            if sequence < last || snapshot.payload != [sequence, sequence * 2, sequence * 3] {
              failures.increment(ordering: .relaxed)
            }
            last = sequence
          }
        }
      }
      #expect(failures.load(ordering: .relaxed) == 0)
      #expect(reference.load()?.sequence == count)
      #expect(live.load(ordering: .relaxed) == 1)
    }
    #expect(live.load(ordering: .relaxed) == 0)
  }

  @Test("compare-exchange loops from 4 threads replace exactly once per attempt that wins")
  func concurrentCompareExchange() {
    let live = AtomicInteger<Int>(0)
    do {
      let reference = AtomicReference(Snapshot(0, live: live))
      runConcurrently(4) { _ in
        for _ in 0..<1_000 {
          var current = reference.load()
          while true {
            let next = Snapshot((current?.sequence ?? 0) + 1, live: live)
            let (exchanged, original) = reference.compareExchange(expected: current, desired: next)
            if exchanged { break }
            current = original
          }
        }
      }
      #expect(reference.load()?.sequence == 4_000)
    }
    #expect(live.load(ordering: .relaxed) == 0)
  }
}
