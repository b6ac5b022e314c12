import Sync

#if canImport(Glibc)
  import Glibc
#endif

/// The sending side of a named message port: a connection to the listener registered under
/// a name, in this or another process of the same user.
///
/// Requests are serialised (one in flight per connection, callers queue on `requestMutex`),
/// each tagged with a sequence number so that a reply arriving after its request timed out
/// is recognised and discarded. The connection becomes invalid, for good, when the listener
/// closes it or dies, when a reply is malformed, when a send times out part-way through a
/// frame (the stream could not be resynchronised), or on ``invalidate()``.
///
/// Two locks, so that asking about or invalidating the connection never waits for a request
/// in flight: `requestMutex` is held for a whole request (send and reply wait); `stateMutex`
/// only for a few loads and stores, never across a blocking call (taken after
/// `requestMutex`, never before). ``invalidate()`` shuts the socket down, which ends a
/// request in flight on another thread at once; the descriptor itself closes when that
/// request lets go of the socket, so it is never closed under a thread polling it.
final class NamedPortConnection: @unchecked Sendable {
  let name: String
  let limits: Frame.Limits
  /// The process that created the connection (see `ForkDetection`). In a child of `fork()`
  /// the socket is shared with the parent: the child's copy only closes its descriptor.
  let creatorProcess = ForkDetection.start()

  // Protected by `requestMutex`, held for a whole send (and reply wait).
  private let requestMutex = Sync.Lock()
  private var decoder: FrameDecoder
  private var nextSequence: UInt32 = 1
  /// Whether the request in flight invalidated the connection (see ``invalidate(because:)``).
  private var requestInvalidated = false
  // Protected by `stateMutex`.
  private let stateMutex = Sync.Lock()
  private var socket: UnixSocket?
  private var invalidationReason: PortError?
  /// Where `recv` writes replies; allocated once (not zeroed per request), as the last step
  /// of a successful `init` so that a failed one leaves nothing behind.
  private let chunk: UnsafeMutableRawBufferPointer

  /// Connects to the port registered as `name` in `directory`, checking that the listening
  /// process passes `policy` (`SO_PEERCRED`).
  ///
  /// Throws ``PortStatus/invalid`` when no live port has that name (`ENOENT`,
  /// `ECONNREFUSED`) or the name is malformed, ``PortStatus/transportError`` when the owner
  /// fails the policy or a socket call fails.
  init(
    name: String, directory: PortDirectory, policy: PeerPolicy = .sameUser, limits: Frame.Limits = .standard,
    connectTimeout: Duration = .seconds(1)
  ) throws(PortError) {
    try PortName.validate(name)
    self.name = name
    self.limits = limits
    decoder = FrameDecoder(limits: limits)
    let socket: UnixSocket
    do {
      socket = try UnixSocket.connect(to: directory.socketPath(for: name), before: .after(connectTimeout))
    } catch {
      if error.code == .connectionRefused {
        // A socket file nobody listens on: its owner died. Clean up after it.
        NamedPortListener.removeDeadOwnersFiles(name: name, directory: directory)
      }
      if error.code == .noSuchFileOrDirectory || error.code == .connectionRefused {
        throw PortError(.invalid, cause: error, detail: "no port is registered as \"\(name)\"")
      }
      throw PortError(.transportError, cause: error, detail: "cannot connect to port \"\(name)\"")
    }
    let credentials: PeerCredentials
    do {
      credentials = try socket.peerCredentials()
    } catch {
      throw PortError(.transportError, cause: error, detail: "cannot read the credentials of port \"\(name)\"")
    }
    if !policy.admits(credentials) {
      throw PortError(
        .transportError, reason: .peerRefused,
        detail:
          "port \"\(name)\" is served by pid \(credentials.processID) uid \(credentials.userID), refused by the peer policy"
      )
    }
    self.socket = socket
    chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 16 * 1024, alignment: 8)
  }

  deinit {
    chunk.deallocate()
  }

  /// Whether the connection has not been invalidated (no system call: for the send path;
  /// ``isValid`` also asks whether the peer went away).
  var isOpen: Bool { stateMutex.withLock { socket != nil } }

  /// Whether the connection can still carry messages, without changing it (for the
  /// registry, which must not start an invalidation under its lock; see ``checkValidity()``).
  /// Never waits for a request in flight; one zero-timeout `poll`.
  var isValid: Bool {
    guard let socket = stateMutex.withLock({ socket }) else { return false }
    // The peer invalidated its port or died: the connection can carry nothing more.
    return !socket.peerHasHungUp
  }

  /// Whether the connection can still carry messages; a connection whose peer hung up (it
  /// invalidated its port or died) is invalidated here, for good, as the next send would
  /// find it. `invalidatedNow` says whether this call did that, so that exactly one caller
  /// reports the invalidation (Core Foundation's `CFMessagePortIsValid` invalidates a
  /// remote port whose peer is gone, callout included). Never waits for a request in
  /// flight (which keeps its own reference to the socket and ends on its own); one
  /// zero-timeout `poll`.
  func checkValidity() -> (valid: Bool, invalidatedNow: Bool) {
    guard let current = stateMutex.withLock({ socket }) else { return (false, false) }
    if !current.peerHasHungUp { return (true, false) }
    let invalidatedNow = stateMutex.withLock { () -> Bool in
      guard socket === current else { return false }
      socket = nil
      if invalidationReason == nil {
        invalidationReason = PortError(.becameInvalid, detail: "port \"\(name)\" closed the connection")
      }
      return true
    }
    // Released here, outside the state lock: the descriptor closes unless a request in flight
    // still holds it.
    withExtendedLifetime(current) {}
    return (false, invalidatedNow)
  }

  /// Why the connection became invalid, once it has.
  var failure: PortError? { stateMutex.withLock { invalidationReason } }

  /// Answers a request through `listener`'s handler on the calling thread instead of the
  /// socket (see ``MessagePort``: for a port only the calling thread serves), after the
  /// same checks a send makes. A reply the handler gives after `receiveTimeout` (counted
  /// from the hand-over, which here is the call) is discarded with
  /// ``PortStatus/receiveTimeout``, as a late reply over the socket is.
  func answerLocally(
    msgid: Int32, payload: [UInt8], replyPortName: String?, receiveTimeout: Duration,
    by listener: NamedPortListener
  ) throws(PortError) -> [UInt8] {
    try checkOutgoing(payload: payload, replyPortName: replyPortName)
    let receiveDeadline = MonotonicInstant.after(receiveTimeout)
    let reply = try listener.answerOnCallingThread(
      Frame(kind: .request, msgid: msgid, sequence: 0, replyPortName: replyPortName, payload: payload))
    if receiveDeadline.hasPassed {
      throw PortError(
        .receiveTimeout, detail: "port \"\(name)\" replied (on the calling thread) after the receive deadline")
    }
    // The limit a reply over the socket is held to (the receiving side refuses it there),
    // so the outcome does not depend on which thread serves the port. The connection is
    // untouched: nothing was sent on it.
    if reply.count > limits.maximumPayload {
      throw PortError(
        .transportError, reason: .payloadTooLarge,
        detail: "port \"\(name)\" replied with \(reply.count) bytes, over the limit of \(limits.maximumPayload)")
    }
    return reply
  }

  /// The checks every outgoing message passes: payload size, reply port name.
  private func checkOutgoing(payload: [UInt8], replyPortName: String?) throws(PortError) {
    if payload.count > limits.maximumPayload {
      throw PortError(
        .transportError, reason: .payloadTooLarge,
        detail: "payload of \(payload.count) bytes exceeds the limit of \(limits.maximumPayload)")
    }
    if let replyPortName { try PortName.validate(replyPortName) }
  }

  /// ``send(msgid:payload:replyPortName:sendDeadline:awaitReply:receiveTimeout:invalidatedConnection:)``
  /// for a caller with no invalidation to report.
  func send(
    msgid: Int32, payload: [UInt8], replyPortName: String?, sendDeadline: MonotonicInstant,
    awaitReply: Bool, receiveTimeout: Duration
  ) throws(PortError) -> [UInt8]? {
    var invalidatedConnection = false
    return try send(
      msgid: msgid, payload: payload, replyPortName: replyPortName, sendDeadline: sendDeadline,
      awaitReply: awaitReply, receiveTimeout: receiveTimeout, invalidatedConnection: &invalidatedConnection)
  }

  /// Sends one message. With `awaitReply`, then waits at most `receiveTimeout` for its reply,
  /// counted from when the whole frame was handed to the kernel, and returns the reply
  /// payload; otherwise returns nil once the frame is handed over. Blocks the calling thread
  /// (and queues other senders on this connection). `invalidatedConnection` is set to
  /// whether this request's failure invalidated the connection: then its caller, and no one
  /// else, reports the invalidation (an ``invalidate()`` or a ``checkValidity()`` that came
  /// first reports it itself).
  func send(
    msgid: Int32, payload: [UInt8], replyPortName: String?, sendDeadline: MonotonicInstant,
    awaitReply: Bool, receiveTimeout: Duration, invalidatedConnection: inout Bool
  ) throws(PortError) -> [UInt8]? {
    invalidatedConnection = false
    try checkOutgoing(payload: payload, replyPortName: replyPortName)
    // Waiting for the connection counts against the send deadline.
    guard requestMutex.lock(before: sendDeadline) else {
      throw PortError(
        .sendTimeout, detail: "another send on port \"\(name)\" held the connection past the send deadline")
    }
    requestInvalidated = false
    defer {
      invalidatedConnection = requestInvalidated
      requestMutex.unlock()
    }
    // A strong reference for the whole request: an `invalidate()` meanwhile shuts the
    // socket down (ending this request) but the descriptor stays ours until we let go.
    let (current, invalidationReason) = stateMutex.withLock { (self.socket, self.invalidationReason) }
    guard let socket = current else {
      if let invalidationReason {
        throw PortError(
          .invalid, cause: invalidationReason.cause, detail: "port \"\(name)\" is invalid: \(invalidationReason.detail)"
        )
      }
      throw PortError(.invalid, detail: "port \"\(name)\" is invalid")
    }
    let sequence = nextSequence
    nextSequence = nextSequence == .max ? 1 : nextSequence + 1
    let frame = Frame(
      kind: awaitReply ? .request : .oneWay, msgid: msgid, sequence: sequence, replyPortName: replyPortName,
      payload: payload)
    var written = 0
    do {
      try socket.sendAll(frame.encoded(), before: sendDeadline, offset: &written)
    } catch .timedOut {
      if written == 0 {
        // Not a byte of the frame went out: the stream is intact and the port stays usable.
        throw PortError(.sendTimeout, detail: "port \"\(name)\" did not accept the message before the send deadline")
      }
      // Part of the frame is in the stream; nothing can follow it safely.
      throw invalidate(
        because: PortError(.sendTimeout, detail: "port \"\(name)\" did not accept the message before the send deadline")
      )
    } catch .peerClosed {
      throw invalidate(because: PortError(.becameInvalid, detail: "port \"\(name)\" closed the connection"))
    } catch {
      throw invalidate(
        because: PortError(.transportError, cause: error.systemError, detail: "sending to port \"\(name)\" failed"))
    }
    if !awaitReply { return nil }
    // The receive limit is the time spent waiting for the reply: it starts now that the
    // request is sent, however much of the send limit the hand-over used.
    return try awaitReplyLocked(socket, sequence: sequence, before: .after(receiveTimeout))
  }

  /// Closes the connection; later sends throw ``PortStatus/invalid``, and a request in
  /// flight on another thread ends at once with ``PortStatus/becameInvalid``. Never waits
  /// for that request. Returns whether this call invalidated it.
  @discardableResult
  func invalidate() -> Bool {
    let closing: UnixSocket? = stateMutex.withLock {
      guard let current = socket else { return nil }
      socket = nil
      invalidationReason = PortError(.invalid, detail: "port \"\(name)\" was invalidated")
      return current
    }
    guard let closing else { return false }
    // A child's copy must not shut down the parent's connection (shutdown acts on the
    // socket, not on one descriptor); releasing `closing` closes the child's descriptor.
    if !ForkDetection.isInherited(creatorProcess) { closing.shutdownBothWays() }
    return true
  }

  private func awaitReplyLocked(_ socket: UnixSocket, sequence: UInt32, before deadline: MonotonicInstant)
    throws(PortError) -> [UInt8]
  {
    while true {
      do {
        while let frame = try decoder.nextFrame() {
          if frame.kind != .reply {
            throw invalidate(
              because: PortError(
                .transportError, detail: "port \"\(name)\" sent a \(frame.kind) frame instead of a reply"))
          }
          // An answer to an earlier request that timed out: its caller has gone.
          if frame.sequence == sequence { return frame.payload }
        }
      } catch let error as FrameError {
        throw invalidate(
          because: PortError(.transportError, detail: "port \"\(name)\" sent a malformed reply: \(error)"))
      } catch let error as PortError {
        throw error
      } catch {
        fatalError("unreachable: \(error)")
      }
      // Wait first: the reply cannot be there yet right after sending, so an eager `recv`
      // would only say EAGAIN.
      do {
        try socket.waitUntil(.readable, before: deadline)
      } catch .timedOut {
        throw PortError(.receiveTimeout, detail: "no reply from port \"\(name)\" before the receive deadline")
      } catch .peerClosed {
        throw invalidate(because: PortError(.becameInvalid, detail: "port \"\(name)\" closed the connection"))
      } catch {
        throw invalidate(
          because: PortError(
            .transportError, cause: error.systemError, detail: "waiting for a reply from \"\(name)\" failed"))
      }
      let received = Result { () throws(TransferFailure) in try socket.receiveAvailable(into: chunk) }
      switch received {
      case .success(let count?):
        decoder.append(UnsafeRawBufferPointer(rebasing: chunk[0..<count]))
      case .success(nil):
        continue  // a spurious readiness report
      case .failure(.peerClosed):
        throw invalidate(
          because: PortError(.becameInvalid, detail: "port \"\(name)\" closed the connection before replying"))
      case .failure(.system(let error)):
        throw invalidate(
          because: PortError(.transportError, cause: error, detail: "receiving from port \"\(name)\" failed"))
      case .failure(.timedOut):
        throw PortError(.receiveTimeout, detail: "no reply from port \"\(name)\" before the receive deadline")
      }
    }
  }

  /// Invalidates the connection for `reason`, met by the request in flight (called with
  /// `requestMutex` held); returns the error that request throws: `reason`, or
  /// ``PortStatus/becameInvalid`` when ``invalidate()`` came first (its shutdown is what the
  /// request met).
  private func invalidate(because reason: PortError) -> PortError {
    stateMutex.withLock {
      if socket == nil {
        return PortError(.becameInvalid, detail: "port \"\(name)\" was invalidated while a request was in flight")
      }
      socket = nil
      if invalidationReason == nil { invalidationReason = reason }
      requestInvalidated = true
      return reason
    }
  }
}
