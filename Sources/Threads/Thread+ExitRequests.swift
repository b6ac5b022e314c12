import Sync

// Exit requests (the guide's Listing 2-3): ask a thread to finish, and let it notice.
extension Thread {
  /// Asks the thread to finish: sets its exit-request flag, then runs the handlers added with
  /// ``addExitRequestHandler(_:)`` on the calling thread (a run loop uses one to wake up) and
  /// releases them. Callable from any thread, any number of times; only the first call runs
  /// the handlers. Does not interrupt the thread: it notices at its next ``isExitRequested``
  /// check.
  public func requestExit() {
    var handlers: [(token: UInt64, handler: @Sendable () -> Void)] = withLock {
      if UInt32.atomicLoad(at: exitWord, ordering: .relaxed) != 0 { return [] }
      UInt32.atomicStore(1, at: exitWord, ordering: .releasing)
      // They run once: moved out, so this call releases them (after the lock) once run.
      let taken = exitHandlers
      exitHandlers = []
      return taken
    }
    for entry in handlers { entry.handler() }
    handlers.removeAll()
  }

  /// Releases the exit-request handlers as the thread ends (on the ending thread, after its
  /// body and `onExit` handlers, without the lock): nothing is left to ask to exit, and a
  /// handler that captures the thread object (the guide's Listing 2-3 pattern) or its run
  /// loop must not keep them alive. Handlers added later are not kept.
  func releaseExitRequestHandlers() {
    var released = withLock { () -> [(token: UInt64, handler: @Sendable () -> Void)] in
      exitHandlersReleased = true
      let taken = exitHandlers
      exitHandlers = []
      return taken
    }
    released.removeAll()
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
  /// The thread object keeps the handler (and what it captures) until it has run, is removed,
  /// or the thread ends, whichever comes first: a handler may capture the thread object or
  /// its run loop without keeping them alive after the thread ended. A handler added to a
  /// thread that has ended (without a pending exit request) is not kept and never runs.
  ///
  /// A handler removed with ``removeExitRequestHandler(_:)`` while a request is running on
  /// another thread may still run once.
  @discardableResult
  public func addExitRequestHandler(_ handler: @escaping @Sendable () -> Void) -> ExitRequestHandlerToken {
    let (token, runNow) = withLock { () -> (UInt64, Bool) in
      nextHandlerToken += 1
      if UInt32.atomicLoad(at: exitWord, ordering: .relaxed) != 0 { return (nextHandlerToken, true) }
      if !exitHandlersReleased { exitHandlers.append((nextHandlerToken, handler)) }
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
}
