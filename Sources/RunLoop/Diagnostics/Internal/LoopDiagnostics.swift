import Sync
import Threads

#if canImport(Glibc)
  import Glibc
#endif

/// What a callback the loop runs is, for metrics and stall reports.
enum CallbackKind: UInt64 {
  case source = 1
  case timer = 2
  case observer = 3
  case block = 4
}

/// What `callbackWillRun` set up, for `callbackDidRun`.
struct CallbackProbe {
  /// `countsBit`: metrics count the callback; `recordsBit`: the stall record is set.
  /// Zero: nothing to do at the end.
  let flags: UInt8
  let kind: CallbackKind
  /// When the callback began (nanoseconds, monotonic clock); set with `recordsBit`.
  let start: Int64
  /// How many diagnosed locks the thread held when the callback began; set with `heldBit`.
  var heldBefore: Int = 0

  static let countsBit: UInt8 = 1
  static let recordsBit: UInt8 = 2
  /// `Diagnostics.Kind.heldLockInCallback` was on: the end compares the held count.
  static let heldBit: UInt8 = 4
}

/// A stall record taken out of the loop while a run nested in a callback runs.
struct SuspendedCallback {
  let record: UInt64
  let item: UInt64
  let mode: UInt64
  let kind: UInt64
}

/// One run loop's metrics counters and stall record, in words the loop's thread writes and
/// any thread reads.
///
/// **Metrics.** Only the loop's thread writes the counters (a relaxed load and store each,
/// no read-modify-write: there is one writer), and only while `metricsOn` is set; readers
/// load them relaxed (each counter is exact at some instant; a snapshot may mix instants by
/// a callback or two). Time asleep is one word, so a reader never sees half an update: not
/// sleeping it holds the total; sleeping, it holds the total minus the instant the sleep
/// began, flagged, and the reader adds its own clock reading. The clock is read only around
/// a sleep. Switching on records the counters as a baseline (under `lockWord`, which the
/// loop's thread never takes); switching off freezes the snapshot.
///
/// **Stall record.** While a callback runs with stalls on, `record` holds when it began
/// (nanoseconds << 2) and two flag bits; `item`, `mode` and `kind` say what runs. The loop's
/// thread stores the item words relaxed, then the record with release; the monitor reads
/// the record with acquire, so it sees the item words of that record (arm64 included: the
/// release store orders the earlier stores, the acquire load the later loads). To name the
/// item the monitor sets `busyBit` by compare-and-swap, takes strong references to the item
/// and mode, then stores the record back with `reportedBit` (release). The loop's thread
/// ends a record only by a compare-and-swap from a value without `busyBit` (waiting, a few
/// instructions, while it is set), so the item it still holds cannot be released before
/// the monitor has its own reference; its acquire pairs with the monitor's release. Zero:
/// no callback is running (or stalls were off when it began).
final class LoopDiagnostics: @unchecked Sendable {
  // @unchecked: the words are accessed atomically as described above; `baseline`,
  // `frozen` and `since` are protected by `lockWord`; `registered` is touched only by the
  // loop's thread; `thread` is written once, by the loop's thread, before the loop is
  // registered with the monitor (whose lock publishes it), and only read afterwards.

  /// Two cache lines: the counters the loop's thread bumps, then the stall record the
  /// monitor polls.
  private let words: UnsafeMutablePointer<UInt64>
  private static let passes = 0
  private static let sourcesFired = 1
  private static let timersFired = 2
  private static let blocksRun = 3
  private static let observerCalls = 4
  private static let asleep = 5
  private static let metricsOn = 6
  private static let record = 8
  private static let item = 9
  private static let mode = 10
  private static let kind = 11

  static let busyBit: UInt64 = 1
  static let reportedBit: UInt64 = 2

  private let lockWord: UnsafeMutablePointer<UInt32>
  /// The counters when metrics were switched on. Protected by `lockWord`.
  private var baseline = RawCounts()
  /// The snapshot taken when metrics were switched off; nil while on or never on.
  /// Protected by `lockWord`.
  private var frozen: RunLoopMetrics?
  /// When metrics were last switched on. Protected by `lockWord`.
  private var since = MonotonicInstant.now

  /// Whether the loop is in the stall monitor's list. Loop's thread only.
  private var registered = false
  /// The loop's thread, for reports (see the type's @unchecked note).
  private(set) weak var thread: Thread?

  init(metrics: Bool) {
    let raw = UnsafeMutableRawPointer.allocate(byteCount: 128, alignment: 64)
    words = raw.bindMemory(to: UInt64.self, capacity: 16)
    words.initialize(repeating: 0, count: 16)
    words[LoopDiagnostics.metricsOn] = metrics ? 1 : 0
    lockWord = .allocate(capacity: 1)
    lockWord.initialize(to: 0)
  }

  deinit {
    UnsafeMutableRawPointer(words).deallocate()
    lockWord.deallocate()
  }

  // MARK: The loop's thread

  @inline(__always)
  private func load(_ index: Int) -> UInt64 {
    UInt64.atomicLoad(at: words + index, ordering: .relaxed)
  }

  /// One more in counter `index`; the loop's thread only (the single writer).
  @inline(__always)
  private func bump(_ index: Int) {
    UInt64.atomicStore(load(index) &+ 1, at: words + index, ordering: .relaxed)
  }

  /// Whether metrics are on: one relaxed load.
  @inline(__always)
  var metricsAreOn: Bool { load(LoopDiagnostics.metricsOn) != 0 }

  /// A pass begins.
  @inline(__always)
  func passWillStart() {
    if metricsAreOn { bump(LoopDiagnostics.passes) }
  }

  /// The loop is about to sleep; returns the instant (nanoseconds) when metrics time the
  /// sleep, 0 when they are off. The loop's thread only.
  @inline(__always)
  func sleepWillBegin() -> Int64 {
    if !metricsAreOn { return 0 }
    let start = Swift.max(1, MonotonicInstant.now.nanoseconds)
    let total = LoopDiagnostics.decodeAsleep(load(LoopDiagnostics.asleep)).value
    UInt64.atomicStore(
      LoopDiagnostics.encodeAsleep(total &- start, sleeping: true), at: words + LoopDiagnostics.asleep,
      ordering: .relaxed)
    return start
  }

  /// The sleep that `sleepWillBegin` timed from `start` ended.
  @inline(__always)
  func sleepDidEnd(_ start: Int64) {
    if start == 0 { return }
    let end = MonotonicInstant.now.nanoseconds
    let base = LoopDiagnostics.decodeAsleep(load(LoopDiagnostics.asleep)).value
    UInt64.atomicStore(
      LoopDiagnostics.encodeAsleep(base &+ end, sleeping: false), at: words + LoopDiagnostics.asleep,
      ordering: .relaxed)
  }

  /// Time asleep in one word: the value shifted left by one, the low bit set while sleeping
  /// (then the value is the total minus the sleep's start).
  static func encodeAsleep(_ value: Int64, sleeping: Bool) -> UInt64 {
    UInt64(bitPattern: value << 1) | (sleeping ? 1 : 0)
  }

  static func decodeAsleep(_ word: UInt64) -> (value: Int64, sleeping: Bool) {
    (Int64(bitPattern: word) >> 1, word & 1 != 0)
  }

  /// A callback of `kind` for `item` (nil for a queued block) is about to run in `mode`.
  /// With metrics, stalls and held-lock checks off: two relaxed loads.
  @inline(__always)
  func callbackWillRun(_ kind: CallbackKind, _ item: AnyObject?, _ mode: ModeItems, activity: UInt = 0)
    -> CallbackProbe
  {
    let counts = metricsAreOn
    if !counts && !Diagnostics.isOn(.stalls, or: .heldLockInCallback) {
      return CallbackProbe(flags: 0, kind: kind, start: 0)
    }
    return callbackWillRunSlowly(kind, item, mode, activity: activity, counts: counts)
  }

  @inline(never)
  private func callbackWillRunSlowly(
    _ kind: CallbackKind, _ item: AnyObject?, _ mode: ModeItems, activity: UInt, counts: Bool
  ) -> CallbackProbe {
    var flags: UInt8 = counts ? CallbackProbe.countsBit : 0
    var start: Int64 = 0
    var heldBefore = 0
    if Diagnostics.isOn(.heldLockInCallback) {
      flags |= CallbackProbe.heldBit
      heldBefore = LockDiagnostics.heldCount()
    }
    // A record is set only inside a callback, and a run nested in one suspends it: the word
    // is zero here unless stalls were switched on in between (then this one is not timed).
    if Diagnostics.isOn(.stalls) && load(LoopDiagnostics.record) == 0 {
      if !registered {
        registered = true
        thread = Thread.current
        StallMonitor.register(self)
      }
      start = Swift.max(1, MonotonicInstant.now.nanoseconds)
      store(item: item, mode: mode, kind: kind.rawValue | UInt64(activity) << 8)
      // Release: publishes the item words to the monitor's acquiring read (see the type).
      UInt64.atomicStore(UInt64(start) << 2, at: words + LoopDiagnostics.record, ordering: .releasing)
      flags |= CallbackProbe.recordsBit
    }
    return CallbackProbe(flags: flags, kind: kind, start: start, heldBefore: heldBefore)
  }

  private func store(item: AnyObject?, mode: ModeItems, kind: UInt64) {
    let itemBits = item.map { UInt64(UInt(bitPattern: Unmanaged.passUnretained($0).toOpaque())) } ?? 0
    let modeBits = UInt64(UInt(bitPattern: Unmanaged.passUnretained(mode).toOpaque()))
    UInt64.atomicStore(itemBits, at: words + LoopDiagnostics.item, ordering: .relaxed)
    UInt64.atomicStore(modeBits, at: words + LoopDiagnostics.mode, ordering: .relaxed)
    UInt64.atomicStore(kind, at: words + LoopDiagnostics.kind, ordering: .relaxed)
  }

  /// The callback `probe` describes returned; `ran` says whether it really ran (a timer no
  /// longer due, a drained descriptor's source do not count).
  @inline(__always)
  func callbackDidRun(_ probe: CallbackProbe, _ item: AnyObject?, _ mode: ModeItems, ran: Bool) {
    if probe.flags == 0 { return }
    callbackDidRunSlowly(probe, item, mode, ran: ran)
  }

  @inline(never)
  private func callbackDidRunSlowly(_ probe: CallbackProbe, _ item: AnyObject?, _ mode: ModeItems, ran: Bool) {
    if probe.flags & CallbackProbe.countsBit != 0 && ran {
      switch probe.kind {
      case .source: bump(LoopDiagnostics.sourcesFired)
      case .timer: bump(LoopDiagnostics.timersFired)
      case .observer: bump(LoopDiagnostics.observerCalls)
      case .block: bump(LoopDiagnostics.blocksRun)
      }
    }
    if probe.flags & CallbackProbe.heldBit != 0 {
      let held = LockDiagnostics.heldCount()
      if held > probe.heldBefore {
        Diagnostics.report(heldLockFinding(kind: probe.kind.rawValue, item: item, mode: mode, from: probe.heldBefore))
      }
    }
    guard probe.flags & CallbackProbe.recordsBit != 0 else { return }
    let record = takeRecord()
    if record & LoopDiagnostics.reportedBit != 0 {
      let total = Duration.nanoseconds(MonotonicInstant.now.nanoseconds - probe.start)
      let kind = load(LoopDiagnostics.kind)
      Diagnostics.report(stallEndedFinding(kind: kind, item: item, mode: mode, total: total))
    }
  }

  /// Ends the current record: a compare-and-swap to zero from a value without `busyBit`
  /// (acquire: the monitor's references to the item are taken before the loop's thread can
  /// drop its own). Returns the record.
  private func takeRecord() -> UInt64 {
    while true {
      let record = UInt64.atomicLoad(at: words + LoopDiagnostics.record, ordering: .acquiring)
      if record & LoopDiagnostics.busyBit != 0 {
        // The monitor is taking its references: a few instructions, unless it was preempted.
        sched_yield()
        continue
      }
      if UInt64.atomicCompareAndSwap(
        expected: record, desired: 0, at: words + LoopDiagnostics.record, ordering: .acquiring)
      {
        return record
      }
    }
  }

  /// A run starts: if it is nested in a callback, that callback's record is taken out (the
  /// loop is not stalled while a nested run serves it). One relaxed load when none is set.
  @inline(__always)
  func suspendCallbackRecord() -> SuspendedCallback? {
    if load(LoopDiagnostics.record) == 0 { return nil }
    let record = takeRecord()
    return SuspendedCallback(
      record: record, item: load(LoopDiagnostics.item), mode: load(LoopDiagnostics.mode),
      kind: load(LoopDiagnostics.kind))
  }

  /// The nested run ended: the callback's record is put back, timed from now, and keeps its
  /// reported mark (so its end still reports the total).
  @inline(__always)
  func resumeCallbackRecord(_ suspended: SuspendedCallback?) {
    guard let suspended else { return }
    UInt64.atomicStore(suspended.item, at: words + LoopDiagnostics.item, ordering: .relaxed)
    UInt64.atomicStore(suspended.mode, at: words + LoopDiagnostics.mode, ordering: .relaxed)
    UInt64.atomicStore(suspended.kind, at: words + LoopDiagnostics.kind, ordering: .relaxed)
    let now = UInt64(Swift.max(1, MonotonicInstant.now.nanoseconds))
    UInt64.atomicStore(
      now << 2 | (suspended.record & LoopDiagnostics.reportedBit), at: words + LoopDiagnostics.record,
      ordering: .releasing)
  }

  // MARK: The stall monitor's thread

  /// The finding for the callback running now if it has run `threshold` or longer and was
  /// not reported yet (it is then marked reported); nil otherwise. The monitor's thread.
  func stallFinding(now: Int64, threshold: Duration) -> Diagnostics.Finding? {
    let recordPointer = words + LoopDiagnostics.record
    let record = UInt64.atomicLoad(at: recordPointer, ordering: .acquiring)
    guard record != 0, record & (LoopDiagnostics.busyBit | LoopDiagnostics.reportedBit) == 0 else { return nil }
    let running = Duration.nanoseconds(now - Int64(record >> 2))
    guard running >= threshold else { return nil }
    // Acquire (see the type): the item words below belong to this record.
    guard
      UInt64.atomicCompareAndSwap(
        expected: record, desired: record | LoopDiagnostics.busyBit, at: recordPointer, ordering: .acquiring)
    else { return nil }
    let itemBits = load(LoopDiagnostics.item)
    let modeBits = load(LoopDiagnostics.mode)
    let kind = load(LoopDiagnostics.kind)
    // Strong references, taken while the loop's thread cannot end the record (it holds both).
    let item: AnyObject? = UnsafeRawPointer(bitPattern: UInt(itemBits)).map {
      Unmanaged<AnyObject>.fromOpaque($0).takeUnretainedValue()
    }
    let mode = Unmanaged<ModeItems>.fromOpaque(UnsafeRawPointer(bitPattern: UInt(modeBits))!).takeUnretainedValue()
    // Release: the references above are taken before the loop's thread sees busy cleared.
    UInt64.atomicStore(record | LoopDiagnostics.reportedBit, at: recordPointer, ordering: .releasing)
    return stalledFinding(kind: kind, item: item, mode: mode, running: running, threshold: threshold)
  }

  // MARK: Findings

  /// `timer "App/Poller.swift:42"`, `observer "x" (beforeWaiting)`, `queued block`.
  static func describe(kind: UInt64, item: AnyObject?) -> String {
    switch CallbackKind(rawValue: kind & 0xFF) {
    case .source: return "source \"\((item as? RunLoopSource)?.name ?? "?")\""
    case .timer: return "timer \"\((item as? RunLoopTimer)?.name ?? "?")\""
    case .observer:
      let activity = RunLoopActivity(rawValue: UInt(kind >> 8))
      return "observer \"\((item as? RunLoopObserver)?.name ?? "?")\" (\(activity))"
    case .block: return "queued block"
    case nil: return "callback"
    }
  }

  private func stalledFinding(kind: UInt64, item: AnyObject?, mode: ModeItems, running: Duration, threshold: Duration)
    -> Diagnostics.Finding
  {
    let what = LoopDiagnostics.describe(kind: kind, item: item)
    let thread = ItemName.describe(self.thread)
    return Diagnostics.Finding(
      kind: .stalls,
      summary:
        "run loop of \(thread) stalled: \(what) has run for \(ItemName.describe(running)) in mode \(mode.name.rawValue)",
      details: [
        "callback: \(what), still running",
        "run loop: \(thread), mode \(mode.name.rawValue)",
        "running for: \(ItemName.describe(running)) (threshold \(ItemName.describe(threshold)))",
      ])
  }

  /// A callback returned holding diagnosed locks it took (those from position `start` of
  /// the thread's held list).
  private func heldLockFinding(kind: UInt64, item: AnyObject?, mode: ModeItems, from start: Int)
    -> Diagnostics.Finding
  {
    let what = LoopDiagnostics.describe(kind: kind, item: item)
    let thread = ItemName.describe(self.thread ?? Thread.current)
    let locks = LockDiagnostics.heldLabels(from: start).map { "\"\($0)\"" }
    return Diagnostics.Finding(
      kind: .heldLockInCallback,
      summary:
        "\(what) returned holding \(locks.count == 1 ? "lock" : "locks") \(locks.joined(separator: ", ")) "
        + "on run loop of \(thread)",
      details: [
        "callback: \(what), mode \(mode.name.rawValue)",
        "still held: \(locks.joined(separator: ", ")) (taken during the callback, not released)",
        "the loop's next callbacks run with the lock held; other threads taking it block until it is released",
      ])
  }

  private func stallEndedFinding(kind: UInt64, item: AnyObject?, mode: ModeItems, total: Duration)
    -> Diagnostics.Finding
  {
    let what = LoopDiagnostics.describe(kind: kind, item: item)
    let thread = ItemName.describe(self.thread)
    return Diagnostics.Finding(
      kind: .stalls,
      summary:
        "stall ended on run loop of \(thread): \(what) ran for \(ItemName.describe(total)) in mode \(mode.name.rawValue)",
      details: [
        "callback: \(what), returned",
        "run loop: \(thread), mode \(mode.name.rawValue)",
        "total: \(ItemName.describe(total)) (threshold \(ItemName.describe(Diagnostics.stallThreshold)))",
      ])
  }

  // MARK: Metrics, any thread

  /// The counters as they are now, time asleep included up to `now`.
  private func rawCounts(at now: MonotonicInstant) -> RawCounts {
    let (value, sleeping) = LoopDiagnostics.decodeAsleep(load(LoopDiagnostics.asleep))
    return RawCounts(
      passes: load(LoopDiagnostics.passes), sourcesFired: load(LoopDiagnostics.sourcesFired),
      timersFired: load(LoopDiagnostics.timersFired), blocksRun: load(LoopDiagnostics.blocksRun),
      observerCalls: load(LoopDiagnostics.observerCalls),
      asleepNanoseconds: sleeping ? value &+ now.nanoseconds : value)
  }

  /// Switches metrics on (from zero, now) or off (freezing the figures).
  func setMetricsEnabled(_ enabled: Bool) {
    WordLock.withLock(lockWord) {
      if enabled == metricsAreOn { return }
      let now = MonotonicInstant.now
      if enabled {
        baseline = rawCounts(at: now)
        since = now
        frozen = nil
      } else {
        frozen = snapshot(at: now)
      }
      UInt64.atomicStore(enabled ? 1 : 0, at: words + LoopDiagnostics.metricsOn, ordering: .relaxed)
    }
  }

  /// The metrics now (frozen when off; all zero if never on).
  func metrics() -> RunLoopMetrics {
    WordLock.withLock(lockWord) {
      if let frozen { return frozen }
      if !metricsAreOn { return RunLoopMetrics(start: since, end: since) }
      return snapshot(at: .now)
    }
  }

  /// Called with `lockWord` held.
  private func snapshot(at now: MonotonicInstant) -> RunLoopMetrics {
    let raw = rawCounts(at: now)
    let asleep = Swift.max(0, raw.asleepNanoseconds &- baseline.asleepNanoseconds)
    let elapsed = Swift.max(0, now.nanoseconds &- since.nanoseconds)
    return RunLoopMetrics(
      passes: Int(raw.passes &- baseline.passes), sourcesFired: Int(raw.sourcesFired &- baseline.sourcesFired),
      timersFired: Int(raw.timersFired &- baseline.timersFired), blocksRun: Int(raw.blocksRun &- baseline.blocksRun),
      observerCalls: Int(raw.observerCalls &- baseline.observerCalls),
      timeAsleep: .nanoseconds(Swift.min(asleep, elapsed)), timeBusy: .nanoseconds(Swift.max(0, elapsed - asleep)),
      start: since, end: now)
  }
}

/// The raw counters of a loop (since its creation).
struct RawCounts {
  var passes: UInt64 = 0
  var sourcesFired: UInt64 = 0
  var timersFired: UInt64 = 0
  var blocksRun: UInt64 = 0
  var observerCalls: UInt64 = 0
  var asleepNanoseconds: Int64 = 0
}
