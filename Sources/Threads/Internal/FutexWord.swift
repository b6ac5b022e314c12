import CThreadingShims
import Sync

#if canImport(Glibc)
  import Glibc
#endif

/// A 32-bit word at a stable heap address that threads can wait on (futex) and update
/// atomically. Used for the start-up handshake, a thread's lifecycle state and the count of
/// critical threads still running.
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

  /// Wakes every thread waiting on the word.
  func wakeAll() {
    let result = tk_futex_wake(address, Int32.max)
    if result < 0 { fatalError("\(SystemCallError(call: "futex", code: SystemErrorCode(rawValue: -result)))") }
  }

  /// Blocks while the word equals `value` (re-checking after every wake-up or signal).
  func wait(whileEqualTo value: UInt32) {
    while load() == value {
      let result = tk_futex_wait(address, value, nil)
      switch -result {
      case 0, EAGAIN, EINTR: continue
      default: fatalError("\(SystemCallError(call: "futex", code: SystemErrorCode(rawValue: -result)))")
      }
    }
  }
}
