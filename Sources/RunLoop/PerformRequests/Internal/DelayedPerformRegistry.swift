import Sync

/// The delayed perform requests of every run loop, for cancellation by target (and action
/// and argument). An entry leaves when its timer fires or is cancelled; entries of ended run
/// loops, and of timers invalidated directly, are purged as they are found.
///
/// An entry holds its timer, hence (until the timer is invalidated) the request's block and
/// captures, whose deinit may make or cancel delayed requests: entries leave the registry
/// under its lock but are released only after it.
enum DelayedPerformRegistry {
  final class Entry: @unchecked Sendable {
    // Immutable after init (the weak references only turn nil; their loads are atomic).
    weak var runLoop: RunLoop?
    /// Weak, as the request does not retain its target: a target released since cannot be
    /// mistaken for a later object at the same address (an `ObjectIdentifier` could).
    private weak var target: AnyObject?
    let action: String?
    let argument: AnyHashable?
    let timer: RunLoopTimer

    init(runLoop: RunLoop, target: AnyObject, action: String?, argument: AnyHashable?, timer: RunLoopTimer) {
      self.runLoop = runLoop
      self.target = target
      self.action = action
      self.argument = argument
      self.timer = timer
    }

    /// Whether the request was made with `object` (the same instance, still alive).
    func isFor(_ object: AnyObject) -> Bool { target === object }
  }

  private static let entries = LockedValue<[Entry]>([])

  static func add(_ entry: Entry) {
    var purged: [Entry] = []
    entries.withLock { entries in
      entries.removeAll { candidate in
        guard candidate.runLoop == nil || !candidate.timer.isValid else { return false }
        purged.append(candidate)
        return true
      }
      entries.append(entry)
    }
    purged.removeAll()
  }

  static func remove(_ entry: Entry) {
    entries.withLock { entries in entries.removeAll { $0 === entry } }
  }

  /// Removes and returns the entries of `runLoop` that `matches` accepts. Entries of ended
  /// run loops are purged too, and released after the lock like those `add` purges.
  static func take(on runLoop: RunLoop, where matches: (Entry) -> Bool) -> [Entry] {
    var purged: [Entry] = []
    let taken: [Entry] = entries.withLock { entries in
      var taken: [Entry] = []
      entries.removeAll { entry in
        guard let owner = entry.runLoop else {
          purged.append(entry)
          return true
        }
        if owner === runLoop && matches(entry) {
          taken.append(entry)
          return true
        }
        return false
      }
      return taken
    }
    purged.removeAll()
    return taken
  }
}
