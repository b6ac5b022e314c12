import Sync
import Threads

/// The stall monitor: one thread, started when the first run loop runs a callback with
/// ``/Sync/Diagnostics/Kind/stalls`` on, that scans the registered loops' stall records
/// every fifth of the threshold (between 1 and 100 ms) and reports each callback that has
/// run past the threshold once, while it still runs. With stalls switched off again it
/// sleeps until a diagnostics setting changes (or a second passes). It runs until the
/// process ends.
///
/// The loops are held weakly: a loop whose thread ended leaves the list at the next scan.
enum StallMonitor {
  /// The registered loops and whether the thread was started, under a word lock (never held
  /// while a finding is reported).
  final class Registry: @unchecked Sendable {
    // @unchecked: `loops` and `started` are protected by `word`.
    let word: UnsafeMutablePointer<UInt32>
    var loops: [Weak] = []
    var started = false

    init() {
      word = .allocate(capacity: 1)
      word.initialize(to: 0)
    }
  }

  struct Weak {
    weak var loop: LoopDiagnostics?
  }

  /// Never freed: the process's one registry.
  static let registry = Registry()

  /// Adds `loop` to the scanned loops (its thread, the first time a callback runs with
  /// stalls on) and starts the monitor thread if it is not running.
  static func register(_ loop: LoopDiagnostics) {
    let start: Bool = WordLock.withLock(registry.word) {
      // Loops of ended threads go when the list would grow past twice its live size.
      if registry.loops.count >= 16 && registry.loops.count.isPowerOfTwo {
        registry.loops.removeAll { $0.loop == nil }
      }
      registry.loops.append(Weak(loop: loop))
      if registry.started { return false }
      registry.started = true
      return true
    }
    guard start else { return }
    do {
      _ = try Thread.detach(name: "stall-monitor") { run() }
    } catch {
      WordLock.withLock(registry.word) { registry.started = false }
      Diagnostics.report(
        Diagnostics.Finding(
          kind: .stalls, summary: "the stall monitor thread could not start; stalls are not reported",
          details: ["error: \(error)"]))
    }
  }

  /// The monitor thread's body.
  static func run() {
    while true {
      let settings = Diagnostics.settings()
      let interval: Duration
      if Diagnostics.isOn(.stalls, in: settings) {
        let threshold = Diagnostics.stallThreshold
        scan(threshold: threshold)
        interval = Swift.min(Swift.max(threshold / 5, .milliseconds(1)), .milliseconds(100))
      } else {
        interval = .seconds(1)
      }
      // Wakes early when a setting changes, so a new mode or threshold applies at once.
      Diagnostics.waitForChange(since: settings, before: .after(interval))
    }
  }

  /// Reports every callback running past `threshold` that was not reported yet.
  static func scan(threshold: Duration) {
    let loops: [LoopDiagnostics] = WordLock.withLock(registry.word) {
      registry.loops.removeAll { $0.loop == nil }
      return registry.loops.compactMap(\.loop)
    }
    let now = MonotonicInstant.now.nanoseconds
    for loop in loops {
      if let finding = loop.stallFinding(now: now, threshold: threshold) { Diagnostics.report(finding) }
    }
  }
}

extension Int {
  fileprivate var isPowerOfTwo: Bool { self > 0 && self & (self - 1) == 0 }
}
