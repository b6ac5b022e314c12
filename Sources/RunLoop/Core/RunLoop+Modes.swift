import Sync

extension RunLoop {
  // MARK: Modes

  /// The mode of the innermost active run call, or nil when the loop is not running.
  /// (`CFRunLoopCopyCurrentMode`)
  public var currentMode: RunLoopMode? {
    lock.withLock { activations.last?.mode.name }
  }

  /// The modes in the common set (initially only ``RunLoopMode/default``).
  public var commonModes: Set<RunLoopMode> {
    lock.withLock { commonModeNames }
  }

  /// Every mode the loop knows (modes are created when first mentioned).
  /// (`CFRunLoopCopyAllModes`)
  public var allModes: Set<RunLoopMode> {
    lock.withLock { Set(modes.keys) }
  }

  /// Adds `mode` to the common set: every item added to ``RunLoopMode/common`` (before or
  /// after) is present in it too. A mode never leaves the set. Adding
  /// ``RunLoopMode/common`` itself stops the process with a message.
  /// (`CFRunLoopAddCommonMode`)
  public func addCommonMode(_ mode: RunLoopMode) {
    if mode == .common {
      reportMisuse("RunLoop", "addCommonMode(.common): the common pseudo-mode cannot be a common mode")
    }
    let scheduled: [RunLoopSource] = lock.withLock {
      guard !commonModeNames.contains(mode) else { return [] }
      commonModeNames.insert(mode)
      let items = modeItems(mode)
      var scheduled: [RunLoopSource] = []
      for source in commonSources where source.isValid && items.insert(source) { scheduled.append(source) }
      for timer in commonTimers where timer.isValid && items.insert(timer) { renewSchedule(timer) }
      for observer in commonObservers where observer.isValid { _ = items.insert(observer) }
      rearmIfSleeping()
      return scheduled
    }
    for source in scheduled { source.scheduleCallback?(self, mode) }
  }

  /// The items of `mode`, created if needed. Called with `lock` held.
  func modeItems(_ mode: RunLoopMode) -> ModeItems {
    if let items = modes[mode] { return items }
    let items = ModeItems(name: mode)
    modes[mode] = items
    return items
  }

  /// The concrete modes `mode` stands for. Called with `lock` held.
  func concreteModes(_ mode: RunLoopMode) -> [RunLoopMode] {
    mode == .common ? Array(commonModeNames) : [mode]
  }
}
