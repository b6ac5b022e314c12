import Sync
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// Runs `body` on a new joinable toolkit thread and returns its handle.
func runLoopExampleSpawn(_ body: @escaping @Sendable () -> Void) -> JoinableThread<Void, Never> {
  do {
    return try Thread.spawn { () throws(Never) in body() }
  } catch {
    fatalError("Thread.spawn failed: \(error)")
  }
}
