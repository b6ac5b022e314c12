import CThreadingShims
import Sync

#if canImport(Glibc)
  import Glibc
#endif

/// Process-wide thread bookkeeping: the pthread key behind `Thread.current`, id numbering,
/// the multithreaded flag.
enum ThreadRegistry {
  /// The key whose per-thread value is a retained `Thread`. Its destructor releases it at
  /// thread exit, ending adopted threads (the main thread and threads the toolkit did not
  /// create) on the way: their exit handlers run there.
  static let currentThreadKey: pthread_key_t = {
    // Made before the fork handler can read it (no lazy initialization in a forked child).
    _ = mainThreadIsGone
    let forkHandler = pthread_atfork(nil, nil, { ThreadRegistry.processDidFork() })
    if forkHandler != 0 {
      fatalError(
        "pthread_atfork failed: \(SystemCallError(call: "pthread_atfork", code: SystemErrorCode(rawValue: forkHandler)))"
      )
    }
    var key = pthread_key_t()
    checkOrDie(
      pthread_key_create(&key) { value in
        guard let value else { return }
        let retained = Unmanaged<Thread>.fromOpaque(value)
        retained.takeUnretainedValue().adoptedThreadDidEnd(currentValue: value)
        retained.release()
      }, "pthread_key_create")
    return key
  }()

  /// 1 in the child of a `fork()` made by a thread with a `Thread` object other than
  /// ``Thread/main`` (and in its descendants): the parent's main thread does not exist there,
  /// so `Thread.main` reports itself finished, with no kernel id (see ``processDidFork()``).
  static let mainThreadIsGone = AtomicInteger<UInt32>(0)

  /// In the child of `fork()`, whose only thread is the forking one: the kernel now counts
  /// that thread as the child's main thread (its id is the child's pid). A forking thread
  /// with an object of its own keeps it (``Thread/current`` does not change) and it reports
  /// its new kernel id; the parent's main thread is gone. A forking thread with no object yet
  /// becomes ``Thread/main`` when it asks for ``Thread/current`` (its id is the pid), as does
  /// the main thread itself. Runs before `fork()` returns in the child, where no other thread
  /// exists: the plain store cannot race, and no lock is taken (one may have been copied
  /// held by a thread that is not there).
  static func processDidFork() {
    let forking = pthread_getspecific(currentThreadKey).map { Unmanaged<Thread>.fromOpaque($0).takeUnretainedValue() }
    guard let thread = forking, thread.kind != .main else {
      mainThreadIsGone.store(0, ordering: .relaxed)
      return
    }
    thread.storedKernelThreadID = tk_gettid()
    mainThreadIsGone.store(1, ordering: .relaxed)
  }

  /// The next thread id; 1 is the main thread's.
  static let idCounter = AtomicInteger<UInt64>(1)

  /// Whether a second thread has been seen (started by the toolkit, or adopted).
  static let multiThreaded = AtomicInteger<UInt32>(0)

  /// Whether `tk_thread_kernel_id_without_syscall` agrees with `gettid` (checked once, on
  /// whichever thread asks first; the decoding is the same on every thread).
  static let kernelIDDecodingWorks: Bool = {
    let decoded = tk_thread_kernel_id_without_syscall()
    return decoded > 0 && decoded == tk_gettid()
  }()

  /// The calling thread's kernel id: decoded from its CPU-clock id when that is known to work,
  /// else `gettid`. Every thread start asks for it, and the decoding reads a value glibc
  /// already holds where `gettid` enters the kernel.
  static func currentKernelThreadID() -> Int32 {
    kernelIDDecodingWorks ? tk_thread_kernel_id_without_syscall() : tk_gettid()
  }

  /// A fresh, never reused id.
  static func nextID() -> UInt64 {
    idCounter.increment(ordering: .relaxed)
  }

  static func markMultiThreaded() {
    if multiThreaded.load(ordering: .relaxed) == 0 {
      multiThreaded.store(1, ordering: .releasing)
    }
  }

  /// Installs `thread` as the calling thread's `Thread.current`, consuming one retain.
  static func install(_ retained: Unmanaged<Thread>) {
    checkOrDie(pthread_setspecific(currentThreadKey, retained.toOpaque()), "pthread_setspecific")
  }

  /// `Thread.current` for a thread seen for the first time: the main thread's object, or a new
  /// adopted one.
  static func adoptCurrentThread() -> Thread {
    let tid = currentKernelThreadID()
    let thread: Thread
    if tid == getpid() {
      thread = Thread.main
    } else {
      thread = Thread(adoptedKernelThreadID: tid)
      markMultiThreaded()
    }
    install(Unmanaged.passRetained(thread))
    return thread
  }
}

/// Threads marked `finishBeforeExit`, and the `atexit` handler that waits for them.
enum CriticalThreads {
  /// How many critical threads have been launched and not yet finished their body.
  static let running = FutexWord(0)

  /// Registers the exit handler and the fork handler once (swift_once makes this
  /// thread-safe).
  static let registration: Void = {
    _ = running
    if atexit({ CriticalThreads.waitForAll() }) != 0 {
      fatalError("atexit failed: cannot guarantee critical threads finish before exit")
    }
    let forked = pthread_atfork(nil, nil, { CriticalThreads.processDidFork() })
    if forked != 0 {
      fatalError(
        "pthread_atfork failed: \(SystemCallError(call: "pthread_atfork", code: SystemErrorCode(rawValue: forked)))")
    }
  }()

  /// In the child of `fork()`, which has only the thread that called it: the other
  /// critical threads do not exist there and will never leave, so the count becomes the
  /// forking thread's own (1 if it is itself inside a critical body, which leaves as usual
  /// when that body returns in the child). Without this the child's `exit()` would wait
  /// forever. Runs before `fork()` returns in the child, where no other thread can touch
  /// the count: plain stores suffice.
  static func processDidFork() {
    running.store(isCallerInCriticalBody ? 1 : 0)
  }

  /// Whether the calling thread is itself a critical thread still counted in `running`.
  private static var isCallerInCriticalBody: Bool {
    guard let value = pthread_getspecific(ThreadRegistry.currentThreadKey) else { return false }
    return Unmanaged<Thread>.fromOpaque(value).takeUnretainedValue().isCountedAsCritical
  }

  /// Counts a critical thread about to be created.
  static func enter() {
    _ = registration
    running.add(1)
  }

  /// Counts a critical thread finished (or never created) and wakes an exiting process.
  static func leave() {
    running.add(UInt32.max)  // -1
    running.wakeAll()
  }

  /// Blocks until every critical thread except possibly the calling one has finished.
  static func waitForAll() {
    let own: UInt32 = isCallerInCriticalBody ? 1 : 0
    while true {
      let count = running.load()
      if count <= own { return }
      running.wait(whileEqualTo: count)
    }
  }
}

/// The application's handler for errors escaping detached threads.
@usableFromInline
enum DetachedErrors {
  /// The handler in force; read and replaced under its lock, called after it.
  static let handler = LockedValue<Thread.DetachedErrorHandler>(printToStandardError)

  static let printToStandardError: Thread.DetachedErrorHandler = { error, thread in
    let name = thread.name.map { "\"\($0)\"" } ?? "(unnamed)"
    writeToStandardError("Thread \(name) (id \(thread.id)): error escaped a detached thread: \(error)\n")
  }

  @usableFromInline
  static func report(_ error: any Error, from thread: Thread) {
    let current = handler.withLock { $0 }
    current(error, thread)
  }
}
