import Glibc
import Sync
import Testing

/// Runs `body` on a new thread after one that ran `first` has ended, trying until the new
/// thread gets the ended one's `pthread_t` (glibc gives a joined thread's descriptor to the
/// next thread with the same stack size) or `attempts` run out. Returns whether it did.
@discardableResult
private func onLaterThreadWithRecycledHandle(
  attempts: Int = 50, first: @escaping @Sendable () -> Void, then body: @escaping @Sendable () -> Void
) -> Bool {
  for attempt in 1...attempts {
    let ended = GuardedValue(pthread_t())
    runConcurrently(1) { _ in
      first()
      ended.value = pthread_self()
    }
    let recycled = GuardedValue(false)
    runConcurrently(1) { _ in
      recycled.value = pthread_equal(pthread_self(), ended.value) != 0
      if recycled.value || attempt == attempts { body() }
    }
    if recycled.value { return true }
  }
  return false
}

@Suite("Lock ownership survives pthread_t reuse", .timeLimit(.minutes(1)))
struct ThreadIdentityTests {
  @Test("a recursive mutex held by an ended thread is not entered by a later thread")
  func recursiveMutexOfEndedThread() {
    let mutex = RecursiveLock()
    // Held forever by a thread that no longer exists: never deinitialized (that would
    // report it as destroyed while locked).
    _ = Unmanaged.passRetained(mutex)
    let entered = GuardedValue(false)
    onLaterThreadWithRecycledHandle(first: { mutex.lock() }, then: { entered.value = mutex.tryLock() })
    #expect(!entered.value)
  }

  @Test("a checked mutex held by an ended thread cannot be unlocked by a later thread")
  func checkedMutexOfEndedThread() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        let mutex = Lock(checked: true)
        onLaterThreadWithRecycledHandle(first: { mutex.lock() }, then: { mutex.unlock() })
      }
    }
  }

  @Test("a read-write lock write-held by an ended thread is not the later thread's")
  func readWriteLockOfEndedThread() {
    let lock = ReadWriteLock()
    _ = Unmanaged.passRetained(lock)
    let heldByLaterThread = GuardedValue(true)
    onLaterThreadWithRecycledHandle(
      first: { lock.writeLock() }, then: { heldByLaterThread.value = lock.isWriteLockedByCurrentThread })
    #expect(!heldByLaterThread.value)
  }

  @Test("a checked spin lock held by an ended thread cannot be unlocked by a later thread")
  func checkedSpinLockOfEndedThread() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        let lock = SpinLock(checked: true)
        onLaterThreadWithRecycledHandle(first: { lock.lock() }, then: { lock.unlock() })
      }
    }
  }
}
