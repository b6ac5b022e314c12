import CThreadingShims

#if canImport(Glibc)
  import Glibc
#endif

/// The kernel's priority-inheritance futex protocol (futex(2), "Priority-inheritance
/// futexes"), process-private, as ``PriorityInheritanceLock`` uses it.
///
/// State table of the 32-bit word (the kernel defines it; user space and kernel both write it):
///
/// | value | meaning |
/// |---|---|
/// | 0 | unlocked |
/// | `tid` | held by the thread whose kernel id is `tid`; nobody waits in the kernel |
/// | `tid` \| `waitersBit` | held; threads wait in the kernel, and the holder runs at the highest waiter's priority until it unlocks |
///
/// The kernel also defines an owner-died bit, set only for futexes on a robust list; this
/// lock never registers one, so the bit never appears.
///
/// User space takes a free word with a compare-and-swap 0 -> `tid` and gives up an
/// uncontended one with `tid` -> 0. Every other transition goes through the kernel:
/// `FUTEX_LOCK_PI` sets the waiters bit, queues the caller by priority and boosts the holder;
/// `FUTEX_UNLOCK_PI` writes the highest-priority waiter's id into the word (with the waiters
/// bit if others remain) and wakes it as the new owner, or writes 0 if nobody waits any more.
/// Because the kernel sets the waiters bit before it sleeps, the holder's user-space
/// compare-and-swap `tid` -> 0 fails whenever somebody sleeps, so no waiter is left behind.
@usableFromInline
package enum PriorityInheritanceFutex {
  /// The kernel's `FUTEX_WAITERS`.
  @usableFromInline
  static let waitersBit: UInt32 = 0x8000_0000

  /// The kernel's `FUTEX_TID_MASK`: the owner's thread id.
  @usableFromInline
  static let threadIDMask: UInt32 = 0x3FFF_FFFF

  /// How timed acquisitions wait in the kernel.
  enum TimedWait: Sendable {
    /// `FUTEX_LOCK_PI2` with an absolute CLOCK_MONOTONIC deadline (Linux 5.14+).
    case monotonic
    /// `FUTEX_LOCK_PI`, whose absolute timeout is on CLOCK_REALTIME: waits in slices of at
    /// most ``realtimeSlice`` and re-checks the monotonic deadline after each, so a wall-clock
    /// jump cannot end the wait early and delays its end by at most one slice.
    case realtimeSlices
  }

  /// The longest single `FUTEX_LOCK_PI` wait on kernels without `FUTEX_LOCK_PI2`.
  static let realtimeSlice: Duration = .milliseconds(20)

  /// Whether the kernel has priority-inheritance futexes, and which timed call it takes;
  /// probed once per process by taking and releasing a private word through the kernel.
  static let support: Result<TimedWait, SystemCallError> = {
    let word = UnsafeMutablePointer<UInt32>.allocate(capacity: 1)
    defer { word.deallocate() }
    word.initialize(to: 0)
    let timedWait: TimedWait
    var result = tk_futex_lock_pi2(word, nil)
    if result == 0 {
      timedWait = .monotonic
    } else if -result == ENOSYS {
      // Either a kernel before 5.14 or one without PI futexes at all: ask the older call.
      result = tk_futex_lock_pi(word, -1)
      if result != 0 {
        return .failure(SystemCallError(call: "futex(FUTEX_LOCK_PI)", code: SystemErrorCode(rawValue: -result)))
      }
      timedWait = .realtimeSlices
    } else {
      return .failure(SystemCallError(call: "futex(FUTEX_LOCK_PI2)", code: SystemErrorCode(rawValue: -result)))
    }
    // The word is ours (the kernel wrote our id without waiters); the kernel clears it.
    let unlocked = tk_futex_unlock_pi(word)
    if unlocked != 0 {
      return .failure(SystemCallError(call: "futex(FUTEX_UNLOCK_PI)", code: SystemErrorCode(rawValue: -unlocked)))
    }
    return .success(timedWait)
  }()

  /// The check that no thread ends holding a lock, prepared once per process: nil, or why
  /// it could not be (`pthread_key_create` failed). See ``noteAcquired()``.
  static let heldCheck: SystemCallError? = {
    let error = tk_pi_held_prepare { count in
      reportMisuse(
        "PriorityInheritanceLock",
        "a thread ended holding \(count) lock(s) (a thread must unlock before it exits; a thread waiting for the lock would otherwise get it without being told)"
      )
    }
    return error == 0 ? nil : SystemCallError(call: "pthread_key_create", code: SystemErrorCode(rawValue: error))
  }()

  /// Counts an acquisition by the calling thread, for the check when it ends: a thread that
  /// ends holding a lock stops the process. The kernel would otherwise hand the lock to a
  /// waiter already asleep in `FUTEX_LOCK_PI` without a word (only a lock nobody waits for
  /// says so, `ESRCH`, to its next locker). One thread-local add; the thread's first
  /// acquisition registers it.
  @inlinable
  @inline(__always)
  static func noteAcquired() {
    let error = tk_pi_held_acquired()
    if error != 0 { registrationFailed(error) }
  }

  /// Counts a release by the calling thread (see ``noteAcquired()``).
  @inlinable
  @inline(__always)
  static func noteReleased() {
    tk_pi_held_released()
  }

  @usableFromInline
  static func registrationFailed(_ error: Int32) -> Never {
    // `pthread_setspecific` fails only without memory for the thread's key block; the key
    // itself was created with the lock (see `heldCheck`).
    fatalError(
      "PriorityInheritanceLock: \(SystemCallError(call: "pthread_setspecific", code: SystemErrorCode(rawValue: error)))"
    )
  }

  /// The calling thread's kernel thread id, as the word stores it. One thread-local load
  /// after the thread's first call.
  @inlinable
  @inline(__always)
  static func currentThreadID() -> UInt32 {
    UInt32(bitPattern: tk_cached_thread_id())
  }

  /// Waits in the kernel until the calling thread owns `word` or `deadline` passes; returns
  /// whether it owns it. `me` is the caller's id; the caller has checked it does not own the
  /// word already. `typeName` names the lock in misuse messages.
  static func lock(
    _ word: UnsafeMutablePointer<UInt32>, me: UInt32, before deadline: MonotonicInstant, timedWait: TimedWait,
    typeName: String
  ) -> Bool {
    while true {
      let result: Int32
      let call: String
      if deadline == .distantFuture {
        if timedWait == .monotonic {
          result = tk_futex_lock_pi2(word, nil)
          call = "futex(FUTEX_LOCK_PI2)"
        } else {
          result = tk_futex_lock_pi(word, -1)
          call = "futex(FUTEX_LOCK_PI)"
        }
      } else if timedWait == .monotonic {
        var time = deadline.timespec
        result = tk_futex_lock_pi2(word, &time)
        call = "futex(FUTEX_LOCK_PI2)"
      } else {
        let remaining = min(deadline.remaining, realtimeSlice)
        if remaining <= .zero { return false }
        let (seconds, attoseconds) = remaining.components
        result = tk_futex_lock_pi(word, seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
        call = "futex(FUTEX_LOCK_PI)"
      }
      switch -result {
      case 0:
        // The kernel made us the owner. This acquiring load reads the word the kernel
        // wrote with an atomic read-modify-write; that write continues the release sequence
        // headed by the previous holder's releasing read-modify-write in `unlockInKernel`,
        // so the holder's writes happen before ours (on x86 and arm64 alike, and the
        // kernel's own locks order them too). It is also what tells ThreadSanitizer.
        let owner = UInt32.atomicLoad(at: word, ordering: .acquiring) & threadIDMask
        if owner != me {
          fatalError("\(typeName): the kernel reported the lock taken, but its word names thread \(owner)")
        }
        return true
      case EINTR, EAGAIN:
        // A signal, or a holder in the middle of exiting: try again.
        continue
      case ETIMEDOUT:
        if timedWait == .monotonic || deadline.hasPassed { return false }
        continue  // one wall-clock slice ended before the monotonic deadline
      case EDEADLK:
        if UInt32.atomicLoad(at: word, ordering: .relaxed) & threadIDMask == me {
          reportMisuse(typeName, "lock() by the thread that already holds it (self-deadlock)")
        }
        // The kernel's chain walk found a cycle (this thread holds a lock the owner waits
        // for, directly or through others). Untimed, it can never end: say so. Timed, wait
        // for the cycle to break (another member giving up) until the deadline, as promised.
        if deadline == .distantFuture {
          reportMisuse(typeName, "lock() would deadlock: a cycle of priority-inheritance locks (lock order)")
        }
        if deadline.hasPassed { return false }
        var pause = timespec(tv_sec: 0, tv_nsec: 1_000_000)
        _ = nanosleep(&pause, nil)
        continue
      case ESRCH:
        reportMisuse(typeName, "the lock is held by a thread that has ended (a thread must unlock before it exits)")
      default:
        // EFAULT, EINVAL, EPERM: a corrupted word, or memory that is not this lock's. The
        // kernel's support was probed when the lock was created, so ENOSYS cannot occur.
        fatalError("\(typeName): \(SystemCallError(call: call, code: SystemErrorCode(rawValue: -result)))")
      }
    }
  }

  /// Gives `word`, held by the caller with the waiters bit set, to the kernel, which hands
  /// it to the highest-priority waiter.
  static func unlockInKernel(_ word: UnsafeMutablePointer<UInt32>, typeName: String) {
    // A releasing read-modify-write that changes nothing: it heads the release sequence the
    // kernel's hand-off write continues (see `lock`), a locked instruction on a line the
    // holder already owns, next to a system call.
    _ = UInt32.atomicFetchOr(0, at: word, ordering: .releasing)
    while true {
      let result = tk_futex_unlock_pi(word)
      switch -result {
      case 0: return
      case EINTR, EAGAIN: continue  // the kernel met a waiter mid-setup: try again
      case EPERM:
        reportMisuse(typeName, "unlock() from a thread that does not hold the lock")
      default:
        fatalError(
          "\(typeName): \(SystemCallError(call: "futex(FUTEX_UNLOCK_PI)", code: SystemErrorCode(rawValue: -result)))")
      }
    }
  }
}
