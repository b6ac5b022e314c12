// Compiles the toolkit's public types beside Foundation and Synchronization, which define
// types of the same names (Thread, RunLoop, Timer, Mutex...). If a toolkit name becomes
// ambiguous in a way module selectors cannot resolve, this target stops building.
import Foundation
import Sync
import Synchronization
import Testing

@Suite("Sync beside Foundation and Synchronization", .timeLimit(.minutes(3)))
struct SyncInteropTests {
  @Test("every Sync lock type is usable with the peers imported")
  func locks() {
    let mutex = Sync::Lock()
    let recursive = RecursiveLock()
    let readWrite = ReadWriteLock()
    let spin = SpinLock()
    let locks: [any Locking] = [mutex, recursive, readWrite, spin]
    var total = 0
    for lock in locks { total += lock.withLock { 1 } }
    #expect(total == 4)

    // The peers, by their own names, in the same scope.
    let foundationLock = NSLock()
    foundationLock.lock()
    foundationLock.unlock()
    let standardMutex = Synchronization.Mutex(0)
    #expect(
      standardMutex.withLock {
        $0 += 1
        return $0
      } == 1)
  }

  @Test("atomics, barriers, instants and errors are usable with the peers imported")
  func values() {
    let counter = AtomicInteger<Int>(0)
    counter.increment(ordering: .full)
    let standard = Synchronization.Atomic<Int>(0)
    standard.add(1, ordering: .sequentiallyConsistent)
    MemoryBarrier.full()
    #expect(counter.load(ordering: .acquiring) == standard.load(ordering: .sequentiallyConsistent))
    let deadline: MonotonicInstant = .after(.seconds(1))
    #expect(!deadline.hasPassed)
    let error = SystemCallError(call: "pthread_create", code: .tryAgain)
    #expect(error.code == .tryAgain)
    // The orderings have names of their own: no module selector needed beside Synchronization's.
    let ordering: (MemoryOrder.Load, MemoryOrder.Store, MemoryOrder.Update) = (.relaxed, .releasing, .full)
    #expect(ordering.2 == .full)
    #expect(Synchronization.AtomicLoadOrdering.relaxed == .relaxed)
    let word = UnsafeMutablePointer<UInt32>.allocate(capacity: 1).initializedForTest()
    defer { word.deallocate() }
    #expect(UInt32.atomicLoad(at: word, ordering: .relaxed) == 0)
  }
}

extension UnsafeMutablePointer where Pointee == UInt32 {
  /// Initializes to zero; leaked on purpose (one word, test only).
  fileprivate func initializedForTest() -> Self {
    initialize(to: 0)
    return self
  }
}
