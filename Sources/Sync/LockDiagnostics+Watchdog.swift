import CThreadingShims

#if canImport(Glibc)
  import Glibc
#endif

extension LockDiagnostics {
  /// The kinds the watchdog thread serves: ``Diagnostics/Kind/deadlocks`` and
  /// ``Diagnostics/Kind/blockingInTask`` (kinds 2 and 4).
  static let watchdogKindsMask: UInt32 = 0x330

  /// Starts the watchdog's thread (``Diagnostics/Kind/deadlocks``,
  /// ``Diagnostics/Kind/blockingInTask``) once per process, the first time one of its kinds
  /// is switched on (`switches`, the switches word that asked). It sleeps while both are off.
  /// A failing `pthread_create` is reported as a finding of each of those kinds that is on in
  /// `switches` (the detector cannot run), and is not final: the next setting that has one of
  /// them on tries again (the usual failure, `EAGAIN`, passes as threads end).
  static func startWatchdog(for switches: UInt32) {
    let started = Diagnostics.OptionSlot.watchdogStarted.pointer
    guard UInt64.atomicCompareAndSwap(expected: 0, desired: 1, at: started, ordering: .relaxed) else { return }
    var thread = pthread_t()
    // Zero outside tests (see the slot).
    var result = Int32(
      truncatingIfNeeded: UInt64.atomicLoad(
        at: Diagnostics.OptionSlot.watchdogStartFailureForTesting.pointer, ordering: .relaxed))
    if result == 0 {
      result = pthread_create(
        &thread, nil,
        { _ in
          LockDiagnostics.watchdogMain()
          return nil
        }, nil)
    }
    if result != 0 {
      // Cleared before reporting (a report may stop the process), so a later setting retries.
      UInt64.atomicStore(0, at: started, ordering: .relaxed)
      let failure = SystemCallError(call: "pthread_create", code: SystemErrorCode(rawValue: result))
      for kind in [Diagnostics.Kind.deadlocks, .blockingInTask] where Diagnostics.isOn(kind, in: switches) {
        Diagnostics.report(
          Diagnostics.Finding(
            kind: kind,
            summary: "the diagnostics watchdog (deadlocks, blocking-in-task) could not start: \(failure)"))
      }
      return
    }
    // Never joined: the watchdog lives as long as the process.
    if pthread_detach(thread) != 0 {}
  }

  /// The watchdog thread's loop, sleeping on the switches word (so a new setting wakes it):
  /// while ``Diagnostics/Kind/deadlocks`` is on, a deadlock scan per
  /// ``Diagnostics/deadlockCheckInterval``; while ``Diagnostics/Kind/blockingInTask`` is on,
  /// a look at the waits inside tasks every quarter of ``Diagnostics/blockingInTaskThreshold``
  /// (so a wait is reported at most about a quarter of the threshold late).
  ///
  /// Everything between two sleeps except the reports runs inside the watchdog gate (see
  /// `tk_diagnostics_watchdog_work_begin`), which a fork waits for: the work makes the Swift
  /// runtime instantiate types, under runtime locks that a child copied mid-work would find
  /// held for ever. The reports run outside it: they call the report handler, user code that
  /// may itself fork.
  static func watchdogMain() {
    if tk_thread_set_name("tk-deadlocks") != 0 {}
    enterWatchdogGate()
    var watchdog = Watchdog()
    // When the last deadlock scan ran (nil: none since the kind was switched on); the next is
    // due an interval later, with the interval read anew at each wake-up.
    var lastDeadlockScan: MonotonicInstant? = nil
    var findings: [Diagnostics.Finding] = []
    while true {
      let settings = Diagnostics.settings()
      let deadlocks = Diagnostics.isOn(.deadlocks, in: settings)
      let blocking = Diagnostics.isOn(.blockingInTask, in: settings)
      var wakeUp = MonotonicInstant.distantFuture
      if !deadlocks && !blocking {
        watchdog = Watchdog()
      }
      if deadlocks {
        let interval = Diagnostics.deadlockCheckInterval
        if (lastDeadlockScan.map { $0 + interval } ?? .distantPast).hasPassed {
          findings += watchdog.scan()
          lastDeadlockScan = .now
        }
        wakeUp = (lastDeadlockScan ?? .now) + interval
      } else {
        lastDeadlockScan = nil
      }
      if blocking {
        let threshold = Diagnostics.blockingInTaskThreshold
        findings += watchdog.scanBlockingInTasks(threshold: threshold)
        let next = MonotonicInstant.after(threshold / 4)
        if next < wakeUp { wakeUp = next }
      }
      leaveWatchdogGate()
      // By index: an iterator's type would be one more first use outside the gate.
      var index = 0
      while index < findings.count {
        Diagnostics.report(findings[index])
        index += 1
      }
      Diagnostics.waitForChange(since: settings, before: wakeUp)
      enterWatchdogGate()
      findings.removeAll(keepingCapacity: true)
    }
  }

  private static func enterWatchdogGate() {
    mustSucceed("Diagnostics: the watchdog gate") { () throws(SystemCallError) in
      try pthreadCall("pthread_mutex_lock") { tk_diagnostics_watchdog_work_begin() }
    }
  }

  private static func leaveWatchdogGate() {
    mustSucceed("Diagnostics: the watchdog gate") { () throws(SystemCallError) in
      try pthreadCall("pthread_mutex_unlock") { tk_diagnostics_watchdog_work_end() }
    }
  }
}

/// The wait-for graph the watchdog builds from the threads' states: a thread waiting for a
/// diagnosed lock points at the thread holding it, a thread blocked in
/// `JoinableThread.join()` at the thread it joins. A ``ReadWriteLock`` writer points at
/// every thread holding the lock (the blocked readers, or the writer), a reader at the writer
/// holding it and at the writers waiting for it (they go first). A cycle is found by a
/// depth-first walk from each waiting thread. Threads waiting on a condition are listed with
/// what they wait for but point at nobody (any thread may notify).
///
/// The threads' states are read one after the other, so one scan may mix instants; a cycle
/// is reported only when a second scan finds the same threads in the same waits (each wait
/// record's start unchanged), and then once.
struct Watchdog {
  /// Cycles seen in the last scan (by their waits), not yet reported.
  private var candidates = Set<[WaitKey]>()
  /// Cycles reported (by their waits).
  private var reported = Set<[WaitKey]>()
  /// Waits inside tasks reported by ``Diagnostics/Kind/blockingInTask`` and still going on.
  private var reportedBlocking = Set<WaitKey>()

  struct WaitKey: Hashable, Comparable {
    let thread: UInt64
    let since: Int64
    static func < (a: WaitKey, b: WaitKey) -> Bool { (a.thread, a.since) < (b.thread, b.since) }
  }

  private struct Entry {
    let state: ThreadState
    let held: [HeldLock]
    let waiting: WaitRecord?
  }

  /// Who holds each lock (by identity number), among the threads that published their held
  /// locks (the waiting ones): one thread for an exclusive lock or a write lock, possibly
  /// several readers for a ``ReadWriteLock``.
  private struct Holders {
    var threads: [UInt64: [UInt64]] = [:]
    /// Per lock, whether its holders hold it for reading.
    var isRead: [UInt64: Bool] = [:]
    /// The threads waiting for a ``ReadWriteLock``'s write lock, by lock.
    var waitingWriters: [UInt64: [UInt64]] = [:]
  }

  /// The ``Diagnostics/Kind/blockingInTask`` findings: each wait inside a task that has
  /// lasted `threshold` or longer, once per wait.
  mutating func scanBlockingInTasks(threshold: Duration) -> [Diagnostics.Finding] {
    let now = MonotonicInstant.now
    var findings: [Diagnostics.Finding] = []
    var stillBlocked = Set<WaitKey>()
    for state in ThreadRegistry.shared.all() {
      let (held, waiting) = state.snapshot()
      guard let waiting, waiting.inTask else { continue }
      let key = WaitKey(thread: state.identity, since: waiting.since.nanoseconds)
      let waited = Duration.nanoseconds(now.nanoseconds - waiting.since.nanoseconds)
      if waited < threshold { continue }
      stillBlocked.insert(key)
      if reportedBlocking.contains(key) { continue }
      let what: String
      switch waiting.target {
      case .lock(let lock): what = "the lock \"\(lock.label)\""
      case .read(let lock): what = "a read lock of \"\(lock.label)\""
      case .write(let lock): what = "the write lock of \"\(lock.label)\""
      case .condition(let lock): what = "a notification of the condition of \"\(lock.label)\""
      case .join(let thread, let name):
        what = "the end of thread \(LockDiagnostics.describeThread(name: name, identity: thread))"
      case .signal(let description): what = description
      }
      var details = [
        "a task blocks the thread it runs on (a thread of Swift's cooperative pool, or of its executor); threshold \(ContentionTable.describe(threshold))"
      ]
      if waiting.deadline != .distantFuture {
        details.append(
          "timed: gives up in \(ContentionTable.describe(.nanoseconds(Swift.max(0, waiting.deadline.nanoseconds - now.nanoseconds))))"
        )
      }
      // A condition's lock is released for the wait. (Read into a local first: Swift 6.3's
      // optimizer fails on the computed property read inside the closure.)
      let released = waiting.conditionLock
      let holds = held.filter { $0.lock.id != released }
        .map { "\"\($0.lock.label)\"" + ($0.isRead ? " (read)" : "") }.joined(separator: ", ")
      details.append("holds \(holds.isEmpty ? "nothing" : holds)")
      findings.append(
        Diagnostics.Finding(
          kind: .blockingInTask,
          summary:
            "\(state.description) has blocked inside a task for \(ContentionTable.describe(waited)), waiting for \(what)",
          details: details))
    }
    // Every wait still blocked past the threshold is reported by now; waits that ended are
    // forgotten, so the set stays as small as the blocked threads.
    reportedBlocking = stillBlocked
    return findings
  }

  mutating func scan() -> [Diagnostics.Finding] {
    let entries = ThreadRegistry.shared.all().map { state in
      let (held, waiting) = state.snapshot()
      return Entry(state: state, held: held, waiting: waiting)
    }
    var byThread: [UInt64: Entry] = [:]
    var holders = Holders()
    for entry in entries {
      let identity = entry.state.identity
      byThread[identity] = entry
      let released = entry.waiting?.conditionLock
      for held in entry.held where held.lock.id != released {
        // A read lock taken twice by one thread is one holder.
        if holders.threads[held.lock.id]?.last != identity {
          holders.threads[held.lock.id, default: []].append(identity)
        }
        holders.isRead[held.lock.id] = held.isRead
      }
      if case .write(let lock) = entry.waiting?.target { holders.waitingWriters[lock.id, default: []].append(identity) }
    }
    // What a waiting thread waits for: the threads that must move first. A reader also waits
    // for the writers waiting for its lock (they go first: writer preference); a writer waits
    // for every holder (all the readers, or the writer).
    func successors(_ identity: UInt64) -> [UInt64] {
      switch byThread[identity]?.waiting?.target {
      case .lock(let lock), .write(let lock): holders.threads[lock.id] ?? []
      case .read(let lock):
        // Readers holding it do not hold a reader back; a writer holding it does.
        (holders.isRead[lock.id] == true ? [] : holders.threads[lock.id] ?? [])
          + (holders.waitingWriters[lock.id] ?? []).filter { $0 != identity }
      // The joined thread: the walk stops there unless it waits too (a thread that never
      // ran a lock hook has no state, so no entry).
      case .join(let thread, _): [thread]
      case .condition, .signal, nil: []
      }
    }
    var findings: [Diagnostics.Finding] = []
    var seenCycles = Set<[WaitKey]>()
    for entry in entries where entry.waiting != nil {
      // A depth-first walk; a cycle is where a walk returns to its path. Each thread is
      // entered at most once per start, so a start costs at most the graph's size.
      var path: [UInt64] = [entry.state.identity]
      var visited: Set<UInt64> = [entry.state.identity]
      func walk(_ current: UInt64) -> [UInt64]? {
        for next in successors(current) {
          if let index = path.firstIndex(of: next) { return Array(path[index...]) }
          if !visited.insert(next).inserted { continue }
          path.append(next)
          if let cycle = walk(next) { return cycle }
          path.removeLast()
        }
        return nil
      }
      guard let cycle = walk(entry.state.identity) else { continue }
      let key = cycle.map { WaitKey(thread: $0, since: byThread[$0]!.waiting!.since.nanoseconds) }.sorted()
      if !seenCycles.insert(key).inserted { continue }
      if reported.contains(key) { continue }
      if candidates.contains(key) {
        reported.insert(key)
        findings.append(finding(cycle.map { byThread[$0]! }, holders: holders, byThread: byThread))
      }
    }
    candidates = seenCycles.subtracting(reported)
    return findings
  }

  private func finding(_ cycle: [Entry], holders: Holders, byThread: [UInt64: Entry]) -> Diagnostics.Finding {
    let now = MonotonicInstant.now
    var details: [String] = []
    func names(_ threads: [UInt64]) -> String {
      threads.compactMap { byThread[$0]?.state.description }.joined(separator: ", ")
    }
    for entry in cycle {
      let waiting = entry.waiting!
      var line: String
      switch waiting.target {
      case .lock(let lock), .condition(let lock):
        line = "\(entry.state.description) waits for \"\(lock.label)\""
        if case .lock = waiting.target, let holder = holders.threads[lock.id]?.first, let holding = byThread[holder] {
          line += " (held by \(holding.state.description))"
        }
      case .write(let lock):
        let holding = holders.threads[lock.id] ?? []
        if holders.isRead[lock.id] == true {
          // Readers are not tracked individually: only those blocked themselves published
          // their held locks, so the report names them and no other.
          line = "\(entry.state.description) waits for the readers of \"\(lock.label)\""
          line += " (blocked readers: \(names(holding)); readers still running are not listed)"
        } else {
          line = "\(entry.state.description) waits for the write lock of \"\(lock.label)\""
          if !holding.isEmpty { line += " (held by \(names(holding)))" }
        }
      case .read(let lock):
        line = "\(entry.state.description) waits for a read lock of \"\(lock.label)\""
        let holding = holders.isRead[lock.id] == true ? [] : holders.threads[lock.id] ?? []
        let writers = (holders.waitingWriters[lock.id] ?? []).filter { $0 != entry.state.identity }
        if !holding.isEmpty { line += " (write-held by \(names(holding)))" }
        if !writers.isEmpty { line += " (behind the waiting writers \(names(writers)))" }
      case .signal(let what):
        // Never in a cycle (it is no edge); listed for completeness.
        line = "\(entry.state.description) waits for \(what)"
      case .join(let thread, let name):
        let joined = byThread[thread]?.state.description ?? LockDiagnostics.describeThread(name: name, identity: thread)
        line = "\(entry.state.description) joins thread \(joined)"
      }
      line += " for \(ContentionTable.describe(.nanoseconds(now.nanoseconds - waiting.since.nanoseconds)))"
      if waiting.deadline != .distantFuture {
        line +=
          ", timed: gives up in \(ContentionTable.describe(.nanoseconds(Swift.max(0, waiting.deadline.nanoseconds - now.nanoseconds))))"
      }
      details.append(line)
      let held = entry.held.map { "\"\($0.lock.label)\"" + ($0.isRead ? " (read)" : "") }.joined(separator: ", ")
      details.append("    holds \(held.isEmpty ? "nothing" : held)")
    }
    let names = cycle.map(\.state.description).joined(separator: ", ")
    let timed = cycle.contains { $0.waiting!.deadline != .distantFuture }
    return Diagnostics.Finding(
      kind: .deadlocks,
      summary:
        "deadlock: \(cycle.count) threads wait for each other: \(names)"
        + (timed ? " (some waits are timed and will give up)" : ""),
      details: details)
  }
}
