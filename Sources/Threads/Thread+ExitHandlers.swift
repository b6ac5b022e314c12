import Sync

#if canImport(Glibc)
  import Glibc
#endif

// Exit handlers: code that runs on a thread as it is about to exit.
extension Thread {
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
  /// made with ``init(name:configuration:_:)`` before ``start()``. Adding one from another
  /// thread to a thread that has started (running or ended) stops the process (misuse: that
  /// thread may be past its exit handlers already). Added on a thread that has already run its exit handlers (from
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
    // `current`, not the key's raw value: a thread that never asked for its object yet (the
    // main thread adding a handler to `Thread.main` first thing) is adopted here.
    let isCurrent = Thread.current === self
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
      reportMisuse(
        "Thread",
        "onExit called from another thread on a thread that has started (running or ended; call it on the thread itself, or before start)"
      )
    }
  }

  /// What `onExit` did with a handler.
  private enum WillExitRegistration {
    case added, runNow, misuse
  }

  /// Runs the `onExit` handlers on the exiting thread, last added first, each outside the
  /// lock, until none is left (a handler may add another).
  func runWillExitHandlers() {
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

  /// Called by the current-thread key's destructor as a thread exits, with the key's value
  /// (this object, retained), which the C library has already cleared.
  func adoptedThreadDidEnd(currentValue: UnsafeMutableRawPointer) {
    guard kind != .toolkit else { return }  // a toolkit thread ran its handlers after its body
    // `Thread.current` must stay this object while the exit handlers run and the
    // dictionary's values are released (else it would adopt the thread anew), as on a
    // toolkit thread: set the key again for them, and clear it after, so the C library
    // needs no further destructor round for it.
    checkOrDie(pthread_setspecific(ThreadRegistry.currentThreadKey, currentValue), "pthread_setspecific")
    runWillExitHandlers()
    releaseExitRequestHandlers()
    withLock { storedDictionary }?.emptyAtThreadEnd()
    checkOrDie(pthread_setspecific(ThreadRegistry.currentThreadKey, nil), "pthread_setspecific")
    UInt32.atomicStore(Lifecycle.finished, at: lifecycleWord, ordering: .releasing)
  }
}
