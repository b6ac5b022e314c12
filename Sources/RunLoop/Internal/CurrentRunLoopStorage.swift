import CThreadingShims
import Sync

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// The seam between a thread and its run loop: a pthread key whose value is a retained
/// `RunLoop`, released (after the loop drops its items) by the key's destructor when the
/// thread exits. The main thread's run loop is also held globally so any thread can reach it,
/// and lives until the process ends.
enum CurrentRunLoopStorage {
  /// The key; created once, on first use.
  static let key: pthread_key_t = {
    var key = pthread_key_t()
    let result = pthread_key_create(&key) { pointer in
      guard let pointer else { return }
      let runLoop = Unmanaged<RunLoop>.fromOpaque(pointer).takeRetainedValue()
      runLoop.threadDidExit()
    }
    if result != 0 {
      fatalError("RunLoop: \(SystemCallError(call: "pthread_key_create", errno: result))")
    }
    return key
  }()

  /// Protects `mainRunLoop`.
  static let mainLock = Mutex()
  /// The main thread's run loop once created. Protected by `mainLock`.
  nonisolated(unsafe) static var mainRunLoop: RunLoop?

  /// Whether the calling thread is the process's main thread (its kernel thread id is the
  /// process id). Costs a system call: used only when a run loop is created.
  static var isMainThread: Bool { tk_gettid() == getpid() }

  /// The calling thread's run loop, created on first use.
  static func current() throws(SystemCallError) -> RunLoop {
    if let pointer = pthread_getspecific(key) {
      return Unmanaged<RunLoop>.fromOpaque(pointer).takeUnretainedValue()
    }
    let runLoop: RunLoop
    if isMainThread {
      runLoop = try main()
      runLoop.claimOwnership()
    } else {
      runLoop = try RunLoop(ownerTag: tk_thread_self())
    }
    let result = pthread_setspecific(key, Unmanaged.passRetained(runLoop).toOpaque())
    if result != 0 {
      Unmanaged.passUnretained(runLoop).release()
      throw SystemCallError(call: "pthread_setspecific", errno: result)
    }
    return runLoop
  }

  /// The main thread's run loop, created on first use by whichever thread asks first.
  static func main() throws(SystemCallError) -> RunLoop {
    mainLock.lock()
    defer { mainLock.unlock() }
    if let mainRunLoop { return mainRunLoop }
    // Owner tag 0: the main thread claims it when it first asks for its current run loop.
    let runLoop = try RunLoop(ownerTag: isMainThread ? tk_thread_self() : 0)
    mainRunLoop = runLoop
    return runLoop
  }
}
