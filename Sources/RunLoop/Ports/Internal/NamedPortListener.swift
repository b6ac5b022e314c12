import CThreadingShims
import Sync

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// A peer the listener refused or dropped, for the owner's report.
struct PeerRejection: Sendable, CustomStringConvertible {
  /// The peer's kernel-recorded credentials, when they could be read.
  var credentials: PeerCredentials?
  /// Why it was refused.
  var reason: String

  var description: String {
    if let credentials {
      return "peer pid \(credentials.processID) uid \(credentials.userID): \(reason)"
    }
    return "peer: \(reason)"
  }
}

/// The serving side of a named message port: a claimed name, a listening socket in the
/// port directory, and the accepted peer connections.
///
/// Threading: one thread serves (``serve(before:)``, or a run loop that watches
/// ``descriptors`` and calls ``handle(descriptor:)``); ``invalidate()`` may come from any
/// thread. `state` is protected by `mutex`; the descriptors are closed only when no thread is
/// inside a serving pass (otherwise that pass closes them on its way out), so a descriptor
/// is never closed under a thread that is polling it.
final class NamedPortListener: @unchecked Sendable {
  /// Answers one message: returns the reply payload for requests (ignored for one-way
  /// messages; nil replies with an empty payload).
  typealias Handler = (Frame) -> [UInt8]?

  let name: String
  let directory: PortDirectory
  let policy: PeerPolicy
  let limits: Frame.Limits
  /// How long a reply may wait for a slow reader before that peer is dropped.
  let replySendTimeout: Duration

  private let mutex = Sync.Mutex()
  private var listener: UnixSocket?          // nil once closed
  private var lockDescriptor: Int32          // -1 once closed
  private var wakeDescriptor: Int32          // eventfd; -1 once closed
  private var peers: [Int32: Peer] = [:]
  private var invalidated = false
  private var serving = false
  private var closedAll = false
  private var handler: Handler
  private var rejectionHandler: ((PeerRejection) -> Void)?

  private final class Peer {
    let socket: UnixSocket
    let credentials: PeerCredentials
    var decoder: FrameDecoder
    /// Where `recv` writes; allocated once per peer (not zeroed per read).
    let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 8)
    init(socket: UnixSocket, credentials: PeerCredentials, limits: Frame.Limits) {
      self.socket = socket
      self.credentials = credentials
      decoder = FrameDecoder(limits: limits)
    }
    deinit { chunk.deallocate() }
  }

  /// Claims `name` in `directory` and starts listening.
  ///
  /// Throws ``PortStatus/invalid`` when the name is malformed or registered by a live
  /// process (`flock` held elsewhere: `EWOULDBLOCK`), ``PortStatus/transportError`` for
  /// socket failures. A socket left by a dead process is replaced.
  init(
    name: String, directory: PortDirectory, policy: PeerPolicy = .sameUser, limits: Frame.Limits = .standard,
    replySendTimeout: Duration = .seconds(1), handler: @escaping Handler
  ) throws(PortError) {
    try PortName.validate(name)
    self.name = name
    self.directory = directory
    self.policy = policy
    self.limits = limits
    self.replySendTimeout = replySendTimeout
    self.handler = handler
    let claimed = tk_claim_lock_file(directory.lockPath(for: name))
    if claimed < 0 {
      if -claimed == EWOULDBLOCK {
        throw PortError(
          .invalid, cause: SystemCallError(call: "flock", errno: EWOULDBLOCK),
          detail: "port name \"\(name)\" is registered by another process")
      }
      throw PortError(.transportError, cause: SystemCallError(call: "open", errno: -claimed), detail: "cannot claim port name \"\(name)\"")
    }
    lockDescriptor = claimed
    let wake = tk_port_eventfd()
    if wake < 0 {
      closeDescriptor(claimed)
      throw PortError(.transportError, cause: SystemCallError(call: "eventfd", errno: -wake), detail: "cannot create a wake-up descriptor")
    }
    wakeDescriptor = wake
    // Holding the claim, any socket file already there is a dead owner's leftover.
    let path = directory.socketPath(for: name)
    if unlink(path) != 0 && errno != ENOENT {
      let error = errno
      closeDescriptor(wake)
      closeDescriptor(claimed)
      throw PortError(.transportError, cause: SystemCallError(call: "unlink", errno: error), detail: "cannot remove the stale socket \(path)")
    }
    do {
      listener = try UnixSocket.listen(at: path)
    } catch {
      closeDescriptor(wake)
      closeDescriptor(claimed)
      throw PortError(.transportError, cause: error, detail: "cannot listen at \(path)")
    }
  }

  deinit {
    invalidate()
  }

  /// Sets the function told about refused or dropped peers (called on the serving thread).
  func setRejectionHandler(_ handler: ((PeerRejection) -> Void)?) {
    mutex.withLock { rejectionHandler = handler }
  }

  var isValid: Bool { mutex.withLock { !invalidated } }

  /// How many peers are connected.
  var peerCount: Int { mutex.withLock { peers.count } }

  /// Stops serving: removes the socket file at once (new lookups fail), then closes the
  /// listener, every peer connection (their pending requests end with became-invalid) and
  /// the name claim. Idempotent; any thread. Returns whether this call invalidated.
  @discardableResult
  func invalidate() -> Bool {
    mutex.lock()
    if invalidated {
      mutex.unlock()
      return false
    }
    invalidated = true
    // Unlink while still holding the flock, so no other process can have claimed the name
    // and bound a fresh socket at this path in between.
    if unlink(directory.socketPath(for: name)) != 0 && errno != ENOENT {
      // The directory is ours (mode 0700); failing to remove our own socket leaves only a
      // stale file that the next owner replaces, so it is not worth failing invalidation.
    }
    if serving {
      var one: UInt64 = 1
      if write(wakeDescriptor, &one, 8) != 8 { fatalError("write(eventfd) failed: errno \(errno)") }
      mutex.unlock()
    } else {
      let closed = closeAllLocked()
      mutex.unlock()
      withExtendedLifetime(closed) {}
    }
    return true
  }

  /// Serves until at least one message was handled or `deadline` passes: waits (ppoll) on
  /// the listener and every peer, accepts new peers (checking their credentials), reads and
  /// answers complete messages. Returns how many messages were handled; throws
  /// ``PortStatus/becameInvalid`` once the port is invalid.
  func serve(before deadline: MonotonicInstant) throws(PortError) -> Int {
    while true {
      let handled = try serveOnce(before: deadline)
      if handled > 0 || deadline.hasPassed { return handled }
    }
  }

  /// One wait and the handling of whatever became ready (possibly only a new connection).
  func serveOnce(before deadline: MonotonicInstant) throws(PortError) -> Int {
    var entries: [pollfd] = []
    do {
      mutex.lock()
      defer { mutex.unlock() }
      if invalidated { throw PortError(.becameInvalid, detail: "port \"\(name)\" invalidated") }
      if serving { fatalError("MessagePort misuse: two threads serve port \"\(name)\" at once") }
      serving = true
      entries.append(pollfd(fd: wakeDescriptor, events: Int16(POLLIN), revents: 0))
      entries.append(pollfd(fd: listener!.descriptor, events: Int16(POLLIN), revents: 0))
      for descriptor in peers.keys { entries.append(pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)) }
    }
    let ready = waitForEvents(&entries, before: deadline)
    var handled = 0
    for entry in entries.dropFirst() where entry.revents != 0 {
      handled += handle(descriptor: entry.fd)
    }
    mutex.lock()
    serving = false
    let becameInvalid = invalidated
    let closed = invalidated ? closeAllLocked() : []
    mutex.unlock()
    withExtendedLifetime(closed) {}
    if let failure = ready { throw PortError(.transportError, cause: failure, detail: "waiting for messages failed") }
    if becameInvalid && handled == 0 { throw PortError(.becameInvalid, detail: "port \"\(name)\" invalidated") }
    return handled
  }

  /// The descriptors a run loop must watch for readability: the listener and every peer.
  var descriptors: [Int32] {
    mutex.withLock {
      guard let listener, !invalidated else { return [] }
      return [listener.descriptor] + Array(peers.keys)
    }
  }

  /// Handles readiness of one of ``descriptors``: accepts pending peers (listener) or reads
  /// and answers a peer's complete messages. Returns how many messages were handled.
  /// Called on the serving thread only.
  func handle(descriptor: Int32) -> Int {
    guard let listener = mutex.withLock({ invalidated ? nil : self.listener }) else { return 0 }
    if descriptor == listener.descriptor {
      acceptPending(listener)
      return 0
    }
    guard let peer = mutex.withLock({ peers[descriptor] }) else { return 0 }
    return service(peer)
  }

  // MARK: - Serving (serving thread only)

  private func acceptPending(_ listener: UnixSocket) {
    while true {
      let socket: UnixSocket?
      do {
        socket = try listener.accept()
      } catch {
        report(PeerRejection(credentials: nil, reason: "accept failed: \(error)"))
        return
      }
      guard let socket else { return }
      let credentials: PeerCredentials
      do {
        credentials = try socket.peerCredentials()
      } catch {
        report(PeerRejection(credentials: nil, reason: "cannot read peer credentials: \(error)"))
        continue  // `socket` closes as it goes out of scope
      }
      if !policy.admits(credentials) {
        report(PeerRejection(credentials: credentials, reason: "refused by the peer policy (\(policy))"))
        continue
      }
      let peer = Peer(socket: socket, credentials: credentials, limits: limits)
      mutex.withLock { peers[socket.descriptor] = peer }
    }
  }

  /// Reads what is available from `peer`, answers every complete frame in order, and
  /// drops the peer on end of stream, a transfer failure or a malformed frame (after
  /// answering the frames that preceded it).
  private func service(_ peer: Peer) -> Int {
    var handled = 0
    while true {
      let received: Int?
      do {
        received = try peer.socket.receiveAvailable(into: peer.chunk)
      } catch .peerClosed {
        handled += drainFrames(of: peer)
        drop(peer, reason: nil)
        return handled
      } catch {
        drop(peer, reason: "receive failed: \(error)")
        return handled
      }
      guard let received else { return handled }
      peer.decoder.append(UnsafeRawBufferPointer(rebasing: peer.chunk[0..<received]))
      handled += drainFrames(of: peer)
      // One read per readiness report: poll and epoll are level-triggered, so anything left
      // in the socket is reported again, and the usual case (one message) saves a `recv`
      // that would only say EAGAIN.
      return handled
    }
  }

  private func drainFrames(of peer: Peer) -> Int {
    var handled = 0
    while true {
      let frame: Frame?
      do {
        frame = try peer.decoder.nextFrame()
      } catch {
        drop(peer, reason: "malformed frame: \(error)")
        return handled
      }
      guard let frame else { return handled }
      if frame.kind == .reply {
        drop(peer, reason: "malformed frame: a reply sent to a listening port")
        return handled
      }
      let current = mutex.withLock { handler }
      let reply = current(frame)
      handled += 1
      // Invalidated by the handler or another thread meanwhile: no reply; the pass closes
      // the connection, which tells the sender its port became invalid.
      if !isValid { return handled }
      if frame.kind == .request {
        let answer = Frame(kind: .reply, msgid: frame.msgid, sequence: frame.sequence, replyPortName: nil, payload: reply ?? [])
        do {
          try peer.socket.sendAll(answer.encoded(), before: .after(replySendTimeout))
        } catch .peerClosed {
          drop(peer, reason: nil)
          return handled
        } catch {
          drop(peer, reason: "reply not delivered: \(error)")
          return handled
        }
      }
    }
  }

  private func drop(_ peer: Peer, reason: String?) {
    mutex.withLock { _ = peers.removeValue(forKey: peer.socket.descriptor) }
    if let reason { report(PeerRejection(credentials: peer.credentials, reason: reason)) }
  }

  private func report(_ rejection: PeerRejection) {
    if let handler = mutex.withLock({ rejectionHandler }) { handler(rejection) }
  }

  private func waitForEvents(_ entries: inout [pollfd], before deadline: MonotonicInstant) -> SystemCallError? {
    var time = deadline.timespec
    let infinite = deadline == .distantFuture
    let result = entries.withUnsafeMutableBufferPointer { buffer in
      infinite ? tk_poll_many(buffer.baseAddress, UInt(buffer.count), nil)
        : tk_poll_many(buffer.baseAddress, UInt(buffer.count), &time)
    }
    return result >= 0 ? nil : SystemCallError(call: "ppoll", errno: -result)
  }

  /// Closes every descriptor; returns the peers so they are released outside the lock.
  private func closeAllLocked() -> [Peer] {
    if closedAll { return [] }
    closedAll = true
    let dropped = Array(peers.values)
    peers.removeAll()
    listener = nil
    closeDescriptor(wakeDescriptor)
    wakeDescriptor = -1
    closeDescriptor(lockDescriptor)
    lockDescriptor = -1
    return dropped
  }
}
