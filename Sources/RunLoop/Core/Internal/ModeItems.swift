import Sync

/// What one mode of one run loop contains. Every field is protected by the owning run loop's
/// lock, so the fields a pass reads skip the runtime's dynamic exclusivity check (see
/// `RunLoop.lock`).
final class ModeItems {
  let name: RunLoopMode
  /// Custom sources, in the order added (firing order is decided by `order` at fire time).
  @exclusivity(unchecked) private(set) var sources: [RunLoopSource] = []
  /// Each source's place in the order added (a running number, not an index), which also
  /// answers membership in O(1).
  private var sourceSequence: [ObjectIdentifier: UInt64] = [:]
  private var nextSourceSequence: UInt64 = 0
  /// The sources a pass must look at to find the signalled ones: all but those the run loop
  /// signals itself (descriptor members, found through `RunLoop.readySources` instead), so
  /// a pass costs O(custom sources + ready members), not O(all members).
  @exclusivity(unchecked) private(set) var scannedSources: [RunLoopSource] = []
  /// The mode's timers by identity (the order added lives in each timer's
  /// `scheduleSequence`). The only strong references the mode holds to its timers: the
  /// schedule below names them by identity, so a timer leaves the mode's memory exactly when
  /// it leaves the mode (`remove`, `removeAllTimers`), where the caller still holds it; the
  /// run loop's lock never drops the last reference to a timer (and with it the timer's
  /// block and captures, whose deinit may call back into the loop).
  @exclusivity(unchecked) private var timerMembers: [ObjectIdentifier: RunLoopTimer] = [:]
  /// The timers' schedule, so a pass finds its wake instant and its due timers without
  /// looking at every timer: entries keyed by fire date plus tolerance (the instant the loop
  /// must wake by) and by fire date (due when passed). Entries are never updated in place:
  /// a change pushes fresh entries under a new `RunLoopTimer.scheduleGeneration`, and
  /// entries of an older generation, or of a timer no longer in the mode, are dropped when
  /// they reach the top (see `currentTimer`).
  private var wakeHeap = TimerHeap()
  private var dueHeap = TimerHeap()
  /// Observers, kept sorted by `order` (stable: equal orders keep the order added).
  @exclusivity(unchecked) var observers: [RunLoopObserver] = []
  /// The union of the observers' activities, so a pass skips points nobody watches.
  @exclusivity(unchecked) var observerMask: UInt = 0

  init(name: RunLoopMode) {
    self.name = name
  }

  /// No sources and no timers (observers do not keep a mode alive, as in Core Foundation).
  var hasNoSourcesOrTimers: Bool { sources.isEmpty && timerMembers.isEmpty }

  /// Whether the mode holds any timer.
  var hasTimers: Bool { !timerMembers.isEmpty }

  /// The mode's timers, in no particular order.
  var timers: [RunLoopTimer] { Array(timerMembers.values) }

  /// Adds `source` unless present; returns whether it was added.
  func insert(_ source: RunLoopSource) -> Bool {
    let id = ObjectIdentifier(source)
    if sourceSequence[id] != nil { return false }
    nextSourceSequence &+= 1
    sourceSequence[id] = nextSourceSequence
    sources.append(source)
    if !source.isSignalledByRunLoop { scannedSources.append(source) }
    return true
  }

  /// Removes `source` if present; returns whether it was there.
  func remove(_ source: RunLoopSource) -> Bool {
    guard sourceSequence.removeValue(forKey: ObjectIdentifier(source)) != nil else { return false }
    if let index = sources.firstIndex(where: { $0 === source }) { sources.remove(at: index) }
    if !source.isSignalledByRunLoop, let index = scannedSources.firstIndex(where: { $0 === source }) {
      scannedSources.remove(at: index)
    }
    return true
  }

  /// Whether `source` is in the mode.
  func contains(_ source: RunLoopSource) -> Bool {
    sourceSequence[ObjectIdentifier(source)] != nil
  }

  /// The source's place in the order added, nil when it is not in the mode.
  func sequence(of source: RunLoopSource) -> UInt64? {
    sourceSequence[ObjectIdentifier(source)]
  }

  /// Removes every source; returns them in the order added.
  func removeAllSources() -> [RunLoopSource] {
    let removed = sources
    sources = []
    scannedSources = []
    sourceSequence = [:]
    return removed
  }

  /// Adds `timer` unless present; returns whether it was added. The caller then schedules
  /// it (`RunLoop.renewSchedule`).
  func insert(_ timer: RunLoopTimer) -> Bool {
    let id = ObjectIdentifier(timer)
    if timerMembers[id] != nil { return false }
    timerMembers[id] = timer
    return true
  }

  /// Removes `timer` if present; returns whether it was there. Its schedule entries become
  /// stale. The caller's reference keeps the timer alive past the run loop's lock.
  func remove(_ timer: RunLoopTimer) -> Bool {
    timerMembers.removeValue(forKey: ObjectIdentifier(timer)) != nil
  }

  /// Whether `timer` is in the mode.
  func contains(_ timer: RunLoopTimer) -> Bool {
    timerMembers[ObjectIdentifier(timer)] != nil
  }

  /// Removes every timer and its schedule; returns the timers, for the caller to release
  /// once the run loop's lock is dropped.
  func removeAllTimers() -> [RunLoopTimer] {
    let removed = Array(timerMembers.values)
    timerMembers = [:]
    wakeHeap = TimerHeap()
    dueHeap = TimerHeap()
    return removed
  }

  /// Records that `timer` (in this mode) is next due at `fireDate` and must have fired by
  /// `fireDate + tolerance`, under its current generation.
  /// `loop` is the run loop the mode belongs to (whose lock the caller holds).
  func schedule(_ timer: RunLoopTimer, fireDate: MonotonicInstant, tolerance: Duration, in loop: RunLoop) {
    push(timer, fireDate: fireDate, tolerance: tolerance)
    if wakeHeap.count > 2 * timerMembers.count + 64 { compact(in: loop) }
  }

  private func push(_ timer: RunLoopTimer, fireDate: MonotonicInstant, tolerance: Duration) {
    let (id, sequence, generation) = (ObjectIdentifier(timer), timer.scheduleSequence, timer.scheduleGeneration)
    wakeHeap.push(.init(key: fireDate.advanced(by: tolerance), sequence: sequence, generation: generation, timer: id))
    dueHeap.push(.init(key: fireDate, sequence: sequence, generation: generation, timer: id))
  }

  /// The timer `entry` describes, if the entry is still its schedule in this mode.
  ///
  /// An entry names its timer by identity only, so the timer it was pushed for may be gone
  /// and another allocated at the same address. That one cannot match: the loop hands out
  /// each generation once (`RunLoop.renewSchedule`), and a timer in the mode has had its
  /// generation set by this loop after it joined (or is invalid, which `isSchedulable`
  /// filters out).
  private func currentTimer(_ entry: TimerHeap.Entry) -> RunLoopTimer? {
    // Membership first: a timer that left this loop's modes may belong to another loop now,
    // whose lock guards its generation.
    guard let timer = timerMembers[entry.timer], entry.generation == timer.scheduleGeneration else { return nil }
    return timer
  }

  /// The earliest instant the loop must wake at for this mode's timers (the minimum of fire
  /// date plus tolerance over valid timers that are not firing), or `.distantFuture`. Drops
  /// stale entries on the way; O(log n) per dropped entry, O(1) otherwise. An entry of a
  /// firing timer is dropped too: the pass firing it renews its schedule afterwards.
  func earliestWakeDeadline() -> MonotonicInstant {
    while let top = wakeHeap.top {
      if let timer = currentTimer(top), timer.isSchedulable { return top.key }
      wakeHeap.popTop()
    }
    return .distantFuture
  }

  /// The timers due at `now` (valid, not firing, fire date passed), earliest first (equal
  /// dates in schedule order: the order added, or re-armed). They stay scheduled (a nested
  /// run may fire them first); the caller renews their schedule after firing them.
  func dueTimers(at now: MonotonicInstant) -> [RunLoopTimer] {
    var due: [TimerHeap.Entry] = []
    var timers: [RunLoopTimer] = []
    while let top = dueHeap.top, top.key <= now {
      dueHeap.popTop()
      if let timer = currentTimer(top), timer.isSchedulable {
        due.append(top)
        timers.append(timer)
      }
    }
    for entry in due { dueHeap.push(entry) }
    return timers
  }

  /// Rebuilds both heaps from the timers, dropping stale entries (amortized O(1) per push).
  private func compact(in loop: RunLoop) {
    wakeHeap = TimerHeap()
    dueHeap = TimerHeap()
    for timer in timerMembers.values {
      guard let (fireDate, tolerance) = timer.scheduleSnapshot(in: loop) else { continue }
      push(timer, fireDate: fireDate, tolerance: tolerance)
    }
  }

  /// Adds `observer` unless present, keeping `observers` sorted by order.
  func insert(_ observer: RunLoopObserver) -> Bool {
    if observers.contains(where: { $0 === observer }) { return false }
    let index = observers.firstIndex(where: { $0.order > observer.order }) ?? observers.count
    observers.insert(observer, at: index)
    observerMask |= observer.activities.rawValue
    return true
  }

  /// Removes `observer` if present; returns whether it was there.
  func remove(_ observer: RunLoopObserver) -> Bool {
    guard let index = observers.firstIndex(where: { $0 === observer }) else { return false }
    observers.remove(at: index)
    observerMask = observers.reduce(0) { $0 | $1.activities.rawValue }
    return true
  }
}

/// A waiting perform request that a queued block carries out and that its waiter may give
/// up (``RunLoop/withdrawQueuedBlock(request:)`` names it by `ObjectIdentifier`).
package protocol WithdrawableRequest: AnyObject, Sendable {
  /// Whether the request ended before its block started (withdrawn, cancelled), so the block
  /// would do nothing. Read with the run loop's lock held: must not call into the run loop.
  var isWithdrawn: Bool { get }
}

/// One block queued with `perform`. Immutable.
struct QueuedBlock {
  let modes: [RunLoopMode]
  let block: @Sendable () -> Void
  /// The waiting perform request the block carries out, so a request whose waiter gave up
  /// can be taken out of the queue (`RunLoop.withdrawQueuedBlock`), and is dropped wherever
  /// the loop finds it withdrawn (a pass held it when its waiter looked); nil for plain blocks.
  var request: (any WithdrawableRequest)? = nil

  /// Whether the block carries out a request that ended without it (it would do nothing).
  /// Called with the run loop's lock held.
  var isWithdrawn: Bool { request?.isWithdrawn ?? false }

  /// Whether the block may run in `mode`, given the run loop's common modes.
  func runs(in mode: RunLoopMode, commonModes: Set<RunLoopMode>) -> Bool {
    for candidate in modes {
      if candidate == mode { return true }
      if candidate == .common && commonModes.contains(mode) { return true }
    }
    return false
  }
}

/// One active run call (runs nest). Fields protected by the run loop's lock (hence
/// `@exclusivity(unchecked)`, see `RunLoop.lock`).
final class Activation {
  let mode: ModeItems
  /// Set by `stop`; checked at the start and at the end of each pass.
  @exclusivity(unchecked) var stopped = false
  /// Core Foundation's "ignore wake-ups" window: from waking up until the top of the next
  /// pass the loop is about to re-check everything, so a wake-up needs no system call.
  /// The innermost activation's value is mirrored in `RunLoop.wakeState` for `wakeUp`.
  @exclusivity(unchecked) var ignoresWakeUps = true
  /// A wake-up arrived while a run nested in this one was active, and may have been meant
  /// for this one: it must not sleep before the top of its next pass (see
  /// `RunLoop.wakeState`). Cleared at the top of each of its passes.
  @exclusivity(unchecked) var wokenWhileNested = false

  init(mode: ModeItems) {
    self.mode = mode
  }
}

/// A binary min-heap of timer schedule entries, ordered by key, then by the timers' schedule
/// sequence (so equal instants keep the order the timers were added or last re-armed).
/// Entries hold no references: moving, dropping or discarding them never releases anything.
struct TimerHeap {
  struct Entry {
    let key: MonotonicInstant
    let sequence: UInt64
    let generation: UInt64
    /// The timer's identity; `ModeItems.currentTimer` resolves it.
    let timer: ObjectIdentifier
  }

  private var entries: [Entry] = []

  var count: Int { entries.count }
  var top: Entry? { entries.first }

  private static func precedes(_ a: Entry, _ b: Entry) -> Bool {
    a.key < b.key || (a.key == b.key && a.sequence < b.sequence)
  }

  mutating func push(_ entry: Entry) {
    entries.append(entry)
    var child = entries.count - 1
    while child > 0 {
      let parent = (child - 1) / 2
      guard TimerHeap.precedes(entries[child], entries[parent]) else { break }
      entries.swapAt(child, parent)
      child = parent
    }
  }

  mutating func popTop() {
    guard !entries.isEmpty else { return }
    entries.swapAt(0, entries.count - 1)
    entries.removeLast()
    var parent = 0
    while true {
      let left = 2 * parent + 1
      if left >= entries.count { return }
      let right = left + 1
      var smallest = left
      if right < entries.count && TimerHeap.precedes(entries[right], entries[left]) { smallest = right }
      guard TimerHeap.precedes(entries[smallest], entries[parent]) else { return }
      entries.swapAt(parent, smallest)
      parent = smallest
    }
  }
}
