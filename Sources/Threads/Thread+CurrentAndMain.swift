import Sync

#if canImport(Glibc)
  import Glibc
#endif

// The current thread's object, the main thread's, and whether the process is multithreaded.
extension Thread {
  /// The calling thread's `Thread`. Works on every thread: the main thread, toolkit threads,
  /// and threads created by other code (their object is created on first use and lives until
  /// the thread ends). Costs one `pthread_getspecific` after the first call on a thread.
  public static var current: Thread {
    if let value = pthread_getspecific(ThreadRegistry.currentThreadKey) {
      return Unmanaged<Thread>.fromOpaque(value).takeUnretainedValue()
    }
    return ThreadRegistry.adoptCurrentThread()
  }

  /// The process's main thread (the thread whose kernel id equals the process id). Usable
  /// from any thread.
  ///
  /// In the child of a `fork()` made by another thread that has a `Thread` object, this is
  /// still the parent's main thread, which does not exist there: it reports
  /// ``isExecuting`` false, ``isFinished`` true and no ``kernelThreadID``. The forking thread
  /// keeps its own object (``current``, with ``isMainThread-property`` false) and reports the child's
  /// pid as its kernel id. A forking thread that never asked for ``current`` becomes this
  /// object in the child, as the main thread itself does.
  public static let main = Thread(mainThreadOfProcess: getpid())

  /// Whether the calling thread is the main thread.
  public static var isMainThread: Bool {
    current.isMainThread
  }

  /// Whether the process has become multithreaded as far as the toolkit knows: a thread was
  /// started through the toolkit, or a thread other than the main one asked for
  /// ``current``. (The guide's `isMultiThreaded`; threads created by other code and never
  /// seen by the toolkit are not counted.) Once true, stays true.
  public static var isMultiThreaded: Bool {
    ThreadRegistry.multiThreaded.load(ordering: .acquiring) != 0
  }
}
