import CThreadingShims
import Sync

/// A timer that fires a block on its run loop's thread at a scheduled monotonic instant,
/// once or repeatedly.
///
/// **Never early**: a timer fires only when `MonotonicInstant.now >= nextFireDate` (the
/// loop's timerfd is armed on `CLOCK_MONOTONIC` with nanosecond precision, and the clock is
/// compared again before firing). It may be late: by up to ``tolerance`` plus whatever the
/// loop was busy with. The loop sleeps until the earliest fire date plus tolerance of its
/// timers and fires every timer due by then, so timers whose windows overlap share one
/// wake-up: a timer with a tolerance on an otherwise idle loop fires at the end of its
/// window (its fire date plus tolerance), earlier only when something else wakes the loop
/// within it. Give a tolerance only to timers that may be that late.
///
/// **Repeating** timers (``interval`` > 0) reschedule from their scheduled time, not from
/// when they actually fired: after firing for `t`, the next fire date is the first instant
/// `t + k * interval` after now. Missing several periods fires the timer once, and it stays on
/// its original grid. An interval of zero or less makes a one-shot timer, invalidated after it
/// fires. The grid has the monotonic clock's resolution: a positive interval below one
/// nanosecond is rounded up to one nanosecond, and fractions of a nanosecond are dropped.
///
/// **Equal fire dates** fire in schedule order, as in Core Foundation and libuv: the order
/// the timers were added, except that a timer re-armed (``setNextFireDate(_:)``, or moved to
/// its next period after firing) goes after the timers already due at that instant.
///
/// **The block is released** as soon as the timer is invalidated (by ``invalidate()``, or
/// after a one-shot timer fired), on the invalidating thread once the call is done with the
/// run loop, never while a run loop lock is held: what it captures may call the run loop
/// from its deinit.
///
/// A timer belongs to one run loop (it may be in several modes of it); adding it to a second
/// run loop stops the process with a message. Adding an invalidated timer is a no-op (the add
/// returns false). Every method may be called from any thread.
///
/// ```swift
/// let timer = RunLoopTimer(after: .milliseconds(100), interval: .milliseconds(300)) { _ in tick() }
/// RunLoop.current.add(timer, forMode: .common)
/// ```
///
/// **Changing a timer**: ``setNextFireDate(_:)``, ``interval`` and ``tolerance`` may be changed
/// at any time (the loop re-plans at once, also while it sleeps); ``scheduledFireDate`` tells
/// a callback which due instant it serves; an invalidated timer can be brought back with
/// ``rearm(fireAt:_:)`` and added again.
///
/// The API takes `Duration` and ``/Sync/MonotonicInstant``, so NaN or infinite intervals cannot be
/// expressed; the seconds-based initializer ``init(seconds:intervalSeconds:toleranceSeconds:name:fileID:line:_:)``
/// rejects them (returns nil). A negative tolerance is treated as zero.
///
/// Core Foundation equivalent: `CFRunLoopTimerCreateWithHandler`,
/// `CFRunLoopTimerSetNextFireDate`, `CFRunLoopTimerInvalidate`.
public final class RunLoopTimer: @unchecked Sendable, Hashable, CustomStringConvertible {
  // @unchecked: the mutable state below is protected by `lock`.

  /// The period of a repeating timer; zero or less means one-shot. A positive interval
  /// given below one nanosecond reads as one nanosecond.
  ///
  /// Settable at any time, from any thread. A repeating timer that has fired and waits for
  /// its next period is re-planned at once: its next fire date becomes its last scheduled
  /// fire date (``scheduledFireDate``) plus the new interval (already past: it fires at the
  /// loop's next timer check), replacing a date set with ``setNextFireDate(_:)``. A timer that
  /// has not fired yet keeps its first fire date; set from the timer's own callback, the new
  /// interval places the next firing. Zero or less makes the timer one-shot: it is
  /// invalidated after its next firing.
  public var interval: Duration {
    get { lock.withLock { intervalValue } }
    set {
      let value = newValue > .zero && newValue < .nanoseconds(1) ? .nanoseconds(1) : newValue
      let loop: RunLoop? = lock.withLock {
        intervalValue = value
        guard valid, !firing else { return nil }
        if value > .zero, let last = lastScheduledFireDate {
          fireDate = last.advanced(by: value)
          rearmed = true
        }
        // Renewed even when the fire date stays: the tolerance in effect follows the interval.
        return runLoop
      }
      loop?.timerScheduleDidChange(self)
    }
  }

  /// Protects every `var` below. Taken after the run loop's lock, never before.
  let lock = Lock()
  /// See ``interval``. Protected by `lock`.
  var intervalValue: Duration
  /// The scheduled instant of the latest firing (set just before the callback runs), nil
  /// before the first one and after ``rearm(fireAt:_:)``. Protected by `lock`.
  var lastScheduledFireDate: MonotonicInstant?
  /// Counts ``rearm(fireAt:_:)`` calls, so a firing learns that its callback re-armed the
  /// timer. Protected by `lock`.
  var rearmCount: UInt64 = 0
  /// The block; nil once the timer is invalid, so its captures go with the invalidation.
  /// Protected by `lock`, but never released with it held (see `invalidate`).
  var callback: (@Sendable (RunLoopTimer) -> Void)?
  /// The scheduled instant of the next firing. Protected by `lock`.
  var fireDate: MonotonicInstant
  /// The tolerance as set (see ``tolerance``). Protected by `lock`.
  var toleranceValue: Duration
  /// The tolerance the loop applies: `toleranceValue`, capped at half the interval for a
  /// repeating timer (see ``tolerance``). Read with `lock` held.
  var effectiveTolerance: Duration {
    intervalValue > .zero ? Swift.min(toleranceValue, intervalValue / 2) : toleranceValue
  }
  /// Protected by `lock`.
  var valid = true
  /// True while the callback runs, so a nested run does not fire it again. Protected by `lock`.
  var firing = false
  /// While `firing`: the identity of the thread running the callback (Sync's thread
  /// identity, never reused by a later thread), so ``rearm(fireAt:_:)`` of a valid timer is
  /// accepted from that callback only. Protected by `lock`.
  var firingThread: UInt64 = 0
  /// The run loop it was added to (nil until added, and again once in no mode). Protected by
  /// `lock`.
  weak var runLoop: RunLoop?
  /// Set, before the timer is first added, for a delayed perform request's private timer:
  /// it can never run again once its loop's thread has ended, so the loop invalidates it
  /// then (releasing its block), where a user's timer only leaves the loop. Protected by
  /// `lock`.
  var endsWithItsRunLoop = false
  /// Set by the owning run loop, with its lock held, to a value that loop never handed out
  /// before, each time it renews the timer's schedule entries; entries of another
  /// generation are stale. Protected by that lock.
  var scheduleGeneration: UInt64 = 0
  /// The timer's place among equal fire dates in its run loop (ties go to the lower):
  /// handed out when it joins the loop and again when it is re-armed. Protected by the
  /// owning run loop's lock.
  var scheduleSequence: UInt64 = 0
  /// Set when the fire date was re-armed (``setNextFireDate(_:)`` or the next period after
  /// a firing), until the loop renews the schedule and hands out a new `scheduleSequence`.
  /// Protected by `lock`.
  var rearmed = false

  /// The name diagnostics give the timer (stall reports): given at creation, or else where
  /// it was created (`#fileID:#line`, for example `"App/Poller.swift:42"`). Immutable.
  public var name: String { ItemName.text(explicitName, creationFile, creationLine) }
  /// The name given at creation, if any.
  let explicitName: String?
  /// Where the timer was created (`#fileID`, `#line` of the initializer's caller).
  let creationFile: StaticString
  let creationLine: UInt

  /// Creates a timer that first fires at `fireDate`, then every `interval` if it is positive
  /// (a positive interval below one nanosecond, the clock's resolution, is rounded up to one
  /// nanosecond). Not scheduled: add it to a run loop with
  /// ``RunLoop/add(_:forMode:)-(RunLoopTimer,_)``. `name` is what diagnostics call it
  /// (default: where it is created, see ``name``).
  public init(
    fireAt fireDate: MonotonicInstant, interval: Duration = .zero, tolerance: Duration = .zero,
    name: String? = nil, fileID: StaticString = #fileID, line: UInt = #line,
    _ block: @escaping @Sendable (RunLoopTimer) -> Void
  ) {
    self.fireDate = fireDate
    self.intervalValue = interval > .zero && interval < .nanoseconds(1) ? .nanoseconds(1) : interval
    self.toleranceValue = tolerance < .zero ? .zero : tolerance
    self.callback = block
    self.explicitName = name
    self.creationFile = fileID
    self.creationLine = line
  }

  /// Creates a timer that first fires `delay` from now, then every `interval` if it is
  /// positive. Not scheduled.
  public convenience init(
    after delay: Duration, interval: Duration = .zero, tolerance: Duration = .zero,
    name: String? = nil, fileID: StaticString = #fileID, line: UInt = #line,
    _ block: @escaping @Sendable (RunLoopTimer) -> Void
  ) {
    self.init(
      fireAt: .after(delay), interval: interval, tolerance: tolerance, name: name, fileID: fileID, line: line, block)
  }

  /// Creates a timer from intervals in seconds, as Core Foundation and Foundation take them
  /// (`CFRunLoopTimerCreate(_, fireDate, interval, ...)`), validating them first: returns nil
  /// when any value is NaN or infinite, instead of scheduling a timer that would fire at once
  /// or never. A negative delay fires at once; a zero or negative interval makes a one-shot
  /// timer, a positive one below a nanosecond repeats every nanosecond; a negative tolerance
  /// is treated as zero. Not scheduled.
  ///
  /// ```swift
  /// guard let timer = RunLoopTimer(seconds: userDelay, intervalSeconds: 0.3, { _ in tick() }) else {
  ///     throw ConfigurationError.invalidDelay
  /// }
  /// ```
  public convenience init?(
    seconds delay: Double, intervalSeconds interval: Double = 0, toleranceSeconds tolerance: Double = 0,
    name: String? = nil, fileID: StaticString = #fileID, line: UInt = #line,
    _ block: @escaping @Sendable (RunLoopTimer) -> Void
  ) {
    guard delay.isFinite, interval.isFinite, tolerance.isFinite else { return nil }
    // Clamp to what Duration and the monotonic clock can hold (about 292 years).
    let limit = 9.0e9
    func duration(_ seconds: Double) -> Duration { .seconds(Swift.min(Swift.max(seconds, -limit), limit)) }
    // A positive interval below an attosecond converts to a zero Duration: it stays positive
    // (a repeating timer, rounded up to a nanosecond like any sub-nanosecond interval).
    let period = interval > 0 ? Swift.max(duration(interval), .nanoseconds(1)) : duration(interval)
    self.init(
      after: duration(delay), interval: period, tolerance: duration(tolerance), name: name, fileID: fileID,
      line: line, block)
  }

  /// Creates a timer that first fires `delay` from now (then every `interval` if positive)
  /// and adds it to the default mode of the calling thread's run loop, like Foundation's
  /// `scheduledTimer`. The loop must still be run for the timer to fire. Creating the
  /// calling thread's run loop, when it has none yet, is ``RunLoop/current``'s: if its
  /// descriptors cannot be made (`EMFILE`) the process stops; create the timer with an
  /// initializer and add it to ``RunLoop/currentOrThrow()`` to handle that case.
  @discardableResult
  public static func scheduled(
    after delay: Duration, interval: Duration = .zero, tolerance: Duration = .zero,
    name: String? = nil, fileID: StaticString = #fileID, line: UInt = #line,
    _ block: @escaping @Sendable (RunLoopTimer) -> Void
  ) -> RunLoopTimer {
    let timer = RunLoopTimer(
      after: delay, interval: interval, tolerance: tolerance, name: name, fileID: fileID, line: line, block)
    RunLoop.current.add(timer, forMode: .default)
    return timer
  }

  /// Whether the timer repeats (its interval is positive).
  public var isRepeating: Bool { interval > .zero }

  /// The instant the timer's latest firing was scheduled for (monotonic clock): during the
  /// callback, the instant this firing was due at, which the callback cannot learn from
  /// ``nextFireDate`` (a repeating timer's is moved to the next period only after the
  /// callback, and a late firing is later than its due instant). Kept after the callback;
  /// nil before the first firing and after ``rearm(fireAt:_:)``.
  public var scheduledFireDate: MonotonicInstant? {
    lock.withLock { lastScheduledFireDate }
  }

  /// The instant the timer is next scheduled to fire (monotonic clock).
  /// (`CFRunLoopTimerGetNextFireDate`)
  public var nextFireDate: MonotonicInstant {
    lock.withLock { fireDate }
  }

  /// Re-arms the timer to fire at `date` (even a one-shot timer that has not fired yet; a
  /// repeating timer continues its grid from `date`). Takes effect at once when the loop is
  /// sleeping. Among timers due at the same instant, a re-armed timer fires after those
  /// already there, so timers re-armed to one instant fire in the order they were re-armed.
  /// No effect on an invalidated timer. (`CFRunLoopTimerSetNextFireDate`)
  ///
  /// While the callback runs (called from it or from another thread), a repeating timer
  /// honours a date later than the instant this firing was due at (``scheduledFireDate``),
  /// which replaces the next period; an earlier or equal date is ignored and the timer goes
  /// on to its next grid point, as in Core Foundation. A one-shot timer is invalidated after
  /// its callback whatever date was set (``rearm(fireAt:_:)`` from the callback keeps it).
  public func setNextFireDate(_ date: MonotonicInstant) {
    let loop: RunLoop? = lock.withLock {
      guard valid else { return nil }
      fireDate = date
      rearmed = true
      return runLoop
    }
    loop?.timerScheduleDidChange(self)
  }

  /// How late the loop may fire the timer to save wake-ups (never earlier). Negative values
  /// become zero. A repeating timer's tolerance is at most half its interval, as in Core
  /// Foundation: a larger value reads (and acts) as half the interval, since the loop may
  /// use all of it and a firing that late would slip past the next period, making an idle
  /// timer skip periods. The value set is kept: it applies in full if the interval grows or
  /// the timer becomes one-shot. (`CFRunLoopTimerSetTolerance`)
  public var tolerance: Duration {
    get { lock.withLock { effectiveTolerance } }
    set {
      let loop: RunLoop? = lock.withLock {
        toleranceValue = newValue < .zero ? .zero : newValue
        return valid ? runLoop : nil
      }
      loop?.timerScheduleDidChange(self)
    }
  }

  /// Makes an invalidated timer valid again (after ``invalidate()`` returned, or after a
  /// one-shot timer fired), with `block` as its callback, first firing at `date` and then
  /// every ``interval`` if positive. The block is given again because invalidation released
  /// the old one. Like a new timer, it is in no mode: add it to a run loop (any run loop) to
  /// schedule it.
  ///
  /// From the timer's own callback it may also be called while the timer is still valid
  /// (a one-shot timer is, until its callback returns): `date` and `block` replace the
  /// current ones, the timer stays in its modes and fires at `date` (a one-shot timer is then
  /// not invalidated after this firing). Elsewhere, re-arming a valid timer is misuse and
  /// stops the process (use ``setNextFireDate(_:)`` to move its fire date), also from another
  /// thread while the callback runs. Core Foundation
  /// has no counterpart (an invalidated `CFRunLoopTimer` stays invalid); libuv's
  /// `uv_timer_start` on a stopped timer is the peer.
  public func rearm(fireAt date: MonotonicInstant, _ block: @escaping @Sendable (RunLoopTimer) -> Void) {
    let (revived, replaced, loop): (Bool, (@Sendable (RunLoopTimer) -> Void)?, RunLoop?) = lock.withLock {
      guard !valid || (firing && firingThread == tk_thread_identity()) else { return (false, nil, nil) }
      // Moved out, to be released after the lock.
      let replaced = callback
      valid = true
      callback = block
      fireDate = date
      rearmed = true
      lastScheduledFireDate = nil
      rearmCount &+= 1
      return (true, replaced, runLoop)
    }
    if !revived {
      reportMisuse("RunLoopTimer", "rearm: the timer is valid; use setNextFireDate(_:) to move its fire date")
    }
    withExtendedLifetime(replaced) {}
    loop?.timerScheduleDidChange(self)
  }

  /// Makes an invalidated timer valid again, first firing `delay` from now; see
  /// ``rearm(fireAt:_:)``.
  public func rearm(after delay: Duration, _ block: @escaping @Sendable (RunLoopTimer) -> Void) {
    rearm(fireAt: .after(delay), block)
  }

  /// Whether the timer can still fire. (`CFRunLoopTimerIsValid`)
  public var isValid: Bool {
    lock.withLock { valid }
  }

  /// Stops the timer (it never fires again unless ``rearm(fireAt:_:)`` gives it a new block),
  /// removes it from every mode of its run loop and releases its block (and what the block
  /// captures) before returning, or, when called from the block itself, as soon as the block
  /// returns; never with a lock held, so a deinit it triggers may use the run loop. Callable
  /// from any thread; idempotent. (`CFRunLoopTimerInvalidate`)
  public func invalidate() {
    let (loop, block): (RunLoop?, (@Sendable (RunLoopTimer) -> Void)?) = lock.withLock {
      guard valid else { return (nil, nil) }
      valid = false
      // Moved out, to be released after the lock (a firing block is kept alive by `fireIfDue`).
      let block = callback
      callback = nil
      return (runLoop, block)
    }
    loop?.removeFromEveryMode(self)
    withExtendedLifetime(block) {}
  }

  /// Whether the timer can be scheduled now: valid and not in its callback.
  var isSchedulable: Bool {
    lock.withLock { valid && !firing }
  }

  /// The fire date and tolerance, or nil once invalid or when the timer is not `runLoop`'s
  /// (it may have moved to another loop meanwhile, whose lock guards its schedule fields).
  func scheduleSnapshot(in loop: RunLoop) -> (MonotonicInstant, Duration)? {
    lock.withLock { valid && runLoop === loop ? (fireDate, effectiveTolerance) : nil }
  }

  /// Like `scheduleSnapshot(in:)`, for renewing the schedule: also says whether the timer
  /// was re-armed since the last renewal, and clears that mark.
  func scheduleForRenewal(in loop: RunLoop) -> (fireDate: MonotonicInstant, tolerance: Duration, rearmed: Bool)? {
    lock.withLock {
      guard valid && runLoop === loop else { return nil }
      defer { rearmed = false }
      return (fireDate, effectiveTolerance, rearmed)
    }
  }

  /// The run loop the timer is scheduled in now, if any.
  var owningRunLoop: RunLoop? {
    lock.withLock { runLoop }
  }

  /// Fires the timer if it is still due, then reschedules or invalidates it; returns whether
  /// the callback ran. Called on the run loop's thread without its lock.
  @discardableResult
  func fireIfDue() -> Bool {
    let due: (MonotonicInstant, UInt64, @Sendable (RunLoopTimer) -> Void)? = lock.withLock {
      guard valid && !firing && fireDate <= .now, let callback else { return nil }
      firing = true
      firingThread = tk_thread_identity()
      lastScheduledFireDate = fireDate
      return (fireDate, rearmCount, callback)
    }
    // `block` keeps the block alive through an `invalidate()` from inside it; this frame
    // releases it, with no lock held.
    guard let (scheduled, rearmsBefore, block) = due else { return false }
    block(self)
    let oneShotDone: Bool = lock.withLock {
      firing = false
      firingThread = 0
      guard valid else { return false }
      // Re-armed by its callback: the new schedule stands.
      guard rearmCount == rearmsBefore else { return false }
      let interval = intervalValue
      guard interval > .zero else { return true }
      // A date set during the callback wins over the grid when it is later than the due
      // date; an earlier one is ignored (Core Foundation's `__CFRunLoopDoTimer` rule).
      guard fireDate <= scheduled else { return false }
      fireDate = RunLoopTimer.nextGridPoint(after: .now, from: scheduled, interval: interval)
      rearmed = true
      return false
    }
    if oneShotDone { invalidate() }
    return true
  }

  /// The first instant `start + k * interval` (k >= 1) strictly after `now`, saturating at
  /// `.distantFuture`: a late repeating timer fires once and keeps its original grid.
  /// Exact for any `start <= now` (even `.distantPast`) and any positive interval (one
  /// nanosecond at least, as the initializer guarantees).
  static func nextGridPoint(
    after now: MonotonicInstant, from start: MonotonicInstant, interval: Duration
  ) -> MonotonicInstant {
    let next = start.advanced(by: interval)
    if next > now { return next }
    // Here start < now, so `now - start` fits in a UInt64 (it may not in an Int64), and the
    // next grid point is `now + step - (now - start) % step`, in (now, now + step].
    let step = UInt64(Swift.max(MonotonicInstant.nanoseconds(of: interval), 1))
    let behind = UInt64(bitPattern: now.nanoseconds) &- UInt64(bitPattern: start.nanoseconds)
    return now.advanced(by: .nanoseconds(Int64(step - behind % step)))
  }

  /// Identity.
  public static func == (lhs: RunLoopTimer, rhs: RunLoopTimer) -> Bool { lhs === rhs }

  /// Identity.
  public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }

  /// `"RunLoopTimer(next: monotonic +12.3s, interval: 0.1 seconds, valid: true)"`.
  public var description: String {
    let (next, interval, isValid) = lock.withLock { (fireDate, intervalValue, valid) }
    return "RunLoopTimer(next: \(next), interval: \(interval), valid: \(isValid))"
  }
}
