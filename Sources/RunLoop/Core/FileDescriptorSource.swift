import CThreadingShims
import Sync

/// Watches a file descriptor from a run loop: a callback on the run-loop thread whenever the
/// descriptor is readable or writable (the guide's `CFFileDescriptor` / `CFSocket` role).
///
/// Add the source to one or more modes of a run loop (``RunLoop/add(_:forMode:)-(FileDescriptorSource,_)``);
/// while the loop runs in one of them, the handler is called with the events that are ready,
/// once per pass for as long as they stay ready (level-triggered: read what you need, the
/// rest is reported again in the next pass). In other modes nothing is reported and the loop
/// does not spin. Any number of descriptors can be watched by one run loop: the kernel
/// reports all that are ready in one wait, and all of them are handled in one pass, without
/// a helper thread.
///
/// ``enable(_:)`` and ``disable(_:)`` choose the events of interest (a disabled source stays
/// scheduled but is never called); ``invalidate()`` removes the source from every run loop
/// for good. The source does not own the descriptor: invalidate it before closing the
/// descriptor (see ``invalidate()`` for when closing is safe).
///
/// A run loop does not keep the source alive (as for ``Port``; in Core Foundation the
/// run-loop source retains its `CFFileDescriptor`, and GLib's context owns an fd source):
/// keep a reference for as long as the descriptor should be watched. Releasing the last one
/// invalidates the source (a readiness already reported is then not delivered).
///
/// **Closing a watched descriptor** (before ``invalidate()``) is misuse. epoll watches the
/// open file, not the number: while a duplicate of the descriptor (`dup`, `fork`, a
/// descriptor passed to another process) keeps the file open, the kernel goes on reporting
/// it, and the number may meanwhile name another file. The run loop never turns that into
/// events: when it finds the number closed (`poll` answers `POLLNVAL`) or naming another
/// file, the process stops with a message naming the descriptor. In checked mode
/// (``/Sync/MisuseChecking``) the file's identity (`st_dev`, `st_ino`, recorded when the
/// source joins a run loop) is compared at every wake-up, before the handler runs (one
/// `fstat` per wake-up); in unchecked mode a reused number is found when the source is
/// re-armed after its handler, which may have been called once with the other file's
/// events. A descriptor closed with no duplicate left simply stops being reported. (An
/// `eventfd`, `timerfd` or epoll descriptor has no inode of its own: all of one kind share
/// the kernel's anonymous inode, so identity cannot tell two of them apart; the other
/// checks still apply.)
///
/// ```swift
/// let source = FileDescriptorSource(descriptor: socket, events: .readable) { source, events in
///     if events.contains(.readable) { drain(socket) }
///     if events.contains(.hangUp) { source.invalidate(); close(socket) }
/// }
/// RunLoop.current.add(source, forMode: .default)
/// ```
///
/// Watching a descriptor the kernel cannot poll (a regular file: `EPERM`), one that is not
/// open (`EBADF`), or one another source already watches in the same run loop (`EEXIST`: use
/// one source with both events instead) is misuse and stops the process when the source is
/// added to a run loop. The system refusing another watch (`ENOSPC`: the user's
/// `fs.epoll.max_user_watches` is reached; `ENOMEM`) also stops the process, with a message
/// naming the call: adding a source reports nothing to its caller.
/// The corresponding C functions are `CFFileDescriptorCreate`,
/// `CFFileDescriptorEnableCallBacks`, `CFFileDescriptorDisableCallBacks`,
/// `CFFileDescriptorInvalidate`; on Linux, `epoll_ctl` and `poll`.
public final class FileDescriptorSource: Hashable, Sendable, CustomStringConvertible {
  /// Descriptor events.
  public struct Events: OptionSet, Sendable, Hashable {
    /// The bit pattern (`POLLIN`/`EPOLLIN` = 1, `POLLOUT` = 4, `POLLERR` = 8, `POLLHUP` = 16).
    public let rawValue: UInt32

    /// Creates events from their `poll` bit pattern.
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// Data can be read (or a connection accepted) without blocking.
    public static let readable = Events(rawValue: UInt32(TK_EPOLL_READABLE))
    /// Data can be written without blocking.
    public static let writable = Events(rawValue: UInt32(TK_EPOLL_WRITABLE))
    /// An error is pending on the descriptor (reported, never requested).
    public static let error = Events(rawValue: UInt32(TK_EPOLL_ERROR))
    /// The peer hung up (reported, never requested).
    public static let hangUp = Events(rawValue: UInt32(TK_EPOLL_HANGUP))
  }

  /// The watched descriptor (not owned: never closed by the source).
  public let descriptor: Int32

  let member: DescriptorMember

  /// Creates a source for `descriptor`, interested in `events` (`.readable`, `.writable` or
  /// both). `handler` runs on the thread of the run loop that noticed, with the source and
  /// the events that are ready (which may include `.error` and `.hangUp`).
  public init(
    descriptor: Int32, events: Events = .readable,
    handler: @escaping @Sendable (FileDescriptorSource, Events) -> Void
  ) {
    self.descriptor = descriptor
    let box = WeakSourceBox()
    member = DescriptorMember(descriptor: descriptor, interest: events.intersection([.readable, .writable]).rawValue) {
      ready in
      if let source = box.value { handler(source, Events(rawValue: ready)) }
    }
    box.value = self
  }

  deinit {
    member.invalidate()
  }

  /// The events the handler is currently called for.
  public var enabledEvents: Events { Events(rawValue: member.currentInterest) }

  /// Adds `events` (`.readable`, `.writable`) to those the handler is called for. Any thread.
  /// (`CFFileDescriptorEnableCallBacks`)
  public func enable(_ events: Events) {
    member.setInterest(enabledEvents.union(events.intersection([.readable, .writable])).rawValue)
  }

  /// Stops calling the handler for `events`. Any thread; takes effect from the next pass.
  /// (`CFFileDescriptorDisableCallBacks`)
  public func disable(_ events: Events) {
    member.setInterest(enabledEvents.subtracting(events).rawValue)
  }

  /// Whether the source can still fire.
  public var isValid: Bool { member.source.isValid }

  /// Removes the source from every mode of every run loop; it never fires again. Idempotent;
  /// any thread. (`CFFileDescriptorInvalidate`)
  ///
  /// Once it returns, no run loop watches the descriptor and the source makes no further
  /// system call on it, so you may close it (and its number may be reused by a new source).
  /// If a run loop is checking the descriptor at that moment, the call waits for that
  /// zero-timeout `poll` or re-arm to end (it never waits for the handler).
  ///
  /// Invalidated from another thread, a handler call the run loop's thread has already
  /// begun may still be running or about to start, with the events polled before: such a
  /// handler must not assume the descriptor is still open. Invalidating and closing on the
  /// run loop's thread (for example from the handler itself) rules that out.
  public func invalidate() {
    member.invalidate()
  }

  /// Sources are equal only to themselves.
  public static func == (lhs: FileDescriptorSource, rhs: FileDescriptorSource) -> Bool { lhs === rhs }

  /// Hashes the source's identity.
  public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }

  /// `"FileDescriptorSource(fd 7, readable, valid)"`.
  public var description: String {
    var events: [String] = []
    if enabledEvents.contains(.readable) { events.append("readable") }
    if enabledEvents.contains(.writable) { events.append("writable") }
    return
      "FileDescriptorSource(fd \(descriptor), \(events.isEmpty ? "disabled" : events.joined(separator: "+")), \(isValid ? "valid" : "invalid"))"
  }
}

/// Lets the member's handler reach its source without keeping it alive.
private final class WeakSourceBox: @unchecked Sendable {
  // Written once in the source's init, before the member can fire.
  weak var value: FileDescriptorSource?
}
