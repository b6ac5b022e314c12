// Atomics rows: the guide's Table 4-2 compare-and-swap and fetch-and-add, uncontended, for
// this toolkit's AtomicInteger beside Synchronization.Atomic and libatomic_ops (the library
// the toolkit's atomics are built on), interleaved in one run.

import CBenchmarkAtomicOps
import Sync
import Synchronization

/// Atomic subjects' storage.
private final class SynchronizationAtomicBox: Sendable {
  let atomic = Synchronization.Atomic<Int>(0)
}

/// Registers the uncontended atomics rows.
func registerAtomicBenchmarks(_ harness: Harness) {
  // Table 4-2: atomic compare-and-swap (always succeeding, full ordering).
  let ours = AtomicInteger<Int>(0)
  let theirs = SynchronizationAtomicBox()
  let raw = UnsafeMutablePointer<UInt64>.allocate(capacity: 1)
  raw.initialize(to: 0)
  defer { raw.deallocate() }
  harness.measureInterleaved(
    id: "cas.uncontended", group: "Table 4-2", operations: 500_000,
    [
      (
        .toolkit("Sync.AtomicInteger"),
        { iterations in
          var value = ours.load(ordering: .relaxed)
          var swapped = 0
          for _ in 0..<iterations {
            if ours.compareAndSwap(expected: value, desired: value &+ 1, ordering: .full) { swapped &+= 1 }
            value &+= 1
          }
          if swapped != iterations { fatalError("cost-tables: Sync.AtomicInteger CAS failed") }
        }
      ),
      (
        .peer("Synchronization.Atomic"),
        { iterations in
          var value = theirs.atomic.load(ordering: .relaxed)
          var swapped = 0
          for _ in 0..<iterations {
            if theirs.atomic.compareExchange(expected: value, desired: value &+ 1, ordering: .sequentiallyConsistent)
              .exchanged
            {
              swapped &+= 1
            }
            value &+= 1
          }
          if swapped != iterations { fatalError("cost-tables: Synchronization.Atomic CAS failed") }
        }
      ),
      (
        .peer("libatomic_ops"),
        { iterations in
          var value = raw.pointee
          var swapped = 0
          for _ in 0..<iterations {
            if bench_ao_compare_and_swap_full(raw, value, value &+ 1) { swapped &+= 1 }
            value &+= 1
          }
          if swapped != iterations { fatalError("cost-tables: AO_compare_and_swap_full failed") }
        }
      ),
    ])

  harness.measureInterleaved(
    id: "fetch-add.uncontended", group: "Atomics, uncontended", operations: 500_000,
    [
      (
        .toolkit("Sync.AtomicInteger"),
        { iterations in
          var sum = 0
          for _ in 0..<iterations { sum &+= ours.fetchAdd(1, ordering: .full) }
          opaqueSink(sum)
        }
      ),
      (
        .peer("Synchronization.Atomic"),
        { iterations in
          var sum = 0
          for _ in 0..<iterations { sum &+= theirs.atomic.wrappingAdd(1, ordering: .sequentiallyConsistent).oldValue }
          opaqueSink(sum)
        }
      ),
      (
        .peer("libatomic_ops"),
        { iterations in
          var sum: UInt64 = 0
          for _ in 0..<iterations { sum &+= bench_ao_fetch_add_full(raw, 1) }
          opaqueSink(sum)
        }
      ),
    ])
}
