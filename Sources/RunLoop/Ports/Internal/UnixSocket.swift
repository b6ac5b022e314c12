import CThreadingShims
import Sync

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Who is at the other end of a Unix-domain socket, as the kernel recorded it at connect
/// time (`SO_PEERCRED`): it cannot be forged by the peer.
struct PeerCredentials: Equatable, Sendable {
  var processID: Int32
  var userID: UInt32
  var groupID: UInt32
}

/// Which peers a named port talks to.
enum PeerPolicy: Equatable, Sendable {
  /// Only processes running as the same effective user (the default).
  case sameUser
  /// Only processes running as one of these user ids.
  case users(Set<UInt32>)

  func admits(_ credentials: PeerCredentials) -> Bool {
    switch self {
    case .sameUser: return credentials.userID == geteuid()
    case .users(let allowed): return allowed.contains(credentials.userID)
    }
  }
}

/// How a socket transfer failed.
enum TransferFailure: Error, Equatable {
  /// The deadline passed first.
  case timedOut
  /// The peer closed the connection or died (EOF, `EPIPE`, `ECONNRESET`).
  case peerClosed
  /// Another system error.
  case system(SystemCallError)

  /// The system call error, for `.system`.
  var systemError: SystemCallError? {
    if case .system(let error) = self { return error }
    return nil
  }
}

/// A non-blocking, close-on-exec `AF_UNIX` stream socket that the toolkit owns (closed on
/// deinit). Not thread-safe: one owner drives it, or its users serialise access.
final class UnixSocket {
  let descriptor: Int32

  private init(descriptor: Int32) {
    self.descriptor = descriptor
  }

  deinit {
    closeDescriptor(descriptor)
  }

  /// A socket listening at `path` (which must not exist).
  static func listen(at path: String, backlog: Int32 = 128) throws(SystemCallError) -> UnixSocket {
    let socket = try makeSocket()
    let bound = tk_unix_bind(socket.descriptor, path)
    if bound != 0 { throw SystemCallError(call: "bind", errno: -bound) }
    if Glibc.listen(socket.descriptor, backlog) != 0 { throw SystemCallError(call: "listen", errno: errno) }
    return socket
  }

  /// A socket connected to the listener at `path`, retrying while its backlog is full until
  /// `deadline`. Throws `ENOENT`/`ECONNREFUSED` at once when nobody listens.
  static func connect(to path: String, before deadline: MonotonicInstant) throws(SystemCallError) -> UnixSocket {
    while true {
      let socket = try makeSocket()
      let result = tk_unix_connect(socket.descriptor, path)
      if result == 0 { return socket }
      // A full backlog on a non-blocking AF_UNIX socket fails with EAGAIN; nothing can be
      // polled for it, so back off briefly and retry until the deadline.
      if result != -EAGAIN || deadline.hasPassed { throw SystemCallError(call: "connect", errno: -result) }
      var pause = timespec(tv_sec: 0, tv_nsec: 200_000)
      _ = nanosleep(&pause, nil)  // an early return (EINTR) only retries sooner
    }
  }

  /// A connected pair of sockets (`socketpair`).
  static func pair() throws(SystemCallError) -> (UnixSocket, UnixSocket) {
    var descriptors: (Int32, Int32) = (-1, -1)
    let result = withUnsafeMutableBytes(of: &descriptors) {
      tk_unix_stream_socketpair($0.baseAddress!.assumingMemoryBound(to: Int32.self))
    }
    if result != 0 { throw SystemCallError(call: "socketpair", errno: -result) }
    return (UnixSocket(descriptor: descriptors.0), UnixSocket(descriptor: descriptors.1))
  }

  private static func makeSocket() throws(SystemCallError) -> UnixSocket {
    let descriptor = tk_unix_stream_socket()
    if descriptor < 0 { throw SystemCallError(call: "socket", errno: -descriptor) }
    return UnixSocket(descriptor: descriptor)
  }

  /// Accepts one pending connection, or returns nil when none is pending.
  func accept() throws(SystemCallError) -> UnixSocket? {
    while true {
      let accepted = tk_unix_accept(descriptor)
      if accepted >= 0 { return UnixSocket(descriptor: accepted) }
      switch -accepted {
      case EAGAIN, EWOULDBLOCK: return nil
      // The connection died between arriving and being accepted: try the next one.
      case EINTR, ECONNABORTED, EPROTO: continue
      default: throw SystemCallError(call: "accept4", errno: -accepted)
      }
    }
  }

  /// The kernel-recorded credentials of the peer.
  func peerCredentials() throws(SystemCallError) -> PeerCredentials {
    var credentials = PeerCredentials(processID: 0, userID: 0, groupID: 0)
    let result = tk_peer_credentials(descriptor, &credentials.processID, &credentials.userID, &credentials.groupID)
    if result != 0 { throw SystemCallError(call: "getsockopt(SO_PEERCRED)", errno: -result) }
    return credentials
  }

  /// Sends all of `bytes`, waiting for buffer space until `deadline`.
  func sendAll(_ bytes: [UInt8], before deadline: MonotonicInstant) throws(TransferFailure) {
    var offset = 0
    while offset < bytes.count {
      let sent = bytes.withUnsafeBytes { buffer in
        tk_send_nosignal(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
      }
      if sent >= 0 {
        offset += sent
        continue
      }
      switch Int32(-sent) {
      case EINTR: continue
      case EAGAIN, EWOULDBLOCK: try waitUntil(.writable, before: deadline)
      case EPIPE, ECONNRESET: throw .peerClosed
      default: throw .system(SystemCallError(call: "send", errno: Int32(-sent)))
      }
    }
  }

  /// Shuts the connection down both ways without closing the descriptor: a thread of ours
  /// waiting on it (poll, send, recv) sees the end of the stream at once, so does the peer,
  /// and the descriptor stays valid (never reused) until the object is released. Safe from
  /// any thread while another one uses the socket.
  func shutdownBothWays() {
    if Glibc.shutdown(descriptor, Int32(SHUT_RDWR)) != 0 {
      let error = errno
      // ENOTCONN: the peer is already gone (or the socket listens); nothing to end.
      if error != ENOTCONN { fatalError("shutdown(\(descriptor)) of a port socket failed: errno \(error)") }
    }
  }

  /// Reads what is available into `buffer` without waiting: the byte count, nil when nothing
  /// is available yet. Throws `.peerClosed` at end of stream.
  func receiveAvailable(into buffer: UnsafeMutableRawBufferPointer) throws(TransferFailure) -> Int? {
    while true {
      let received = tk_receive(descriptor, buffer.baseAddress!, buffer.count)
      if received > 0 { return received }
      if received == 0 { throw .peerClosed }
      switch Int32(-received) {
      case EINTR: continue
      case EAGAIN, EWOULDBLOCK: return nil
      case ECONNRESET: throw .peerClosed
      default: throw .system(SystemCallError(call: "recv", errno: Int32(-received)))
      }
    }
  }

  enum Readiness {
    case readable
    case writable
  }

  /// Waits until the socket is readable / writable (or the peer hung up, which the next
  /// transfer reports), or throws `.timedOut` at `deadline`.
  func waitUntil(_ readiness: Readiness, before deadline: MonotonicInstant) throws(TransferFailure) {
    let events = Int16(readiness == .readable ? POLLIN : POLLOUT)
    let result: Int32
    if deadline == .distantFuture {
      result = tk_poll_one(descriptor, events, nil)
    } else {
      var time = deadline.timespec
      result = tk_poll_one(descriptor, events, &time)
    }
    if result < 0 { throw .system(SystemCallError(call: "ppoll", errno: -result)) }
    if result == 0 { throw .timedOut }
  }
}
