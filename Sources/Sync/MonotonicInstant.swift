import CThreadingShims

#if canImport(Glibc)
  import Glibc
#endif

/// A point in time on the system's monotonic clock (`CLOCK_MONOTONIC`).
///
/// Every deadline and timeout in the toolkit is measured on this clock, never on the wall
/// clock: setting the date, NTP steps and leap seconds do not move it, so a timed wait never
/// returns early or late because someone changed the time. It counts nanoseconds from an
/// unspecified start (on Linux, boot) and does not advance while the machine is suspended.
///
/// Instants compare, and add and subtract `Duration`s, saturating at ``distantPast`` and
/// ``distantFuture`` instead of overflowing.
///
/// ```swift
/// let deadline = MonotonicInstant.now + .milliseconds(250)
/// if mutex.lock(before: deadline) { defer { mutex.unlock() }; ... }
/// ```
///
/// ## Deadlines and timeouts
///
/// One rule spells time in every module of the toolkit:
///
/// - A **deadline** is a `MonotonicInstant`, labelled `before:`: `lock(before:)`,
///   `wait(before:)`, `withLock(when:before:)`, and in the other modules
///   `run(mode:before:)`, `send(_:before:)`.
/// - A **relative limit** is a `Duration`, labelled `timeout:`: `lock(timeout:)`,
///   `wait(timeout:)`, `withLock(when:timeout:)`. It means the deadline `.after(timeout)`.
///   Every call that takes one of the two takes the other too, except a named port's
///   `MessagePort.remote(name:connectTimeout:)` and `MessagePort.send(msgid:...)`, which
///   keep `CFMessagePortSendRequest`'s relative timeouts only.
/// - `until:` names a **predicate** only: `wait(until: { ready })`. (`LockedValue` spells its
///   predicate `when:`, as Abseil's `LockWhen`.) The one exception is sleeping, where nothing
///   can time out: it keeps Swift's `Clock.sleep` spelling, `sleep(for:)` and `sleep(until:)`.
/// - A deadline already passed, or a zero or negative timeout, makes one attempt and never
///   blocks.
///
/// How a timeout is reported depends on the family, for a reason each:
///
/// - Locks, conditions, condition variables, condition locks, semaphores, latches and atomic
///   waits return `Bool` (`false`: the time ran out); a scoped form that returns its body's
///   result (`withLock(before:_:)`, ``LockedValue/withLock(when:before:_:)``) returns nil
///   instead. On these hot paths a timeout is an expected outcome and nothing else can fail.
///   The shared-memory pair, which can fail otherwise, throws ``SharedMemoryLockError`` and
///   reports a timeout in its result: ``SharedMemoryLock/lock(before:)`` returns nil,
///   ``SharedMemoryCondition/wait(_:before:)`` a ``SharedMemoryCondition/WaitResult`` whose
///   `timedOut` is true.
/// - Run-loop runs return a `RunLoopRunResult`: a run ends in several ways besides the
///   timeout.
/// - Ports, named ports and perform requests throw a typed error: they already fail in other
///   ways and return a value on success. A port's or named port's `PortError` has the
///   status `sendTimeout` or `receiveTimeout`; a perform request throws
///   `PerformError.timedOut`.
@frozen
public struct MonotonicInstant: InstantProtocol, Hashable, Sendable, CustomStringConvertible {
  /// Nanoseconds since the clock's unspecified start.
  public var nanoseconds: Int64

  /// Creates the instant `nanoseconds` after the monotonic clock's start.
  @inlinable
  public init(nanoseconds: Int64) {
    self.nanoseconds = nanoseconds
  }

  /// The current instant (`clock_gettime(CLOCK_MONOTONIC)`, a vDSO call that does not enter
  /// the kernel).
  @inlinable
  public static var now: MonotonicInstant {
    let value = tk_monotonic_now_ns()
    // CLOCK_MONOTONIC is always present on Linux; failure would mean a broken libc.
    if value < 0 {
      fatalError(
        "\(SystemCallError(call: "clock_gettime(CLOCK_MONOTONIC)", code: SystemErrorCode(rawValue: Int32(truncatingIfNeeded: -value))))"
      )
    }
    return MonotonicInstant(nanoseconds: value)
  }

  /// An instant later than any the clock will reach: a deadline that never expires.
  public static let distantFuture = MonotonicInstant(nanoseconds: .max)

  /// An instant earlier than any the clock has shown: a deadline that has always expired.
  public static let distantPast = MonotonicInstant(nanoseconds: .min)

  /// The instant `duration` from now, saturating at ``distantFuture`` / ``distantPast``.
  @inlinable
  public static func after(_ duration: Duration) -> MonotonicInstant {
    now.advanced(by: duration)
  }

  /// This instant moved by `duration`, saturating instead of overflowing.
  @inlinable
  public func advanced(by duration: Duration) -> MonotonicInstant {
    // In 128 bits, then saturated: a duration beyond Int64's nanoseconds (up to
    // `.seconds(UInt64.max)` and more) still lands on the right side.
    MonotonicInstant(nanoseconds: Self.saturated(Int128(nanoseconds) + duration.attoseconds / 1_000_000_000))
  }

  /// The duration from this instant to `other` (negative when `other` is earlier). Exact
  /// for any two instants, ``distantPast`` and ``distantFuture`` included, so
  /// `advanced(by: duration(to: other)) == other` always holds.
  @inlinable
  public func duration(to other: MonotonicInstant) -> Duration {
    // In 128 bits: the difference of two Int64s (up to 2^64 ns) does not fit in an Int64,
    // but is far inside a Duration's range.
    Duration(attoseconds: (Int128(other.nanoseconds) - Int128(nanoseconds)) * 1_000_000_000)
  }

  /// The time left until this instant, or zero when it has passed.
  @inlinable
  public var remaining: Duration {
    let left = MonotonicInstant.now.duration(to: self)
    return left < .zero ? .zero : left
  }

  /// Whether this instant is now or in the past.
  @inlinable
  public var hasPassed: Bool { MonotonicInstant.now >= self }

  /// The instant `duration` after `instant`, saturating.
  @inlinable
  public static func + (instant: MonotonicInstant, duration: Duration) -> MonotonicInstant {
    instant.advanced(by: duration)
  }

  /// The instant `duration` before `instant`, saturating.
  @inlinable
  public static func - (instant: MonotonicInstant, duration: Duration) -> MonotonicInstant {
    // Subtracted in 128 bits, not by advancing by `.zero - duration`: negating the most
    // negative Duration overflows. Truncating division is symmetric, so this is the same
    // rounding as `advanced(by:)`.
    MonotonicInstant(nanoseconds: saturated(Int128(instant.nanoseconds) - duration.attoseconds / 1_000_000_000))
  }

  /// The duration from `earlier` to `later`.
  @inlinable
  public static func - (later: MonotonicInstant, earlier: MonotonicInstant) -> Duration {
    earlier.duration(to: later)
  }

  /// Orders instants by time.
  @inlinable
  public static func < (lhs: MonotonicInstant, rhs: MonotonicInstant) -> Bool {
    lhs.nanoseconds < rhs.nanoseconds
  }

  /// `"monotonic +12.345678901s"` (`-` for an instant before the clock's start).
  public var description: String {
    // Sign and magnitude apart: -0.5 s has no whole seconds to carry the sign, and
    // `distantPast` has no positive counterpart in Int64.
    let magnitude = nanoseconds.magnitude
    var digits = String(magnitude % 1_000_000_000)
    digits = String(repeating: "0", count: 9 - digits.count) + digits
    return "monotonic \(nanoseconds < 0 ? "-" : "+")\(magnitude / 1_000_000_000).\(digits)s"
  }

  /// The whole nanoseconds of `duration` (attoseconds truncated toward zero), saturated to
  /// `Int64`. Package API: every module converts durations this way.
  @inlinable
  package static func nanoseconds(of duration: Duration) -> Int64 {
    // From the full 128-bit count, not `components`: that traps when the whole seconds do
    // not fit in Int64 (`.seconds(UInt64.max)`, a sum past `.seconds(Int64.max)`), and such
    // a timeout must saturate like any other. Int128 division truncates toward zero.
    saturated(duration.attoseconds / 1_000_000_000)
  }

  /// `value` clamped to `Int64`'s range.
  @inlinable
  static func saturated(_ value: Int128) -> Int64 {
    if value > Int128(Int64.max) { return .max }
    if value < Int128(Int64.min) { return .min }
    return Int64(value)
  }

  /// This instant as a `timespec` for calls that take an absolute CLOCK_MONOTONIC time.
  /// Instants before the clock's start become zero (already expired).
  @inlinable
  public var timespec: timespec {
    let clamped = Swift.max(nanoseconds, 0)
    return Glibc.timespec(tv_sec: Int(clamped / 1_000_000_000), tv_nsec: Int(clamped % 1_000_000_000))
  }
}
