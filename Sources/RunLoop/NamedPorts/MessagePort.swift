import CThreadingShims
import Sync

/// A named message port, local or remote: the guide's `CFMessagePort` (and `NSMessagePort`
/// with its name server) for Linux, between threads and between processes of one user.
///
/// **Local** ports are registered under a name (``local(name:handler:)``) and answer
/// messages with a handler; **remote** ports are looked up by that name
/// (``remote(name:connectTimeout:)``), from the same process or any other process of the same
/// user, and ``send(msgid:data:replyPortName:sendTimeout:receiveTimeout:replyMode:)`` to it.
/// A process holds at most one valid remote port per name: looking the name up again
/// returns it.
///
/// **Names** are unique per user: 1...64 bytes of ASCII letters, digits and `. _ - @ + :`,
/// not starting with a dot. Creating a local port under a name this process already
/// registered returns *the existing port* and ignores the new handler (the guide's rule;
/// `CFMessagePortCreateLocal` reports it through `shouldFreeInfo`); ``registered(name:)``
/// tells beforehand. A name registered by another live process throws
/// ``PortStatus/invalid``.
///
/// **Transport.** A local port listens on a Unix-domain stream socket `<name>.sock` in a
/// per-user directory: `$XDG_RUNTIME_DIR/threading-toolkit`; without `XDG_RUNTIME_DIR`,
/// `/tmp/threading-toolkit-<uid>`, unless another user took that path first, then (and from
/// then on) `$HOME/.tk-ports`. The directory is created with mode 0700 and refused
/// when another user owns it or group/others may access it. Both ends check the other's kernel-recorded
/// credentials (`SO_PEERCRED`): only processes of the same user are served. Messages travel
/// as length-checked frames; a peer that sends an oversized or malformed frame is
/// disconnected and reported (``setPeerRejectionHandler(_:)``) while the port keeps serving
/// everyone else, and every message accepted before the bad frame is still handled. The
/// serving thread never waits for one peer: replies a peer does not read wait in a bounded
/// buffer, and a peer that breaks the port's ``ServerLimits`` (too many peers, too many
/// bytes held, too slow) is disconnected. A name
/// is claimed with an `flock` that the kernel releases when its process dies, so a crashed
/// owner's name can be registered again at once. Invalidating a port removes its files.
///
/// **Serving in a run loop** (the guide's way): add the local port to modes of the owning
/// thread's run loop with ``RunLoop/add(_:forMode:)-(MessagePort,_)``; its handler then runs
/// on that thread while the loop runs in one of those modes. The port's sockets sit in one
/// epoll set that the loop watches as one descriptor, so any number of senders costs the
/// loop one member. A port scheduled in the run loops of several threads is served by one
/// of them at a time: each message is handled once, on whichever loop's thread takes it.
///
/// A run loop does not keep a port alive (in Core Foundation the run-loop source retains
/// it): keep a reference for as long as the port should serve; releasing the last one
/// invalidates it and frees its name.
///
/// **Serving without a run loop.** The thread that owns a local port calls
/// ``serve(before:)`` to wait for and handle messages; the handler runs on that thread.
/// Serving a port both ways at once is misuse and stops the process.
///
/// **fork().** A child of `fork()` cannot use a port it inherited: sending, serving or
/// adding it to a run loop stops the child with a message naming both processes (the
/// socket, the name claim and the connections are the parent's). Invalidating or releasing
/// the inherited copy only closes the child's descriptors: the parent's name stays
/// registered and its peers stay connected. A child that needs ports creates its own.
///
/// **Sending blocks**; it never runs a run loop. A one-way send returns once the message is
/// handed to the kernel; a request waits for the reply until the receive timeout. Results
/// map to the guide's codes (``PortStatus``). A peer that dies or invalidates its port
/// mid-request ends the wait at once with ``PortStatus/becameInvalid``, never a hang.
/// A request to a local port of this process that only the calling thread serves (from
/// inside the port's own handler, or with the port scheduled in this thread's run loop and
/// no other) is answered at once on the calling thread by calling the handler, the way a
/// waiting perform request to one's own thread runs at once: blocking would wait for a
/// reply that only this thread could produce. The outcome is the socket path's: the same
/// payload limits, and a handler slower than the receive timeout ends the request with
/// ``PortStatus/receiveTimeout`` (its reply is discarded).
///
/// ```swift
/// // Process or thread A:
/// let server = try MessagePort.local(name: "com.example.worker") { message in
///     message.msgid == 1 ? Array("pong".utf8) : nil
/// }
/// while running { _ = try server.serve(before: .after(.seconds(1))) }
///
/// // Process or thread B:
/// let remote = try MessagePort.remote(name: "com.example.worker")
/// let reply = try remote.send(msgid: 1, data: Array("ping".utf8),
///                             sendTimeout: .seconds(1), receiveTimeout: .seconds(1),
///                             replyMode: .awaitReply)
/// ```
///
/// The corresponding C functions are `CFMessagePortCreateLocal`, `CFMessagePortCreateRemote`,
/// `CFMessagePortSendRequest`, `CFMessagePortInvalidate` and
/// `CFMessagePortSetInvalidationCallBack`.
public final class MessagePort: Hashable, Sendable, CustomStringConvertible {
  /// Answers one message on the serving thread. The returned bytes are the reply to a
  /// request (nil replies with no bytes); for a one-way message the result is ignored. The
  /// message's ``PortMessage/replyPort-swift.property`` is the sender's `.name(...)` when it
  /// gave one. A reply over the 1 MiB payload limit is not delivered: the request throws
  /// ``PortStatus/transportError`` (over a connection the sender's side refuses it as a
  /// malformed reply and invalidates its remote port; answered on the calling thread, with
  /// ``PortError/Reason/payloadTooLarge``).
  public typealias Handler = @Sendable (PortMessage) -> [UInt8]?

  /// Whether a send waits for the reply.
  public enum ReplyMode: Sendable, Hashable {
    /// Returns once the message is handed over; the handler's reply is discarded.
    case oneWay
    /// Waits for the handler's reply until the receive timeout.
    case awaitReply
  }

  private enum Role {
    case local(NamedPortListener)
    case remote(NamedPortConnection)
  }

  /// The name the port is registered (local) or was looked up (remote) under.
  public let name: String

  private let role: Role
  private let callbacks = CallbackSlots()
  /// The run-loop member watching a local port's descriptor, created on first scheduling.
  private let runLoopMember = MemberSlot()

  private init(name: String, role: Role) {
    self.name = name
    self.role = role
  }

  deinit {
    runLoopMember.take()?.invalidate()
    switch role {
    case .local(let listener): listener.invalidate()
    case .remote(let connection): connection.invalidate()
    }
  }

  /// Registers a local port under `name` with `handler`, or returns the local port this
  /// process already registered under `name` (then `handler` is ignored).
  ///
  /// Throws ``PortError``: ``PortStatus/invalid`` for a malformed name or one registered by
  /// another live process; ``PortStatus/transportError`` when the port directory is unsafe
  /// (owner, mode) or a socket call fails. Never blocks.
  public static func local(name: String, handler: @escaping Handler) throws(PortError) -> MessagePort {
    try local(name: name, limits: .standard, handler: handler)
  }

  /// Registers a local port under `name` with `handler` that serves its peers within
  /// `limits` (see ``ServerLimits``), or returns the local port this process already
  /// registered under `name` (then `handler` and `limits` are ignored).
  ///
  /// Throws as ``local(name:handler:)``. Never blocks. Stops the process when a limit is
  /// not positive.
  public static func local(name: String, limits: ServerLimits, handler: @escaping Handler) throws(PortError)
    -> MessagePort
  {
    limits.checkPositive()
    // First, as `remote(name:)` does: a malformed name is `invalid` whatever the state of the
    // port directory, and costs no directory check.
    try PortName.validate(name)
    return try LocalPortRegistry.shared.register(name: name) { () throws(PortError) -> MessagePort in
      let directory = try PortDirectory.prepare()
      let listener = try NamedPortListener(name: name, directory: directory, serverLimits: limits) { frame in
        handler(
          PortMessage(msgid: frame.msgid, payload: frame.payload, replyPort: frame.replyPortName.map { .name($0) }))
      }
      return MessagePort(name: name, role: .local(listener))
    }
  }

  /// The local port this process registered under `name`, if it is still valid.
  public static func registered(name: String) -> MessagePort? {
    LocalPortRegistry.shared.lookup(name: name)
  }

  /// Looks up the port registered under `name` by this or another process of the same user
  /// and connects to it, waiting at most `connectTimeout` when its listener is saturated.
  ///
  /// While a remote port for `name` that this process obtained is still valid (and
  /// referenced), returns *that port* (the same object, `==` to it, one connection) without
  /// connecting again, as ``local(name:handler:)`` returns the registered local port and as
  /// `CFMessagePortCreateRemote` does. Its users share it: their sends are serialised, and
  /// ``invalidate()`` ends it for all of them. Once it is invalid, the next call connects
  /// anew.
  ///
  /// Throws ``PortError``: ``PortStatus/invalid`` when no live port has that name;
  /// ``PortStatus/transportError`` when its process runs as another user (`SO_PEERCRED`),
  /// the directory is unsafe, or a socket call fails.
  @available(*, noasync, message: "may block while connecting")
  public static func remote(name: String, connectTimeout: Duration = .seconds(1)) throws(PortError) -> MessagePort {
    // First, so that a malformed name costs no directory check, socket or buffer.
    try PortName.validate(name)
    if let existing = RemotePortRegistry.shared.lookup(name: name) { return existing }
    let directory = try PortDirectory.prepare()
    let connection = try NamedPortConnection(name: name, directory: directory, connectTimeout: connectTimeout)
    // Two threads may have connected at once: the first registered wins, the other
    // connection closes as its port is released here.
    return RemotePortRegistry.shared.adopt(MessagePort(name: name, role: .remote(connection)))
  }

  /// Whether this is a remote port (a sending end) rather than a local, registered one.
  public var isRemote: Bool {
    if case .remote = role { return true }
    return false
  }

  /// Whether the port still works: false after ``invalidate()``, or for a remote port once
  /// its peer went away. A remote port that finds its peer gone here becomes invalid for
  /// good and runs its invalidation handler, on the calling thread, before this returns
  /// (as `CFMessagePortIsValid` does). Never blocks (not even while a send on the port is
  /// in flight).
  public var isValid: Bool {
    switch role {
    case .local(let listener):
      return listener.isValid
    case .remote(let connection):
      let (valid, invalidatedNow) = connection.checkValidity()
      if invalidatedNow { fireInvalidation() }
      return valid
    }
  }

  /// ``isValid`` without its side effect (no invalidation, no handler): for the registries,
  /// which ask under their locks, and for ``description``.
  var isUsable: Bool {
    switch role {
    case .local(let listener): return listener.isValid
    case .remote(let connection): return connection.isValid
    }
  }

  /// Sends a message to a remote port: the guide's `CFMessagePortSendRequest`.
  ///
  /// With ``ReplyMode/oneWay`` returns nil once the message is handed over (within
  /// `sendTimeout`); with ``ReplyMode/awaitReply`` then waits up to `receiveTimeout` for the
  /// reply and returns its bytes. Blocks the calling thread (it does not run a run loop);
  /// concurrent sends on one remote port are serialised. `replyPortName` travels with the
  /// message (the check-in pattern of Listings 3-17..3-19).
  ///
  /// The two durations are two different limits, as in `CFMessagePortSendRequest`, not one
  /// deadline split in two: `sendTimeout` bounds handing the message over (a stuck or full
  /// peer), `receiveTimeout` the wait for the peer's reply, counted from when the message
  /// was handed over. A request can so take up to the time the hand-over took plus
  /// `receiveTimeout`; a handler slower than `receiveTimeout` times the request out however
  /// generous `sendTimeout` is.
  ///
  /// Throws ``PortError`` with the guide's code: ``PortStatus/sendTimeout``,
  /// ``PortStatus/receiveTimeout`` (the port stays usable; a late reply is discarded),
  /// ``PortStatus/invalid`` (already invalid), ``PortStatus/becameInvalid`` (the peer closed
  /// or died), ``PortStatus/transportError`` (a socket failure, a malformed reply, a
  /// payload over 1 MiB). A send timeout part-way through a message, a peer that went away
  /// and a malformed reply invalidate the remote port (the invalidation handler runs).
  /// Sending on a local port is misuse and stops the process.
  @available(*, noasync, message: "blocks until the message is sent (and the reply arrives)")
  @discardableResult
  public func send(
    msgid: Int32, data: [UInt8] = [], replyPortName: String? = nil, sendTimeout: Duration,
    receiveTimeout: Duration, replyMode: ReplyMode
  ) throws(PortError) -> [UInt8]? {
    guard case .remote(let connection) = role else {
      reportMisuse(
        "MessagePort", "send on the local port \"\(name)\"; create a remote port with MessagePort.remote(name:)")
    }
    if ForkDetection.isInherited(connection.creatorProcess) {
      ForkDetection.reportInheritedUse("MessagePort", "message port", "send", creator: connection.creatorProcess)
    }
    if replyMode == .awaitReply, connection.isOpen, let local = LocalPortRegistry.shared.lookup(name: name),
      case .local(let listener) = local.role, local.isServedOnlyByCallingThread(listener)
    {
      // Only while the connection still reaches a live port: that is then this local port
      // (a live port holds its name). A connection whose port was invalidated reaches no
      // port, even if a new local port took the name since: the request fails as it would
      // over the socket, and this remote port becomes invalid.
      let (reachesPort, invalidatedNow) = connection.checkValidity()
      if !reachesPort {
        if invalidatedNow { fireInvalidation() }
        throw connection.failure ?? PortError(.becameInvalid, detail: "port \"\(name)\" closed the connection")
      }
      do {
        return try connection.answerLocally(
          msgid: msgid, payload: data, replyPortName: replyPortName, receiveTimeout: receiveTimeout, by: listener)
      } catch {
        // The handler (or another thread) invalidated the port meanwhile: its connections
        // are shut, and as after a request over the socket this remote port finds its peer
        // gone and becomes invalid, running its invalidation handler.
        if error.status == .becameInvalid && connection.checkValidity().invalidatedNow { fireInvalidation() }
        throw error
      }
    }
    let sendDeadline = MonotonicInstant.after(sendTimeout)
    var invalidatedConnection = false
    do {
      return try connection.send(
        msgid: msgid, payload: data, replyPortName: replyPortName, sendDeadline: sendDeadline,
        awaitReply: replyMode == .awaitReply, receiveTimeout: receiveTimeout,
        invalidatedConnection: &invalidatedConnection)
    } catch {
      // Only when this send's failure invalidated the port: an `invalidate()` (or an
      // `isValid`) that ended it runs the handler itself, before it returns.
      if invalidatedConnection { fireInvalidation() }
      throw error
    }
  }

  /// Waits until messages arrive or `deadline` (monotonic clock) passes and handles them on
  /// the calling thread, which must be the only one serving this port. Returns how many
  /// messages were handled (0 at the deadline).
  ///
  /// Throws ``PortStatus/becameInvalid`` once the port is invalid (including when
  /// ``invalidate()`` is called from another thread during the wait, which ends it at once),
  /// ``PortStatus/transportError`` when waiting fails. Serving a remote port, or one port
  /// from two threads at once, is misuse and stops the process.
  @available(*, noasync, message: "blocks until messages arrive")
  @discardableResult
  public func serve(before deadline: MonotonicInstant) throws(PortError) -> Int {
    guard case .local(let listener) = role else {
      reportMisuse("MessagePort", "serve on the remote port \"\(name)\"")
    }
    if ForkDetection.isInherited(listener.creatorProcess) {
      ForkDetection.reportInheritedUse("MessagePort", "message port", "serve", creator: listener.creatorProcess)
    }
    // A failure does not run the invalidation handler: only `invalidate()` (or the release)
    // invalidates a local port, and `invalidate()` runs the handler itself before it returns.
    return try listener.serve(before: deadline)
  }

  /// Waits at most `timeout` (monotonic clock) for messages and handles them on the calling
  /// thread; see ``serve(before:)``.
  @available(*, noasync, message: "blocks until messages arrive")
  @discardableResult
  public func serve(timeout: Duration) throws(PortError) -> Int {
    try serve(before: .after(timeout))
  }

  /// Invalidates the port: a local port's name is unregistered at once and every connected
  /// sender's pending request ends with ``PortStatus/becameInvalid``, even while the port's
  /// handler is busy (its reply is then discarded); a remote port closes its connection, and a
  /// send of its in flight on another thread ends with ``PortStatus/becameInvalid``. Never
  /// waits for a handler or a send. Runs the invalidation handler once. A local port lets go
  /// of its message and rejection handlers (and what they capture) here, even if they are
  /// running, so a handler that captures its own port does not keep it alive. Idempotent;
  /// any thread.
  public func invalidate() {
    let invalidated: Bool
    switch role {
    case .local(let listener):
      // Leave the run loops before the descriptor they watch is closed.
      runLoopMember.take()?.invalidate()
      invalidated = listener.invalidate()
      LocalPortRegistry.shared.remove(name: name, port: self)
    case .remote(let connection):
      invalidated = connection.invalidate()
    }
    if invalidated { fireInvalidation() }
  }

  /// Sets the function run once when the port becomes invalid, by ``invalidate()`` or
  /// because its peer went away (`CFMessagePortSetInvalidationCallBack`). It runs on the
  /// thread that noticed, before the call that noticed returns: ``invalidate()``; for a
  /// remote port also ``isValid``, a send or ``remote(name:connectTimeout:)`` that finds the
  /// peer gone. (A remote port learns that only then: nothing watches it in the background.)
  /// Releasing the port does not run it. Setting it on an already invalid port runs it at once, on the
  /// calling thread, also when an earlier handler already ran for that invalidation. A
  /// handler it replaces is released before it returns, with no toolkit lock held.
  public func setInvalidationHandler(_ handler: (@Sendable (MessagePort) -> Void)?) {
    let (replaced, runNow) = callbacks.setInvalidation(handler)
    // Released here, outside the slot's lock: its captures may use this port in their deinit.
    withExtendedLifetime(replaced) {}
    if let runNow {
      runNow(self)
    } else if !isValid {
      fireInvalidation()
    }
  }

  /// Sets the function told, on the serving thread, about each peer a local port refused
  /// (another user, the peer limit) or disconnected (oversized or malformed frame, a
  /// ``ServerLimits`` limit broken, reply not collected in time), and about a failing
  /// `accept` (out of descriptors: told once per shortage).
  public func setPeerRejectionHandler(_ handler: (@Sendable (String) -> Void)?) {
    guard case .local(let listener) = role else { return }
    listener.setRejectionHandler(handler.map { report in { rejection in report(rejection.description) } })
  }

  /// Whether only the calling thread can serve this local port right now: it is inside the
  /// port's serving pass, or the port is scheduled in its run loop and no other.
  private func isServedOnlyByCallingThread(_ listener: NamedPortListener) -> Bool {
    listener.isBeingServedByCallingThread || runLoopMember.current?.isScheduledOnlyInCallingThreadsLoop == true
  }

  /// The member to add to run-loop modes (local ports only), created on first use; nil for a
  /// remote or invalid port.
  func runLoopSource() -> RunLoopSource? {
    guard case .local(let listener) = role else { return nil }
    if ForkDetection.isInherited(listener.creatorProcess) {
      ForkDetection.reportInheritedUse(
        "MessagePort", "message port", "RunLoop.add(messagePort)", creator: listener.creatorProcess)
    }
    return runLoopMember.obtain { () -> DescriptorMember? in
      let descriptor = listener.readinessDescriptor
      if descriptor < 0 { return nil }
      return DescriptorMember(
        handlingDescriptor: descriptor, interest: UInt32(TK_EPOLL_READABLE),
        handler: { [weak self] _ in
          guard let self else { return true }
          do {
            // Nil while another thread's run loop serves the port: left to that pass.
            return try listener.serveOnceFromRunLoop() != nil
          } catch {
            if !listener.isValid { self.invalidate() }
            return true
          }
        })
    }?.source
  }

  /// The member if one was created (for removal).
  var existingRunLoopSource: RunLoopSource? { runLoopMember.current?.source }

  private func fireInvalidation() {
    if case .local = role { LocalPortRegistry.shared.remove(name: name, port: self) }
    if let handler = callbacks.takeInvalidation() { handler(self) }
  }

  /// Ports are equal only to themselves.
  public static func == (lhs: MessagePort, rhs: MessagePort) -> Bool { lhs === rhs }

  /// Hashes the port's identity.
  public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }

  /// `"MessagePort(local \"name\")"`, `"MessagePort(remote \"name\", invalid)"`...
  public var description: String {
    "MessagePort(\(isRemote ? "remote" : "local") \"\(name)\"\(isUsable ? "" : ", invalid"))"
  }
}

/// The invalidation callback, fired at most once. No handler is released or called inside
/// the lock: they leave it as return values.
private final class CallbackSlots: Sendable {
  private struct State {
    var invalidation: (@Sendable (MessagePort) -> Void)?
    /// Set once the invalidation was reported; a handler set afterwards is run by its setter
    /// instead of being stored (it would never be taken).
    var fired = false
  }

  private let state = LockedValue(State())

  /// Stores `handler`, returning the one it replaces (for the caller to release); once the
  /// invalidation was reported, stores nothing and returns `handler` as `runNow`.
  func setInvalidation(
    _ handler: (@Sendable (MessagePort) -> Void)?
  ) -> (replaced: (@Sendable (MessagePort) -> Void)?, runNow: (@Sendable (MessagePort) -> Void)?) {
    state.withLock { state in
      if state.fired { return (nil, handler) }
      let replaced = state.invalidation
      state.invalidation = handler
      return (replaced, nil)
    }
  }

  func takeInvalidation() -> (@Sendable (MessagePort) -> Void)? {
    state.withLock { state in
      if state.fired || state.invalidation == nil { return nil }
      state.fired = true
      defer { state.invalidation = nil }
      return state.invalidation
    }
  }
}

/// Holds the lazily created run-loop member of a local message port.
private final class MemberSlot: Sendable {
  private struct State {
    var member: DescriptorMember?
    /// Set by `take()`: no member is created afterwards.
    var retired = false
  }

  private let state = LockedValue(State())

  func obtain(_ create: () -> DescriptorMember?) -> DescriptorMember? {
    state.withLock { state in
      if state.retired { return nil }
      if state.member == nil { state.member = create() }
      return state.member
    }
  }

  var current: DescriptorMember? { state.withLock { $0.member } }

  /// Takes the member out for good (no new one is created afterwards).
  func take() -> DescriptorMember? {
    state.withLock { state in
      state.retired = true
      defer { state.member = nil }
      return state.member
    }
  }
}
