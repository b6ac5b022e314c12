import RunLoop
import Sync

/// The jobs a ``RunLoopExecutor`` holds: one ring of `UnownedJob` per priority (0...255),
/// and a 256-bit map of the non-empty rings, so the highest priority is found with at most
/// four word tests and a leading-zero count.
///
/// Not thread-safe: the executor's lock guards every call. A ring's storage is allocated
/// the first time its priority is used and doubles when it is full; it is never shrunk, so
/// once the queue has held its peak number of jobs a push and a pop allocate nothing (the
/// steady state). The storage is plain words (`UnownedJob` is one trivially copied pointer):
/// growing it moves no Swift object and runs no user code.
struct JobQueue: ~Copyable {
  /// One ring per priority. `storage` is nil until the priority is first used.
  private struct Ring {
    var storage: UnsafeMutablePointer<UnownedJob>? = nil
    var capacity = 0  // a power of two, or 0
    var head = 0  // index of the oldest job
    var count = 0
  }

  /// The most jobs an executor runs in one pass of its loop: a backlog is spread over
  /// several passes, so the loop's timers and other sources are served between them and no
  /// single callback runs for long; the price is one extra pass per 512 jobs.
  static let jobsPerPass = 512

  /// How long one pass runs jobs at most (checked every 16 jobs, so the clock is read once
  /// per 16 jobs): also bounds a pass whose jobs are slow, or whose thread waits for the
  /// queue's lock while many threads enqueue.
  static let passDuration = Duration.milliseconds(2)

  /// The instant a pass that starts now should stop taking jobs.
  static func passDeadline() -> MonotonicInstant { .after(passDuration) }

  /// Whether a pass with `budget` jobs left should stop now: at every 16th job, once
  /// `deadline` has passed.
  static func passIsOver(budget: Int, deadline: MonotonicInstant) -> Bool {
    budget & 15 == 0 && deadline.hasPassed
  }

  private static let priorityCount = 256
  private static let initialCapacity = 16

  private let rings: UnsafeMutablePointer<Ring>
  /// Bit `p % 64` of word `p / 64` is set while ring `p` is not empty.
  private let nonEmpty: UnsafeMutablePointer<UInt64>
  /// Jobs in all rings.
  private(set) var count = 0

  init() {
    rings = .allocate(capacity: JobQueue.priorityCount)
    rings.initialize(repeating: Ring(), count: JobQueue.priorityCount)
    nonEmpty = .allocate(capacity: 4)
    nonEmpty.initialize(repeating: 0, count: 4)
  }

  deinit {
    for index in 0..<JobQueue.priorityCount {
      rings[index].storage?.deallocate()
    }
    rings.deinitialize(count: JobQueue.priorityCount)
    rings.deallocate()
    nonEmpty.deallocate()
  }

  var isEmpty: Bool { count == 0 }

  /// Appends `job` to its priority's ring (first in, first out within a priority).
  mutating func push(_ job: UnownedJob, priority: UInt8) {
    let index = Int(priority)
    if rings[index].count == rings[index].capacity { grow(index) }
    let ring = rings[index]
    ring.storage.unsafelyUnwrapped[(ring.head &+ ring.count) & (ring.capacity &- 1)] = job
    rings[index].count = ring.count &+ 1
    nonEmpty[index >> 6] |= 1 << UInt64(index & 63)
    count &+= 1
  }

  /// Removes and returns the oldest job of the highest non-empty priority, or nil.
  mutating func popHighest() -> UnownedJob? {
    var word = 3
    while nonEmpty[word] == 0 {
      if word == 0 { return nil }
      word -= 1
    }
    let index = word << 6 | (63 - nonEmpty[word].leadingZeroBitCount)
    let ring = rings[index]
    let job = ring.storage.unsafelyUnwrapped[ring.head]
    rings[index].head = (ring.head &+ 1) & (ring.capacity &- 1)
    rings[index].count = ring.count &- 1
    if ring.count == 1 { nonEmpty[word] &= ~(1 << UInt64(index & 63)) }
    count &-= 1
    return job
  }

  /// Doubles ring `index` (or gives it its first storage), keeping its order.
  private func grow(_ index: Int) {
    let ring = rings[index]
    let capacity = max(JobQueue.initialCapacity, ring.capacity * 2)
    let storage = UnsafeMutablePointer<UnownedJob>.allocate(capacity: capacity)
    if let old = ring.storage {
      for offset in 0..<ring.count {
        (storage + offset).initialize(to: old[(ring.head + offset) & (ring.capacity - 1)])
      }
      old.deallocate()
    }
    rings[index] = Ring(storage: storage, capacity: capacity, head: 0, count: ring.count)
  }
}

/// What ``RunLoopExecutor`` and ``RunLoopThreadGroup``'s threads share: a `JobQueue` under
/// a lock, drained by a run-loop source's perform callback on the loop's thread. The queue
/// itself stays a field of its owner (whose lock guards it together with the owner's other
/// state); these helpers take it through non-escaping closures, so they allocate nothing.
enum JobSourceQueue {
  /// Asks the loop to drain after a push found the queue empty. Only that transition needs a
  /// signal: until the queue is empty again a signal is pending or a drain is running (which
  /// signals again if it leaves jobs). The owner's lock orders the push before the signal;
  /// `signal` is a full barrier, which keeps the wake-up's read of the loop's state after it
  /// (see `RunLoopSource.signal`). `wakeUp` on the one loop served, without reading the
  /// source's list of loops.
  ///
  /// `yielding`: the enqueuing thread hands the loop a job of the task it hands the loop over
  /// and over (see ``RunLoopExecutor``'s cost): it yields its CPU when the loop watches for
  /// work there (``/RunLoop/RunLoop/wakeUpYieldingToWatcher()``).
  @inline(__always)
  static func signal(_ source: RunLoopSource, _ runLoop: RunLoop, yielding: Bool = false) {
    source.signal()
    if yielding { runLoop.wakeUpYieldingToWatcher() } else { runLoop.wakeUp() }
  }

  /// One drain pass (a source's perform callback): runs as many jobs as `count` says are
  /// queued when it starts, at most `JobQueue.jobsPerPass` and for about
  /// `JobQueue.passDuration`, highest priority first, each taken with `pop` under `lock`
  /// and run with `run` outside it. Signals again when jobs remain, so the rest run in later
  /// passes and the loop's timers and other sources get their turn.
  @inline(__always)
  static func drainPass(
    lock: Lock, source: RunLoopSource, runLoop: RunLoop,
    count: () -> Int, pop: () -> UnownedJob?, run: (UnownedJob) -> Void
  ) {
    lock.lock()
    var budget = Swift.min(count(), JobQueue.jobsPerPass)
    var next = budget > 0 ? pop() : nil
    lock.unlock()
    // The clock is read only by a pass long enough to reach a check (every 16th job).
    let passEnds = budget > 16 ? JobQueue.passDeadline() : .distantFuture
    while let job = next {
      run(job)
      budget -= 1
      if budget == 0 || JobQueue.passIsOver(budget: budget, deadline: passEnds) { break }
      lock.lock()
      next = pop()
      lock.unlock()
    }
    // Read after the last job ran, not at the last pop: a push during that job signalled,
    // but a nested run of the loop inside the job may have taken the signal into a drain
    // that returned at once (drains do not nest), so this check is what runs that push.
    if lock.withLock({ count() }) > 0 { signal(source, runLoop) }
  }
}
