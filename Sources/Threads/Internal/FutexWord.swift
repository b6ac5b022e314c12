import Sync

/// A 32-bit word at a stable heap address that threads can wait on (Sync's `Futex`) and
/// update atomically. Used for the start-up handshake and the count of critical threads
/// still running.
final class FutexWord: @unchecked Sendable {
  // @unchecked: the word is only touched through atomics and futex calls.
  let address: UnsafeMutablePointer<UInt32>

  init(_ value: UInt32) {
    address = .allocate(capacity: 1)
    address.initialize(to: value)
  }

  deinit {
    address.deallocate()
  }

  /// The current value; acquiring, so what the storing thread wrote before is visible.
  @inline(__always)
  func load() -> UInt32 {
    UInt32.atomicLoad(at: address, ordering: .acquiring)
  }

  /// Stores `value` (releasing) without waking anyone (for words nobody sleeps on).
  @inline(__always)
  func store(_ value: UInt32) {
    UInt32.atomicStore(value, at: address, ordering: .releasing)
  }

  /// Stores `value` (releasing) and wakes every waiter.
  func storeAndWakeAll(_ value: UInt32) {
    UInt32.atomicStore(value, at: address, ordering: .releasing)
    wakeAll()
  }

  /// Replaces `expected` by `desired`; returns whether it did.
  @inline(__always)
  func compareAndSwap(expected: UInt32, desired: UInt32) -> Bool {
    UInt32.atomicCompareAndSwap(expected: expected, desired: desired, at: address, ordering: .full)
  }

  /// Adds `delta` (wrapping) and returns the new value.
  @discardableResult
  func add(_ delta: UInt32) -> UInt32 {
    UInt32.atomicFetchAdd(delta, at: address, ordering: .full) &+ delta
  }

  /// Wakes every thread waiting on the word. The kernel's futex wake is a full barrier
  /// before it looks for sleepers (paired with one in futex wait before it reads the word),
  /// so a store made before this call is seen by a waiter not yet asleep, on arm64 too.
  func wakeAll() {
    Futex.wake(address, count: Int32.max)
  }

  /// Blocks while the word equals `value`, re-checking after every wake-up, signal or
  /// spurious return. The acquiring load makes what the waking thread stored before its
  /// change visible once this returns.
  func wait(whileEqualTo value: UInt32) {
    while load() == value {
      _ = Futex.wait(address, expected: value, deadline: .distantFuture)
    }
  }
}
