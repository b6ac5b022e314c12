import Sync

extension RunLoop {
  // MARK: Sources

  /// Adds `source` to `mode` (to every common mode for ``RunLoopMode/common``) and calls its
  /// `schedule` callback for each mode it entered, on the calling thread. Adding a source
  /// twice to a mode is harmless. Returns false, adding nothing, when the source was
  /// invalidated or the loop's thread has ended (the loop never runs again; its `schedule`
  /// and `cancel` callbacks are not called). Does not wake the loop. (`CFRunLoopAddSource`)
  @discardableResult
  public func add(_ source: RunLoopSource, forMode mode: RunLoopMode) -> Bool {
    checkNotInherited("add(source)")
    var entered: [RunLoopMode] = []
    let added: Bool = lock.withLock {
      // A loop whose thread has ended never runs again (Core Foundation ignores additions to
      // a finished run loop): nothing is added, so nothing waits there for ever.
      if threadHasEnded { return false }
      guard source.register(in: self) else { return false }
      if mode == .common && !commonSources.contains(where: { $0 === source }) {
        commonSources.append(source)
      }
      for name in concreteModes(mode) where modeItems(name).insert(source) {
        entered.append(name)
      }
      return true
    }
    for name in entered { source.scheduleCallback?(self, name) }
    return added
  }

  /// Removes `source` from `mode` (from every common mode for ``RunLoopMode/common``),
  /// calling its `cancel` callback for each mode it left. Removing what was never added is
  /// harmless. (`CFRunLoopRemoveSource`)
  public func remove(_ source: RunLoopSource, forMode mode: RunLoopMode) {
    let left: [RunLoopMode] = lock.withLock {
      if mode == .common {
        guard let index = commonSources.firstIndex(where: { $0 === source }) else { return [] }
        commonSources.remove(at: index)
      }
      let left = concreteModes(mode).filter { modes[$0]?.remove(source) ?? false }
      if !left.isEmpty { wakeUpIfARunIsLeftEmpty() }
      return left
    }
    for name in left { source.cancelCallback?(self, name) }
  }

  /// Whether `source` is in `mode` (for ``RunLoopMode/common``: whether it was added to
  /// common). (`CFRunLoopContainsSource`)
  public func contains(_ source: RunLoopSource, inMode mode: RunLoopMode) -> Bool {
    lock.withLock {
      if mode == .common { return commonSources.contains { $0 === source } }
      return modes[mode]?.contains(source) ?? false
    }
  }

  /// Removes an invalidated source everywhere, calling `cancel` for each mode it left.
  func removeFromEveryMode(_ source: RunLoopSource) {
    let left: [RunLoopMode] = lock.withLock {
      commonSources.removeAll { $0 === source }
      let left = modes.values.filter { $0.remove(source) }.map(\.name)
      if !left.isEmpty { wakeUpIfARunIsLeftEmpty() }
      return left
    }
    for name in left { source.cancelCallback?(self, name) }
  }

  // MARK: Timers

  /// Adds `timer` to `mode` (to every common mode for ``RunLoopMode/common``). Returns false,
  /// adding nothing, when the timer was invalidated or the loop's thread has ended (the loop
  /// never runs again; the timer stays free for another loop). A timer belongs to one run
  /// loop: adding it to a second one stops the process with a message (Core Foundation
  /// ignores that add silently, leaving a timer that never fires where the caller expects
  /// it; here the mistake is reported). If the loop sleeps in that mode its timerfd is
  /// re-armed at once (no wake-up needed). (`CFRunLoopAddTimer`)
  @discardableResult
  public func add(_ timer: RunLoopTimer, forMode mode: RunLoopMode) -> Bool {
    checkNotInherited("add(timer)")
    let outcome: Int = lock.withLock {
      if threadHasEnded { return 0 }
      let claim: Int = timer.lock.withLock {
        guard timer.valid else { return 0 }
        if let owner = timer.runLoop, owner !== self { return -1 }
        if timer.runLoop == nil {
          // Newly this loop's: it goes after the timers added before it on equal dates.
          nextTimerSequence &+= 1
          timer.scheduleSequence = nextTimerSequence
        }
        timer.runLoop = self
        // A generation of this loop from the claim on, even if the timer is invalidated
        // before `renewSchedule` (which then skips it): one it kept from an earlier stay here
        // or in another loop could match an old entry of this loop's heaps once a `rearm`
        // makes it valid again, before `renewSchedule` or its removal runs.
        nextTimerGeneration &+= 1
        timer.scheduleGeneration = nextTimerGeneration
        return 1
      }
      guard claim == 1 else { return claim }
      timerClaimedForTesting?(timer)
      if mode == .common && !commonTimers.contains(where: { $0 === timer }) {
        commonTimers.append(timer)
      }
      for name in concreteModes(mode) { _ = modeItems(name).insert(timer) }
      renewSchedule(timer)
      rearmIfSleeping()
      return 1
    }
    if outcome < 0 {
      reportMisuse("RunLoop", "add(timer): the timer is already scheduled in another run loop")
    }
    return outcome == 1
  }

  /// Removes `timer` from `mode` (every common mode for ``RunLoopMode/common``). Harmless if
  /// it is not there. Once in no mode, the timer may be added to another run loop. Removed
  /// by a callback of the pass that was about to fire it, it does not fire in that pass.
  /// (`CFRunLoopRemoveTimer`)
  public func remove(_ timer: RunLoopTimer, forMode mode: RunLoopMode) {
    lock.withLock {
      if mode == .common {
        guard let index = commonTimers.firstIndex(where: { $0 === timer }) else { return }
        commonTimers.remove(at: index)
      }
      for name in concreteModes(mode) { _ = modes[name]?.remove(timer) }
      releaseTimerIfUnscheduled(timer)
      // A sleeping loop's timerfd may be armed for the removed timer: move it to the next
      // instant the mode still needs, as `removeFromEveryMode` does for an invalidated one.
      rearmIfSleeping()
      wakeUpIfARunIsLeftEmpty()
    }
  }

  /// Whether `timer` is in `mode` (for ``RunLoopMode/common``: whether it was added to
  /// common). (`CFRunLoopContainsTimer`)
  public func contains(_ timer: RunLoopTimer, inMode mode: RunLoopMode) -> Bool {
    lock.withLock {
      if mode == .common { return commonTimers.contains { $0 === timer } }
      return modes[mode]?.contains(timer) ?? false
    }
  }

  /// The earliest scheduled fire date among `mode`'s valid timers, or nil. A timer whose
  /// callback is running does not count (its fire date is the instant it is firing for, already
  /// past; its next one is decided when the callback returns), as in Core Foundation.
  /// (`CFRunLoopGetNextTimerFireDate`)
  public func nextTimerFireDate(inMode mode: RunLoopMode) -> MonotonicInstant? {
    lock.withLock {
      modes[mode]?.timers.compactMap { timer in
        timer.lock.withLock { timer.valid && !timer.firing ? timer.fireDate : nil }
      }.min()
    }
  }

  /// Forgets the timer's owner once it is in no mode. Called with `lock` held.
  func releaseTimerIfUnscheduled(_ timer: RunLoopTimer) {
    if commonTimers.contains(where: { $0 === timer }) { return }
    if modes.values.contains(where: { $0.contains(timer) }) { return }
    timer.lock.withLock { if timer.runLoop === self { timer.runLoop = nil } }
  }

  /// Removes an invalidated timer everywhere, and forgets being its owner (a re-armed timer
  /// may join any run loop).
  func removeFromEveryMode(_ timer: RunLoopTimer) {
    lock.withLock {
      commonTimers.removeAll { $0 === timer }
      for mode in modes.values { _ = mode.remove(timer) }
      timer.lock.withLock { if timer.runLoop === self { timer.runLoop = nil } }
      rearmIfSleeping()
      wakeUpIfARunIsLeftEmpty()
    }
  }

  /// `timer`'s fire date or tolerance changed: renew its schedule, and re-arm now if the
  /// loop sleeps.
  func timerScheduleDidChange(_ timer: RunLoopTimer) {
    lock.withLock {
      renewSchedule(timer)
      rearmIfSleeping()
    }
  }

  /// Replaces `timer`'s schedule entries in every mode holding it with ones for its current
  /// fire date and tolerance (none once it is invalid). Called with `lock` held: after it is
  /// added, after its schedule changes, and after the pass that fired it. A re-armed timer
  /// gets a new sequence, so it goes after the timers already due at its new instant.
  func renewSchedule(_ timer: RunLoopTimer) {
    // Not this loop's any more (or invalid): its entries here are already stale (it left
    // every mode), and its schedule fields belong to its new loop's lock.
    guard let schedule = timer.scheduleForRenewal(in: self) else { return }
    if schedule.rearmed {
      nextTimerSequence &+= 1
      timer.scheduleSequence = nextTimerSequence
    }
    // Unique in this loop, so no entry of a freed timer matches a timer that reuses its
    // address (see `ModeItems.currentTimer`).
    nextTimerGeneration &+= 1
    timer.scheduleGeneration = nextTimerGeneration
    for mode in modes.values where mode.contains(timer) {
      mode.schedule(timer, fireDate: schedule.fireDate, tolerance: schedule.tolerance, in: self)
    }
  }

  /// The items of the mode handed to the `pollDescriptor` (see `parkedMode`), if it exists.
  /// Called with `lock` held.
  var parkedModeItems: ModeItems? {
    guard let name = parkedMode else { return nil }
    return name == .default ? defaultItems : modes[name]
  }

  /// While the loop sleeps, moves the timerfd to the new wake instant of the mode it sleeps
  /// in, so timer changes from other threads take effect without a wake-up. Called with
  /// `lock` held.
  func rearmIfSleeping() {
    // Asleep in a run, or handed to the `pollDescriptor` between `runDueWork` calls (no run
    // active, so `currentRunDeadline` is the distant future).
    guard isSleeping, let mode = activations.last?.mode ?? parkedModeItems else { return }
    let wakeAt = min(mode.earliestWakeDeadline(), currentRunDeadline)
    if sleepsOnFutex {
      // A futex sleep has no instant to wake at: if there is one now, the loop must wake
      // and sleep again in epoll with the timerfd armed.
      if wakeAt != .distantFuture { wakeUp() }
      return
    }
    if wakeAt != armedDeadline {
      backend.armTimer(at: wakeAt)
      armedDeadline = wakeAt
    }
  }

  // MARK: Observers

  /// Adds `observer` to `mode` (every common mode for ``RunLoopMode/common``). Returns false,
  /// adding nothing, when it was invalidated or the loop's thread has ended; adding it to a
  /// second run loop stops the process with a message (Core Foundation ignores that add
  /// silently). (`CFRunLoopAddObserver`)
  @discardableResult
  public func add(_ observer: RunLoopObserver, forMode mode: RunLoopMode) -> Bool {
    checkNotInherited("add(observer)")
    let outcome: Int = lock.withLock {
      if threadHasEnded { return 0 }
      let claim: Int = observer.lock.withLock {
        guard observer.valid else { return 0 }
        if let owner = observer.runLoop, owner !== self { return -1 }
        observer.runLoop = self
        return 1
      }
      guard claim == 1 else { return claim }
      if mode == .common && !commonObservers.contains(where: { $0 === observer }) {
        commonObservers.append(observer)
      }
      for name in concreteModes(mode) { _ = modeItems(name).insert(observer) }
      return 1
    }
    if outcome < 0 {
      reportMisuse("RunLoop", "add(observer): the observer belongs to another run loop")
    }
    return outcome == 1
  }

  /// Removes `observer` from `mode` (every common mode for ``RunLoopMode/common``). Harmless
  /// if it is not there. Once in no mode, the observer may be added to another run loop.
  /// (`CFRunLoopRemoveObserver`)
  public func remove(_ observer: RunLoopObserver, forMode mode: RunLoopMode) {
    lock.withLock {
      if mode == .common {
        guard let index = commonObservers.firstIndex(where: { $0 === observer }) else { return }
        commonObservers.remove(at: index)
      }
      for name in concreteModes(mode) { _ = modes[name]?.remove(observer) }
      // In no mode any more: it may join another run loop (as a timer, and as in Core
      // Foundation, which forgets the observer's loop when it leaves its last mode).
      if !commonObservers.contains(where: { $0 === observer })
        && !modes.values.contains(where: { $0.observers.contains { $0 === observer } })
      {
        observer.lock.withLock { if observer.runLoop === self { observer.runLoop = nil } }
      }
    }
  }

  /// Whether `observer` is in `mode` (for ``RunLoopMode/common``: whether it was added to
  /// common). (`CFRunLoopContainsObserver`)
  public func contains(_ observer: RunLoopObserver, inMode mode: RunLoopMode) -> Bool {
    lock.withLock {
      if mode == .common { return commonObservers.contains { $0 === observer } }
      return modes[mode]?.observers.contains { $0 === observer } ?? false
    }
  }

  /// Removes an invalidated observer everywhere.
  func removeFromEveryMode(_ observer: RunLoopObserver) {
    lock.withLock {
      commonObservers.removeAll { $0 === observer }
      for mode in modes.values { _ = mode.remove(observer) }
    }
  }
}

extension RunLoop {
  /// Stops the process when this run loop was inherited through `fork()` (see
  /// `ForkDetection`): adding to it in the child would use the parent's epoll set and
  /// timerfd. One relaxed load.
  @inline(__always)
  func checkNotInherited(_ operation: String) {
    if backend.isInherited {
      ForkDetection.reportInheritedUse("RunLoop", "run loop", operation, creator: backend.creatorProcess)
    }
  }
}
