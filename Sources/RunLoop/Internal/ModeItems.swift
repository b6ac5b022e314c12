/// What one mode of one run loop contains. Every field is protected by the owning run loop's
/// lock.
final class ModeItems {
  let name: RunLoopMode
  /// Custom sources, in the order added (firing order is decided by `order` at fire time).
  var sources: [RunLoopSource] = []
  /// Timers, in the order added.
  var timers: [RunLoopTimer] = []
  /// Observers, kept sorted by `order` (stable: equal orders keep the order added).
  var observers: [RunLoopObserver] = []
  /// The union of the observers' activities, so a pass skips points nobody watches.
  var observerMask: UInt = 0

  init(name: RunLoopMode) {
    self.name = name
  }

  /// No sources and no timers (observers do not keep a mode alive, as in Core Foundation).
  var hasNoSourcesOrTimers: Bool { sources.isEmpty && timers.isEmpty }

  /// Adds `source` unless present; returns whether it was added.
  func insert(_ source: RunLoopSource) -> Bool {
    if sources.contains(where: { $0 === source }) { return false }
    sources.append(source)
    return true
  }

  /// Removes `source` if present; returns whether it was there.
  func remove(_ source: RunLoopSource) -> Bool {
    guard let index = sources.firstIndex(where: { $0 === source }) else { return false }
    sources.remove(at: index)
    return true
  }

  /// Adds `timer` unless present; returns whether it was added.
  func insert(_ timer: RunLoopTimer) -> Bool {
    if timers.contains(where: { $0 === timer }) { return false }
    timers.append(timer)
    return true
  }

  /// Removes `timer` if present; returns whether it was there.
  func remove(_ timer: RunLoopTimer) -> Bool {
    guard let index = timers.firstIndex(where: { $0 === timer }) else { return false }
    timers.remove(at: index)
    return true
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

/// One block queued with `perform`. Immutable.
struct QueuedBlock {
  let modes: [RunLoopMode]
  let block: @Sendable () -> Void

  /// Whether the block may run in `mode`, given the run loop's common modes.
  func runs(in mode: RunLoopMode, commonModes: Set<RunLoopMode>) -> Bool {
    for candidate in modes {
      if candidate == mode { return true }
      if candidate == .common && commonModes.contains(mode) { return true }
    }
    return false
  }
}

/// One active run call (runs nest). Fields protected by the run loop's lock.
final class Activation {
  let mode: ModeItems
  /// Set by `stop`; checked at the start and at the end of each pass.
  var stopped = false
  /// Core Foundation's "ignore wake-ups" window: from waking up until the top of the next
  /// pass the loop is about to re-check everything, so a wake-up needs no eventfd write.
  /// The innermost activation's value is mirrored in `RunLoop.wakeState` for `wakeUp`.
  var ignoresWakeUps = true

  init(mode: ModeItems) {
    self.mode = mode
  }
}
