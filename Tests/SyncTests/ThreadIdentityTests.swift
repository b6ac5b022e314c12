import Glibc
import ProcessTestSupport
import Sync
import Testing

/// Makes a lock with `make`, runs `first` with it on a thread, and once that thread has ended
/// runs `body` with the same lock on a new thread, trying until the new thread gets the
/// ended one's `pthread_t` (glibc gives a joined thread's descriptor to the next thread with
/// the same stack size, unless another thread of the process takes it first) or `attempts`
/// run out; `body` runs on the last attempt either way. Returns whether a handle was
/// recycled. Every attempt makes its own lock: `first` leaves it held by a thread that no
/// longer exists, so a later attempt's `first` would block on it for ever.
@discardableResult
private func onLaterThreadWithRecycledHandle<Lock: AnyObject & Sendable>(
  attempts: Int = 50, make: () -> Lock, first: @escaping @Sendable (Lock) -> Void,
  then body: @escaping @Sendable (Lock) -> Void
) -> Bool {
  for attempt in 1...attempts {
    let lock = make()
    // Held for ever by a thread that no longer exists: never deinitialized (that would
    // report it as destroyed while locked).
    _ = Unmanaged.passRetained(lock)
    let ended = GuardedValue(pthread_t())
    runConcurrently(1) { _ in
      first(lock)
      ended.value = pthread_self()
    }
    let recycled = GuardedValue(false)
    runConcurrently(1) { _ in
      recycled.value = pthread_equal(pthread_self(), ended.value) != 0
      if recycled.value || attempt == attempts { body(lock) }
    }
    if recycled.value { return true }
  }
  return false
}

@Suite("Lock ownership survives pthread_t reuse", .timeLimit(.minutes(3)))
struct ThreadIdentityTests {
  @Test("a recursive mutex held by an ended thread is not entered by a later thread")
  func recursiveMutexOfEndedThread() {
    let entered = GuardedValue(false)
    onLaterThreadWithRecycledHandle(
      make: { RecursiveLock() }, first: { $0.lock() }, then: { entered.value = $0.tryLock() })
    #expect(!entered.value)
  }

  @Test("a checked mutex held by an ended thread cannot be unlocked by a later thread", .runsExitTests)
  func checkedMutexOfEndedThread() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        onLaterThreadWithRecycledHandle(
          make: { Lock(checked: true) }, first: { $0.lock() }, then: { $0.unlock() })
      }
    }
  }

  @Test("a read-write lock write-held by an ended thread is not the later thread's")
  func readWriteLockOfEndedThread() {
    let heldByLaterThread = GuardedValue(true)
    onLaterThreadWithRecycledHandle(
      make: { ReadWriteLock() }, first: { $0.writeLock() },
      then: { heldByLaterThread.value = $0.isWriteLockedByCurrentThread })
    #expect(!heldByLaterThread.value)
  }

  @Test("a checked spin lock held by an ended thread cannot be unlocked by a later thread", .runsExitTests)
  func checkedSpinLockOfEndedThread() async {
    await #expect(processExitsWith: .failure) {
      blocking {
        onLaterThreadWithRecycledHandle(
          make: { SpinLock(checked: true) }, first: { $0.lock() }, then: { $0.unlock() })
      }
    }
  }
}
