import CThreadingShims
import Sync

#if canImport(Glibc)
  import Glibc
#endif

/// A minimal three-state futex lock on a 32-bit word the caller allocates (Drepper,
/// "Futexes Are Tricky", mutex 3), for the Threads module's own short critical sections.
///
/// Why not `Sync.Lock`: each `Lock` is an object plus a 64-byte aligned block; a `Thread`
/// and its join state would need several, and their allocation alone measured about 0.9 us
/// per spawned thread (Table 2-1's creation time is about 12 us here). This lock lives in a
/// word of a block the owner allocates anyway.
///
/// | value | meaning |
/// |---|---|
/// | 0 | unlocked |
/// | 1 | locked, nobody sleeping |
/// | 2 | locked, someone may be sleeping: unlock wakes one |
///
/// Acquire ordering on taking the lock and release ordering on giving it up make the
/// protected writes visible to the next holder. Not recursive: the sections guarded by it
/// never call out to user code.
@usableFromInline
enum WordLock {
  @inlinable
  @inline(__always)
  static func lock(_ word: UnsafeMutablePointer<UInt32>) {
    if UInt32.atomicCompareAndSwap(expected: 0, desired: 1, at: word, ordering: .acquiring) { return }
    lockContended(word)
  }

  @usableFromInline
  @inline(never)
  static func lockContended(_ word: UnsafeMutablePointer<UInt32>) {
    while UInt32.atomicExchange(2, at: word, ordering: .acquiring) != 0 {
      let result = tk_futex_wait(word, 2, nil)
      if result != 0, -result != EAGAIN, -result != EINTR {
        fatalError("\(SystemCallError(call: "futex", code: SystemErrorCode(rawValue: -result)))")
      }
    }
  }

  @inlinable
  @inline(__always)
  static func unlock(_ word: UnsafeMutablePointer<UInt32>) {
    if UInt32.atomicExchange(0, at: word, ordering: .releasing) == 2 {
      wakeOne(word)
    }
  }

  @usableFromInline
  @inline(never)
  static func wakeOne(_ word: UnsafeMutablePointer<UInt32>) {
    let result = tk_futex_wake(word, 1)
    if result < 0 { fatalError("\(SystemCallError(call: "futex", code: SystemErrorCode(rawValue: -result)))") }
  }

  @inlinable
  @inline(__always)
  static func withLock<Result>(_ word: UnsafeMutablePointer<UInt32>, _ body: () throws -> Result) rethrows -> Result {
    lock(word)
    defer { unlock(word) }
    return try body()
  }
}
