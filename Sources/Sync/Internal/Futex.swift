import CThreadingShims

#if canImport(Glibc)
  import Glibc
#endif

/// The Linux futex calls the lock family parks on. Process-private futexes only. Package
/// API: the Threads and RunLoop modules park on it too.
@usableFromInline
package enum Futex {
  /// Sleeps while `*word == expected`, until woken or `deadline` (monotonic) passes.
  /// Returns false only when the deadline passed; true for a wake-up, a changed value or a
  /// signal (callers re-check their state in all of those cases).
  @usableFromInline
  package static func wait(
    _ word: UnsafeMutablePointer<UInt32>, expected: UInt32, deadline: MonotonicInstant
  ) -> Bool {
    let result: Int32
    if deadline == .distantFuture {
      result = tk_futex_wait(word, expected, nil)
    } else {
      var time = deadline.timespec
      result = tk_futex_wait(word, expected, &time)
    }
    switch -result {
    case 0, EAGAIN, EINTR: return true
    case ETIMEDOUT: return false
    default:
      // EFAULT/EINVAL/ENOSYS mean a corrupted lock word or a kernel without futexes: no
      // caller can recover, and returning would break mutual exclusion.
      fatalError("\(SystemCallError(call: "futex(FUTEX_WAIT_BITSET)", code: SystemErrorCode(rawValue: -result)))")
    }
  }

  /// Wakes up to `count` threads sleeping on `word`; returns how many woke.
  @usableFromInline
  @discardableResult
  package static func wake(_ word: UnsafeMutablePointer<UInt32>, count: Int32) -> Int32 {
    let result = tk_futex_wake(word, count)
    // Checked here rather than through shimCall: this is the unlock path of every lock.
    if result < 0 {
      fatalError("\(SystemCallError(call: "futex(FUTEX_WAKE)", code: SystemErrorCode(rawValue: -result)))")
    }
    return result
  }
}

/// Reports a programming error in the use of a toolkit primitive. Always stops the process
/// with a message naming the type and the misuse, in debug and release builds alike
/// (unlike `precondition`, whose message release builds drop). Package API: the Threads and
/// RunLoop modules report their misuse through it too.
@usableFromInline
package func reportMisuse(_ type: String, _ message: String) -> Never {
  fatalError("\(type) misuse: \(message)")
}

/// The calling thread's owner tag for locks: a number no other thread of the process ever
/// gets, even after this one ends (a `pthread_t` is reused by a later thread, which would
/// then pass for the owner of a lock an ended thread still holds). Never 0. One
/// thread-local load after the thread's first call.
@inlinable
@inline(__always)
func currentThreadTag() -> UInt64 {
  tk_thread_identity()
}
