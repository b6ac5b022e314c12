import CThreadingShims
import Sync
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// The seam between a thread and its run loop: a `Threads.ThreadLocal` holding the thread's
/// run loop; when the thread exits, its destructor makes the loop drop its items (custom
/// sources get `cancel`), and the loop is released. The main thread's run loop is also held
/// globally so any thread can reach it, and lives until the process ends. Creating a thread's
/// run loop registers an exit-request handler on its `Thread` that stops (and so wakes) the
/// loop's runs (and wakes it), so `thread.requestExit()` is noticed by a sleeping run loop.
enum CurrentRunLoopStorage {
  /// Each thread's run loop, nil until first asked for.
  static let slot = ThreadLocal<RunLoop?>(initialValue: { nil }, destructor: { runLoop in runLoop?.threadDidExit() })

  /// The main thread's run loop once created.
  static let mainRunLoop = LockedValue<RunLoop?>(nil)

  /// Whether the calling thread is the process's main thread (its kernel thread id is the
  /// process id). Costs a system call: used only when a run loop is created.
  static var isMainThread: Bool { tk_gettid() == getpid() }

  /// The calling thread's run loop, created on first use.
  static func current() throws(SystemCallError) -> RunLoop {
    if let runLoop = slot.value { return runLoop }
    let runLoop: RunLoop
    if isMainThread {
      runLoop = try main()
      runLoop.claimOwnership()
    } else {
      runLoop = try RunLoop(ownerTag: tk_thread_identity())
    }
    slot.value = runLoop
    ThreadRunLoops.register(runLoop, threadID: Thread.current.id)  // perform(on:)
    // An exit request ends every run, current and later, so
    // `while !Thread.current.isExitRequested { runLoop.run(...) }` finishes promptly. A
    // request made before this point runs the handler at once.
    // Weak: the Thread object may outlive the run loop (released at thread exit).
    Thread.current.addExitRequestHandler { [weak runLoop] in runLoop?.threadExitRequested() }
    return runLoop
  }

  /// The main thread's run loop, created on first use by whichever thread asks first.
  static func main() throws(SystemCallError) -> RunLoop {
    try mainRunLoop.withLock { (mainRunLoop) throws(SystemCallError) -> RunLoop in
      if let mainRunLoop { return mainRunLoop }
      // Owner tag 0: the main thread claims it when it first asks for its current run loop.
      let runLoop = try RunLoop(ownerTag: isMainThread ? tk_thread_identity() : 0)
      mainRunLoop = runLoop
      return runLoop
    }
  }
}
