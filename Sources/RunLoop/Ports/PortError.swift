import Sync

/// A failed port operation: the guide's result code, the system call behind it when there
/// is one, and a sentence saying what happened.
///
/// Ports throw this (typed throws) for every failure the environment or a peer can cause:
/// deadlines that pass, ports that are or become invalid, sockets that fail, peers that send
/// garbage or die. Programming errors (a negative queue capacity, receiving on a port you do
/// not own) stop the process instead, as everywhere in the toolkit.
///
/// ```swift
/// do {
///     try port.send(message, timeout: .milliseconds(50))
/// } catch let error where error.status == .sendTimeout {
///     // the receiver is not keeping up; drop or retry later
/// }
/// ```
public struct PortError: Error, Hashable, Sendable, CustomStringConvertible {
  /// Which of the guide's result codes this failure is (never ``PortStatus/success``).
  public let status: PortStatus

  /// The system call that failed, when the failure came from one (a `connect` refused, a
  /// `send` that hit `EPIPE`...); nil when no call failed (see ``reason``).
  public let cause: SystemCallError?
  /// The rule a failure broke when no system call failed (a port directory others may read,
  /// a peer the policy refuses, a payload over the limit); nil otherwise.
  public let reason: Reason?

  /// What happened, in words, for logs and test failures.
  public let detail: String

  /// Creates an error with the guide's `status`, an optional system-call `cause` and a
  /// `detail` sentence. Stops the process when `status` is ``PortStatus/success``: success
  /// is not an error.
  public init(_ status: PortStatus, cause: SystemCallError? = nil, reason: Reason? = nil, detail: String) {
    if status == .success { reportMisuse("PortError", "success is not an error") }
    self.status = status
    self.cause = cause
    self.reason = reason
    self.detail = detail
  }

  /// A rule a port operation broke although every system call succeeded: matchable without
  /// parsing ``detail``.
  ///
  /// ```swift
  /// catch let error where error.reason == .peerRefused { ... }
  /// ```
  public enum Reason: Hashable, Sendable {
    /// The port directory's path is relative or longer than a Unix socket path allows.
    case directoryPathInvalid
    /// The port directory is not a directory (or is a symbolic link).
    case directoryNotADirectory
    /// The port directory belongs to another user.
    case directoryOwnedByAnotherUser
    /// The port directory's mode lets the group or others in (it must be 0700).
    case directoryNotPrivate
    /// The process serving the named port is refused by the peer policy (another user, by
    /// default).
    case peerRefused
    /// The payload is larger than the connection's limit.
    case payloadTooLarge
  }

  /// The guide's numeric result code (`rawValue`), for example -1.
  public var code: Int32 { status.rawValue }

  /// `"<status>: <detail>"`, followed by the system call error when there is one.
  public var description: String {
    var text = "\(status): \(detail)"
    if let cause { text += " [\(cause)]" }
    if let reason { text += " [\(reason)]" }
    return text
  }
}
