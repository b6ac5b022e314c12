// Object-keyed critical section rows: synchronized(obj), uncontended, beside the toolkit's
// own locks and Foundation's NSRecursiveLock, measured in the same run.

import Foundation
import Sync

// MARK: - synchronized.uncontended

/// One operation = enter and leave an uncontended critical section that increments a
/// counter.
func registerSynchronizedBenchmarks(_ harness: Harness) {
  let id = "synchronized.uncontended"
  let group = "Object-keyed critical section, uncontended"
  let operations = 1_000_000

  final class Account { var balance = 0 }
  let account = Account()

  let mutex = Sync.Lock()
  let recursive = RecursiveLock()
  let lock = NSRecursiveLock()

  harness.measureInterleaved(
    id: id, group: group, operations: operations,
    [
      (
        .toolkit("Sync.synchronized(obj)"),
        { iterations in
          for _ in 0..<iterations { synchronized(account) { account.balance &+= 1 } }
        }
      ),
      (
        .toolkit("Sync.Lock.withLock"),
        { iterations in
          for _ in 0..<iterations { mutex.withLock { account.balance &+= 1 } }
        }
      ),
      (
        .toolkit("Sync.RecursiveLock.withLock"),
        { iterations in
          for _ in 0..<iterations { recursive.withLock { account.balance &+= 1 } }
        }
      ),
      (
        .peer("Foundation.NSRecursiveLock"),
        { iterations in
          for _ in 0..<iterations {
            lock.lock()
            account.balance &+= 1
            lock.unlock()
          }
        }
      ),
    ])
}
