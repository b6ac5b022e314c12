/// The name of a run-loop mode: a named set of sources, timers and observers.
///
/// A run always happens in one concrete mode; items of other modes keep their events until a
/// run in their mode. Modes come into existence when something is added to them or a block is
/// queued for them (``RunLoop/allModes``); running a mode that does not exist creates nothing
/// and returns ``RunLoopRunResult/finished``, as in Core Foundation. ``default`` is where most
/// work goes. ``common`` is not a mode but a per-run-loop set
/// of modes (initially only ``default``, extended with ``RunLoop/addCommonMode(_:)``): an item
/// added to `common` is present in every common mode, including modes added to the set later.
/// Running in `common` itself is a programming error (the process stops with a message).
///
/// ```swift
/// let tracking: RunLoopMode = "tracking"
/// runLoop.addCommonMode(tracking)
/// runLoop.add(timer, forMode: .common)   // fires in .default and in tracking
/// ```
///
/// Core Foundation equivalent: a `CFRunLoopMode` (`CFStringRef`), `kCFRunLoopDefaultMode`,
/// `kCFRunLoopCommonModes`.
public struct RunLoopMode: Hashable, Sendable, RawRepresentable, ExpressibleByStringLiteral,
  CustomStringConvertible
{
  /// The mode's name; two modes are the same mode when their names are equal.
  public let rawValue: String

  /// Names a mode.
  public init(rawValue: String) {
    self.rawValue = rawValue
  }

  /// Names a mode.
  public init(_ name: String) {
    self.rawValue = name
  }

  /// Names a mode with a literal: `let mode: RunLoopMode = "tracking"`.
  public init(stringLiteral value: String) {
    self.rawValue = value
  }

  /// The default mode (`kCFRunLoopDefaultMode`): where timers, sources and blocks go unless
  /// told otherwise, and where ``RunLoop/run()`` runs.
  public static let `default` = RunLoopMode("kCFRunLoopDefaultMode")

  /// The common-modes pseudo-mode (`kCFRunLoopCommonModes`): add items to it to have them in
  /// every common mode of a run loop. Never run it.
  public static let common = RunLoopMode("kCFRunLoopCommonModes")

  /// The mode's name.
  public var description: String { rawValue }
}
