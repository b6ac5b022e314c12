import ProcessTestSupport
import Sync
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

// libuv's thread tests (test-thread.c, test-thread-equal.c, test-thread-name.c,
// test-thread-affinity.c, test-thread-priority.c, test-threadpool.c,
// test-threadpool-cancel.c) translated to the Threads module: `uv_thread_create_ex` is
// `Thread.spawn(configuration:)`, `uv_key_t` is `ThreadLocal`, `uv_thread_self`/
// `uv_thread_equal` are `Thread.current` and `==`, `uv_queue_work`/`uv_cancel` are
// `ThreadPool.run` and task cancellation.

@Suite("libuv scenarios: threads", .timeLimit(.minutes(3)))
struct PeerLibuvThreadTests {
  @Test("thread_create: a spawned thread runs its body with its argument, and join returns after it ran")
  func createAndJoin() throws {
    let argument = 42
    let called = AtomicInteger<Int>(0)
    let worker = try Thread.spawn { () -> Int in
      called.increment(ordering: .relaxed)
      return argument
    }
    #expect(worker.join() == 42)
    #expect(called.load(ordering: .relaxed) == 1)
  }

  @Test("thread_detach: a detached thread runs its body to the end without being joined")
  func detachedThreadRuns() throws {
    let finished = TestLatch()
    let ran = AtomicInteger<Int>(0)
    let worker = try Thread.spawn {
      ran.increment(ordering: .relaxed)
      finished.open()
    }
    let thread = worker.thread
    worker.detach()
    finished.wait()
    #expect(ran.load(ordering: .relaxed) == 1)
    // Its object stays usable after the detach.
    #expect(thread != Thread.current)
  }

  @Test(
    "thread_local_storage: each thread starts without a value, sets its own and clears it; the main thread's is untouched"
  )
  func threadLocalStorage() throws {
    let key = ThreadLocal<String?>(initialValue: { nil })
    #expect(key.value == nil)
    key.value = "main"
    #expect(key.value == "main")
    let results = try spawnAll(0..<2) { index -> Bool in
      var ok = key.value == nil
      key.value = "thread \(index)"
      ok = ok && key.value == "thread \(index)"
      key.value = nil
      ok = ok && key.value == nil
      key.removeValue()
      return ok && !key.hasValue
    }
    #expect(results == [true, true])
    #expect(key.value == "main")
  }

  @Test("thread-local destructors run once per thread that had a value, on that thread, with its last value")
  func threadLocalDestructors() throws {
    let finals = TestBox<[Int]>([])
    let key = ThreadLocal<Int>(
      initialValue: { 0 },
      destructor: { value in finals.update { $0.append(value) } })
    _ = try spawnAll(0..<4) { index in
      if index != 3 { key.value = index + 10 }  // thread 3 never touches it: no destructor
    }
    #expect(finals.value.sorted() == [10, 11, 12])
  }

  @Test("thread_equal: a thread equals itself, not another thread; the main thread's object is stable")
  func threadEquality() throws {
    let mine = Thread.current
    #expect(mine == Thread.current)
    let worker = try Thread.spawn { () -> (Bool, UInt64) in
      let current = Thread.current
      return (current == Thread.current, current.id)
    }
    let workerThread = worker.thread
    let (equalToItself, workerID) = worker.join()
    #expect(equalToItself)
    #expect(workerThread.id == workerID)
    #expect(workerThread != mine)
    #expect(workerThread.id != mine.id)
  }

  @Test("thread_stack_size: a thread without a stack option gets at least the documented default")
  func defaultStackSize() throws {
    let size = try Thread.spawn { () throws(SystemCallError) in try Thread.currentStackSize().stackSize }.join()
    #expect(size >= ThreadConfiguration.defaultStackSize)
  }

  @Test(
    "thread_stack_size_explicit: explicit sizes, aligned or not, give a stack at least that large",
    arguments: [1024 * 1024, 8 * 1024 * 1024, 1_234_567, ThreadConfiguration.minimumStackSize + 42])
  func explicitStackSize(_ requested: Int) throws {
    var configuration = ThreadConfiguration()
    configuration.stackSize = requested
    let size = try Thread.spawn(configuration: configuration) { () throws(SystemCallError) in
      try Thread.currentStackSize().stackSize
    }.join()
    #expect(size >= requested)
    // ThreadSanitizer's pthread_create raises a stack smaller than its thread-local data
    // plus 128 KiB to exactly that sum, which is no page multiple (and glibc's stack cache
    // may hand such a stack on to a later thread), so the alignment holds only without it.
    if !isRunningUnderThreadSanitizer {
      #expect(size % ThreadConfiguration.pageSize == 0)
    }
  }

  @Test(
    "thread_stack_size_explicit: sizes below the minimum (0, 42, unaligned) are refused, not rounded up as libuv does",
    arguments: [0, 42, ThreadConfiguration.minimumStackSize - 42, ThreadConfiguration.minimumStackSize / 2 - 42])
  func tooSmallStackSize(_ requested: Int) {
    var configuration = ThreadConfiguration()
    configuration.stackSize = requested
    #expect(
      throws: ThreadStartError.invalidConfiguration(
        .stackSizeTooSmall(requested, minimum: ThreadConfiguration.minimumStackSize))
    ) {
      try Thread.spawn(configuration: configuration) {}.join()
    }
  }

  @Test("a stack too large to map fails thread creation with EAGAIN, and the next thread starts normally")
  func unmappableStackSize() throws {
    var configuration = ThreadConfiguration()
    configuration.stackSize = 1 << 50  // beyond the 47-bit user address space
    #expect {
      try Thread.spawn(configuration: configuration) {}.join()
    } throws: { error in
      (error as? ThreadStartError)?.systemError?.code == .tryAgain
    }
    #expect(try Thread.spawn { 1 }.join() == 1)
  }

  @Test("thread_name: a long name is kept whole by Thread.name and cut to 15 bytes for the kernel")
  func longThreadName() throws {
    let name = "a-thread-name-longer-than-the-kernel-keeps"
    let (full, kernel) = try Thread.spawn(name: name) { () throws(SystemCallError) in
      (Thread.current.name, try Thread.currentKernelName())
    }.join()
    #expect(full == name)
    #expect(kernel == String(name.prefix(ThreadConfiguration.kernelNameLimit)))
  }

  @Test("thread_affinity: a thread pinned to one CPU reads that CPU back; a thread re-pins itself and widens again")
  func affinity() throws {
    let allowed = try Thread.currentCPUAffinity()
    try #require(!allowed.isEmpty)
    let cpu = allowed.last!
    var configuration = ThreadConfiguration()
    configuration.cpuAffinity = [cpu]
    // (libuv's `uv_thread_getcpu` has no counterpart: the mask is what the toolkit reports.)
    let mask = try Thread.spawn(configuration: configuration) { () throws(SystemCallError) in
      try Thread.currentCPUAffinity()
    }.join()
    #expect(mask == [cpu])
    // Set from inside the thread, then widened again.
    let (pinned, restored) = try Thread.spawn { () throws(any Error) in
      try Thread.setCurrentCPUAffinity([allowed.first!])
      let pinned = try Thread.currentCPUAffinity()
      try Thread.setCurrentCPUAffinity(allowed)
      return (pinned, try Thread.currentCPUAffinity())
    }.join()
    #expect(pinned == [allowed.first!])
    #expect(restored == allowed)
  }

  @Test("thread_affinity: an empty or out-of-range CPU list is refused without changing the mask")
  func invalidAffinity() throws {
    let refused = try Thread.spawn { () throws(SystemCallError) -> (Bool, Bool, Bool) in
      let before = try Thread.currentCPUAffinity()
      var empty = false
      var outOfRange = false
      do throws(ThreadSettingError) { try Thread.setCurrentCPUAffinity([]) } catch {
        empty = error == .invalidValue(.cpuAffinityEmpty)
      }
      do throws(ThreadSettingError) { try Thread.setCurrentCPUAffinity([4096]) } catch {
        if case .invalidValue(.cpuAffinityOutOfRange(cpu: 4096, allowed: _)) = error { outOfRange = true }
      }
      return (empty, outOfRange, try Thread.currentCPUAffinity() == before)
    }.join()
    #expect(refused == (true, true, true))
  }

  @Test("thread_priority: a thread lowers its own priority and reads the new value back")
  func priority() throws {
    let niceBefore = try Thread.currentNiceValue()
    let (lowered, lowest, outOfRange) = try Thread.spawn { () throws(any Error) -> (Double, Double, Bool) in
      try Thread.setCurrentRelativePriority(0.25)
      let lowered = try Thread.currentRelativePriority()
      try Thread.setCurrentRelativePriority(0.0)
      let lowest = try Thread.currentRelativePriority()
      var refused = false
      do throws(ThreadSettingError) { try Thread.setCurrentRelativePriority(1.5) } catch {
        if case .invalidValue(.relativePriorityOutOfRange(1.5, allowed: _)) = error { refused = true }
      }
      return (lowered, lowest, refused)
    }.join()
    #expect(lowered == 0.25)
    #expect(lowest == ThreadConfiguration.relativePriority(forNiceValue: 19))
    #expect(outOfRange)
    // The setting is per thread: the test thread's priority is unchanged.
    #expect(try Thread.currentNiceValue() == niceBefore)
  }
}

@Suite("libuv scenarios: thread pool", .timeLimit(.minutes(3)))
struct PeerLibuvThreadPoolTests {
  @Test("threadpool_queue_work_simple: the work runs on a pool thread and its result reaches the submitter")
  func queueWorkSimple() async throws {
    let pool = makePool("uv-simple")
    let submitter = Thread.current.id
    let (value, worker) = try await pool.run { (6 * 7, Thread.current.id) }
    #expect(value == 42)
    #expect(worker != submitter)
    await pool.shutDown()
  }

  @Test(
    "threadpool_cancel_work: with every thread busy, each queued job cancelled gets .cancelled and never runs; the running ones finish"
  )
  func cancelQueuedWhileSaturated() async throws {
    let threads = 2
    let pool = makePool("uv-cancel", maximumThreads: threads)
    let release = TestLatch()
    let ranQueued = AtomicInteger<Int>(0)
    var blockers: [Task<Int, any Error>] = []
    for index in 0..<threads {
      let blocker: Task<Int, any Error> = Task {
        try await pool.run { () -> Int in
          block(on: release)
          return index
        }
      }
      blockers.append(blocker)
    }
    #expect(await eventually { pool.statistics.runningJobs == threads })
    var queued: [Task<Void, any Error>] = []
    for _ in 0..<6 {
      let task: Task<Void, any Error> = Task {
        try await pool.run { () -> Void in _ = ranQueued.increment(ordering: .relaxed) }
      }
      queued.append(task)
    }
    #expect(await eventually { pool.statistics.queuedJobs == 6 })
    // Cancel in an order other than submission order.
    for index in [3, 0, 5, 1, 4, 2] { queued[index].cancel() }
    for task in queued {
      let outcome = await task.result
      #expect(isCancellation(outcome), "expected .cancelled, got \(outcome)")
    }
    #expect(pool.statistics.queuedJobs == 0)
    #expect(pool.statistics.runningJobs == threads)
    // Running work cannot be cancelled: its task still gets the value.
    for blocker in blockers { blocker.cancel() }
    release.open()
    var values: [Int] = []
    for blocker in blockers { values.append(try await blocker.value) }
    #expect(values == Array(0..<threads))
    // The pool still works after the cancellations.
    #expect(try await pool.run { 7 } == 7)
    await pool.shutDown()
    #expect(ranQueued.load(ordering: .relaxed) == 0)
  }

  @Test(
    "threadpool_cancel_when_busy: racing cancellation against the start, each job either ran once and returned its value or never ran and was cancelled"
  )
  func cancelRacingTheStart() async throws {
    let pool = makePool("uv-race", maximumThreads: 2)
    let jobs = isRunningUnderSanitizer ? 100 : 1_000
    let runs = UnsafeMutableBufferPointer<Int>.allocate(capacity: jobs)
    runs.initialize(repeating: 0)
    defer { runs.deallocate() }
    nonisolated(unsafe) let perJob = runs
    let lock = Lock()
    var tasks: [Task<Int, any Error>] = []
    for index in 0..<jobs {
      let task: Task<Int, any Error> = Task {
        try await pool.run { () -> Int in
          lock.withLock { perJob[index] += 1 }
          return index
        }
      }
      tasks.append(task)
      if index % 2 == 0 { task.cancel() }
    }
    var cancelled = 0
    for (index, task) in tasks.enumerated() {
      switch await task.result {
      case .success(let value):
        #expect(value == index)
        #expect(lock.withLock { perJob[index] } == 1)
      case .failure(let error):
        #expect((error as? ThreadPoolError<Never>).map { if case .cancelled = $0 { true } else { false } } == true)
        #expect(lock.withLock { perJob[index] } == 0, "job \(index) was cancelled but its closure ran")
        cancelled += 1
      }
    }
    #expect(cancelled <= jobs / 2)
    await pool.shutDown()
    let statistics = pool.statistics
    #expect(statistics.queuedJobs == 0 && statistics.runningJobs == 0 && statistics.waitingJobs == 0)
  }
}
