import RunLoop
import RunLoopConcurrency
import Sync
import TestSupport
import Threads

/// A run-loop thread for async tests: `RunLoopThread.start` and `stop` block, so they are
/// called from these synchronous helpers.
final class LoopThread: @unchecked Sendable {
  // @unchecked: `handle` is touched only under `lock`.
  let runLoop: RunLoop
  let thread: Thread
  private let lock = Lock()
  private var handle: RunLoopThread?

  init(name: String = "executor-test") {
    let started: RunLoopThread
    do {
      started = try RunLoopThread.start(name: name)
    } catch {
      fatalError("RunLoopThread.start: \(error)")
    }
    runLoop = started.runLoop
    thread = started.thread
    handle = consume started
  }

  /// Stops and joins the thread.
  func stop() {
    lock.lock()
    let taken = handle.take()
    lock.unlock()
    taken?.stop()
  }

  /// Runs `body` on the loop's thread and waits for it.
  func onLoop(_ body: @escaping @Sendable () -> Void) {
    do {
      try runLoop.performAndWait(body)
    } catch {
      fatalError("performAndWait: \(error)")
    }
  }
}

/// An actor whose code runs on a run loop's thread: the one-line pin.
actor PinnedCounter {
  let executor: RunLoopExecutor
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  let expectedThread: Thread
  private(set) var value = 0
  private(set) var wrongThreadCalls = 0
  private(set) var order: [Int] = []
  private var seen: [UInt8] = []

  init(on loop: LoopThread) {
    executor = RunLoopExecutor(runLoop: loop.runLoop)
    expectedThread = loop.thread
  }

  func increment() -> Int {
    if Thread.current !== expectedThread || executor.isIsolatingCurrentContext() != true { wrongThreadCalls += 1 }
    value += 1
    return value
  }

  func prepare(slots: Int) { seen = [UInt8](repeating: 0, count: slots) }

  func mark(_ slot: Int) {
    if Thread.current !== expectedThread { wrongThreadCalls += 1 }
    seen[slot] &+= 1
  }

  /// Slots marked other than exactly once.
  func slotsNotMarkedOnce() -> Int { seen.count(where: { $0 != 1 }) }

  func record(_ index: Int) { order.append(index) }

  /// Starts one task per priority, each isolated to this actor, in the order given: their
  /// first jobs are enqueued on this executor while this job still runs.
  func startRecorders(_ priorities: [TaskPriority]) -> [Task<Void, Never>] {
    priorities.enumerated().map { index, priority in
      Task(priority: priority) { self.record(index) }
    }
  }
}

extension TestThread {
  /// Waits for the thread to end without holding a cooperative thread (see `offPool`): the
  /// join for async tests. Stops the process when the thread was joined already.
  func joined() async {
    await takeHandle().value()
  }
}

/// Waits for `latch` on the calling thread; async tests call it through `offPool`, which
/// blocks a thread of its own instead of a cooperative one.
func blockingWait(_ latch: Latch) { latch.wait() }

/// Starts a task that makes an iterator of `sequence` and waits in its `next()`, and returns
/// the task once it is about to call `next()` (the wait for that blocks no cooperative
/// thread). For tests of how a waiting `next()` ends; await the result with
/// `valueUnlessHung`.
func taskWaitingInNext<Sequence: AsyncSequence & Sendable>(_ sequence: Sequence) async -> Task<Sequence.Element?, Never>
where Sequence.Element: Sendable, Sequence.Failure == Never {
  let waiting = Latch(count: 1)
  let waiter = Task { () -> Sequence.Element? in
    var iterator = sequence.makeAsyncIterator()
    waiting.countDown()
    return await iterator.next(isolation: nil)
  }
  await offPool { blockingWait(waiting) }
  return waiter
}

/// A thread whose run loop exists but does not run until `release()`: work queued on it
/// waits without any callback blocking the loop (so no stall is reported). After the release
/// the thread runs its loop until `stop()`, which joins it.
final class HeldLoop: @unchecked Sendable {
  // @unchecked: `handle` is touched only under `lock`; the rest is immutable or atomic.
  let runLoop: RunLoop
  let thread: Thread
  private let go = Latch(count: 1)
  private let done = AtomicBool(false)
  private let lock = Lock()
  private var handle: JoinableThread<Void, Never>?

  init(name: String = "held-loop") {
    let ready = Latch(count: 1)
    let slot = LockedValue<RunLoop?>(nil)
    let go = go
    let done = done
    let spawned: JoinableThread<Void, Never>
    do {
      spawned = try Thread.spawn(name: name) { () throws(Never) in
        // A source that never fires keeps the default mode from ending runs as `finished`.
        RunLoop.current.add(RunLoopSource(perform: {}), forMode: .default)
        slot.withLock { $0 = RunLoop.current }
        ready.countDown()
        go.wait()
        while !done.load(ordering: .acquiring) { _ = RunLoop.current.run(mode: .default, timeout: .seconds(1)) }
      }
    } catch {
      fatalError("Thread.spawn: \(error)")
    }
    ready.wait()
    runLoop = slot.withLock { $0 }!
    thread = spawned.thread
    handle = consume spawned
  }

  /// Lets the thread run its loop (once; later calls do nothing).
  func release() {
    lock.withLock { if !go.isOpen { go.countDown() } }
  }

  /// Runs `body` on the loop's thread and waits for it (the loop must be released).
  func onLoop(_ body: @escaping @Sendable () -> Void) {
    do {
      try runLoop.performAndWait(body)
    } catch {
      fatalError("performAndWait: \(error)")
    }
  }

  /// Ends the loop's runs and joins the thread (releasing it first if needed).
  func stop() {
    release()
    done.store(true, ordering: .releasing)
    runLoop.wakeUp()
    lock.lock()
    let taken = handle.take()
    lock.unlock()
    taken?.join()
  }
}
