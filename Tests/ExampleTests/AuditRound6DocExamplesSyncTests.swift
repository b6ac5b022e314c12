// The code examples of Sync's doc comments (and of its DocC articles), compiled and run: each
// test keeps its example's lines as the doc comment shows them, with the names the example
// leaves to the reader (`work()`, `Config`, `download()`, ...) defined around it, and asserts
// what the surrounding text claims.
import Sync
import TestSupport
import Testing
import Threads

#if canImport(Glibc)
  import Glibc
#endif

@Suite("Sync doc-comment examples", .timeLimit(.minutes(3)))
struct AuditRound6DocExamplesSyncTests {
  @Test("AtomicBool: a stop flag polled between work items")
  func atomicBoolStopFlag() {
    let stop = AtomicBool(false)
    let items = AtomicInteger<Int>(0)
    let started = Latch(count: 1)
    @Sendable func work() {
      if items.increment(ordering: .relaxed) == 1 { started.countDown() }
    }
    let worker = TestThread.spawn {
      // Worker: poll between work items.
      while !stop.load(ordering: .relaxed) { work() }
    }
    started.wait()
    // Controller:
    stop.store(true, ordering: .relaxed)
    worker.join()
    #expect(items.load(ordering: .relaxed) >= 1)
  }

  @Test("AtomicInteger: a statistic and a published flag")
  func atomicIntegerOrderings() {
    let hits = AtomicInteger<Int64>(0)
    hits.increment(ordering: .relaxed)  // a statistic: no ordering needed
    let ready = AtomicInteger<UInt32>(0)
    ready.store(1, ordering: .releasing)  // publish what was written before
    #expect(hits.load(ordering: .relaxed) == 1)
    #expect(ready.load(ordering: .acquiring) == 1)
  }

  final class Config: Sendable {
    static let defaults = Config(reloadedFrom: "defaults")
    let source: String
    init(reloadedFrom path: String) { source = path }
  }

  @Test("AtomicReference: publish a reloaded configuration")
  func atomicReferencePublish() {
    let path = "/etc/app.conf"
    let current = AtomicReference<Config>(Config.defaults)
    // Readers, on any thread: a retained reference, safe to use after a concurrent store.
    let config = current.load()
    // Writer: everything initialized in the new object is visible to a reader that loads it.
    current.store(Config(reloadedFrom: path))
    #expect(config?.source == "defaults")
    #expect(current.load()?.source == path)
  }

  @Test("AtomicInteger.wait(whileEqualTo:) and wakeAll(): a waiter sleeps until the value changes")
  func atomicWaitAndWake() {
    let state = AtomicInteger<UInt32>(0)
    let waiter = TestThread.spawn {
      // Waiter: sleep until state is no longer 0. Wake-ups can be spurious: loop on the condition.
      while state.load(ordering: .acquiring) == 0 {
        state.wait(whileEqualTo: 0)
      }
    }
    // Another thread: publish, then wake.
    state.store(1, ordering: .releasing)
    state.wakeAll()
    waiter.join()
    #expect(state.load(ordering: .relaxed) == 1)
  }

  final class ConditionState: @unchecked Sendable {
    // @unchecked: `work` is protected by `condition`.
    let condition = Condition()
    var work = 0  // protected by `condition`
    var queue: [Int] = []  // protected by `condition`
  }

  @Test("Condition: Listings 4-3 and 4-4, a consumer waits for the producer's work")
  func conditionProducerConsumer() {
    let state = ConditionState()
    let consumer = TestThread.spawn {
      let condition = state.condition
      // consumer (Listing 4-3)
      condition.withLock {
        condition.wait(until: { state.work > 0 })
        state.work -= 1
      }
    }
    let condition = state.condition
    // producer (Listing 4-4): change the state and signal while holding the lock
    condition.withLock {
      state.work += 1
      condition.signal()
    }
    consumer.join()
    #expect(condition.withLock { state.work } == 0)
  }

  @Test("Condition.wait(until:): take an item once the queue is not empty")
  func conditionWaitUntil() {
    let state = ConditionState()
    let taken = Box<Int?>(nil)
    let consumer = TestThread.spawn {
      let condition = state.condition
      var item = 0
      condition.withLock {
        condition.wait(until: { !state.queue.isEmpty })
        item = state.queue.removeFirst()
      }
      taken.value = item
    }
    state.condition.withLock {
      state.queue.append(7)
      state.condition.signal()
    }
    consumer.join()
    #expect(taken.value == 7)
  }

  final class ConditionLockState: @unchecked Sendable {
    // @unchecked: `queue` is protected by `queueLock`.
    static let noData = 0
    static let hasData = 1
    let queueLock = ConditionLock(condition: noData)
    var queue: [Int] = []
  }

  @Test("ConditionLock: the guide's producer and consumer")
  func conditionLockProducerConsumer() {
    let state = ConditionLockState()
    let noData = ConditionLockState.noData
    let hasData = ConditionLockState.hasData
    let consumed = Box<Int?>(nil)
    let consumer = TestThread.spawn {
      let queueLock = state.queueLock
      // consumer
      queueLock.lock(whenCondition: hasData)
      let item = state.queue.removeFirst()
      queueLock.unlock(withCondition: state.queue.isEmpty ? noData : hasData)
      consumed.value = item
    }
    let queueLock = state.queueLock
    let item = 42
    // producer
    queueLock.lock()
    state.queue.append(item)
    queueLock.unlock(withCondition: hasData)
    consumer.join()
    #expect(consumed.value == 42)
    #expect(queueLock.condition == noData)
  }

  final class ReadyState: @unchecked Sendable {
    // @unchecked: `isReady` is protected by `mutex`.
    let mutex = Lock()
    let ready = ConditionVariable()
    var isReady = false  // protected by `mutex`
  }

  @Test("ConditionVariable: Listings 4-5 and 4-6, paired with a Lock")
  func conditionVariableWithLock() {
    let state = ReadyState()
    let waiter = TestThread.spawn {
      let mutex = state.mutex
      let ready = state.ready
      // waiter (Listing 4-5)
      mutex.withLock {
        ready.wait(mutex, until: { state.isReady })
      }
    }
    let mutex = state.mutex
    let ready = state.ready
    // signaller (Listing 4-6)
    mutex.withLock {
      state.isReady = true
      ready.signal()
    }
    waiter.join()
    #expect(mutex.withLock { state.isReady })
  }

  @Test("Diagnostics: switched on in code, findings to a custom handler", .runsExitTests)
  func diagnosticsInCode() async {
    // The settings are process-wide: they are changed in a child process of their own.
    await #expect(processExitsWith: .success) {
      struct Logger { func warning(_ line: String) { _ = line } }
      let log = Logger()
      // Or in code:
      Diagnostics.stallThreshold = .milliseconds(50)
      Diagnostics.setMode(.report, for: .stalls)
      Diagnostics.reportHandler = { finding in log.warning("\(finding)") }
      precondition(Diagnostics.stallThreshold == .milliseconds(50))
      precondition(Diagnostics.mode(of: .stalls) == .report)
    }
  }

  @Test("Latch: wait until every worker has finished")
  func latchWaitsForWorkers() {
    final class Worker: Sendable {
      let ran = AtomicBool(false)
      func run() { ran.store(true, ordering: .relaxed) }
    }
    let workers = [Worker(), Worker(), Worker()]
    let threads = LockedValue([TestThread]())
    func start(_ body: @escaping @Sendable () -> Void) {
      let thread = TestThread.spawn(body)
      threads.withLock { $0.append(thread) }
    }
    let done = Latch(count: workers.count)
    for worker in workers {
      start {
        worker.run()
        done.countDown()
      }
    }
    done.wait()  // all workers have finished `run()`
    #expect(workers.allSatisfy { $0.ran.load(ordering: .relaxed) })
    for thread in threads.withLock({ $0 }) { thread.join() }
  }

  @Test("Lazy: computed once, on first use")
  func lazyComputedOnce() {
    let calls = AtomicInteger<Int>(0)
    @Sendable func computePrimes(below limit: Int) -> [Int] {
      calls.increment(ordering: .relaxed)
      return (2..<limit).filter { n in !(2..<n).contains { n % $0 == 0 } }
    }
    let primes = Lazy { computePrimes(below: 100) }
    // on any thread, any number of times:
    let count = primes.value.count
    #expect(count == 25)
    #expect(primes.value.count == 25)
    #expect(calls.load(ordering: .relaxed) == 1)
  }

  @Test("Lock: withLock and the guide's tryLock")
  func lockWithLockAndTryLock() {
    let lock = Lock()
    var total = 0  // protected by `lock`
    lock.withLock { total += 1 }

    if lock.tryLock() {  // the guide's NSLock `try` loop
      defer { lock.unlock() }
      total += 1
    }
    #expect(total == 2)
  }

  struct Job: Sendable { let id: Int }

  @Test("LockedValue: withLock, withLockIfAvailable and withLock(when:)")
  func lockedValueExample() {
    let hits = LockedValue([String: Int]())
    hits.withLock { $0["index.html", default: 0] += 1 }
    let snapshot = hits.withLock { $0 }

    // A non-blocking attempt: nil when another thread holds it.
    var printed: Int?
    if let count = hits.withLockIfAvailable({ $0.count }) { printed = count }

    // Wait until there is something to take, then take it, atomically.
    let jobs = LockedValue([Job]())
    let producer = TestThread.spawn { jobs.withLock { $0.append(Job(id: 3)) } }
    let next = jobs.withLock(when: { !$0.isEmpty }) { $0.removeFirst() }
    producer.join()

    #expect(snapshot == ["index.html": 1])
    #expect(printed == 1)
    #expect(next.id == 3)
  }

  final class Account: @unchecked Sendable {
    // @unchecked: `balance` is protected by the lock passed to `transfer`.
    var balance = 100
    func transfer(_ amount: Int, using lock: some Locking) {
      lock.withLock { balance -= amount }
    }
  }

  @Test("Locking: one function for any lock of the family")
  func lockingGeneric() {
    let account = Account()
    account.transfer(10, using: Lock())
    account.transfer(10, using: RecursiveLock())
    account.transfer(10, using: SpinLock())
    #expect(account.balance == 70)
  }

  // ThreadSanitizer does not model standalone fences: it would report the payload's plain
  // write and read as a race although the barriers order them.
  @Test(
    "MemoryBarrier.release(): the payload is visible before the flag", .enabled(if: !isRunningUnderThreadSanitizer))
  func memoryBarrierPublish() {
    final class Shared: @unchecked Sendable {
      // @unchecked: `payload` is written before `ready` is released and read after it is seen.
      var payload = 0
      let ready = AtomicInteger<Int32>(0)
    }
    let shared = Shared()
    let reader = TestThread.spawn {
      while shared.ready.load(ordering: .relaxed) == 0 { Thread.yield() }
      MemoryBarrier.acquire()
      #expect(shared.payload == 99)
    }
    func compute() -> Int { 99 }
    shared.payload = compute()  // plain write
    MemoryBarrier.release()  // payload is visible before ready
    shared.ready.store(1, ordering: .relaxed)
    reader.join()
  }

  @Test("MisuseChecking.mode: set in code, printed as \"checked\"", .runsExitTests)
  func misuseCheckingModeInCode() async {
    await #expect(processExitsWith: .success) {
      // First thing in main, before any lock exists:
      MisuseChecking.mode = .checked
      precondition("\(MisuseChecking.mode)" == "checked", "printed \(MisuseChecking.mode)")
    }
  }

  @Test("MonotonicInstant: a deadline for lock(before:)")
  func monotonicDeadline() {
    let mutex = Lock()
    var updated = false
    let deadline = MonotonicInstant.now + .milliseconds(250)
    if mutex.lock(before: deadline) {
      defer { mutex.unlock() }
      updated = true
    }
    #expect(updated)
  }

  @Test("Once: the table is built once")
  func onceBuildsOnce() {
    final class Tables: @unchecked Sendable {
      // @unchecked: `table` is written once, inside `setup.run`.
      let setup = Once()
      var table: [Int] = []
      var builds = 0
      func buildTable() -> [Int] {
        builds += 1
        return [1, 2, 3]
      }
      func sharedTable() -> [Int] {
        setup.run { table = buildTable() }
        return table
      }
    }
    let tables = Tables()
    #expect(tables.sharedTable() == [1, 2, 3])
    #expect(tables.sharedTable() == [1, 2, 3])
    #expect(tables.builds == 1)
  }

  @Test("PriorityInheritanceLock: a real-time thread and a normal-priority one share it")
  func priorityInheritanceExample() throws {
    let mixed = AtomicInteger<Int>(0)
    @Sendable func mixNextBuffer() { mixed.increment(ordering: .relaxed) }
    func updateMixerSettings() { mixed.increment(ordering: .relaxed) }
    let lock = try PriorityInheritanceLock()
    var configuration = ThreadConfiguration()
    configuration.schedulingPolicy = .fifo(priority: 10)
    // `let audio = try Thread.spawn(configuration: configuration) { ... }`, falling back to no
    // thread where the process may not use a real-time policy.
    var audio = Self.spawnUnlessNotPermitted(configuration) {
      lock.withLock { mixNextBuffer() }  // a normal-priority holder is boosted to 10
    }
    lock.withLock { updateMixerSettings() }  // this thread may run at normal priority
    if let started = audio.take() {
      started.join()
      #expect(mixed.load(ordering: .relaxed) == 2)
    } else {
      #expect(mixed.load(ordering: .relaxed) == 1)
    }
  }

  /// A started thread, or nil when the system refuses its real-time policy (`EPERM`).
  static func spawnUnlessNotPermitted(
    _ configuration: ThreadConfiguration, _ body: @escaping @Sendable () -> Void
  ) -> JoinableThread<Void, Never>? {
    do throws(ThreadStartError) {
      return try Thread.spawn(configuration: configuration, body)
    } catch {
      #expect(error.systemError?.code == .operationNotPermitted)
      return nil
    }
  }

  @Test("ProcessLock: tryLockBreakingStaleLock, then unlock")
  func processLockExample() throws {
    let path = "/tmp/audit6-doc-example-\(getpid()).lock"
    defer { unlink(path) }
    var worked = false
    func doExclusiveWork() { worked = true }
    let lock = try ProcessLock(path: path)
    if try lock.tryLockBreakingStaleLock() {
      defer { try? lock.unlock() }
      doExclusiveWork()
    }  // else a live process holds it: retry later
    #expect(worked)
    #expect(try lock.owner() == nil)
  }

  @Test("ProcessLockError: catch .notOwner after the lock was broken")
  func processLockErrorNotOwner() throws {
    let path = "/tmp/audit6-doc-example-broken-\(getpid()).lock"
    defer { unlink(path) }
    let lock = try ProcessLock(path: path)
    #expect(try lock.tryLock())
    #expect(try ProcessLock(path: path).breakLock())
    var caught: ProcessLockError?
    do throws(ProcessLockError) {
      try lock.unlock()
    } catch .notOwner {
      // another process broke the lock while we held it: the work just done may have
      // overlapped with someone else's
      caught = .notOwner
    } catch {
      print(error)
    }
    #expect(caught == .notOwner)
  }

  @Test("ReadWriteLock: withReadLock and withWriteLock")
  func readWriteLockExample() {
    let lock = ReadWriteLock()
    var table: [String: Int] = [:]  // protected by `lock`
    let hits = lock.withReadLock { table["a"] }
    lock.withWriteLock { table["a", default: 0] += 1 }
    #expect(hits == nil)
    #expect(lock.withReadLock { table["a"] } == 1)
  }

  @Test("RecursiveLock: re-acquired by a recursive call")
  func recursiveLockExample() {
    let lock = RecursiveLock()
    var depth = 0
    func countDown(_ value: Int) {
      lock.withLock {
        depth += 1
        if value > 0 { countDown(value - 1) }  // re-acquires without deadlock
      }
    }
    countDown(5)
    #expect(depth == 6)
  }

  @Test("Semaphore: at most four at a time")
  func semaphoreSlots() {
    let slots = Semaphore(value: 4)
    let running = AtomicInteger<Int>(0)
    let most = AtomicInteger<Int>(0)
    @Sendable func download() {
      let now = running.increment(ordering: .full)
      var seen = most.load(ordering: .relaxed)
      while now > seen {
        let exchanged = most.compareExchange(expected: seen, desired: now, ordering: .full)
        if exchanged.exchanged { break }
        seen = exchanged.original
      }
      Thread.yield()
      running.decrement(ordering: .full)
    }
    runThreads(8) { _ in
      slots.wait()
      defer { slots.signal() }
      download()  // at most four at a time
    }
    #expect(most.load(ordering: .relaxed) <= 4)
    #expect(most.load(ordering: .relaxed) >= 1)
  }

  @Test("SharedMemoryLock and SharedMemoryCondition: a flag set by a producer")
  func sharedMemoryConditionExample() throws {
    let region = try SharedMemoryRegion(sharedAnonymousByteCount: 256)
    _ = try SharedMemoryLock.initialize(at: region.address + 64)
    _ = SharedMemoryCondition.initialize(at: region.address + 128)
    let address = Int(bitPattern: region.address)
    let consumer = TestThread.spawn {
      do {
        let base = UnsafeMutableRawPointer(bitPattern: address)!
        let ready = base.bindMemory(to: Int32.self, capacity: 1)
        let lock = SharedMemoryLock(existingAt: base + 64)
        let changed = SharedMemoryCondition(existingAt: base + 128)
        // Consumer (any process):
        if try lock.lock() == .previousOwnerDied {
          // check the data, then
          lock.markConsistent()
        }
        while ready.pointee == 0 {
          if try changed.wait(lock) == .previousOwnerDied {
            // check
            lock.markConsistent()
          }
        }
        lock.unlock()
      } catch {
        Issue.record("consumer: \(error)")
      }
    }
    // Shared: a flag at offset 0, the lock at 64, the condition at 128.
    let ready = region.address.bindMemory(to: Int32.self, capacity: 1)
    let lock = SharedMemoryLock(existingAt: region.address + 64)
    let changed = SharedMemoryCondition(existingAt: region.address + 128)
    // Producer (another process):
    _ = try lock.lock()
    ready.pointee = 1
    changed.broadcast()
    lock.unlock()
    consumer.join()
    #expect(ready.pointee == 1)
  }

  @Test("SharedMemoryLock: a counter in a shared region")
  func sharedMemoryLockExample() throws {
    func recount() -> Int { 0 }
    // The shared memory: counter at offset 0, the lock at offset 64.
    let region = try SharedMemoryRegion(sharedAnonymousByteCount: 128)  // before fork()
    let counter = region.address.bindMemory(to: Int.self, capacity: 1)
    let lock = try SharedMemoryLock.initialize(at: region.address + 64)

    // In any process that maps the region:
    switch try lock.lock() {
    case .acquired: break
    case .previousOwnerDied:
      counter.pointee = recount()  // repair what the dead holder may have left
      lock.markConsistent()
    }
    counter.pointee += 1
    lock.unlock()
    #expect(counter.pointee == 1)
  }

  @Test("SharedMemoryLockError: the typed catch compiles and the lock works")
  func sharedMemoryLockErrorExample() throws {
    let region = try SharedMemoryRegion(sharedAnonymousByteCount: 128)
    let lock = try SharedMemoryLock.initialize(at: region.address)
    var acquired: SharedMemoryLock.Acquisition?
    do throws(SharedMemoryLockError) {
      let acquisition = try lock.lock()
      acquired = acquisition
      lock.unlock()
    } catch .notRecoverable {
      // an earlier owner died and its successor gave up on the data: re-create the
      // shared state (a new region, a new lock) and tell the other processes
    } catch {
      print(error)
    }
    #expect(acquired == .acquired)
  }

  @Test("SharedMemoryRegion: a lock, a condition and data laid out in one region")
  func sharedMemoryRegionLayout() throws {
    let region = try SharedMemoryRegion(sharedAnonymousByteCount: 4096)
    let lock = try SharedMemoryLock.initialize(at: region.address)
    let condition = SharedMemoryCondition.initialize(at: region.address + SharedMemoryLock.byteCount)
    let data = region.address + SharedMemoryLock.byteCount + SharedMemoryCondition.byteCount
    #expect(try lock.lock() == .acquired)
    #expect(try condition.wait(lock, timeout: .milliseconds(1)).timedOut)
    lock.unlock()
    #expect(data - region.address == 128)
  }

  @Test("synchronized(self): a lock per object")
  func synchronizedPerObject() {
    final class Cart: @unchecked Sendable {
      // @unchecked: `items` is protected by `synchronized(self)`.
      var items: [Int] = []
      func addItem(_ item: Int) {
        synchronized(self) { items.append(item) }
      }
    }
    let cart = Cart()
    runThreads(4) { index in cart.addItem(index) }
    #expect(cart.items.sorted() == [0, 1, 2, 3])
  }

  @Test("SystemCallError and SystemErrorCode: a failed ProcessLock told apart by its code")
  func systemCallErrorCode() {
    var other: SystemCallError?
    var readOnly = false
    do {
      let lock = try ProcessLock(path: "/sys/audit6-cannot-create.lock")
      _ = try lock.tryLock()
    } catch let error where error.code == .readOnlyFileSystem {
      // the lock's directory is on a read-only file system
      readOnly = true
    } catch {
      other = error
    }
    var denied = false
    do {
      let lock = try ProcessLock(path: "/sys/audit6-cannot-create.lock")
      _ = try lock.tryLock()
    } catch let error where error.code == .permissionDenied {
      // the directory is not writable by this process
      denied = true
    } catch {
      other = error
    }
    #expect(readOnly || denied, "\(String(describing: other))")
  }

  @Test("ThreadBarrier: exactly one thread per step publishes")
  func threadBarrierSteps() {
    let workers = 3
    let steps = 4
    let published = LockedValue([Int]())
    let computed = AtomicInteger<Int>(0)
    @Sendable func compute(_ step: Int) { computed.increment(ordering: .relaxed) }
    @Sendable func publish(_ step: Int) { published.withLock { $0.append(step) } }
    let barrier = ThreadBarrier(parties: workers)
    runThreads(workers) { _ in
      // on each worker thread:
      for step in 0..<steps {
        compute(step)
        if barrier.arriveAndWait() { publish(step) }  // exactly one thread per step
      }
    }
    #expect(published.withLock { $0 } == [0, 1, 2, 3])
    #expect(computed.load(ordering: .relaxed) == workers * steps)
  }

  @Test("Choosing a lock: a deadline, else report busy")
  func choosingALockDeadline() {
    let mutex = Lock()
    var outcome = ""
    func update() { outcome = "updated" }
    func reportBusy() { outcome = "busy" }
    let deadline = MonotonicInstant.now + .milliseconds(250)
    if mutex.lock(before: deadline) {
      defer { mutex.unlock() }
      update()
    } else {
      reportBusy()
    }
    #expect(outcome == "updated")
  }
}
