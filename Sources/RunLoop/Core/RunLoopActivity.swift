/// The points of a run-loop pass an observer can watch, with Core Foundation's bit values.
///
/// One pass in order: ``entry`` (once per run call), ``beforeTimers``, ``beforeSources``,
/// custom sources fire, ``beforeWaiting`` (skipped for a zero-timeout run and in a pass where
/// a custom source fired), sleep, ``afterWaiting`` (only if the loop slept), timers fire, and
/// finally ``exit`` (once per run call).
///
/// Core Foundation equivalent: `CFRunLoopActivity` (`kCFRunLoopEntry` ...).
public struct RunLoopActivity: OptionSet, Hashable, Sendable, CustomStringConvertible {
  /// The bit mask, equal to Core Foundation's.
  public let rawValue: UInt

  /// Creates an activity set from Core Foundation bit values.
  public init(rawValue: UInt) {
    self.rawValue = rawValue
  }

  /// The run call is entering the loop (1).
  public static let entry = RunLoopActivity(rawValue: 1 << 0)
  /// The loop is about to fire due timers (2).
  public static let beforeTimers = RunLoopActivity(rawValue: 1 << 1)
  /// The loop is about to fire signalled custom sources (4).
  public static let beforeSources = RunLoopActivity(rawValue: 1 << 2)
  /// The loop is about to sleep (32).
  public static let beforeWaiting = RunLoopActivity(rawValue: 1 << 5)
  /// The loop has just woken up (64).
  public static let afterWaiting = RunLoopActivity(rawValue: 1 << 6)
  /// The run call is leaving the loop (128).
  public static let exit = RunLoopActivity(rawValue: 1 << 7)
  /// Every activity (`kCFRunLoopAllActivities`, 0x0FFFFFFF).
  public static let allActivities = RunLoopActivity(rawValue: 0x0FFF_FFFF)

  /// `"entry"`, `"beforeTimers"`, ... joined by `|`.
  public var description: String {
    let names: [(RunLoopActivity, String)] = [
      (.entry, "entry"), (.beforeTimers, "beforeTimers"), (.beforeSources, "beforeSources"),
      (.beforeWaiting, "beforeWaiting"), (.afterWaiting, "afterWaiting"), (.exit, "exit"),
    ]
    let present = names.filter { contains($0.0) }.map(\.1)
    return present.isEmpty ? "[]" : present.joined(separator: "|")
  }
}
