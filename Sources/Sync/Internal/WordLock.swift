/// A minimal three-state futex lock on a 32-bit word the caller allocates (Drepper,
/// "Futexes Are Tricky", mutex 3), for the toolkit's own short critical sections in objects
/// that already own a block of words (a thread's join state, a run loop's wait word).
///
/// | value | meaning |
/// |---|---|
/// | 0 | unlocked |
/// | 1 | locked, nobody sleeping |
/// | 2 | locked, someone may be sleeping: unlock wakes one |
///
/// Acquire ordering on taking the lock and release ordering on giving it up make the
/// protected writes visible to the next holder (x86 and arm64 alike: `ldaxr`/`stlxr` or
/// the locked instruction). Not recursive, no owner, no misuse checks: the sections it
/// guards never call out to user code. Public code uses ``Lock`` or ``LockedValue``.
@usableFromInline
package enum WordLock {
  /// Acquires the lock on `word`, sleeping in the kernel while another thread holds it.
  @inlinable
  @inline(__always)
  package static func lock(_ word: UnsafeMutablePointer<UInt32>) {
    if UInt32.atomicCompareAndSwap(expected: 0, desired: 1, at: word, ordering: .acquiring) { return }
    lockContended(word)
  }

  @usableFromInline
  @inline(never)
  static func lockContended(_ word: UnsafeMutablePointer<UInt32>) {
    while UInt32.atomicExchange(2, at: word, ordering: .acquiring) != 0 {
      _ = Futex.wait(word, expected: 2, deadline: .distantFuture)
    }
  }

  /// Releases the lock on `word`, waking one sleeper if there may be any. The caller holds it.
  @inlinable
  @inline(__always)
  package static func unlock(_ word: UnsafeMutablePointer<UInt32>) {
    if UInt32.atomicExchange(0, at: word, ordering: .releasing) == 2 {
      Futex.wake(word, count: 1)
    }
  }

  /// Runs `body` holding the lock on `word`.
  @inlinable
  @inline(__always)
  package static func withLock<Result, Failure: Error>(
    _ word: UnsafeMutablePointer<UInt32>, _ body: () throws(Failure) -> Result
  ) throws(Failure) -> Result {
    lock(word)
    defer { unlock(word) }
    return try body()
  }
}
