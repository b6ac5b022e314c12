import CThreadingShims
import Sync
import Threads

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

  /// ``wakeUp()``, then, when the loop's thread watches for the wake-up on the caller's own
  /// CPU (see ``spinsBeforeSleeping``), yields that CPU to it: the loop goes on at once, as
  /// a loop woken from a sleep would by preempting its waker, instead of waiting until the
  /// caller blocks. For wakers that hand the loop work and then wait for its answer (an
  /// executor's enqueue).
  package func wakeUpYieldingToWatcher() {
    wakeUp()
    let cpu = watchingCPU.load(ordering: .relaxed)
    if cpu >= 0 && cpu == tk_current_cpu() { Thread.yield() }
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

  /// Whether the loop's thread, about to sleep with nothing to wait for but a wake-up, first
  /// watches for one for up to 30 us when its previous such sleep was shorter than that. On
  /// by default; callable from any thread, taking effect at the loop's next sleep.
  ///
  /// **What it buys.** Meanwhile the loop is not marked asleep, so a thread that queues work
  /// for it (a call to an actor whose executor is the loop's `RunLoopExecutor`, a signalled
  /// source, a perform request) wakes it with one compare-and-swap and no system call, and the loop
  /// goes on at once instead of being woken by the kernel. On virtual machines, where waking
  /// an idle CPU takes microseconds, that is most of a cross-thread round trip: on a 2-vCPU
  /// KVM guest, a loop answering another thread's requests did so in a fraction of the time
  /// of two threads waking each other through an eventfd (see the README's cost tables).
  /// The loop yields the CPU between looks, so a partner thread on the same CPU runs and
  /// answers rather than waiting for the loop to give up; and a `RunLoopExecutor`'s enqueue
  /// of a task that goes back and forth between the loop and its caller, made on the CPU
  /// where the loop watches, yields that CPU back to the loop, which runs the job at once (as
  /// a loop woken from a sleep would, by preempting its waker) instead of after the enqueuing
  /// thread blocks (see that type's "Cost").
  ///
  /// **What it costs.** Up to 30 us of CPU before a sleep, and only while the loop's sleeps
  /// are that short: a loop whose sleeps are longer (timers, idle periods, work arriving
  /// every 100 us) never watches, and a watch that finds nothing ends in a sleep that is
  /// then not short, so the next one does not watch. A loop woken steadily every 10-30 us
  /// may use its CPU fully instead of partly. Loops with a timer or run deadline pending, or
  /// with descriptor sources or named ports, sleep in `epoll_wait` and never watch.
  ///
  /// Turn it off for a thread that must leave the CPU at once whenever it has nothing to do
  /// (battery-powered devices, a CPU shared with latency-critical work):
  ///
  /// ```swift
  /// worker.runLoop.spinsBeforeSleeping = false
  /// ```
  public var spinsBeforeSleeping: Bool {
    get { spinsBeforeSleepingSwitch.load(ordering: .relaxed) }
    // Relaxed: the switch orders no other memory; the loop reads it before each futex sleep.
    set { spinsBeforeSleepingSwitch.store(newValue, ordering: .relaxed) }
  }

  /// Whether the loop is asleep waiting for an event (also between two ``runDueWork(mode:)``
  /// calls, when a foreign loop waits on ``pollDescriptor`` for it). Meant for other threads
  /// (is it worth waking?); about your own thread's loop it is false while a run is active.
  /// (`CFRunLoopIsWaiting`)
  public var isWaiting: Bool {
    lock.withLock { isSleeping }
  }
}
