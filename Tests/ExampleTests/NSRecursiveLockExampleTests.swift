import Sync
import TestSupport
import Testing

/// The guide's NSRecursiveLock example: a recursive function takes the lock on every call;
/// called with 5 it re-acquires five more times without deadlocking.
@Suite("NSRecursiveLock example: recursive function", .timeLimit(.minutes(3)))
struct NSRecursiveLockExampleTests {
  final class Example: @unchecked Sendable {
    let theLock = RecursiveLock()
    var calls = 0  // protected by `theLock`
    var deepestLevel = 0  // protected by `theLock`

    func myRecursiveFunction(_ value: Int) {
      theLock.lock()
      calls += 1
      deepestLevel = max(deepestLevel, theLock.levelsHeldByCurrentThread)
      if value != 0 {
        myRecursiveFunction(value - 1)
      }
      theLock.unlock()
    }
  }

  @Test("myRecursiveFunction(5) runs six levels deep and leaves the lock free")
  func recursion() {
    let example = Example()
    example.myRecursiveFunction(5)
    #expect(example.calls == 6)
    #expect(example.deepestLevel == 6)
    #expect(example.theLock.levelsHeldByCurrentThread == 0)
    let freeElsewhere = AtomicInteger<Int>(0)
    runThreads(1) { _ in
      if example.theLock.tryLock() {
        freeElsewhere.store(1, ordering: .relaxed)
        example.theLock.unlock()
      }
    }
    #expect(freeElsewhere.load(ordering: .relaxed) == 1)
  }
}
