import Sync
import Threads

/// How diagnostics name things: items by their given name or creation site, threads by name
/// and id.
enum ItemName {
  /// An item's name: the one given at creation, or `file:line` of its creation.
  static func text(_ explicit: String?, _ file: StaticString, _ line: UInt) -> String {
    explicit ?? "\(file):\(line)"
  }

  /// `thread "worker" (#7)`, `thread #7` when unnamed, `the main thread`, or `an unknown
  /// thread` before the loop's thread is known.
  static func describe(_ thread: Thread?) -> String {
    guard let thread else { return "an unknown thread" }
    if let name = thread.name, !name.isEmpty { return "thread \"\(name)\" (#\(thread.id))" }
    if thread.isMainThread { return "the main thread" }
    return "thread #\(thread.id)"
  }

  /// A duration in whole milliseconds (microseconds below one millisecond).
  static func describe(_ duration: Duration) -> String {
    let nanoseconds = MonotonicInstant.nanoseconds(of: duration)
    if nanoseconds < 1_000_000 { return "\(nanoseconds / 1_000) us" }
    return "\(nanoseconds / 1_000_000) ms"
  }
}
