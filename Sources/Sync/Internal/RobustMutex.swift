import CThreadingShims

#if canImport(Glibc)
  import Glibc
#endif

/// The pthread calls behind ``SharedMemoryLock`` and ``SharedMemoryCondition``: a
/// process-shared, robust, error-checking `pthread_mutex_t` and a process-shared
/// `pthread_cond_t` on CLOCK_MONOTONIC, placed in caller-provided memory.
///
/// Robustness is glibc's and the kernel's: each thread registers a robust list (with
/// `set_robust_list`) through which glibc links every robust mutex the thread holds; when a
/// thread ends, by exit or by its process being killed, the kernel walks the list and, for
/// each mutex still held, sets the owner-died bit in its word and wakes one waiter. The next
/// `pthread_mutex_lock` then succeeds with `EOWNERDEAD` and the mutex is *inconsistent*:
/// `pthread_mutex_consistent` makes it normal again; unlocking without it makes every later
/// lock fail with `ENOTRECOVERABLE`.
enum RobustMutex {
  /// How one acquisition attempt ended.
  enum Outcome {
    case acquired
    case acquiredAfterOwnerDied
    case busy  // trylock only
    case timedOut
    case notRecoverable
  }

  static func initialize(_ mutex: UnsafeMutablePointer<pthread_mutex_t>) throws(SystemCallError) {
    var attributes = pthread_mutexattr_t()
    try pthreadCall("pthread_mutexattr_init") { pthread_mutexattr_init(&attributes) }
    defer {
      mustSucceed("SharedMemoryLock") { () throws(SystemCallError) in
        try pthreadCall("pthread_mutexattr_destroy") { pthread_mutexattr_destroy(&attributes) }
      }
    }
    try pthreadCall("pthread_mutexattr_setpshared") {
      pthread_mutexattr_setpshared(&attributes, Int32(PTHREAD_PROCESS_SHARED))
    }
    try pthreadCall("pthread_mutexattr_setrobust") {
      pthread_mutexattr_setrobust(&attributes, Int32(PTHREAD_MUTEX_ROBUST))
    }
    // Error-checking: relocking by the holder reports EDEADLK instead of hanging.
    try pthreadCall("pthread_mutexattr_settype") {
      pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ERRORCHECK))
    }
    try pthreadCall("pthread_mutex_init") { pthread_mutex_init(mutex, &attributes) }
  }

  static func initializeCondition(_ condition: UnsafeMutablePointer<pthread_cond_t>) throws(SystemCallError) {
    var attributes = pthread_condattr_t()
    try pthreadCall("pthread_condattr_init") { pthread_condattr_init(&attributes) }
    defer {
      mustSucceed("SharedMemoryCondition") { () throws(SystemCallError) in
        try pthreadCall("pthread_condattr_destroy") { pthread_condattr_destroy(&attributes) }
      }
    }
    try pthreadCall("pthread_condattr_setpshared") {
      pthread_condattr_setpshared(&attributes, Int32(PTHREAD_PROCESS_SHARED))
    }
    try pthreadCall("pthread_condattr_setclock") { pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC) }
    try pthreadCall("pthread_cond_init") { pthread_cond_init(condition, &attributes) }
  }

  /// Turns a lock-family result into an outcome; misuse stops the process, any other
  /// failure is thrown.
  static func outcome(_ result: Int32, call: String, typeName: String) throws(SystemCallError) -> Outcome {
    switch result {
    case 0: return .acquired
    case EOWNERDEAD: return .acquiredAfterOwnerDied
    case EBUSY: return .busy
    case ETIMEDOUT: return .timedOut
    case ENOTRECOVERABLE: return .notRecoverable
    case EDEADLK:
      reportMisuse(typeName, "lock() by the thread that already holds it (self-deadlock)")
    case EINVAL:
      reportMisuse(typeName, "\(call) on memory that does not hold an initialized lock")
    default:
      throw SystemCallError(call: call, code: SystemErrorCode(rawValue: result))
    }
  }

  static func lock(
    _ mutex: UnsafeMutablePointer<pthread_mutex_t>, before deadline: MonotonicInstant, typeName: String
  ) throws(SystemCallError) -> Outcome {
    if deadline == .distantFuture {
      return try outcome(pthread_mutex_lock(mutex), call: "pthread_mutex_lock", typeName: typeName)
    }
    var time = deadline.timespec
    return try outcome(
      tk_mutex_lock_monotonic(mutex, &time), call: "pthread_mutex_clocklock", typeName: typeName)
  }

  /// One attempt that never waits: `pthread_mutex_clocklock` with a deadline already
  /// passed, not `pthread_mutex_trylock`, which on a not-recoverable robust mutex returns
  /// `ENOTRECOVERABLE` but leaves the mutex locked by the caller (glibc compares the swap's
  /// previous value, 0, with the caller's id to decide whether to release it), so every
  /// later lock in every process would wait forever. Costs one futex call that returns at
  /// once when the lock is busy.
  static func tryLock(_ mutex: UnsafeMutablePointer<pthread_mutex_t>, typeName: String) throws(SystemCallError)
    -> Outcome
  {
    var past = timespec(tv_sec: 0, tv_nsec: 0)
    let result = tk_mutex_lock_monotonic(mutex, &past)
    // The error-checking mutex answers the holder's attempt with EDEADLK: for a try-lock that
    // is "busy" (documented: nil when held by anyone, the caller included), not misuse.
    if result == EDEADLK { return .busy }
    let outcome = try outcome(result, call: "pthread_mutex_clocklock", typeName: typeName)
    return outcome == .timedOut ? .busy : outcome
  }

  static func unlock(_ mutex: UnsafeMutablePointer<pthread_mutex_t>, typeName: String) {
    switch pthread_mutex_unlock(mutex) {
    case 0: return
    case EPERM:
      reportMisuse(typeName, "unlock() by a thread that does not hold the lock (or of an unlocked lock)")
    case let code:
      fatalError("\(typeName): \(SystemCallError(call: "pthread_mutex_unlock", code: SystemErrorCode(rawValue: code)))")
    }
  }

  /// `pthread_mutex_consistent` by the holder. With `unlessConsistent`, a lock that is
  /// consistent already (its holder marked it meanwhile) is left as it is instead of being
  /// reported.
  static func markConsistent(
    _ mutex: UnsafeMutablePointer<pthread_mutex_t>, typeName: String, unlessConsistent: Bool = false
  ) {
    // Checked here: glibc's pthread_mutex_consistent does not look at the caller, and makes
    // whichever thread calls it the mutex's recorded owner.
    if !isHeldByCurrentThread(mutex) {
      reportMisuse(typeName, "markConsistent() by a thread that does not hold the lock")
    }
    switch pthread_mutex_consistent(mutex) {
    case 0: return
    case EINVAL:
      if unlessConsistent { return }
      reportMisuse(typeName, "markConsistent() of a lock whose previous owner did not die (nothing to recover)")
    case let code:
      fatalError(
        "\(typeName): \(SystemCallError(call: "pthread_mutex_consistent", code: SystemErrorCode(rawValue: code)))")
    }
  }

  /// Whether the calling thread holds `mutex` (glibc's word keeps the owner's kernel thread id
  /// in its low 30 bits, as the kernel's robust-futex protocol requires).
  static func isHeldByCurrentThread(_ mutex: UnsafeMutablePointer<pthread_mutex_t>) -> Bool {
    let word = UnsafeMutableRawPointer(mutex).assumingMemoryBound(to: UInt32.self)
    return UInt32.atomicLoad(at: word, ordering: .relaxed) & 0x3FFF_FFFF == UInt32(bitPattern: tk_gettid())
  }

  static func wait(
    _ condition: UnsafeMutablePointer<pthread_cond_t>, _ mutex: UnsafeMutablePointer<pthread_mutex_t>,
    before deadline: MonotonicInstant, typeName: String
  ) throws(SystemCallError) -> Outcome {
    if deadline == .distantFuture {
      return try outcome(pthread_cond_wait(condition, mutex), call: "pthread_cond_wait", typeName: typeName)
    }
    var time = deadline.timespec
    return try outcome(
      pthread_cond_timedwait(condition, mutex, &time), call: "pthread_cond_timedwait", typeName: typeName)
  }

  static func signal(_ condition: UnsafeMutablePointer<pthread_cond_t>, all: Bool) {
    let result = all ? pthread_cond_broadcast(condition) : pthread_cond_signal(condition)
    if result != 0 {
      fatalError(
        "SharedMemoryCondition: \(SystemCallError(call: all ? "pthread_cond_broadcast" : "pthread_cond_signal", code: SystemErrorCode(rawValue: result)))"
      )
    }
  }
}
