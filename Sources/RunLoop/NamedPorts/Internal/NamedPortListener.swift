import CThreadingShims
import Sync

#if canImport(Glibc)
  import Glibc
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
/// All of a listener's descriptors (the wake-up eventfd, the listening socket, every peer)
/// sit in one epoll set of its own, so one `epoll_wait` reports every ready peer, and a run
/// loop watches the whole port through the single descriptor ``readinessDescriptor``.
///
/// Threading: one thread serves (``serve(before:)``, or a run loop that watches
/// ``readinessDescriptor`` and calls ``serveOnce(before:)`` with a passed deadline);
/// ``invalidate()`` may come from any thread. `state` is protected by `mutex`; the
/// descriptors the serving pass uses are closed only when no thread is inside a serving
/// pass (otherwise that pass closes them on its way out), so a descriptor is never closed
/// under a thread that is polling it. Invalidation during a pass (a busy handler) still ends
/// the clients' requests at once: it shuts every peer connection down (the descriptors stay
/// open), closes the listening socket (which resets connections not yet accepted; the pass
/// touches it only through a reference it holds briefly) and releases the name claim.
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

  private let mutex = Sync.Lock()
  private var listener: UnixSocket?  // nil once closed
  private var lockDescriptor: Int32  // -1 once closed
  private var wakeDescriptor: Int32  // eventfd; -1 once closed
  private var epollDescriptor: Int32  // -1 once closed
  private var peers: [Int32: Peer] = [:]
  private var invalidated = false
  private var serving = false
  /// The `tk_thread_identity()` of the thread in a serving pass (meaningful while `serving`).
  private var servingThread: UInt64 = 0
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
    let claimed: Int32
    do throws(SystemCallError) {
      claimed = try shimCall("open") { tk_claim_lock_file(directory.lockPath(for: name)) }
    } catch  where error.code == .wouldBlock {
      throw PortError(
        .invalid, cause: SystemCallError(call: "flock", code: .wouldBlock),
        detail: "port name \"\(name)\" is registered by another process")
    } catch {
      throw PortError(.transportError, cause: error, detail: "cannot claim port name \"\(name)\"")
    }
    lockDescriptor = claimed
    let wake: Int32
    do throws(SystemCallError) {
      wake = try shimCall("eventfd") { tk_eventfd_create() }
    } catch {
      closeDescriptor(claimed)
      throw PortError(.transportError, cause: error, detail: "cannot create a wake-up descriptor")
    }
    wakeDescriptor = wake
    let epoll: Int32
    do throws(SystemCallError) {
      epoll = try shimCall("epoll_create1") { tk_epoll_create() }
    } catch {
      closeDescriptor(wake)
      closeDescriptor(claimed)
      throw PortError(.transportError, cause: error, detail: "cannot create the port's epoll set")
    }
    epollDescriptor = epoll
    // Holding the claim, any socket file already there is a dead owner's leftover.
    let path = directory.socketPath(for: name)
    do throws(SystemCallError) {
      _ = try systemCall("unlink") { unlink(path) }
    } catch  where error.code == .noSuchFileOrDirectory {
      // Nothing left behind.
    } catch {
      closeDescriptor(epoll)
      closeDescriptor(wake)
      closeDescriptor(claimed)
      throw PortError(.transportError, cause: error, detail: "cannot remove the stale socket \(path)")
    }
    let socket: UnixSocket
    do {
      socket = try UnixSocket.listen(at: path)
    } catch {
      closeDescriptor(epoll)
      closeDescriptor(wake)
      closeDescriptor(claimed)
      throw PortError(.transportError, cause: error, detail: "cannot listen at \(path)")
    }
    do throws(SystemCallError) {
      _ = try shimCall("epoll_ctl") {
        tk_epoll_add(epoll, wake, UInt32(TK_EPOLL_READABLE), NamedPortListener.wakeToken)
      }
      _ = try shimCall("epoll_ctl") {
        tk_epoll_add(epoll, socket.descriptor, UInt32(TK_EPOLL_READABLE), NamedPortListener.listenerToken)
      }
    } catch {
      _ = unlink(path)
      closeDescriptor(epoll)
      closeDescriptor(wake)
      closeDescriptor(claimed)
      throw PortError(.transportError, cause: error, detail: "cannot watch \(path)")
    }
    listener = socket
  }

  private static let wakeToken: UInt64 = 0
  private static let listenerToken: UInt64 = 1
  /// Peers are reported as their descriptor plus this.
  private static let firstPeerToken: UInt64 = 2

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
  /// the name claim. All of that happens at once even while a handler runs (see the type's
  /// doc). Idempotent; any thread. Returns whether this call invalidated.
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
      // The pass may be inside a handler for a while: end the clients' requests now (their
      // connections see the end of stream) and free the name, leaving the descriptors the
      // pass may use open until it ends.
      for peer in peers.values { peer.socket.shutdownBothWays() }
      let closedListener = listener
      listener = nil
      releaseClaimLocked()
      _ = mustSucceed("RunLoop: port wake-up") { () throws(SystemCallError) in
        try shimCall("write(eventfd)") { tk_eventfd_signal(wakeDescriptor) }
      }
      mutex.unlock()
      // Closed here unless `acceptPending` holds it; then it closes when that lets go.
      withExtendedLifetime(closedListener) {}
    } else {
      let closed = closeAllLocked()
      mutex.unlock()
      withExtendedLifetime(closed) {}
    }
    return true
  }

  /// Serves until at least one message was handled or `deadline` passes: waits (epoll) on
  /// the listener and every peer, accepts new peers (checking their credentials), reads and
  /// answers complete messages. Returns how many messages were handled; throws
  /// ``PortStatus/becameInvalid`` once the port is invalid.
  func serve(before deadline: MonotonicInstant) throws(PortError) -> Int {
    while true {
      let handled = try serveOnce(before: deadline)
      if handled > 0 || deadline.hasPassed { return handled }
    }
  }

  /// One wait (until `deadline`; a passed deadline only polls) and the handling of whatever
  /// became ready: new peers accepted, complete messages answered. Returns how many messages
  /// were handled (possibly 0: only a new connection); throws like ``serve(before:)``.
  func serveOnce(before deadline: MonotonicInstant) throws(PortError) -> Int {
    let epoll: Int32
    do {
      mutex.lock()
      defer { mutex.unlock() }
      if invalidated { throw PortError(.becameInvalid, detail: "port \"\(name)\" invalidated") }
      if serving {
        // The port's own handler serving it again would re-enter a pass; another thread
        // doing so would race it.
        reportMisuse("MessagePort", "two threads serve port \"\(name)\" at once")
      }
      serving = true
      servingThread = tk_thread_identity()
      epoll = epollDescriptor
    }
    let capacity = 16
    var tokens = [UInt64](repeating: 0, count: capacity)
    var events = [UInt32](repeating: 0, count: capacity)
    let ready = Result { () throws(SystemCallError) -> Int32 in
      try shimCall("epoll_wait") {
        tokens.withUnsafeMutableBufferPointer { tokenBuffer in
          events.withUnsafeMutableBufferPointer { eventBuffer in
            if deadline == .distantFuture {
              return tk_epoll_wait(epoll, tokenBuffer.baseAddress, eventBuffer.baseAddress, Int32(capacity), nil)
            }
            var time = deadline.timespec
            return tk_epoll_wait(epoll, tokenBuffer.baseAddress, eventBuffer.baseAddress, Int32(capacity), &time)
          }
        }
      }
    }
    var handled = 0
    for token in tokens.prefix(Int((try? ready.get()) ?? 0)) {
      switch token {
      case NamedPortListener.wakeToken:
        break  // written only by invalidate(), which is handled below
      case NamedPortListener.listenerToken:
        if let listener = mutex.withLock({ invalidated ? nil : self.listener }) { acceptPending(listener) }
      default:
        let descriptor = Int32(truncatingIfNeeded: token - NamedPortListener.firstPeerToken)
        if let peer = mutex.withLock({ invalidated ? nil : peers[descriptor] }) { handled += service(peer) }
      }
    }
    mutex.lock()
    serving = false
    let becameInvalid = invalidated
    let closed = invalidated ? closeAllLocked() : []
    mutex.unlock()
    withExtendedLifetime(closed) {}
    if case .failure(let error) = ready {
      throw PortError(.transportError, cause: error, detail: "waiting for messages failed")
    }
    if becameInvalid && handled == 0 { throw PortError(.becameInvalid, detail: "port \"\(name)\" invalidated") }
    return handled
  }

  /// Whether the calling thread is inside a serving pass of this port (its handler is
  /// running on this thread, directly or in a run loop).
  var isBeingServedByCallingThread: Bool {
    mutex.withLock { serving && servingThread == tk_thread_identity() }
  }

  /// Answers a request on the calling thread without the socket, as a serving pass would:
  /// for a request that only the calling thread could ever serve. Throws
  /// ``PortStatus/becameInvalid`` when the port is invalid.
  func answerOnCallingThread(_ frame: Frame) throws(PortError) -> [UInt8] {
    let current: Handler? = mutex.withLock { invalidated ? nil : handler }
    guard let current else { throw PortError(.becameInvalid, detail: "port \"\(name)\" invalidated") }
    return current(frame) ?? []
  }

  /// An epoll descriptor that is readable while the port has work (a new peer, a message,
  /// the invalidation): what a run loop watches for this port. -1 once closed.
  var readinessDescriptor: Int32 { mutex.withLock { epollDescriptor } }

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
      let added: Result<Int32, SystemCallError>? = mutex.withLock {
        // Invalidated meanwhile: refuse (the socket closes as it goes out of scope).
        if invalidated { return nil }
        let result = Result { () throws(SystemCallError) -> Int32 in
          try shimCall("epoll_ctl") {
            tk_epoll_add(
              epollDescriptor, socket.descriptor, UInt32(TK_EPOLL_READABLE),
              UInt64(socket.descriptor) + NamedPortListener.firstPeerToken)
          }
        }
        if case .success = result { peers[socket.descriptor] = peer }
        return result
      }
      if case .failure(let error) = added {
        report(PeerRejection(credentials: credentials, reason: "cannot watch the connection: \(error)"))
      }
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
        let answer = Frame(
          kind: .reply, msgid: frame.msgid, sequence: frame.sequence, replyPortName: nil, payload: reply ?? [])
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
    mutex.withLock {
      guard peers.removeValue(forKey: peer.socket.descriptor) != nil else { return }
      // Closing the socket would also remove it from the set, but only once every duplicate
      // of the descriptor is closed; removing it explicitly keeps the set exact.
      _ = mustSucceed("RunLoop: removing a port peer") { () throws(SystemCallError) in
        try shimCall("epoll_ctl(EPOLL_CTL_DEL)") { tk_epoll_remove(epollDescriptor, peer.socket.descriptor) }
      }
    }
    if let reason { report(PeerRejection(credentials: peer.credentials, reason: reason)) }
  }

  private func report(_ rejection: PeerRejection) {
    if let handler = mutex.withLock({ rejectionHandler }) { handler(rejection) }
  }

  /// Closes every descriptor; returns the peers so they are released outside the lock.
  private func closeAllLocked() -> [Peer] {
    if closedAll { return [] }
    closedAll = true
    let dropped = Array(peers.values)
    peers.removeAll()
    listener = nil
    closeDescriptor(epollDescriptor)
    epollDescriptor = -1
    closeDescriptor(wakeDescriptor)
    wakeDescriptor = -1
    releaseClaimLocked()
    return dropped
  }

  /// Closes the name claim (the `flock`'s descriptor), freeing the name for any process.
  private func releaseClaimLocked() {
    if lockDescriptor < 0 { return }
    closeDescriptor(lockDescriptor)
    lockDescriptor = -1
  }
}
