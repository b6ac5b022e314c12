// ReadWriteLock hooks rows: three subjects (diagnostics off, lock order on, contention
// sampled 1 in 100), measured interleaved in one run, through `ReadWriteLock`, whose inlined
// operations carry the same hooks as `Lock`.
//
//   diagnostics.rwlock-hooks-read   readLock + unlock, nothing else held
//   diagnostics.rwlock-hooks-write  writeLock + unlock, nothing else held
//
// The goals, as for `Lock`: lock order on under 3x off; sampling 1 in 100 under 1.2x off;
// off within 1.02x of the build without the hooks (compare with a previous report's JSON:
// the `rwlock.read-uncontended` and `rwlock.write-uncontended` rows).

import Sync

/// Registers the `ReadWriteLock` diagnostics rows.
func registerReadWriteLockHooksBenchmarks(_ harness: Harness) {
  let group = "Diagnostics"
  let lock = ReadWriteLock(name: "benchmark rwlock")
  let orderBefore = Diagnostics.mode(of: .lockOrder)
  let contentionBefore = Diagnostics.collectsLockContention
  let samplingBefore = Diagnostics.lockContentionSampling

  func subjects(_ operation: String, _ body: @escaping (Int) -> Void) -> [(subject: Subject, body: (Int) -> Void)] {
    [
      (
        subject: .peer("ReadWriteLock \(operation)+unlock, diagnostics off (baseline)"),
        body: { iterations in
          Diagnostics.setMode(.off, for: .lockOrder)
          Diagnostics.collectsLockContention = false
          body(iterations)
        }
      ),
      (
        subject: .toolkit("ReadWriteLock \(operation)+unlock, lock order on"),
        body: { iterations in
          Diagnostics.collectsLockContention = false
          Diagnostics.setMode(.report, for: .lockOrder)
          body(iterations)
        }
      ),
      (
        subject: .toolkit("ReadWriteLock \(operation)+unlock, contention sampled 1 in 100"),
        body: { iterations in
          Diagnostics.setMode(.off, for: .lockOrder)
          Diagnostics.lockContentionSampling = 100
          Diagnostics.collectsLockContention = true
          body(iterations)
        }
      ),
    ]
  }

  if harness.wants("diagnostics.rwlock-hooks-read") {
    harness.measureInterleaved(
      id: "diagnostics.rwlock-hooks-read", group: group, operations: 1_000_000,
      subjects("readLock") { iterations in
        for _ in 0..<iterations {
          lock.readLock()
          lock.unlock()
        }
      })
  }
  if harness.wants("diagnostics.rwlock-hooks-write") {
    harness.measureInterleaved(
      id: "diagnostics.rwlock-hooks-write", group: group, operations: 1_000_000,
      subjects("writeLock") { iterations in
        for _ in 0..<iterations {
          lock.writeLock()
          lock.unlock()
        }
      })
  }
  Diagnostics.setMode(orderBefore, for: .lockOrder)
  Diagnostics.collectsLockContention = contentionBefore
  Diagnostics.lockContentionSampling = samplingBefore
  Diagnostics.resetLockContention()
}
