import CThreadingShims
import Sync

#if canImport(Glibc)
  import Glibc
#endif

// A thread's name, configuration, kernel id and lifecycle, readable from any thread.
extension Thread {
  /// The thread's name: the full name given in the configuration or set later (not the
  /// kernel's truncated copy, which ``currentKernelName()`` reads). Nil when none was set;
  /// the main thread and adopted threads start with nil.
  ///
  /// Setting is allowed before the thread starts, or from the thread itself (which also
  /// renames it in the kernel: at most 15 bytes, cut on a character boundary as
  /// ``ThreadConfiguration/kernelName(for:)`` describes). Setting the name of a thread that
  /// has started (running or ended) from another thread stops the process (misuse: the
  /// target may be ending, and its kernel name cannot be changed safely then). The corresponding C function is
  /// `pthread_setname_np`.
  public var name: String? {
    get { withLock { storedName } }
    set {
      if UInt32.atomicLoad(at: lifecycleWord, ordering: .acquiring) == Lifecycle.notStarted && kind == .toolkit {
        let applied: Bool = withLock {
          guard UInt32.atomicLoad(at: lifecycleWord, ordering: .acquiring) == Lifecycle.notStarted else { return false }
          storedName = newValue
          storedConfiguration.name = newValue
          return true
        }
        if applied { return }
      }
      // `current`, not the key's raw value: a thread that never asked for its object yet
      // (the main thread setting `Thread.main.name` first thing) is adopted here.
      guard Thread.current === self else {
        reportMisuse(
          "Thread",
          "name set from another thread on a thread that has started (running or ended; set it before start, or on the thread itself)"
        )
      }
      withLock { storedName = newValue }
      let kernelName = ThreadConfiguration.kernelName(for: newValue ?? "")
      shimCallOrDie("pthread_setname_np") { kernelName.withCString { tk_thread_set_name($0) } }
    }
  }

  /// The configuration the thread was (or will be) created with. Settable until ``start()``;
  /// setting it afterwards stops the process (misuse). Threads not created by the toolkit
  /// report the default configuration.
  public var configuration: ThreadConfiguration {
    get { withLock { storedConfiguration } }
    set {
      withLock {
        let notStarted = UInt32.atomicLoad(at: lifecycleWord, ordering: .acquiring) == Lifecycle.notStarted
        guard kind == .toolkit, notStarted else {
          reportMisuse("Thread", "configuration changed after the thread started")
        }
        storedConfiguration = newValue
        storedName = newValue.name
      }
    }
  }

  /// The kernel's id for this thread (what `gettid()` returns on it, shown by `top -H` and
  /// `/proc/<pid>/task`), once the thread is running; nil before. Kernel ids are reused after
  /// a thread ends; use ``id`` as a stable key.
  ///
  /// In the child of `fork()` the forking thread's object reports its id there (the child's
  /// pid); when a thread other than the main one forked, ``main`` reports nil (the parent's
  /// main thread does not exist in the child, and its id is a thread of the parent).
  public var kernelThreadID: Int32? {
    if kind == .main { return isMainThreadGoneAfterFork ? nil : getpid() }
    return withLock { storedKernelThreadID }
  }

  /// Whether the thread is running its body (always true for the main and adopted threads
  /// until they end). False for ``main`` in the child of a `fork()` made by another thread.
  public var isExecuting: Bool {
    UInt32.atomicLoad(at: lifecycleWord, ordering: .acquiring) == Lifecycle.running && !isMainThreadGoneAfterFork
  }

  /// Whether the thread's body has returned (or thrown). True for ``main`` in the child of a
  /// `fork()` made by another thread (the parent's main thread does not exist there).
  public var isFinished: Bool {
    UInt32.atomicLoad(at: lifecycleWord, ordering: .acquiring) == Lifecycle.finished || isMainThreadGoneAfterFork
  }

  /// Whether this is ``main`` in a process forked by another thread (see
  /// `ThreadRegistry.mainThreadIsGone`).
  private var isMainThreadGoneAfterFork: Bool {
    kind == .main && ThreadRegistry.mainThreadIsGone.load(ordering: .relaxed) != 0
  }
}
