import Sync

/// A callback invoked at chosen points of a run loop's pass (``RunLoopActivity``).
///
/// Observers of a mode fire in increasing ``order`` at each point they watch; a one-shot
/// observer (`repeats: false`) is invalidated after firing once. An observer belongs to one
/// run loop (possibly several of its modes); adding it to a second run loop stops the process
/// with a message, unless it was removed from every mode of the first (then it may join
/// another, as in Core Foundation); adding an invalidated observer is a no-op (the add
/// returns false).
/// Observers do not keep a mode alive: a mode with only observers is empty and a run in it
/// returns ``RunLoopRunResult/finished`` at once. An observer added during a pass is seen
/// from the next notification point on. The callback runs on the loop's thread without the
/// loop's lock; it is not re-entered by a nested run while it runs.
///
/// ```swift
/// let observer = RunLoopObserver(activities: .allActivities) { _, activity in
///     print("run loop:", activity)
/// }
/// RunLoop.current.add(observer, forMode: .default)
/// ```
///
/// Core Foundation equivalent: `CFRunLoopObserverCreateWithHandler`,
/// `CFRunLoopObserverInvalidate`.
public final class RunLoopObserver: @unchecked Sendable, Hashable {
  // @unchecked: the mutable state below is protected by `lock`.

  /// The activities the observer is called for.
  public let activities: RunLoopActivity
  /// Whether the observer stays after firing (false: invalidated after the first call).
  public let repeats: Bool
  /// Lower orders are called first at each point.
  public let order: Int

  /// Protects every `var` below. Taken after the run loop's lock, never before.
  let lock = Lock()
  /// Protected by `lock`.
  var valid = true
  /// True while the callback runs. Protected by `lock`.
  var firing = false
  /// The run loop it was added to. Protected by `lock`.
  weak var runLoop: RunLoop?
  /// The callback; nil once the observer is invalid, so what it captures is released at
  /// invalidation (Core Foundation releases an observer's context then), outside `lock`.
  /// Protected by `lock`.
  var callback: (@Sendable (RunLoopObserver, RunLoopActivity) -> Void)?

  /// The name diagnostics give the observer (stall reports): given at creation, or else
  /// where it was created (`#fileID:#line`, for example `"App/Frames.swift:42"`). Immutable.
  public var name: String { ItemName.text(explicitName, creationFile, creationLine) }
  /// The name given at creation, if any.
  let explicitName: String?
  /// Where the observer was created (`#fileID`, `#line` of the initializer's caller).
  let creationFile: StaticString
  let creationLine: UInt

  /// Creates an observer for `activities`, called with itself and the activity. `name` is
  /// what diagnostics call it (default: where it is created, see ``name``).
  public init(
    activities: RunLoopActivity, repeats: Bool = true, order: Int = 0,
    name: String? = nil, fileID: StaticString = #fileID, line: UInt = #line,
    _ callback: @escaping @Sendable (RunLoopObserver, RunLoopActivity) -> Void
  ) {
    self.explicitName = name
    self.creationFile = fileID
    self.creationLine = line
    self.activities = activities
    self.repeats = repeats
    self.order = order
    self.callback = callback
  }

  /// Whether the observer can still be called. (`CFRunLoopObserverIsValid`)
  public var isValid: Bool {
    lock.withLock { valid }
  }

  /// Removes the observer from every mode of its run loop; it is never called again, and
  /// its callback (with everything the callback captures) is released at once, or when the
  /// call in progress returns if the observer invalidates itself from its callback.
  /// Callable from any thread, including its own callback; idempotent.
  /// (`CFRunLoopObserverInvalidate`)
  public func invalidate() {
    let (loop, released): (RunLoop?, (@Sendable (RunLoopObserver, RunLoopActivity) -> Void)?) = lock.withLock {
      guard valid else { return (nil, nil) }
      valid = false
      // Taken out here and dropped after the lock: its captures' deinits may call back into
      // the observer or its run loop.
      let released = callback
      callback = nil
      return (runLoop, released)
    }
    loop?.removeFromEveryMode(self)
    _ = released
  }

  /// Calls the observer for `activity` unless it is invalid or already running; returns
  /// whether it called it. Called on the run loop's thread without its lock.
  @discardableResult
  func fire(_ activity: RunLoopActivity) -> Bool {
    let call: (@Sendable (RunLoopObserver, RunLoopActivity) -> Void)? = lock.withLock {
      guard valid && !firing, let callback else { return nil }
      firing = true
      return callback
    }
    guard let call else { return false }
    call(self, activity)
    lock.withLock { firing = false }
    if !repeats { invalidate() }
    return true
  }

  /// Identity.
  public static func == (lhs: RunLoopObserver, rhs: RunLoopObserver) -> Bool { lhs === rhs }

  /// Identity.
  public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}
