import CThreadingShims
import Sync

#if canImport(Glibc)
  import Glibc
#endif

/// A thread of execution: the guide's `NSThread`/POSIX thread, for Linux, without Foundation.
///
/// Every thread has a `Thread` object, reachable from anywhere on it as ``current``: threads
/// the toolkit creates, the main thread (``main``), and threads created by other code
/// (adopted lazily on their first ``current``). Through it you reach the thread's
/// ``threadDictionary``, its ``name``, a stable ``id``, and its exit request flag
/// (``requestExit()``, ``isExitRequested``) - the guide's way of ending a thread: ask it, and
/// let it leave its entry routine - and its exit handlers (``onExit(_:)``), which run on it as
/// it ends.
///
/// Creating threads:
/// - ``spawn(name:configuration:_:)``: a joinable thread whose body returns a value;
///   ``JoinableThread/join()`` (which consumes the noncopyable handle) waits and returns it,
///   or rethrows the body's typed error.
/// - ``detach(name:configuration:_:)``: a detached thread, reclaimed automatically; an error
///   escaping it goes to ``detachedErrorHandler`` (default: printed to standard error).
/// - ``init(name:configuration:_:)`` then ``start()``: the guide's create-then-start form,
///   configurable until started; starts a detached thread.
///
/// ```swift
/// let sum = try Thread.spawn(name: "summer") { (1...100).reduce(0, +) }
/// print(sum.join())                        // 5050
///
/// let worker = try Thread.detach(name: "poller") {
///     while !Thread.current.isExitRequested { poll() }
/// }
/// worker.requestExit()
/// ```
///
/// Name clash: Foundation also has a `Thread`; in a file importing both, write
/// `Threads::Thread`.
///
/// The corresponding C functions are `pthread_create`, `pthread_join`, `pthread_detach`,
/// `pthread_self` and `pthread_getspecific`.
public final class Thread: @unchecked Sendable {
  // @unchecked: mutable state is guarded by the word lock (see each property); the lifecycle
  // and exit flag are atomics; the dictionary locks itself.

  /// The kinds of thread object.
  enum Kind {
    /// Created by the toolkit (`spawn`, `detach`, `init` + `start`).
    case toolkit
    /// The process's main thread.
    case main
    /// A thread created by other code, seen through `Thread.current`.
    case adopted
  }

  /// Lifecycle values in `lifecycleWord`.
  enum Lifecycle {
    static let notStarted: UInt32 = 0
    static let starting: UInt32 = 1
    static let running: UInt32 = 2
    static let finished: UInt32 = 3
  }

  /// What the new thread applies to itself before running its body (written by the creator
  /// under the word lock before `pthread_create`, read by the new thread under it).
  struct StartPlan {
    var kernelName: String?
    var niceValue: Int32?
    /// Present when the creator waits to learn whether the set-up succeeded: 1 = ok,
    /// 2 + errno = failed (the body does not run).
    var handshake: FutexWord?
    var isCritical: Bool
  }

  /// A stable identifier, unique for the life of the process and never reused: 1 for the
  /// main thread, then increasing in the order `Thread` objects are created. (Kernel thread
  /// ids are reused after a thread ends; see ``kernelThreadID`` for that one.)
  public let id: UInt64

  /// Whether this is the process's main thread (the one that ran `main`).
  public let isMainThread: Bool

  /// The thread's lock-owner identity (`tk_thread_identity`) when it was reserved at
  /// creation (a joinable thread: the deadlock watchdog follows joins to it), else 0.
  let lockIdentity: UInt64

  let kind: Kind

  /// One small block for the words below (a `WordLock`, the lifecycle, the exit flag):
  /// one allocation instead of a lock object each keeps thread creation cheap.
  private let words: UnsafeMutablePointer<UInt32>
  /// The lock guarding the stored properties below.
  var lockWord: UnsafeMutablePointer<UInt32> { words }
  /// `Lifecycle` values; atomic. Nobody sleeps on it (joiners use `pthread_join`).
  var lifecycleWord: UnsafeMutablePointer<UInt32> { words + 1 }
  /// 0 or 1; set once, under the lock, read lock-free.
  var exitWord: UnsafeMutablePointer<UInt32> { words + 2 }

  // Guarded by the lock (`withLock`). The lock already makes every access exclusive, so the
  // runtime's dynamic exclusivity checks (a runtime call per access) are switched off.
  @exclusivity(unchecked) var storedDictionary: ThreadDictionary?
  @exclusivity(unchecked) var storedName: String?
  @exclusivity(unchecked) var storedConfiguration: ThreadConfiguration
  @exclusivity(unchecked) var entry: (@Sendable () -> Void)?
  @exclusivity(unchecked) var startPlan: StartPlan?
  @exclusivity(unchecked) var exitHandlers: [(token: UInt64, handler: @Sendable () -> Void)] = []
  /// Set once the thread has ended: exit-request handlers are no longer kept.
  @exclusivity(unchecked) var exitHandlersReleased = false
  @exclusivity(unchecked) var nextHandlerToken: UInt64 = 0
  /// Handlers added with `onExit`, run last-added first as the thread ends.
  @exclusivity(unchecked) var willExitHandlers: [@Sendable () -> Void] = []
  /// Set once the thread has run its `onExit` handlers; later ones run at once.
  @exclusivity(unchecked) var willExitHandlersDone = false
  @exclusivity(unchecked) var storedKernelThreadID: Int32?
  /// Whether this is a `finishBeforeExit` thread still counted in `CriticalThreads.running`:
  /// set as its body is about to run, cleared right before it leaves the count (after its
  /// exit handlers and its dictionary's deinitializers, which may call `exit()` or `fork()`).
  /// Not guarded by the lock: only the thread itself writes and reads it (the exit and fork
  /// handlers read it on the calling thread, where the lock may be held by a thread that
  /// no longer exists in a forked child).
  @exclusivity(unchecked) var isCountedAsCritical = false

  // MARK: Creating thread objects

  /// Creates a thread that will run `body` when ``start()`` is called: the guide's
  /// create-then-start form (`NSThread` `initWithTarget:` + `start`). Until then you may
  /// change ``configuration`` and ``name``; afterwards they are frozen.
  ///
  /// The thread is detached when it starts: it cannot be joined, its resources are reclaimed
  /// when `body` returns, and an error escaping `body` goes to ``detachedErrorHandler``. Use
  /// ``spawn(name:configuration:_:)`` for a joinable thread with a result.
  ///
  /// - Parameters:
  ///   - name: The thread's name; overrides `configuration.name` when not nil.
  ///   - configuration: Stack, priority, affinity and the other settings.
  ///   - body: The entry routine; the thread ends when it returns.
  public init(
    name: String? = nil, configuration: ThreadConfiguration = ThreadConfiguration(),
    _ body: @escaping @Sendable () throws -> Void
  ) {
    id = ThreadRegistry.nextID()
    lockIdentity = 0
    isMainThread = false
    kind = .toolkit
    words = Thread.allocateWords(lifecycle: Lifecycle.notStarted)
    var configuration = configuration
    if let name { configuration.name = name }
    storedConfiguration = configuration
    storedName = configuration.name
    entry = {
      do {
        try body()
      } catch {
        DetachedErrors.report(error, from: Thread.current)
      }
    }
  }

  /// A toolkit thread whose entry reports its own outcome (spawn).
  @usableFromInline
  init(spawnedWith configuration: ThreadConfiguration, entry: @escaping @Sendable () -> Void) {
    id = ThreadRegistry.nextID()
    lockIdentity = tk_thread_identity_reserve()
    isMainThread = false
    kind = .toolkit
    words = Thread.allocateWords(lifecycle: Lifecycle.notStarted)
    storedConfiguration = configuration
    storedName = configuration.name
    self.entry = entry
  }

  /// The object for a running thread the toolkit did not create.
  init(adoptedKernelThreadID tid: Int32) {
    id = ThreadRegistry.nextID()
    lockIdentity = 0
    isMainThread = false
    kind = .adopted
    words = Thread.allocateWords(lifecycle: Lifecycle.running)
    storedConfiguration = ThreadConfiguration()
    storedKernelThreadID = tid
  }

  /// The main thread's object.
  init(mainThreadOfProcess pid: Int32) {
    id = 1
    lockIdentity = 0
    isMainThread = true
    kind = .main
    words = Thread.allocateWords(lifecycle: Lifecycle.running)
    storedConfiguration = ThreadConfiguration()
    storedKernelThreadID = pid
  }

  deinit {
    words.deallocate()
  }

  /// The lock, lifecycle and exit-flag words, initialized.
  private static func allocateWords(lifecycle: UInt32) -> UnsafeMutablePointer<UInt32> {
    let words = UnsafeMutablePointer<UInt32>.allocate(capacity: 3)
    words.initialize(repeating: 0, count: 3)
    words[1] = lifecycle
    return words
  }

  /// Runs `body` holding the thread object's lock (short sections; never user code).
  @inline(__always)
  func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
    try WordLock.withLock(lockWord, body)
  }

  /// The thread's key/value store; see ``ThreadDictionary``. Created on first use (most
  /// threads never touch it) and emptied when the thread ends.
  public var threadDictionary: ThreadDictionary {
    withLock {
      if let storedDictionary { return storedDictionary }
      let dictionary = ThreadDictionary()
      storedDictionary = dictionary
      return dictionary
    }
  }
}
