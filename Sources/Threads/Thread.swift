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

  let kind: Kind

  /// One small block for the words below (a `WordLock`, the lifecycle, the exit flag):
  /// one allocation instead of a lock object each keeps thread creation cheap.
  private let words: UnsafeMutablePointer<UInt32>
  /// The lock guarding the stored properties below.
  private var lockWord: UnsafeMutablePointer<UInt32> { words }
  /// `Lifecycle` values; atomic. Nobody sleeps on it (joiners use `pthread_join`).
  private var lifecycleWord: UnsafeMutablePointer<UInt32> { words + 1 }
  /// 0 or 1; set once, under the lock, read lock-free.
  private var exitWord: UnsafeMutablePointer<UInt32> { words + 2 }

  // Guarded by the lock (`withLock`). The lock already makes every access exclusive, so the
  // runtime's dynamic exclusivity checks (a runtime call per access) are switched off.
  @exclusivity(unchecked) private var storedDictionary: ThreadDictionary?
  @exclusivity(unchecked) private var storedName: String?
  @exclusivity(unchecked) private var storedConfiguration: ThreadConfiguration
  @exclusivity(unchecked) private var entry: (@Sendable () -> Void)?
  @exclusivity(unchecked) private var startPlan: StartPlan?
  @exclusivity(unchecked) private var exitHandlers: [(token: UInt64, handler: @Sendable () -> Void)] = []
  @exclusivity(unchecked) private var nextHandlerToken: UInt64 = 0
  /// Handlers added with `onExit`, run last-added first as the thread ends.
  @exclusivity(unchecked) private var willExitHandlers: [@Sendable () -> Void] = []
  /// Set once the thread has run its `onExit` handlers; later ones run at once.
  @exclusivity(unchecked) private var willExitHandlersDone = false
  @exclusivity(unchecked) private var storedKernelThreadID: Int32?
  @exclusivity(unchecked) private var criticalBodyRunning = false

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
    isMainThread = false
    kind = .adopted
    words = Thread.allocateWords(lifecycle: Lifecycle.running)
    storedConfiguration = ThreadConfiguration()
    storedKernelThreadID = tid
  }

  /// The main thread's object.
  private init(mainThreadOfProcess pid: Int32) {
    id = 1
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
    let words = UnsafeMutablePointer<UInt32>.allocate(capacity: 4)
    words.initialize(repeating: 0, count: 4)
    words[1] = lifecycle
    return words
  }

  /// Runs `body` holding the thread object's lock (short sections; never user code).
  @inline(__always)
  private func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
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

  // MARK: The current and main threads

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

  // MARK: State

  /// The thread's name: the full name given in the configuration or set later (not the
  /// kernel's truncated copy, which ``currentKernelName()`` reads). Nil when none was set;
  /// the main thread and adopted threads start with nil.
  ///
  /// Setting is allowed before the thread starts, or from the thread itself (which also
  /// renames it in the kernel: at most 15 bytes, cut on a character boundary as
  /// ``ThreadConfiguration/kernelName(for:)`` describes). Setting a running thread's name
  /// from another thread stops the process (misuse: the target may be ending, and its
  /// kernel name cannot be changed safely then). The corresponding C function is
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
        threadsMisuse(
          "Thread", "name set on a running thread from another thread (set it before start, or on the thread itself)")
      }
      withLock { storedName = newValue }
      let kernelName = ThreadConfiguration.kernelName(for: newValue ?? "")
      checkOrDie(kernelName.withCString { tk_thread_set_name($0) }, "pthread_setname_np")
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
          threadsMisuse("Thread", "configuration changed after the thread started")
        }
        storedConfiguration = newValue
        storedName = newValue.name
      }
    }
  }

  /// The kernel's id for this thread (what `gettid()` returns on it, shown by `top -H` and
  /// `/proc/<pid>/task`), once the thread is running; nil before. Kernel ids are reused after
  /// a thread ends; use ``id`` as a stable key.
  public var kernelThreadID: Int32? {
    withLock { storedKernelThreadID }
  }

  /// Whether the thread is running its body (always true for the main and adopted threads
  /// until they end).
  public var isExecuting: Bool { UInt32.atomicLoad(at: lifecycleWord, ordering: .acquiring) == Lifecycle.running }

  /// Whether the thread's body has returned (or thrown).
  public var isFinished: Bool { UInt32.atomicLoad(at: lifecycleWord, ordering: .acquiring) == Lifecycle.finished }

  /// Whether this thread is inside the body of a `finishBeforeExit` thread (exit handler).
  var isRunningCriticalBody: Bool {
    withLock { criticalBodyRunning }
  }

  /// ``isRunningCriticalBody`` read by this thread itself, without the lock: only the thread
  /// itself writes the flag, so its own reads need no lock. The fork handler relies on this:
  /// in a forked child the lock may be held by a thread that does not exist there.
  var isRunningCriticalBodyAsSeenByItself: Bool {
    criticalBodyRunning
  }

  // MARK: Exit requests (Listing 2-3)

  /// Asks the thread to finish: sets its exit-request flag, then runs the handlers added with
  /// ``addExitRequestHandler(_:)`` on the calling thread (a run loop uses one to wake up).
  /// Callable from any thread, any number of times; only the first call runs the handlers.
  /// Does not interrupt the thread: it notices at its next ``isExitRequested`` check.
  public func requestExit() {
    let handlers: [@Sendable () -> Void] = withLock {
      if UInt32.atomicLoad(at: exitWord, ordering: .relaxed) != 0 { return [] }
      UInt32.atomicStore(1, at: exitWord, ordering: .releasing)
      return exitHandlers.map(\.handler)
    }
    for handler in handlers { handler() }
  }

  /// Whether ``requestExit()`` has been called: one acquiring load, cheap enough to check in
  /// every iteration of a work loop. Everything the requester wrote before requesting is
  /// visible once this returns true.
  ///
  /// ```swift
  /// while moreWork && !Thread.current.isExitRequested { doSomeWork() }
  /// ```
  public var isExitRequested: Bool {
    UInt32.atomicLoad(at: exitWord, ordering: .acquiring) != 0
  }

  /// Adds a handler that ``requestExit()`` runs, on the requesting thread, right after setting
  /// the flag. If the exit was already requested, runs `handler` at once on the calling
  /// thread. Keep handlers short and non-blocking (they run inside someone else's call);
  /// typical use is waking the thread's run loop.
  ///
  /// A handler removed with ``removeExitRequestHandler(_:)`` while a request is running on
  /// another thread may still run once.
  @discardableResult
  public func addExitRequestHandler(_ handler: @escaping @Sendable () -> Void) -> ExitRequestHandlerToken {
    let (token, runNow) = withLock { () -> (UInt64, Bool) in
      nextHandlerToken += 1
      if UInt32.atomicLoad(at: exitWord, ordering: .relaxed) != 0 { return (nextHandlerToken, true) }
      exitHandlers.append((nextHandlerToken, handler))
      return (nextHandlerToken, false)
    }
    if runNow { handler() }
    return ExitRequestHandlerToken(value: token)
  }

  /// Removes a handler added with ``addExitRequestHandler(_:)``. Removing an unknown or
  /// already removed token does nothing.
  public func removeExitRequestHandler(_ token: ExitRequestHandlerToken) {
    // The removed closure is released after the lock, in case its captures' deinitializers
    // use this thread object.
    let removed = withLock { () -> [(token: UInt64, handler: @Sendable () -> Void)] in
      let removed = exitHandlers.filter { $0.token == token.value }
      exitHandlers.removeAll { $0.token == token.value }
      return removed
    }
    _ = removed
  }

  // MARK: Exit handlers

  /// Adds `handler` to run on this thread when it is about to exit: after its entry routine
  /// has returned (or thrown), while ``current``, ``threadDictionary`` and ``name`` are still
  /// usable. Handlers run last-added first; a handler added by a running handler runs too.
  /// The guide's `NSThreadWillExitNotification`, scoped to one thread (GLib's and libuv's
  /// thread-exit callbacks play the same role).
  ///
  /// When handlers run, by kind of thread:
  /// - Toolkit threads (``spawn(name:configuration:_:)``, ``detach(name:configuration:_:)``,
  ///   ``start()``): right after the body, before the thread is finished;
  ///   ``JoinableThread/join()`` returns only after they have run.
  /// - Threads created by other code: from the thread-specific-data destructor of
  ///   ``current`` when the thread ends (it must end through `pthread_exit` or by returning
  ///   from its start routine, which is how every POSIX thread ends).
  /// - The main thread: only if it ends through `pthread_exit`. Process exit (`exit`,
  ///   returning from `main`) runs no thread's exit handlers; nor does it wait for threads
  ///   other than ``ThreadConfiguration/finishBeforeExit`` ones.
  ///
  /// Add handlers from the thread itself (`Thread.current.onExit { ... }`), or on a thread
  /// made with ``init(name:configuration:_:)`` before ``start()``. Adding one to a running
  /// thread from another thread stops the process (misuse: that thread may be past its exit
  /// handlers already). Added on a thread that has already run its exit handlers (from
  /// another thread-specific-data destructor), `handler` runs at once.
  ///
  /// A handler is not removable; it is released after it has run (or with the thread
  /// object, if the thread never runs).
  ///
  /// ```swift
  /// let connection = try Connection.open()
  /// Thread.current.onExit { connection.close() }
  /// ```
  public func onExit(_ handler: @escaping @Sendable () -> Void) {
    let isCurrent = pthread_getspecific(ThreadRegistry.currentThreadKey) == Unmanaged.passUnretained(self).toOpaque()
    // Under the lock, so a thread being started cannot run its handlers before this one is
    // in the list: `start()` moves the lifecycle on before the new thread can take the lock.
    let outcome: WillExitRegistration = withLock {
      let notStarted = UInt32.atomicLoad(at: lifecycleWord, ordering: .acquiring) == Lifecycle.notStarted
      guard isCurrent || (kind == .toolkit && notStarted) else { return .misuse }
      if willExitHandlersDone { return .runNow }
      willExitHandlers.append(handler)
      return .added
    }
    switch outcome {
    case .added: return
    case .runNow: handler()
    case .misuse:
      threadsMisuse(
        "Thread", "onExit called on a running thread from another thread (call it on the thread itself, or before start)")
    }
  }

  /// What `onExit` did with a handler.
  private enum WillExitRegistration {
    case added, runNow, misuse
  }

  /// Runs the `onExit` handlers on the exiting thread, last added first, each outside the
  /// lock, until none is left (a handler may add another).
  private func runWillExitHandlers() {
    while true {
      let next: (@Sendable () -> Void)? = withLock {
        if let handler = willExitHandlers.popLast() { return handler }
        willExitHandlersDone = true
        return nil
      }
      guard let next else { return }
      next()
    }
  }

  // MARK: Starting

  /// Starts a thread created with ``init(name:configuration:_:)``, detached. Returns once the
  /// thread exists (and, when a ``ThreadConfiguration/relativePriority`` is set, once it has
  /// applied it); the body may not have started yet.
  ///
  /// - Throws: `SystemCallError` for an invalid configuration (`EINVAL`), when the system
  ///   refuses another thread or cannot map its stack (`EAGAIN` from `pthread_create`), or
  ///   the priority needs a permission the process lacks (`EPERM` from
  ///   `pthread_create` for real-time policies, `EACCES` from `setpriority`). After a failure
  ///   the thread object may be reconfigured and started again.
  ///
  /// Calling `start()` twice, or on the main thread, an adopted thread or a spawned thread,
  /// stops the process (misuse). The corresponding C function is `pthread_create`.
  public func start() throws(SystemCallError) {
    guard kind == .toolkit,
      UInt32.atomicCompareAndSwap(
        expected: Lifecycle.notStarted, desired: Lifecycle.starting, at: lifecycleWord, ordering: .full)
    else {
      threadsMisuse(
        "Thread", "start() called on a thread that is already started (or not created by init(name:configuration:_:))")
    }
    do {
      _ = try launch(joinable: false)
    } catch {
      UInt32.atomicStore(Lifecycle.notStarted, at: lifecycleWord, ordering: .releasing)
      throw error
    }
  }

  /// Creates and starts a joinable thread running `body`, and returns its handle. Join it
  /// (``JoinableThread/join()``) to get the value `body` returns, or the error it throws, or
  /// detach it (``JoinableThread/detach()``).
  ///
  /// ```swift
  /// let worker = try Thread.spawn(name: "parser") { () throws(ParseError) -> Document in
  ///     try parse(data)
  /// }
  /// let document = try worker.join()      // rethrows ParseError
  /// ```
  ///
  /// - Parameters:
  ///   - name: The thread's name; overrides `configuration.name` when not nil.
  ///   - configuration: Stack, priority, affinity and the other settings.
  ///   - body: The entry routine; the thread ends when it returns.
  /// - Throws: `SystemCallError` as described for ``start()``.
  @inlinable
  public static func spawn<Value: Sendable, Failure: Error>(
    name: String? = nil, configuration: ThreadConfiguration = ThreadConfiguration(),
    _ body: @escaping @Sendable () throws(Failure) -> Value
  ) throws(SystemCallError) -> JoinableThread<Value, Failure> {
    // Inlinable so the generic parts (the result box, the handle) are specialized in the
    // caller: unspecialized, their metadata lookups cost a measurable share of a thread start.
    var configuration = configuration
    if let name { configuration.name = name }
    let outcome = JoinOutcome<Value, Failure>()
    let thread = Thread(spawnedWith: configuration) {
      do throws(Failure) {
        outcome.complete(.success(try body()))
      } catch {
        outcome.complete(.failure(error))
      }
    }
    let handle = try thread.launchSpawned()
    return JoinableThread(thread: thread, handle: handle, outcome: outcome)
  }

  /// Starts a thread made by `init(spawnedWith:entry:)`, joinable.
  @usableFromInline
  func launchSpawned() throws(SystemCallError) -> pthread_t {
    UInt32.atomicStore(Lifecycle.starting, at: lifecycleWord, ordering: .relaxed)  // not yet shared
    return try launch(joinable: true)
  }

  /// Creates and starts a detached thread running `body` (the guide's
  /// `detachNewThreadSelector` and Listing 2-1). Its resources are reclaimed when `body`
  /// returns; an error escaping `body` goes to ``detachedErrorHandler``. At process exit a
  /// detached thread may be cut off mid-work unless its configuration sets
  /// ``ThreadConfiguration/finishBeforeExit``.
  ///
  /// - Returns: The thread's object (for its name, dictionary and exit requests).
  /// - Throws: `SystemCallError` as described for ``start()``.
  @discardableResult
  public static func detach(
    name: String? = nil, configuration: ThreadConfiguration = ThreadConfiguration(),
    _ body: @escaping @Sendable () throws -> Void
  ) throws(SystemCallError) -> Thread {
    let thread = Thread(name: name, configuration: configuration, body)
    try thread.start()
    return thread
  }

  /// Creates the POSIX thread. The caller has moved the lifecycle to `starting`.
  private func launch(joinable: Bool) throws(SystemCallError) -> pthread_t {
    let configuration = withLock { storedConfiguration }
    let resolved = try configuration.resolved()

    var attributes = pthread_attr_t()
    try check(pthread_attr_init(&attributes), "pthread_attr_init")
    defer { checkOrDie(pthread_attr_destroy(&attributes), "pthread_attr_destroy") }
    try check(pthread_attr_setstacksize(&attributes, resolved.stackSize), "pthread_attr_setstacksize")
    if let guardSize = resolved.guardSize {
      try check(pthread_attr_setguardsize(&attributes, guardSize), "pthread_attr_setguardsize")
    }
    if !joinable {
      try check(
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED)), "pthread_attr_setdetachstate")
    }
    if let policy = resolved.schedulingPolicy {
      let (cPolicy, cPriority) = policy.policyAndPriority
      try check(
        pthread_attr_setinheritsched(&attributes, Int32(PTHREAD_EXPLICIT_SCHED)), "pthread_attr_setinheritsched")
      try check(pthread_attr_setschedpolicy(&attributes, cPolicy), "pthread_attr_setschedpolicy")
      var parameters = sched_param(sched_priority: cPriority)
      try check(pthread_attr_setschedparam(&attributes, &parameters), "pthread_attr_setschedparam")
    }
    if let cpus = resolved.cpuAffinity {
      let result = cpus.withUnsafeBufferPointer { cpus in
        tk_attr_set_affinity(&attributes, cpus.baseAddress, Int32(cpus.count))
      }
      try check(result, "pthread_attr_setaffinity_np")
    }

    let handshake = resolved.niceValue == nil ? nil : FutexWord(0)
    let isCritical = configuration.finishBeforeExit
    withLock {
      startPlan = StartPlan(
        kernelName: resolved.kernelName, niceValue: resolved.niceValue, handshake: handshake, isCritical: isCritical)
    }
    if isCritical { CriticalThreads.enter() }
    ThreadRegistry.markMultiThreaded()

    // The new thread owns this retain: it becomes its `Thread.current` value.
    let argument = Unmanaged.passRetained(self).toOpaque()
    var handle = pthread_t()
    let result = pthread_create(&handle, &attributes, threadEntryPoint, argument)
    if result != 0 {
      Unmanaged<Thread>.fromOpaque(argument).release()
      if isCritical { CriticalThreads.leave() }
      throw SystemCallError(call: "pthread_create", code: SystemErrorCode(rawValue: result))
    }
    if let handshake {
      handshake.wait(whileEqualTo: 0)
      let outcome = handshake.load()
      if outcome != 1 {
        // The thread applied nothing else and is ending without running the body.
        if joinable { checkOrDie(pthread_join(handle, nil), "pthread_join") }
        if isCritical { CriticalThreads.leave() }
        throw SystemCallError(call: "setpriority", code: SystemErrorCode(rawValue: Int32(outcome - 2)))
      }
    }
    return handle
  }

  /// Runs on the new thread: applies the start plan, runs the body, ends the thread.
  fileprivate func runOnNewThread(_ retainedSelf: Unmanaged<Thread>) {
    let tid = ThreadRegistry.currentKernelThreadID()
    // One lock section on the common path (no priority to apply). Values released here
    // (the plan) are dropped after the lock is released, never under it.
    // Explicit lock/unlock rather than `withLock`: returning the closure through the generic
    // result would re-abstract it, two heap allocations on every thread start.
    WordLock.lock(lockWord)
    let taken = startPlan
    startPlan = nil
    if let taken, taken.niceValue == nil {
      storedKernelThreadID = tid
      criticalBodyRunning = taken.isCritical
    }
    let body = entry
    WordLock.unlock(lockWord)
    guard let plan = taken, let body else { fatalError("Thread internal error: started without a plan or a body") }
    if let kernelName = plan.kernelName {
      checkOrDie(kernelName.withCString { tk_thread_set_name($0) }, "pthread_setname_np")
    }
    if let nice = plan.niceValue {
      let result = tk_thread_set_nice(nice)
      if result == 0 {
        withLock {
          storedKernelThreadID = tid
          criticalBodyRunning = plan.isCritical
        }
      }
      plan.handshake?.storeAndWakeAll(result == 0 ? 1 : UInt32(result) + 2)
      if result != 0 {
        retainedSelf.release()
        return
      }
    }
    ThreadRegistry.install(retainedSelf)
    UInt32.atomicStore(Lifecycle.running, at: lifecycleWord, ordering: .releasing)

    body()
    runWillExitHandlers()

    // `body` (a local) still holds the entry closure, so clearing `entry` under the lock
    // runs no deinitializer there; the captures are released when this function returns.
    let dictionary = withLock { () -> ThreadDictionary? in
      entry = nil
      criticalBodyRunning = false
      return storedDictionary
    }
    dictionary?.removeAll()
    UInt32.atomicStore(Lifecycle.finished, at: lifecycleWord, ordering: .releasing)
    if plan.isCritical { CriticalThreads.leave() }
  }

  /// Called by the current-thread key's destructor as a thread exits, with the key's value
  /// (this object, retained), which the C library has already cleared.
  func adoptedThreadDidEnd(currentValue: UnsafeMutableRawPointer) {
    guard kind != .toolkit else { return }  // a toolkit thread ran its handlers after its body
    // `Thread.current` must stay this object while the exit handlers run (else it would
    // adopt the thread anew): set the key again for them, and clear it after, so the C
    // library needs no further destructor round for it.
    checkOrDie(pthread_setspecific(ThreadRegistry.currentThreadKey, currentValue), "pthread_setspecific")
    runWillExitHandlers()
    checkOrDie(pthread_setspecific(ThreadRegistry.currentThreadKey, nil), "pthread_setspecific")
    withLock { storedDictionary }?.removeAll()
    UInt32.atomicStore(Lifecycle.finished, at: lifecycleWord, ordering: .releasing)
  }

  // MARK: Detached errors

  /// Receives an error that escaped a detached thread's body, with that thread.
  public typealias DetachedErrorHandler = @Sendable (_ error: any Error, _ thread: Thread) -> Void

  /// What happens to an error escaping a detached thread (``detach(name:configuration:_:)``,
  /// ``start()``, or a ``JoinableThread`` detached before its body threw). Runs on the
  /// thread that threw (or on the detaching thread, if the error was already stored). The
  /// default writes `Thread "<name>" (id N): error escaped a detached thread: <error>` to
  /// standard error. Set it early, once, from any thread.
  public static var detachedErrorHandler: DetachedErrorHandler {
    get { DetachedErrors.box.lock.withLock { DetachedErrors.box.handler } }
    set {
      let old = DetachedErrors.box.lock.withLock { () -> DetachedErrorHandler in
        let old = DetachedErrors.box.handler
        DetachedErrors.box.handler = newValue
        return old
      }
      _ = old  // released after the lock
    }
  }

  /// Restores the default ``detachedErrorHandler`` (print to standard error).
  public static func resetDetachedErrorHandler() {
    detachedErrorHandler = DetachedErrors.printToStandardError
  }
}

/// The C entry routine of every toolkit thread.
private func threadEntryPoint(_ argument: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
  guard let argument else { fatalError("Thread internal error: no argument") }
  let retained = Unmanaged<Thread>.fromOpaque(argument)
  retained.takeUnretainedValue().runOnNewThread(retained)
  return nil
}
