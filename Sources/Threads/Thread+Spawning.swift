import CThreadingShims
import Sync

#if canImport(Glibc)
  import Glibc
#endif

// Starting threads: the create-then-start form, spawn (joinable), detach, and the code
// that runs first on every new toolkit thread.
extension Thread {
  /// Starts a thread created with ``init(name:configuration:_:)``, detached. Returns once the
  /// thread exists (and, when a ``ThreadConfiguration/relativePriority`` is set, once it has
  /// applied it); the body may not have started yet.
  ///
  /// - Throws: ``ThreadStartError``:
  ///   - ``ThreadStartError/invalidConfiguration(_:)`` when a configuration field is out of
  ///     range (what ``ThreadConfiguration/validate()`` throws); no C call was made.
  ///   - ``ThreadStartError/system(_:)`` when a call failed: `pthread_create` with `EAGAIN`
  ///     (``/Sync/SystemErrorCode/tryAgain``) when the system refuses another thread or
  ///     cannot map its stack, `EPERM` for a real-time policy without permission, `EINVAL`
  ///     for a CPU affinity with no online CPU; `setpriority` with `EACCES` when raising the
  ///     priority needs a permission the process lacks.
  ///
  ///   After a failure the thread object may be reconfigured and started again.
  ///
  /// Calling `start()` twice, or on the main thread, an adopted thread or a spawned thread,
  /// stops the process (misuse). The corresponding C function is `pthread_create`.
  public func start() throws(ThreadStartError) {
    guard kind == .toolkit,
      UInt32.atomicCompareAndSwap(
        expected: Lifecycle.notStarted, desired: Lifecycle.starting, at: lifecycleWord, ordering: .full)
    else {
      reportMisuse(
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
  /// - Throws: ``ThreadStartError`` as described for ``start()``: `.invalidConfiguration`
  ///   for a configuration field out of range, `.system` for a failed call (`EAGAIN` from
  ///   `pthread_create`, the system refusing another thread, is `.system` with the code
  ///   ``/Sync/SystemErrorCode/tryAgain``).
  @inlinable
  public static func spawn<Value: Sendable, Failure: Error>(
    name: String? = nil, configuration: ThreadConfiguration = ThreadConfiguration(),
    _ body: @escaping @Sendable () throws(Failure) -> Value
  ) throws(ThreadStartError) -> JoinableThread<Value, Failure> {
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
  func launchSpawned() throws(ThreadStartError) -> pthread_t {
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
  /// - Throws: ``ThreadStartError`` as described for ``start()``.
  @discardableResult
  public static func detach(
    name: String? = nil, configuration: ThreadConfiguration = ThreadConfiguration(),
    _ body: @escaping @Sendable () throws -> Void
  ) throws(ThreadStartError) -> Thread {
    let thread = Thread(name: name, configuration: configuration, body)
    try thread.start()
    return thread
  }

  /// Creates the POSIX thread. The caller has moved the lifecycle to `starting`.
  private func launch(joinable: Bool) throws(ThreadStartError) -> pthread_t {
    let configuration = withLock { storedConfiguration }
    let resolved: ThreadConfiguration.Resolved
    do throws(ThreadConfigurationError) {
      resolved = try configuration.resolved()
    } catch {
      throw .invalidConfiguration(error)
    }
    do throws(SystemCallError) {
      return try launch(joinable: joinable, configuration: configuration, resolved: resolved)
    } catch {
      throw .system(error)
    }
  }

  /// Creates the POSIX thread with checked values.
  private func launch(
    joinable: Bool, configuration: ThreadConfiguration, resolved: ThreadConfiguration.Resolved
  ) throws(SystemCallError) -> pthread_t {

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
      _ = try shimCall("pthread_attr_setaffinity_np") {
        cpus.withUnsafeBufferPointer { cpus in tk_attr_set_affinity(&attributes, cpus.baseAddress, Int32(cpus.count)) }
      }
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
    do {
      try check(pthread_create(&handle, &attributes, threadEntryPoint, argument), "pthread_create")
    } catch {
      Unmanaged<Thread>.fromOpaque(argument).release()
      if isCritical { CriticalThreads.leave() }
      throw error
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
  func runOnNewThread(_ retainedSelf: Unmanaged<Thread>) {
    // First: the identity the creator reserved (a joiner names this thread by it).
    if lockIdentity != 0 { tk_thread_identity_adopt(lockIdentity) }
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
    }
    var body = entry
    // With no priority to apply nothing can fail from here on, so the closure leaves `entry`
    // in this section (`body` holds it: nothing is released under the lock). Otherwise it
    // leaves once the priority is applied: a thread whose setting failed keeps it.
    if taken?.niceValue == nil { entry = nil }
    WordLock.unlock(lockWord)
    guard let plan = taken, body != nil else { fatalError("Thread internal error: started without a plan or a body") }
    if let kernelName = plan.kernelName {
      shimCallOrDie("pthread_setname_np") { kernelName.withCString { tk_thread_set_name($0) } }
    }
    if let nice = plan.niceValue {
      let result = tk_thread_set_nice(nice)
      if result == 0 {
        withLock {
          storedKernelThreadID = tid
          entry = nil
        }
      }
      plan.handshake?.storeAndWakeAll(result == 0 ? 1 : UInt32(-result) + 2)
      if result != 0 {
        retainedSelf.release()
        return
      }
    }
    isCountedAsCritical = plan.isCritical
    ThreadRegistry.install(retainedSelf)
    UInt32.atomicStore(Lifecycle.running, at: lifecycleWord, ordering: .releasing)

    body?()
    // The body's captures are released here, on this thread, outside any lock: before the
    // exit handlers, before the thread reports finished, and while a `finishBeforeExit`
    // thread still counts (a capture's deinitializer may be the work that must not be cut
    // off, such as a writer that flushes when released).
    body = nil
    runWillExitHandlers()
    releaseExitRequestHandlers()

    let dictionary = withLock { storedDictionary }
    dictionary?.emptyAtThreadEnd()
    UInt32.atomicStore(Lifecycle.finished, at: lifecycleWord, ordering: .releasing)
    if plan.isCritical {
      // Still counted until here, so an exit() from the handlers or the dictionary's
      // deinitializers does not wait for this thread, and a fork() from them leaves the
      // child's count at one, matching the leave() below.
      isCountedAsCritical = false
      CriticalThreads.leave()
    }
  }
}

/// The C entry routine of every toolkit thread.
private func threadEntryPoint(_ argument: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
  guard let argument else { fatalError("Thread internal error: no argument") }
  let retained = Unmanaged<Thread>.fromOpaque(argument)
  retained.takeUnretainedValue().runOnNewThread(retained)
  return nil
}
