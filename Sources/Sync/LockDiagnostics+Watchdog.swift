import CThreadingShims

#if canImport(Glibc)
  import Glibc
#endif

extension LockDiagnostics {
  /// Starts the ``Diagnostics/Kind/deadlocks`` watchdog's thread once per process (the first
  /// time the kind is switched on). It sleeps while the kind is off. A failing
  /// `pthread_create` is reported as a finding of the kind (the detector cannot run).
  static func startWatchdog() {
    let started = Diagnostics.OptionSlot.watchdogStarted.pointer
    guard UInt64.atomicCompareAndSwap(expected: 0, desired: 1, at: started, ordering: .relaxed) else { return }
    var thread = pthread_t()
    let result = pthread_create(
      &thread, nil,
      { _ in
        LockDiagnostics.watchdogMain()
        return nil
      }, nil)
    if result != 0 {
      Diagnostics.report(
        Diagnostics.Finding(
          kind: .deadlocks, summary: "the deadlock watchdog could not start: pthread_create failed (error \(result))"))
      return
    }
    // Never joined: the watchdog lives as long as the process.
    if pthread_detach(thread) != 0 {}
  }

  /// The watchdog thread's loop: a scan per ``Diagnostics/deadlockCheckInterval`` while the
  /// kind is on, sleeping on the switches word (so a new setting wakes it).
  static func watchdogMain() {
    if tk_thread_set_name("tk-deadlocks") != 0 {}
    var watchdog = Watchdog()
    while true {
      let settings = Diagnostics.settings()
      guard Diagnostics.isOn(.deadlocks, in: settings) else {
        watchdog = Watchdog()
        Diagnostics.waitForChange(since: settings, before: .distantFuture)
        continue
      }
      for finding in watchdog.scan() { Diagnostics.report(finding) }
      Diagnostics.waitForChange(since: settings, before: .after(Diagnostics.deadlockCheckInterval))
    }
  }
}

/// The wait-for graph the watchdog builds from the threads' states: a thread waiting for a
/// diagnosed lock points at the thread holding it, a thread blocked in
/// `JoinableThread.join()` at the thread it joins. Each thread waits for at most one lock
/// or thread and each lock has at most one holder, so a cycle is found by walking from each
/// waiting thread. Threads waiting on a condition are listed with what they wait for but point at
/// nobody (any thread may notify).
///
/// The threads' states are read one after the other, so one scan may mix instants; a cycle
/// is reported only when a second scan finds the same threads in the same waits (each wait
/// record's start unchanged), and then once.
struct Watchdog {
  /// Cycles seen in the last scan (by their waits), not yet reported.
  private var candidates = Set<[WaitKey]>()
  /// Cycles reported (by their waits).
  private var reported = Set<[WaitKey]>()

  struct WaitKey: Hashable, Comparable {
    let thread: UInt64
    let since: Int64
    static func < (a: WaitKey, b: WaitKey) -> Bool { (a.thread, a.since) < (b.thread, b.since) }
  }

  private struct Entry {
    let state: ThreadState
    let held: [LockIdentity]
    let waiting: WaitRecord?
  }

  mutating func scan() -> [Diagnostics.Finding] {
    let entries = ThreadRegistry.shared.all().map { state in
      let (held, waiting) = state.snapshot()
      return Entry(state: state, held: held, waiting: waiting)
    }
    var byThread: [UInt64: Entry] = [:]
    var holderOf: [UInt64: UInt64] = [:]
    for entry in entries {
      byThread[entry.state.identity] = entry
      let released = entry.waiting?.conditionLock
      for lock in entry.held where lock.id != released {
        holderOf[lock.id] = entry.state.identity
      }
    }
    func next(_ identity: UInt64) -> UInt64? {
      switch byThread[identity]?.waiting?.target {
      case .lock(let lock): holderOf[lock.id]
      // The joined thread: the walk stops there unless it waits too (a thread that never
      // ran a lock hook has no state, so no entry).
      case .join(let thread, _): thread
      case .condition, nil: nil
      }
    }
    var findings: [Diagnostics.Finding] = []
    var seenCycles = Set<[WaitKey]>()
    for entry in entries where entry.waiting != nil {
      // Walk at most as many steps as there are threads; a cycle is where a walk returns.
      var path: [UInt64] = [entry.state.identity]
      var current = entry.state.identity
      var cycle: [UInt64]? = nil
      while let holder = next(current) {
        if let index = path.firstIndex(of: holder) {
          cycle = Array(path[index...])
          break
        }
        path.append(holder)
        current = holder
      }
      guard let cycle else { continue }
      let key = cycle.map { WaitKey(thread: $0, since: byThread[$0]!.waiting!.since.nanoseconds) }.sorted()
      if !seenCycles.insert(key).inserted { continue }
      if reported.contains(key) { continue }
      if candidates.contains(key) {
        reported.insert(key)
        findings.append(finding(cycle.map { byThread[$0]! }, holderOf: holderOf, byThread: byThread))
      }
    }
    candidates = seenCycles.subtracting(reported)
    return findings
  }

  private func finding(_ cycle: [Entry], holderOf: [UInt64: UInt64], byThread: [UInt64: Entry])
    -> Diagnostics.Finding
  {
    let now = MonotonicInstant.now
    var details: [String] = []
    for entry in cycle {
      let waiting = entry.waiting!
      var line: String
      switch waiting.target {
      case .lock(let lock), .condition(let lock):
        line = "\(entry.state.description) waits for \"\(lock.label)\""
        if case .lock = waiting.target, let holder = holderOf[lock.id], let holding = byThread[holder] {
          line += " (held by \(holding.state.description))"
        }
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
      let held = entry.held.map { "\"\($0.label)\"" }.joined(separator: ", ")
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
