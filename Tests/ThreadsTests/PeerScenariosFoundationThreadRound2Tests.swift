import Glibc
import Sync
import Testing
import Threads

// More of swift-corelibs-foundation's TestThread scenarios, written against this toolkit's
// API: names (Unicode, empty, with a NUL, set before start), the default stack, the thread
// dictionary's lifetime, detached threads and exit requests (NSThread's cancel).

@Suite("Foundation scenarios, round 2: threads", .timeLimit(.minutes(3)))
struct PeerFoundationThreadRound2Tests {
  /// TestThread.test_threadName with non-ASCII names: the name is kept whole and the kernel
  /// gets its longest prefix of whole characters within 15 bytes (`Thread.name`,
  /// `ThreadConfiguration.kernelName(for:)`); Foundation on Linux would keep the old name
  /// when `pthread_setname_np` refuses a long one, a documented difference.
  @Test func unicodeNamesAreKeptWholeAndCutOnACharacterBoundaryForTheKernel() throws {
    let worker = try Thread.spawn { () throws(SystemCallError) -> [String?] in
      var seen: [String?] = []
      for name in ["スレッド-worker-name", "🧵🧵🧵🧵x", "cafe\u{301}-cafe\u{301}-cafe\u{301}", "ünï"] {
        Thread.current.name = name
        seen.append(Thread.current.name)
        seen.append(try Thread.currentKernelName())
      }
      return seen
    }
    let names = try worker.join()
    #expect(
      names == [
        "スレッド-worker-name", "スレッド-wo",
        "🧵🧵🧵🧵x", "🧵🧵🧵",
        "cafe\u{301}-cafe\u{301}-cafe\u{301}", "cafe\u{301}-cafe\u{301}-c",
        "ünï", "ünï",
      ])
    #expect(ThreadConfiguration.kernelName(for: "スレッド-worker-name") == "スレッド-wo")
  }

  /// An empty name and nil: the kernel name becomes empty; a name with a NUL is kept whole
  /// and cut at the NUL for the kernel.
  @Test func emptyNilAndNULNamesReachTheKernelSafely() throws {
    let worker = try Thread.spawn { () throws(SystemCallError) -> [String?] in
      var seen: [String?] = []
      Thread.current.name = "before"
      Thread.current.name = ""
      seen.append(Thread.current.name)
      seen.append(try Thread.currentKernelName())
      Thread.current.name = "ab\u{0}cd"
      seen.append(Thread.current.name)
      seen.append(try Thread.currentKernelName())
      Thread.current.name = nil
      seen.append(Thread.current.name)
      seen.append(try Thread.currentKernelName())
      return seen
    }
    let names = try worker.join()
    #expect(names == ["", "", "ab\u{0}cd", "ab", nil, ""])
  }

  /// A long Unicode name given at creation reaches the kernel cut, from the thread's first
  /// instruction.
  @Test func aUnicodeNameGivenAtCreationIsTheKernelNameFromTheStart() throws {
    let name = "größere-worker-thread"
    let worker = try Thread.spawn(name: name) { () throws(SystemCallError) -> [String?] in
      [Thread.current.name, try Thread.currentKernelName()]
    }
    #expect(worker.thread.name == name)
    let seen = try worker.join()
    #expect(seen == [name, ThreadConfiguration.kernelName(for: name)])
    #expect(seen[1]!.utf8.count <= ThreadConfiguration.kernelNameLimit)
  }

  /// NSThread's default `stackSize` stands for the guide's 512 KiB here
  /// (`ThreadConfiguration.defaultStackSize`): a thread started with the default
  /// configuration runs on a stack at least that big.
  @Test func aDefaultThreadRunsOnAtLeastTheGuidesStackSize() throws {
    #expect(ThreadConfiguration().stackSize == ThreadConfiguration.defaultStackSize)
    #expect(ThreadConfiguration.defaultStackSize == 512 * 1024)
    let worker = try Thread.spawn { () throws(SystemCallError) -> Int in
      try Thread.currentStackSize().stackSize
    }
    #expect(try worker.join() >= 512 * 1024)
  }

  /// A guard size is rounded up to whole pages and a negative one is refused.
  @Test func aGuardSizeIsRoundedToPagesAndANegativeOneIsRefused() throws {
    var configuration = ThreadConfiguration()
    configuration.guardSize = 1
    let worker = try Thread.spawn(configuration: configuration) { () throws(SystemCallError) -> Int in
      try Thread.currentStackSize().guardSize
    }
    let guardSize = try worker.join()
    #expect(guardSize >= ThreadConfiguration.pageSize)
    #expect(guardSize % ThreadConfiguration.pageSize == 0)
    var negative = ThreadConfiguration()
    negative.guardSize = -1
    #expect(throws: ThreadConfigurationError.self) { try negative.validate() }
    #expect(throws: ThreadStartError.self) { _ = try Thread.spawn(configuration: negative) {} }
  }

  /// TestThread's detachNewThread: the body runs on a new, non-main thread with the name
  /// given, and the returned object finishes.
  @Test func aDetachedThreadRunsItsBodyOnANewNamedThread() throws {
    let done = Semaphore()
    let seen = LockedValue<[String?]>([])
    let outside = Thread.current
    let thread = try Thread.detach(name: "peer-detached") {
      let current = Thread.current
      seen.withLock {
        $0 = [current.name, current === outside ? "same" : "other", Thread.isMainThread ? "main" : "secondary"]
      }
      done.signal()
    }
    #expect(done.wait(timeout: .seconds(30)))
    #expect(seen.withLock { $0 } == ["peer-detached", "other", "secondary"])
    #expect(thread.name == "peer-detached")
    let giveUp = MonotonicInstant.after(.seconds(30))
    while !thread.isFinished && !giveUp.hasPassed { sched_yield() }
    #expect(thread.isFinished)
    #expect(!thread.isExecuting)
  }

  /// The thread dictionary's values are released when the thread ends (before `join`
  /// returns), not when the last reference to the `Thread` goes, as `ThreadDictionary`
  /// documents; the dictionary is then empty.
  @Test func aThreadsDictionaryIsEmptiedWhenTheThreadEnds() throws {
    final class Tracked: @unchecked Sendable {
      let released: Sync.Semaphore
      init(_ released: Sync.Semaphore) { self.released = released }
      deinit { released.signal() }
    }
    let released = Semaphore()
    let worker = try Thread.spawn { () -> [String] in
      let dictionary = Thread.current.threadDictionary
      dictionary["tracked"] = Tracked(released)
      dictionary["count"] = 1
      dictionary.update { entries in entries["count"] = ((entries["count"] as? Int) ?? 0) + 1 }
      return dictionary.keys.sorted() + ["\(dictionary["count", as: Int.self] ?? -1)"]
    }
    let thread = worker.thread
    #expect(worker.join() == ["count", "tracked", "2"])
    #expect(released.wait(timeout: .zero))
    #expect(thread.threadDictionary.count == 0)
  }

  /// Another thread holding a `Thread` may read and write its dictionary (the guide's
  /// Listing 2-3 exit flag): the worker sees the flag and stops.
  @Test func aFlagSetInAWorkersDictionaryFromOutsideStopsItsLoop() throws {
    let started = Semaphore()
    let worker = try Thread.spawn { () -> Int in
      Thread.current.threadDictionary["ThreadShouldExitNow"] = false
      started.signal()
      var rounds = 0
      while !(Thread.current.threadDictionary["ThreadShouldExitNow", as: Bool.self] ?? true) {
        rounds += 1
        Thread.yield()
      }
      return rounds
    }
    #expect(started.wait(timeout: .seconds(30)))
    #expect(worker.thread.threadDictionary["ThreadShouldExitNow", as: Bool.self] == false)
    worker.thread.threadDictionary["ThreadShouldExitNow"] = true
    #expect(worker.join() >= 0)
  }

  /// NSThread's `cancel` on a finished thread, and on the current thread: the flag is set and
  /// nothing else happens; a handler added after the request runs at once, exactly once.
  @Test func exitRequestsAfterTheEndAndOnTheCurrentThreadOnlySetTheFlag() throws {
    let worker = try Thread.spawn { () -> [Bool] in
      let before = Thread.current.isExitRequested
      Thread.current.requestExit()
      let after = Thread.current.isExitRequested
      return [before, after]
    }
    let thread = worker.thread
    #expect(worker.join() == [false, true])
    #expect(thread.isExitRequested)
    thread.requestExit()
    #expect(thread.isExitRequested)

    let finished = try Thread.spawn { () -> Void in }
    let finishedThread = finished.thread
    finished.join()
    #expect(!finishedThread.isExitRequested)
    let handlerRuns = LockedValue(0)
    finishedThread.requestExit()
    let token = finishedThread.addExitRequestHandler { handlerRuns.withLock { $0 += 1 } }
    finishedThread.requestExit()
    finishedThread.removeExitRequestHandler(token)
    #expect(handlerRuns.withLock { $0 } == 1)
    #expect(finishedThread.isExitRequested)
  }
}

@Suite("Foundation scenarios, round 2: thread dictionary values", .timeLimit(.minutes(3)))
struct PeerFoundationThreadDictionaryRound2Tests {
  /// NSMutableDictionary-like use of `threadDictionary`: assigning nil removes an entry, and
  /// a value replaced, removed or cleared is released outside the dictionary's lock, so its
  /// deinitializer may use the same dictionary (`ThreadDictionary` doc).
  @Test func releasedValuesMayUseTheDictionaryFromTheirDeinit() throws {
    final class Reentrant: @unchecked Sendable {
      let tag: String
      init(_ tag: String) { self.tag = tag }
      deinit {
        let dictionary = Thread.current.threadDictionary
        let seen = dictionary.count
        dictionary["released-\(tag)"] = seen
      }
    }
    let worker = try Thread.spawn { () -> [String] in
      let dictionary = Thread.current.threadDictionary
      dictionary["a"] = Reentrant("replaced")
      dictionary["a"] = Reentrant("removed")
      dictionary["a"] = nil
      dictionary["b"] = Reentrant("updated")
      dictionary.update { $0["b"] = nil }
      let before = dictionary.keys.sorted()
      dictionary["c"] = Reentrant("cleared")
      dictionary.removeAll()
      return before + ["|"] + dictionary.keys.sorted()
    }
    let keys = worker.join()
    #expect(keys == ["released-removed", "released-replaced", "released-updated", "|", "released-cleared"])
  }
}

@Suite("Foundation scenarios, round 2: exit-request handlers calling back", .timeLimit(.minutes(3)))
struct PeerFoundationExitRequestReentryRound2Tests {
  /// An exit-request handler (the toolkit's hook for NSThread's cancel) may use the same
  /// thread's exit-request API: requesting again does nothing more, a handler added from it
  /// runs at once, and removing tokens from it is harmless.
  @Test func anExitRequestHandlerMayCallBackIntoTheSameThread() throws {
    let release = Sync.Semaphore()
    let worker = try Thread.spawn { () -> Bool in
      release.wait()
      return Thread.current.isExitRequested
    }
    let thread = worker.thread
    let log = LockedValue<[String]>([])
    let tokenBox = LockedValue<ExitRequestHandlerToken?>(nil)
    let token = thread.addExitRequestHandler {
      log.withLock { $0.append("first") }
      thread.requestExit()
      let inner = thread.addExitRequestHandler { log.withLock { $0.append("added-late") } }
      thread.removeExitRequestHandler(inner)
      if let other = tokenBox.withLock({ $0 }) { thread.removeExitRequestHandler(other) }
      log.withLock { $0.append("first-done") }
    }
    let second = thread.addExitRequestHandler { log.withLock { $0.append("second") } }
    tokenBox.withLock { $0 = second }
    thread.requestExit()
    thread.requestExit()
    thread.removeExitRequestHandler(token)
    release.signal()
    let sawRequest = worker.join()
    #expect(sawRequest)
    let entries = log.withLock { $0 }
    #expect(entries.prefix(3) == ["first", "added-late", "first-done"])
    #expect(entries.filter { $0 == "first" }.count == 1)
    #expect(entries.filter { $0 == "second" }.count <= 1)
  }
}
