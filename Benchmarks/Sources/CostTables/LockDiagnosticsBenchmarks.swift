// Lock diagnostics rows: what an uncontended lock+unlock of a diagnosed lock (`Condition`,
// whose lock operations carry the same hooks as the other lock types) costs with every
// detector off (the baseline), with lock-order detection on, and with contention statistics
// sampling one acquisition in 100, measured interleaved in the same run.
//
//   diagnostics.lock         lock + unlock, nothing else held
//   diagnostics.lock-nested  lock an outer lock, lock + unlock an inner one, unlock the
//                            outer (with lock order on: one known order, a cache lookup)
//
// The goals: lock order on under 3x off; sampling 1 in 100 under 1.2x off; off within 1.02x
// of the build without the hooks (compare with a previous report's JSON).

import Sync

/// Registers the lock diagnostics rows.
func registerLockDiagnosticsBenchmarks(_ harness: Harness) {
  let group = "Diagnostics"
  let outer = Condition(name: "benchmark outer")
  let inner = Condition(name: "benchmark inner")
  let orderBefore = Diagnostics.mode(of: .lockOrder)
  let contentionBefore = Diagnostics.collectsLockContention
  let samplingBefore = Diagnostics.lockContentionSampling

  func subjects(_ body: @escaping (Int) -> Void) -> [(subject: Subject, body: (Int) -> Void)] {
    [
      (
        subject: .peer("Condition lock+unlock, diagnostics off (baseline)"),
        body: { iterations in
          Diagnostics.setMode(.off, for: .lockOrder)
          Diagnostics.collectsLockContention = false
          body(iterations)
        }
      ),
      (
        subject: .toolkit("Condition lock+unlock, lock order on"),
        body: { iterations in
          Diagnostics.collectsLockContention = false
          Diagnostics.setMode(.report, for: .lockOrder)
          body(iterations)
        }
      ),
      (
        subject: .toolkit("Condition lock+unlock, contention sampled 1 in 100"),
        body: { iterations in
          Diagnostics.setMode(.off, for: .lockOrder)
          Diagnostics.lockContentionSampling = 100
          Diagnostics.collectsLockContention = true
          body(iterations)
        }
      ),
    ]
  }

  if harness.wants("diagnostics.lock") {
    harness.measureInterleaved(
      id: "diagnostics.lock", group: group, operations: 1_000_000,
      subjects { iterations in
        for _ in 0..<iterations {
          inner.lock()
          inner.unlock()
        }
      })
  }
  if harness.wants("diagnostics.lock-nested") {
    harness.measureInterleaved(
      id: "diagnostics.lock-nested", group: group, operations: 500_000,
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
