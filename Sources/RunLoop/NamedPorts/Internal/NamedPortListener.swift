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
/// All of a listener's descriptors (the wake-up eventfd, the deadline timerfd, the listening
/// socket, every peer) sit in one epoll set of its own, so one `epoll_wait` reports every
/// ready peer, and a run loop watches the whole port through the single descriptor
/// ``readinessDescriptor``.
///
/// The serving thread never blocks on a peer (``MessagePort/ServerLimits``): a reply the
/// peer does not take at once waits in the peer's output buffer, the peer is watched for
/// writability too, and a deadline starts. Its messages are still read and handled
/// meanwhile (a requester that timed out reads no more replies until its next request),
/// their replies queued behind the pending one. Deadlines (an unfinished frame, an untaken
/// reply, the end of an accept back-off) arm the timerfd for the earliest one, so a pass
/// runs when one expires even if no peer moves. A pass that finds no deadline pending arms nothing: the usual exchange (a
/// whole request read, a whole reply written) touches no timer.
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
  let serverLimits: MessagePort.ServerLimits
  /// The process that created the listener (see `ForkDetection`). In a child of `fork()`
  /// the socket file, the name claim's `flock`, the peers' connections and the eventfd are
  /// the parent's: the child's copy only closes its own descriptors.
  let creatorProcess = ForkDetection.start()

  // Protected by `mutex`.
  private let mutex = Sync.Lock()
  private var listener: UnixSocket?  // nil once closed
  private var lockDescriptor: Int32  // -1 once closed
  private var wakeDescriptor: Int32  // eventfd; -1 once closed
  private var timerDescriptor: Int32  // timerfd; -1 once closed
  private var epollDescriptor: Int32  // -1 once closed
  private var peers: [Int32: Peer] = [:]
  private var invalidated = false
  private var serving = false
  /// The `tk_thread_identity()` of the thread in a serving pass (meaningful while `serving`).
  private var servingThread: UInt64 = 0
  /// Whether the pass in progress was started by a run loop (meaningful while `serving`).
  private var servingFromRunLoop = false
  private var closedAll = false
  private var handler: Handler?
  private var rejectionHandler: ((PeerRejection) -> Void)?

  // Serving state: touched only inside a serving pass, by the one thread in it (`serving`,
  // set and cleared with `mutex` held, orders one pass before the next), and by
  // `closeAllLocked` when no pass runs.
  /// The pass's epoll set and timerfd (open for the whole pass, see the type's doc).
  private var passEpoll: Int32 = -1
  private var passTimer: Int32 = -1
  /// Peers with a deadline (an unfinished frame or an untaken reply), by descriptor.
  private var timedPeers: [Int32: Peer] = [:]
  /// Bytes held for all peers: unfinished input plus untaken replies.
  private var bufferedBytes = 0
  /// The instant the timerfd is armed for; nil while disarmed.
  private var armedDeadline: MonotonicInstant?
  /// Whether the listening socket is out of the epoll interest (an accept failure).
  private var acceptPaused = false
  private var acceptResumeAt = MonotonicInstant.distantFuture
  private var acceptBackoff: Duration
  /// Whether the current run of accept failures (until an accept succeeds) was reported.
  private var acceptFailureReported = false
  /// Whether refusing peers over `maximumPeers` was reported (until a peer leaves).
  private var peerLimitReported = false

  /// The first back-off after a failed accept (doubling up to `maximumAcceptBackoff`).
  private let initialAcceptBackoff: Duration
  private let maximumAcceptBackoff: Duration
  /// Connections accepted per pass at most, so a connection flood cannot starve the peers.
  private static let acceptsPerPass = 64

  private final class Peer {
    let socket: UnixSocket
    let credentials: PeerCredentials
    var decoder: FrameDecoder
    /// Where `recv` writes; allocated once per peer (not zeroed per read).
    let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 8)
    /// Replies the peer has not taken yet, in order: `output[outputOffset...]`.
    var output: [UInt8] = []
    var outputOffset = 0
    /// When the unfinished incoming frame must be complete.
    var inputDeadline: MonotonicInstant?
    /// When the pending replies must have been taken: set when a reply is left pending with
    /// none before it, cleared once the buffer empties.
    var outputDeadline: MonotonicInstant?
    /// What this peer counts in the listener's `bufferedBytes`.
    var accounted = 0
    /// Whether it is in the listener's `timedPeers`.
    var isTimed = false
    var isDropped = false

    init(socket: UnixSocket, credentials: PeerCredentials, limits: Frame.Limits) {
      self.socket = socket
      self.credentials = credentials
      decoder = FrameDecoder(limits: limits)
    }
    deinit { chunk.deallocate() }

    var pendingOutput: Int { output.count - outputOffset }
    var token: UInt64 { UInt64(socket.descriptor) + NamedPortListener.firstPeerToken }
    var deadline: MonotonicInstant? {
      switch (inputDeadline, outputDeadline) {
      case (let input?, let output?): return min(input, output)
      case (let input?, nil): return input
      case (nil, let output?): return output
      case (nil, nil): return nil
      }
    }
  }

  /// Claims `name` in `directory` and starts listening.
  ///
  /// Throws ``PortStatus/invalid`` when the name is malformed or registered by a live
  /// process (`flock` held elsewhere: `EWOULDBLOCK`), ``PortStatus/transportError`` for
  /// socket failures. A socket left by a dead process is replaced. After a failed accept the
  /// listener waits `acceptBackoff` before trying again, doubling up to 1 s (or
  /// `acceptBackoff` if larger), unless a peer leaves first.
  init(
    name: String, directory: PortDirectory, policy: PeerPolicy = .sameUser, limits: Frame.Limits = .standard,
    serverLimits: MessagePort.ServerLimits = .standard, acceptBackoff: Duration = .milliseconds(50),
    handler: @escaping Handler
  ) throws(PortError) {
    try PortName.validate(name)
    serverLimits.checkPositive()
    initialAcceptBackoff = acceptBackoff
    maximumAcceptBackoff = max(acceptBackoff, .seconds(1))
    self.acceptBackoff = acceptBackoff
    self.name = name
    self.directory = directory
    self.policy = policy
    self.limits = limits
    self.serverLimits = serverLimits
    self.handler = handler
    let lockPath = directory.lockPath(for: name)
    let claimed = try NamedPortListener.claim(lockPath, name: name)
    lockDescriptor = claimed
    // Until the listener is complete, a failure below closes what was opened itself: a
    // throw once every stored property is set still runs deinit, whose invalidate() must
    // then do nothing (the descriptors are already closed, the claim already abandoned).
    invalidated = true
    let wake: Int32
    do throws(SystemCallError) {
      wake = try shimCall("eventfd") { tk_eventfd_create() }
    } catch {
      NamedPortListener.abandonClaim(claimed, at: lockPath)
      throw PortError(.transportError, cause: error, detail: "cannot create a wake-up descriptor")
    }
    wakeDescriptor = wake
    let epoll: Int32
    do throws(SystemCallError) {
      epoll = try shimCall("epoll_create1") { tk_epoll_create() }
    } catch {
      closeDescriptor(wake)
      NamedPortListener.abandonClaim(claimed, at: lockPath)
      throw PortError(.transportError, cause: error, detail: "cannot create the port's epoll set")
    }
    epollDescriptor = epoll
    let timer: Int32
    do throws(SystemCallError) {
      timer = try shimCall("timerfd_create") { tk_timerfd_create_monotonic() }
    } catch {
      closeDescriptor(epoll)
      closeDescriptor(wake)
      NamedPortListener.abandonClaim(claimed, at: lockPath)
      throw PortError(.transportError, cause: error, detail: "cannot create the port's deadline timer")
    }
    timerDescriptor = timer
    // Holding the claim, any socket file already there is a dead owner's leftover.
    let path = directory.socketPath(for: name)
    do throws(SystemCallError) {
      _ = try systemCall("unlink") { unlink(path) }
    } catch  where error.code == .noSuchFileOrDirectory {
      // Nothing left behind.
    } catch {
      closeDescriptor(timer)
      closeDescriptor(epoll)
      closeDescriptor(wake)
      NamedPortListener.abandonClaim(claimed, at: lockPath)
      throw PortError(.transportError, cause: error, detail: "cannot remove the stale socket \(path)")
    }
    let socket: UnixSocket
    do {
      socket = try UnixSocket.listen(at: path)
    } catch {
      closeDescriptor(timer)
      closeDescriptor(epoll)
      closeDescriptor(wake)
      NamedPortListener.abandonClaim(claimed, at: lockPath)
      throw PortError(.transportError, cause: error, detail: "cannot listen at \(path)")
    }
    do throws(SystemCallError) {
      _ = try shimCall("epoll_ctl") {
        tk_epoll_add(epoll, wake, UInt32(TK_EPOLL_READABLE), NamedPortListener.wakeToken)
      }
      _ = try shimCall("epoll_ctl") {
        tk_epoll_add(epoll, timer, UInt32(TK_EPOLL_READABLE), NamedPortListener.timerToken)
      }
      _ = try shimCall("epoll_ctl") {
        tk_epoll_add(epoll, socket.descriptor, UInt32(TK_EPOLL_READABLE), NamedPortListener.listenerToken)
      }
    } catch {
      _ = unlink(path)
      closeDescriptor(timer)
      closeDescriptor(epoll)
      closeDescriptor(wake)
      NamedPortListener.abandonClaim(claimed, at: lockPath)
      throw PortError(.transportError, cause: error, detail: "cannot watch \(path)")
    }
    listener = socket
    invalidated = false
  }

  /// Opens and locks the claim file at `path` (see ``PortDirectory``), making sure the file
  /// locked is the one at the path: an owner removes its claim file while holding the lock,
  /// then unlocks, so a file opened before that removal and locked after it no longer
  /// claims anything, and the claim is tried again on the path's new file.
  ///
  /// Throws ``PortStatus/invalid`` when another open file description holds the lock (a
  /// live owner, in this or another process), ``PortStatus/transportError`` when a call
  /// fails.
  static func claim(_ path: String, name: String) throws(PortError) -> Int32 {
    while true {
      let claimed: Int32
      do throws(SystemCallError) {
        claimed = try shimCall("open") { tk_claim_lock_file(path) }
      } catch  where error.code == .wouldBlock {
        throw PortError(
          .invalid, cause: SystemCallError(call: "flock", code: .wouldBlock),
          detail: "port name \"\(name)\" is registered by another process")
      } catch {
        throw PortError(.transportError, cause: error, detail: "cannot claim port name \"\(name)\"")
      }
      var locked = stat()
      var current = stat()
      do throws(SystemCallError) {
        _ = try systemCall("fstat") { fstat(claimed, &locked) }
      } catch {
        closeDescriptor(claimed)
        throw PortError(.transportError, cause: error, detail: "cannot inspect the claim of port name \"\(name)\"")
      }
      if lstat(path, &current) == 0 && current.st_dev == locked.st_dev && current.st_ino == locked.st_ino {
        return claimed
      }
      // Removed (or replaced) by its previous owner after we opened it: try the new one.
      closeDescriptor(claimed)
    }
  }

  /// Removes the claim file while its lock is still held (see ``claim(_:name:)``), then
  /// releases the lock. A failed removal leaves only a file the next owner reuses.
  private static func abandonClaim(_ descriptor: Int32, at path: String) {
    _ = unlink(path)
    closeDescriptor(descriptor)
  }

  /// Removes the files of a port whose owner died without invalidating it (its socket
  /// refuses connections), if no process holds the name's claim; does nothing otherwise
  /// (a live owner, or a call failing: the files then wait for the next registration).
  static func removeDeadOwnersFiles(name: String, directory: PortDirectory) {
    let lockPath = directory.lockPath(for: name)
    guard let claimed = try? claim(lockPath, name: name) else { return }
    // Holding the claim: no live process owns the name, and none can bind its socket
    // until we let go.
    _ = unlink(directory.socketPath(for: name))
    abandonClaim(claimed, at: lockPath)
  }

  private static let wakeToken: UInt64 = 0
  private static let listenerToken: UInt64 = 1
  private static let timerToken: UInt64 = 2
  /// Peers are reported as their descriptor plus this.
  fileprivate static let firstPeerToken: UInt64 = 3

  deinit {
    invalidate()
  }

  /// Sets the function told about refused or dropped peers (called on the serving thread).
  func setRejectionHandler(_ handler: ((PeerRejection) -> Void)?) {
    let replaced: ((PeerRejection) -> Void)? = mutex.withLock {
      if invalidated { return handler }
      defer { rejectionHandler = handler }
      return rejectionHandler
    }
    withExtendedLifetime(replaced) {}
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
    // Released after the mutex, whichever way this returns (their captures may use the port).
    let released = (handler, rejectionHandler)
    handler = nil
    rejectionHandler = nil
    defer { withExtendedLifetime(released) {} }
    if ForkDetection.isInherited(creatorProcess) {
      // A child's copy: unlinking would unregister the parent's name, shutting peers down
      // would end the parent's connections, writing the eventfd would wake the parent's
      // serving pass. Closing the child's descriptors leaves the parent's files and claim
      // as they were (an flock belongs to the open file, which the parent still has).
      let closed = closeAllLocked()
      mutex.unlock()
      withExtendedLifetime(closed) {}
      return true
    }
    // Unlink while still holding the flock, so no other process can have claimed the name
    // and bound a fresh socket at this path in between.
    if unlink(directory.socketPath(for: name)) != 0 && errno != ENOENT {
      // The directory is ours (mode 0700); failing to remove our own socket leaves only a
      // stale file that the next owner replaces, so it is not worth failing invalidation.
    }
    // The claim file goes too, while its lock is held (the claim is released below): a
    // process that opened it meanwhile finds it gone once it gets the lock, and claims the
    // path's new file instead (see `claim`). So no name leaves a file behind.
    _ = unlink(directory.lockPath(for: name))
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
    // Never nil: only passes started by run loops are skipped.
    try pass(before: deadline, fromRunLoop: false) ?? 0
  }

  /// ``serveOnce(before:)`` with a passed deadline, for a run loop the port is scheduled in.
  /// A port may be scheduled in the run loops of several threads, which all see it ready at
  /// once: while another thread's run loop is in a pass, this returns nil and serves nothing
  /// (that pass handles what is ready, and the run-loop watch it re-arms when it ends
  /// reports what is left).
  func serveOnceFromRunLoop() throws(PortError) -> Int? {
    try pass(before: .distantPast, fromRunLoop: true)
  }

  private func pass(before deadline: MonotonicInstant, fromRunLoop: Bool) throws(PortError) -> Int? {
    let epoll: Int32
    do {
      mutex.lock()
      defer { mutex.unlock() }
      if invalidated { throw PortError(.becameInvalid, detail: "port \"\(name)\" invalidated") }
      if serving {
        if fromRunLoop && servingFromRunLoop && servingThread != tk_thread_identity() { return nil }
        // The port's own handler serving it again would re-enter a pass; another thread
        // doing so would race it (unless both are run loops, above).
        if servingThread == tk_thread_identity() {
          reportMisuse("MessagePort", "port \"\(name)\" served again from its own handler, inside its serving pass")
        }
        reportMisuse("MessagePort", "two threads serve port \"\(name)\" at once")
      }
      serving = true
      servingFromRunLoop = fromRunLoop
      servingThread = tk_thread_identity()
      epoll = epollDescriptor
      passEpoll = epollDescriptor
      passTimer = timerDescriptor
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
      case NamedPortListener.timerToken:
        // Expired: drained so it stops reporting; the deadlines are checked below.
        _ = tk_counter_fd_drain(passTimer)
        armedDeadline = nil
      case NamedPortListener.listenerToken:
        if let listener = mutex.withLock({ invalidated ? nil : self.listener }) { acceptPending(listener) }
      default:
        let descriptor = Int32(truncatingIfNeeded: token - NamedPortListener.firstPeerToken)
        if let peer = mutex.withLock({ invalidated ? nil : peers[descriptor] }) { handled += service(peer) }
      }
    }
    if !timedPeers.isEmpty || acceptPaused { enforceDeadlines() }
    rearmTimer()
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

  /// Bytes held for peers (unfinished input, untaken replies) and how many peers have a
  /// deadline: serving state, for the serving thread to read between passes (tests and the
  /// fuzz target check that both return to zero once the peers are gone).
  var heldBytesAndTimedPeers: (bytes: Int, timedPeers: Int) { (bufferedBytes, timedPeers.count) }

  /// Whether the calling thread is inside a serving pass of this port (its handler is
  /// running on this thread, directly or in a run loop).
  var isBeingServedByCallingThread: Bool {
    mutex.withLock { serving && servingThread == tk_thread_identity() }
  }

  /// Answers a request on the calling thread without the socket, as a serving pass would:
  /// for a request that only the calling thread could ever serve. Throws
  /// ``PortStatus/becameInvalid`` when the port is invalid, also when it became invalid
  /// while the handler ran (by the handler or another thread): as a serving pass does, the
  /// reply is then discarded.
  func answerOnCallingThread(_ frame: Frame) throws(PortError) -> [UInt8] {
    let current: Handler? = mutex.withLock { invalidated ? nil : handler }
    guard let current else { throw PortError(.becameInvalid, detail: "port \"\(name)\" invalidated") }
    let reply = current(frame)
    if mutex.withLock({ invalidated }) {
      throw PortError(.becameInvalid, detail: "port \"\(name)\" invalidated while answering")
    }
    return reply ?? []
  }

  /// An epoll descriptor that is readable while the port has work (a new peer, a message,
  /// the invalidation): what a run loop watches for this port. -1 once closed.
  var readinessDescriptor: Int32 { mutex.withLock { epollDescriptor } }

  // MARK: - Serving (serving thread only)

  private func acceptPending(_ listener: UnixSocket) {
    for _ in 0..<NamedPortListener.acceptsPerPass {
      let socket: UnixSocket?
      do {
        socket = try listener.accept()
      } catch {
        // Out of descriptors (EMFILE, ENFILE) or memory: the connection stays pending, so a
        // level-triggered listener would report it again at once. Stop watching it instead.
        pauseAccepting(listener, after: error)
        return
      }
      guard let socket else { return }
      acceptFailureReported = false
      acceptBackoff = initialAcceptBackoff
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
      // Only this thread adds peers: a count that is under the limit here stays under it.
      if peerCount >= serverLimits.maximumPeers {
        // Closed at once (as it goes out of scope): its sender learns now rather than at
        // its receive timeout.
        if !peerLimitReported {
          peerLimitReported = true
          report(
            PeerRejection(
              credentials: credentials,
              reason: "refused: the port serves its limit of \(serverLimits.maximumPeers) peers "
                + "(further refusals are not reported until a peer leaves)"))
        }
        continue
      }
      let peer = Peer(socket: socket, credentials: credentials, limits: limits)
      enum Outcome {
        case added
        case invalidated
        case failed(SystemCallError)
      }
      let outcome: Outcome = mutex.withLock {
        // Invalidated meanwhile: refuse (the socket closes as it goes out of scope).
        if invalidated { return .invalidated }
        do throws(SystemCallError) {
          _ = try shimCall("epoll_ctl") {
            tk_epoll_add(epollDescriptor, socket.descriptor, UInt32(TK_EPOLL_READABLE), peer.token)
          }
        } catch {
          return .failed(error)
        }
        peers[socket.descriptor] = peer
        return .added
      }
      switch outcome {
      case .added, .invalidated:
        break
      case .failed(let error):
        report(PeerRejection(credentials: credentials, reason: "cannot watch the connection: \(error)"))
      }
    }
  }

  /// Takes the listening socket out of the epoll interest after `accept` failed, until a
  /// peer leaves (freeing a descriptor) or the back-off ends; reports the first failure of a
  /// run of them only.
  private func pauseAccepting(_ listener: UnixSocket, after error: SystemCallError) {
    if !acceptFailureReported {
      acceptFailureReported = true
      report(
        PeerRejection(
          credentials: nil,
          reason: "accept failed: \(error); accepting again when a peer leaves or after a back-off "
            + "(further failures are not reported until an accept succeeds)"))
    }
    acceptPaused = true
    acceptResumeAt = .after(acceptBackoff)
    acceptBackoff = min(acceptBackoff * 2, maximumAcceptBackoff)
    setInterest(of: listener.descriptor, token: NamedPortListener.listenerToken, to: 0)
  }

  private func resumeAccepting() {
    acceptPaused = false
    acceptResumeAt = .distantFuture
    guard let listener = mutex.withLock({ invalidated ? nil : self.listener }) else { return }
    setInterest(of: listener.descriptor, token: NamedPortListener.listenerToken, to: UInt32(TK_EPOLL_READABLE))
  }

  private func setInterest(of descriptor: Int32, token: UInt64, to events: UInt32) {
    _ = mustSucceed("RunLoop: changing a port socket's interest") { () throws(SystemCallError) in
      try shimCall("epoll_ctl(EPOLL_CTL_MOD)") { tk_epoll_modify(passEpoll, descriptor, events, token) }
    }
  }

  /// Serves `peer`: writes more of its pending replies, if any, then takes what it sent and
  /// answers every complete frame in order (replies queue behind those it has not taken).
  /// Drops the peer on end of stream, a transfer failure, a malformed frame (after
  /// answering the frames that preceded it) or a broken limit.
  ///
  /// A peer with replies pending is still read from: its requester may have stopped waiting
  /// for them (a receive timeout), and a client reads only while it waits for a reply, so
  /// the one-way messages it sends meanwhile would otherwise wait behind a reply that nobody
  /// takes until the peer is dropped for it, and be lost with it. The buffer limits bound
  /// what a peer that never reads can make the port hold.
  private func service(_ peer: Peer) -> Int {
    if peer.pendingOutput > 0 {
      _ = flush(peer)
      if peer.isDropped { return 0 }
    }
    let received: Int?
    do {
      received = try peer.socket.receiveAvailable(into: peer.chunk)
    } catch .peerClosed {
      let (handled, _) = drainFrames(of: peer)
      drop(peer, reason: nil)
      return handled
    } catch {
      drop(peer, reason: "receive failed: \(error)")
      return 0
    }
    guard let received else {
      settle(peer, completedFrames: false)
      return 0
    }
    peer.decoder.append(UnsafeRawBufferPointer(rebasing: peer.chunk[0..<received]))
    let (handled, completed) = drainFrames(of: peer)
    settle(peer, completedFrames: completed)
    // One read per readiness report: poll and epoll are level-triggered, so anything left
    // in the socket is reported again, and the usual case (one message) saves a `recv`
    // that would only say EAGAIN.
    return handled
  }

  /// Answers the complete frames buffered for `peer`, in order (a reply the peer cannot take
  /// at once waits behind any it has not taken). Returns how many were handled and whether
  /// any frame was completed.
  private func drainFrames(of peer: Peer) -> (handled: Int, completed: Bool) {
    var handled = 0
    var completed = false
    while !peer.isDropped {
      let frame: Frame?
      do {
        frame = try peer.decoder.nextFrame()
      } catch {
        drop(peer, reason: "malformed frame: \(error)")
        return (handled, completed)
      }
      guard let frame else { return (handled, completed) }
      completed = true
      if frame.kind == .reply {
        drop(peer, reason: "malformed frame: a reply sent to a listening port")
        return (handled, completed)
      }
      guard let current = mutex.withLock({ handler }) else { return (handled, completed) }
      let reply = current(frame)
      handled += 1
      // Invalidated by the handler or another thread meanwhile: no reply; the pass closes
      // the connection, which tells the sender its port became invalid.
      if !isValid { return (handled, completed) }
      if frame.kind == .request {
        let answer = Frame(
          kind: .reply, msgid: frame.msgid, sequence: frame.sequence, replyPortName: nil, payload: reply ?? [])
        write(answer.encoded(), to: peer)
        // A peer that sends requests without taking the replies is over its limit here:
        // stop answering (`settle` drops it), so one read of tiny requests cannot make
        // the port hold a reply for each of them first.
        if peer.pendingOutput + peer.decoder.bufferedByteCount > serverLimits.maximumBufferedBytesPerPeer {
          return (handled, completed)
        }
      }
    }
    return (handled, completed)
  }

  /// Writes what the peer's socket takes now; the rest waits in the peer's output buffer
  /// (the peer is then watched for writability too, with a deadline). Behind replies the
  /// peer has not taken yet, `bytes` only join the buffer, in order.
  private func write(_ bytes: [UInt8], to peer: Peer) {
    if peer.pendingOutput > 0 {
      // Keeps the earlier deadline: the peer still has to take the first reply in time.
      peer.output.removeFirst(peer.outputOffset)
      peer.outputOffset = 0
      peer.output += bytes
      return
    }
    let sent: Int
    do {
      sent = try peer.socket.sendAvailable(bytes, from: 0)
    } catch .peerClosed {
      drop(peer, reason: nil)
      return
    } catch {
      drop(peer, reason: "reply not delivered: \(error)")
      return
    }
    if sent == bytes.count { return }
    peer.output = bytes
    peer.outputOffset = sent
    peer.outputDeadline = .after(serverLimits.slowPeerTimeout)
    setInterest(
      of: peer.socket.descriptor, token: peer.token, to: UInt32(TK_EPOLL_READABLE) | UInt32(TK_EPOLL_WRITABLE))
  }

  /// Writes more of the peer's pending replies; returns true once all of them are taken (the
  /// peer is then watched for input only).
  private func flush(_ peer: Peer) -> Bool {
    do {
      peer.outputOffset = try peer.socket.sendAvailable(peer.output, from: peer.outputOffset)
    } catch .peerClosed {
      drop(peer, reason: nil)
      return false
    } catch {
      drop(peer, reason: "reply not delivered: \(error)")
      return false
    }
    if peer.pendingOutput > 0 { return false }
    peer.output = []
    peer.outputOffset = 0
    peer.outputDeadline = nil
    setInterest(of: peer.socket.descriptor, token: peer.token, to: UInt32(TK_EPOLL_READABLE))
    return true
  }

  /// After serving `peer`: updates its input deadline (an unfinished frame must be complete
  /// `slowPeerTimeout` after its first byte or after the previous completed frame), the
  /// bytes held for it, and drops it when it breaks a buffer limit.
  private func settle(_ peer: Peer, completedFrames: Bool) {
    if peer.isDropped { return }
    if peer.decoder.bufferedByteCount == 0 {
      peer.inputDeadline = nil
    } else if completedFrames || peer.inputDeadline == nil {
      peer.inputDeadline = .after(serverLimits.slowPeerTimeout)
    }
    let timed = peer.deadline != nil
    if timed != peer.isTimed {
      peer.isTimed = timed
      timedPeers[peer.socket.descriptor] = timed ? peer : nil
    }
    let held = peer.decoder.bufferedByteCount + peer.pendingOutput
    if held != peer.accounted {
      bufferedBytes += held - peer.accounted
      peer.accounted = held
    }
    if held > serverLimits.maximumBufferedBytesPerPeer {
      drop(
        peer,
        reason: "holds \(held) bytes, over the limit of \(serverLimits.maximumBufferedBytesPerPeer) per peer")
    } else if bufferedBytes > serverLimits.maximumBufferedBytesTotal {
      drop(
        peer,
        reason:
          "would take the port's buffers to \(bufferedBytes) bytes, over the limit of \(serverLimits.maximumBufferedBytesTotal)"
      )
    }
  }

  /// Drops the peers whose deadline passed and resumes accepting when its back-off ended.
  private func enforceDeadlines() {
    let now = MonotonicInstant.now
    if acceptPaused && acceptResumeAt <= now { resumeAccepting() }
    for peer in timedPeers.values {
      guard let deadline = peer.deadline, deadline <= now else { continue }
      let what = peer.pendingOutput > 0 ? "did not read its reply" : "did not finish its frame"
      drop(peer, reason: "slow peer: \(what) within \(serverLimits.slowPeerTimeout)")
    }
  }

  /// Arms the timerfd for the earliest deadline (or disarms it), unless it already is.
  private func rearmTimer() {
    var next: MonotonicInstant? = acceptPaused ? acceptResumeAt : nil
    for peer in timedPeers.values {
      if let deadline = peer.deadline { next = min(next ?? deadline, deadline) }
    }
    if next == armedDeadline { return }
    armedDeadline = next
    _ = mustSucceed("RunLoop: arming a port's deadline timer") { () throws(SystemCallError) in
      try shimCall("timerfd_settime") { tk_timerfd_arm_absolute(passTimer, next?.nanoseconds ?? .max) }
    }
  }

  private func drop(_ peer: Peer, reason: String?) {
    if peer.isDropped { return }
    peer.isDropped = true
    mutex.withLock {
      guard peers.removeValue(forKey: peer.socket.descriptor) != nil else { return }
      // Closing the socket would also remove it from the set, but only once every duplicate
      // of the descriptor is closed; removing it explicitly keeps the set exact.
      _ = mustSucceed("RunLoop: removing a port peer") { () throws(SystemCallError) in
        try shimCall("epoll_ctl(EPOLL_CTL_DEL)") { tk_epoll_remove(epollDescriptor, peer.socket.descriptor) }
      }
    }
    if peer.isTimed {
      peer.isTimed = false
      timedPeers[peer.socket.descriptor] = nil
    }
    bufferedBytes -= peer.accounted
    peer.accounted = 0
    // Its descriptor closes with it, and there is room for another peer.
    peerLimitReported = false
    if acceptPaused { resumeAccepting() }
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
    closeDescriptor(timerDescriptor)
    timerDescriptor = -1
    // No pass runs: the serving state is ours to reset.
    timedPeers.removeAll()
    bufferedBytes = 0
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
