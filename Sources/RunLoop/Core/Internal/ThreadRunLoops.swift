import Sync
import Threads

/// Which run loop each toolkit thread has, so a perform request can name a ``Thread``.
/// Filled by the run loop's creation on its own thread (`CurrentRunLoopStorage.current()`,
/// a one-line hook); entries are weak, so a thread's ended run loop disappears.
enum ThreadRunLoops {
  private struct Entry {
    weak var runLoop: RunLoop?
  }

  private static let entries = LockedValue<[UInt64: Entry]>([:])

  /// Records `runLoop` as the run loop of the thread with `threadID`.
  static func register(_ runLoop: RunLoop, threadID: UInt64) {
    entries.withLock { entries in
      if entries.count > 64 { entries = entries.filter { $0.value.runLoop != nil } }
      entries[threadID] = Entry(runLoop: runLoop)
    }
  }

  /// The run loop of `thread`, if it has one that is still alive. The main thread's is made
  /// here on first use; nil when its descriptors cannot be made (`EMFILE`, `ENOMEM`): the
  /// perform requests then throw `noRunLoop` rather than stop the process.
  static func runLoop(of thread: Thread) -> RunLoop? {
    if thread.isMainThread { return try? CurrentRunLoopStorage.main() }
    return entries.withLock { $0[thread.id]?.runLoop }
  }
}
