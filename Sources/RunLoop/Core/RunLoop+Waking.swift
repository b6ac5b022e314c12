import Sync

extension RunLoop {
  // MARK: Waking and stopping

  /// Makes a sleeping loop wake up and re-check its sources, timers, blocks and stop
  /// request. Coalesced: costs nothing when a wake-up is already pending, when the loop is
  /// not running (it re-checks everything when it starts), or when it has just woken up and
  /// is about to re-check; one compare-and-swap when the loop is busy; one `futex_wake` or
  /// eventfd write when it sleeps. Lock-free: never blocks.
  /// (`CFRunLoopWakeUp`)
  public func wakeUp() {
    // Full load: its leading fence keeps the caller's signal or queued block (stored just
    // before) ahead of this read, so returning early on a pending wake-up is safe: the loop
    // clears `wakeUpPending` with a `.full` update (trailing fence) before it checks sources.
    var state = wakeState.load(ordering: .full)
    if state & RunLoop.ignoringWakeUps != 0 && state & RunLoop.wakeUpDropped == 0 {
      _ = wakeState.or(RunLoop.wakeUpDropped, ordering: .full)
      return
    }
    while state & (RunLoop.ignoringWakeUps | RunLoop.wakeUpPending) == 0 {
      if wakeState.compareAndSwap(expected: state, desired: state | RunLoop.wakeUpPending, ordering: .full) {
        // Only a loop that committed to sleeping needs a system call; a busy one sees
        // `wakeUpPending` before it sleeps.
        if state & RunLoop.sleepingOnFutex != 0 {
          wakeState.wake(count: 1)
        } else if state & RunLoop.sleepingInEpoll != 0 {
          backend.signalWakeUp()
        }
        return
      }
      state = wakeState.load(ordering: .full)
    }
  }

  /// Ends the innermost active run call: it returns ``RunLoopRunResult/stopped`` at the end
  /// of its current pass (at once if it sleeps). Outer nested runs continue. Does nothing when
  /// the loop is not running (a later run is not affected, as in Core Foundation; libuv's
  /// `uv_stop` before `uv_run` would end that run after one iteration). Callable from any
  /// thread. (`CFRunLoopStop`)
  public func stop() {
    let running: Bool = lock.withLock {
      guard let activation = activations.last else { return false }
      activation.stopped = true
      return true
    }
    if running { wakeUp() }
  }

  /// The loop's thread was asked to exit: from now on every run of the loop ends (see the
  /// type's "Exit requests"). Called by the thread's exit-request handler, on any thread;
  /// lock-free.
  func threadExitRequested() {
    // Set before the wake-up, by an RMW on the word the owner updates at the top of every
    // pass and checks by compare-and-swap before every sleep: one modification order, so no
    // fence argument is needed (see `wakeState`); `.full` for the `wakeUp` load after it.
    _ = wakeState.fetchOr(RunLoop.exitRequested, ordering: .full)
    wakeUp()
  }

  /// Whether the loop's thread was asked to exit. Called by the loop's thread. An early
  /// check only (acquiring is enough: it orders nothing else); the decisive ones are the
  /// read-modify-writes at the top of a pass and before a sleep.
  var isExitRequested: Bool {
    wakeState.load(ordering: .acquiring) & RunLoop.exitRequested != 0
  }

  /// Marks every activation but the innermost as woken: a wake-up the innermost run received
  /// may have been meant for any of them (see `wakeState`). Called with `lock` held.
  func passWakeUpToOuterActivations() {
    for activation in activations.dropLast() { activation.wokenWhileNested = true }
  }

  /// Wakes the loop when a run's mode has nothing left that could end a wait, so that run
  /// returns finished instead of sleeping on. Called with `lock` held after an item left a
  /// mode; costs nothing when the loop is not running. Any activation counts, not only the
  /// innermost: the wake-up reaches an outer run through `passWakeUpToOuterActivations`.
  func wakeUpIfARunIsLeftEmpty() {
    if activations.isEmpty { return }
    if activations.contains(where: { isEmpty($0.mode) }) { wakeUp() }
  }

  /// Whether the loop is asleep waiting for an event (also between two ``runDueWork(mode:)``
  /// calls, when a foreign loop waits on ``pollDescriptor`` for it). Meant for other threads
  /// (is it worth waking?); about your own thread's loop it is false while a run is active.
  /// (`CFRunLoopIsWaiting`)
  public var isWaiting: Bool {
    lock.withLock { isSleeping }
  }
}
