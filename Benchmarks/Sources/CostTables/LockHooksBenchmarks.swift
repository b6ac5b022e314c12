// Lock hooks rows: the same three subjects as the `diagnostics.lock` rows (diagnostics off,
// lock order on, contention sampled 1 in 100), measured interleaved in one run, through
// `Lock`, the plain lock whose inlined lock()/unlock() carry the hooks; and two subjects that
// split the sampled figure in its parts: sampling 1 in 10,000 (nearly only the inlined
// countdown of the unsampled acquisitions) and every acquisition sampled (one sample's cost,
// a hundredth of which the 1-in-100 row pays per operation).
//
//   diagnostics.lock-hooks         lock + unlock, nothing else held
//   diagnostics.lock-hooks-nested  lock an outer lock, lock + unlock an inner one, unlock the
//                                  outer (with lock order on: one known order, a cache lookup)
//
// The goals: lock order on under 3x off; sampling 1 in 100 under 1.2x off; off within 1.02x
// of the build without the hooks (compare with a previous report's JSON: `mutex.*` rows).

import Sync

/// Registers the `Lock` diagnostics rows.
func registerLockHooksBenchmarks(_ harness: Harness) {
  let group = "Diagnostics"
  let outer = Lock(name: "benchmark outer")
  let inner = Lock(name: "benchmark inner")
  let orderBefore = Diagnostics.mode(of: .lockOrder)
  let contentionBefore = Diagnostics.collectsLockContention
  let samplingBefore = Diagnostics.lockContentionSampling

  /// Contention statistics alone, sampling one acquisition in `interval`.
  func sampled(_ interval: Int, _ name: String, _ body: @escaping (Int) -> Void) -> (
    subject: Subject, body: (Int) -> Void
  ) {
    (
      subject: .toolkit(name),
      body: { iterations in
        Diagnostics.setMode(.off, for: .lockOrder)
        Diagnostics.lockContentionSampling = interval
        Diagnostics.collectsLockContention = true
        body(iterations)
      }
    )
  }

  func subjects(_ body: @escaping (Int) -> Void) -> [(subject: Subject, body: (Int) -> Void)] {
    [
      (
        subject: .peer("Lock lock+unlock, diagnostics off (baseline)"),
        body: { iterations in
          Diagnostics.setMode(.off, for: .lockOrder)
          Diagnostics.collectsLockContention = false
          body(iterations)
        }
      ),
      (
        subject: .toolkit("Lock lock+unlock, lock order on"),
        body: { iterations in
          Diagnostics.collectsLockContention = false
          Diagnostics.setMode(.report, for: .lockOrder)
          body(iterations)
        }
      ),
      sampled(100, "Lock lock+unlock, contention sampled 1 in 100", body),
      sampled(10_000, "Lock lock+unlock, contention sampled 1 in 10,000 (the unsampled path)", body),
      sampled(1, "Lock lock+unlock, contention sampled every time (what one sample costs)", body),
    ]
  }

  if harness.wants("diagnostics.lock-hooks") {
    harness.measureInterleaved(
      id: "diagnostics.lock-hooks", group: group, operations: 1_000_000,
      subjects { iterations in
        for _ in 0..<iterations {
          inner.lock()
          inner.unlock()
        }
      })
  }
  if harness.wants("diagnostics.lock-hooks-nested") {
    harness.measureInterleaved(
      id: "diagnostics.lock-hooks-nested", group: group, operations: 500_000,
      subjects { iterations in
        for _ in 0..<iterations {
          outer.lock()
          inner.lock()
          inner.unlock()
          outer.unlock()
        }
      })
  }
  Diagnostics.setMode(orderBefore, for: .lockOrder)
  Diagnostics.collectsLockContention = contentionBefore
  Diagnostics.lockContentionSampling = samplingBefore
  Diagnostics.resetLockContention()
}
