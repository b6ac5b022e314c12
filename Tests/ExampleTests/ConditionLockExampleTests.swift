import Sync
import TestSupport
import Testing

/// The guide's `NSConditionLock` producer/consumer: the producer takes the lock whatever
/// the condition, appends, and unlocks with HAS_DATA; the consumer locks only when the
/// condition is HAS_DATA, removes one item and unlocks with NO_DATA or HAS_DATA depending
/// on what is left.
@Suite("NSConditionLock: producer and consumer with NO_DATA / HAS_DATA", .timeLimit(.minutes(3)))
struct ConditionLockExampleTests {
  static let noData = 0
  static let hasData = 1

  final class Shared: @unchecked Sendable {
    let condLock = ConditionLock(condition: ConditionLockExampleTests.noData)
    var queue: [Int] = []  // protected by `condLock`
  }

  @Test("every produced item is consumed once, in order, and the lock ends at NO_DATA")
  func listing() {
    let shared = Shared()
    let count = 2_000
    let consumed = UnsafeMutableBufferPointer<Int>.allocate(capacity: count)
    defer { consumed.deallocate() }
    nonisolated(unsafe) let received = consumed
    runThreads(2) { index in
      if index == 0 {
        // Producer.
        for item in 0..<count {
          shared.condLock.lock()
          // Add data to the queue.
          shared.queue.append(item)
          shared.condLock.unlock(withCondition: ConditionLockExampleTests.hasData)
        }
      } else {
        // Consumer.
        for slot in 0..<count {
          shared.condLock.lock(whenCondition: ConditionLockExampleTests.hasData)
          // Remove data from the queue.
          let item = shared.queue.removeFirst()
          let isEmpty = shared.queue.isEmpty
          shared.condLock.unlock(
            withCondition: isEmpty ? ConditionLockExampleTests.noData : ConditionLockExampleTests.hasData)
          // Process the data locally.
          received[slot] = item
        }
      }
    }
    #expect(Array(consumed) == Array(0..<count))
    #expect(shared.condLock.condition == ConditionLockExampleTests.noData)
    #expect(shared.queue.isEmpty)
  }
}
