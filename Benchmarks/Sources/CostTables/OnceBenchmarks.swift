// One-time initialization rows: the cost of a call after the first, for this toolkit's Once
// beside its peers, measured in the same run.

import Foundation
import Sync
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

// MARK: - once.initialized

/// One operation = one call after initialization has completed, beside a plain acquiring
/// atomic load of a word (the least any thread-safe "already initialized?" check can cost).
func registerOnceBenchmarks(_ harness: Harness) {
  let id = "once.initialized"
  let group = "One-time initialization: a call after the first"
  let calls = 10_000_000

  let word = onceOpaque(AtomicInteger<UInt32>(3))

  let once = Once()
  nonisolated(unsafe) var counter = 0
  once.run { counter += 1 }

  let lazy = Lazy { 42 }
  _ = lazy.value

  // Behind an opaque call, so the optimizer cannot prove no other thread writes it and
  // hoist the load out of the loop.
  let holder = onceOpaque(AtomicHolder())

  let control = UnsafeMutablePointer<pthread_once_t>.allocate(capacity: 1)
  control.initialize(to: pthread_once_t())
  defer { control.deallocate() }
  precondition(pthread_once(control, {}) == 0)

  harness.measureInterleaved(
    id: id, group: group, operations: calls,
    [
      (
        .toolkit("Sync.AtomicInteger.load(acquiring)"),
        { iterations in
          var hits = 0
          for _ in 0..<iterations where word.load(ordering: .acquiring) == 3 { hits &+= 1 }
          precondition(hits == iterations)
        }
      ),
      (
        .peer("Synchronization.Atomic.load(acquiring)"),
        { iterations in
          var hits = 0
          for _ in 0..<iterations where holder.word.load(ordering: .acquiring) == 3 { hits &+= 1 }
          precondition(hits == iterations)
        }
      ),
      (
        .toolkit("Sync.Once"),
        { iterations in
          for _ in 0..<iterations { once.run { counter += 1 } }
        }
      ),
      (
        .toolkit("Sync.Lazy.value"),
        { iterations in
          var sum = 0
          for _ in 0..<iterations { sum &+= lazy.value }
          precondition(sum == 42 &* iterations)
        }
      ),
      (
        .peer("pthread_once"),
        { iterations in
          for _ in 0..<iterations { precondition(pthread_once(control, {}) == 0) }
        }
      ),
    ])
  precondition(counter == 1)
}

private final class AtomicHolder: Sendable {
  let word = Synchronization.Atomic<UInt32>(3)
}

@inline(never)
private func onceOpaque<T>(_ value: T) -> T { value }
