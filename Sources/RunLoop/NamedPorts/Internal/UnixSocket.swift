import CThreadingShims
import Sync

#if canImport(Glibc)
  import Glibc
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
    _ = try shimCall("bind") { tk_unix_bind(socket.descriptor, path) }
    _ = try systemCall("listen") { Glibc.listen(socket.descriptor, backlog) }
    return socket
  }

  /// A socket connected to the listener at `path`, retrying while its backlog is full until
  /// `deadline`. Throws `ENOENT`/`ECONNREFUSED` at once when nobody listens.
  static func connect(to path: String, before deadline: MonotonicInstant) throws(SystemCallError) -> UnixSocket {
    while true {
      let socket = try makeSocket()
      do throws(SystemCallError) {
        _ = try shimCall("connect") { tk_unix_connect(socket.descriptor, path) }
        return socket
      } catch  where error.code == .tryAgain && !deadline.hasPassed {
        // A full backlog on a non-blocking AF_UNIX socket fails with EAGAIN; nothing can be
        // polled for it, so back off briefly and retry until the deadline.
      }
      var pause = timespec(tv_sec: 0, tv_nsec: 200_000)
      _ = nanosleep(&pause, nil)  // an early return (EINTR) only retries sooner
    }
  }

  /// A connected pair of sockets (`socketpair`).
  static func pair() throws(SystemCallError) -> (UnixSocket, UnixSocket) {
    var descriptors: (Int32, Int32) = (-1, -1)
    _ = try shimCall("socketpair") {
      withUnsafeMutableBytes(of: &descriptors) {
        tk_unix_stream_socketpair($0.baseAddress!.assumingMemoryBound(to: Int32.self))
      }
    }
    return (UnixSocket(descriptor: descriptors.0), UnixSocket(descriptor: descriptors.1))
  }

  private static func makeSocket() throws(SystemCallError) -> UnixSocket {
    UnixSocket(descriptor: try shimCall("socket") { tk_unix_stream_socket() })
  }

  /// Accepts one pending connection, or returns nil when none is pending.
  func accept() throws(SystemCallError) -> UnixSocket? {
    while true {
      do throws(SystemCallError) {
        return UnixSocket(descriptor: try shimCall("accept4") { tk_unix_accept(descriptor) })
      } catch  where error.code == .tryAgain || error.code == .wouldBlock {
        return nil
      } catch  where [.interrupted, SystemErrorCode(rawValue: ECONNABORTED), .protocolError].contains(error.code) {
        // The connection died between arriving and being accepted: try the next one.
        continue
      }
    }
  }

  /// The kernel-recorded credentials of the peer.
  func peerCredentials() throws(SystemCallError) -> PeerCredentials {
    var credentials = PeerCredentials(processID: 0, userID: 0, groupID: 0)
    _ = try shimCall("getsockopt(SO_PEERCRED)") {
      tk_peer_credentials(descriptor, &credentials.processID, &credentials.userID, &credentials.groupID)
    }
    return credentials
  }

  /// Sends all of `bytes`, waiting for buffer space until `deadline`.
  func sendAll(_ bytes: [UInt8], before deadline: MonotonicInstant) throws(TransferFailure) {
    var offset = 0
    try sendAll(bytes, before: deadline, offset: &offset)
  }

  /// ``sendAll(_:before:)`` that leaves in `offset` how many bytes went out (also when it
  /// throws), so a caller can tell a transfer that never started from one cut short.
  func sendAll(_ bytes: [UInt8], before deadline: MonotonicInstant, offset: inout Int) throws(TransferFailure) {
    while offset < bytes.count {
      do throws(SystemCallError) {
        offset += try shimCall("send") {
          bytes.withUnsafeBytes { buffer in
            tk_send_nosignal(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
          }
        }
      } catch {
        switch error.code {
        case .interrupted: continue
        case .tryAgain, .wouldBlock: try waitUntil(.writable, before: deadline)
        case .brokenPipe, .connectionReset: throw .peerClosed
        default: throw .system(error)
        }
      }
    }
  }

  /// Whether the peer has closed or shut down its end (a zero-timeout poll; never waits).
  /// A poll that fails for another reason than a signal (`ENOMEM`) answers false: the next
  /// send finds out.
  var peerHasHungUp: Bool {
    var entry = pollfd(fd: descriptor, events: 0, revents: 0)
    while true {
      let ready = poll(&entry, 1, 0)
      if ready >= 0 { return ready > 0 && entry.revents & Int16(POLLHUP | POLLERR) != 0 }
      if errno != EINTR { return false }
    }
  }

  /// Sends as much of `bytes[offset...]` as the socket takes now, never waiting; returns the
  /// offset reached (`bytes.count` once everything is sent).
  func sendAvailable(_ bytes: [UInt8], from offset: Int) throws(TransferFailure) -> Int {
    var offset = offset
    while offset < bytes.count {
      do throws(SystemCallError) {
        offset += try shimCall("send") {
          bytes.withUnsafeBytes { buffer in
            tk_send_nosignal(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
          }
        }
      } catch {
        switch error.code {
        case .interrupted: continue
        case .tryAgain, .wouldBlock: return offset
        case .brokenPipe, .connectionReset: throw .peerClosed
        default: throw .system(error)
        }
      }
    }
    return offset
  }

  /// Shuts the connection down both ways without closing the descriptor: a thread of ours
  /// waiting on it (poll, send, recv) sees the end of the stream at once, so does the peer,
  /// and the descriptor stays valid (never reused) until the object is released. Safe from
  /// any thread while another one uses the socket.
  func shutdownBothWays() {
    do throws(SystemCallError) {
      _ = try systemCall("shutdown(\(descriptor))") { Glibc.shutdown(descriptor, Int32(SHUT_RDWR)) }
    } catch  where error.code == .socketNotConnected {
      // The peer is already gone (or the socket listens); nothing to end.
    } catch {
      fatalError("RunLoop: shutdown of a port socket: \(error)")
    }
  }

  /// Reads what is available into `buffer` without waiting: the byte count, nil when nothing
  /// is available yet. Throws `.peerClosed` at end of stream.
  func receiveAvailable(into buffer: UnsafeMutableRawBufferPointer) throws(TransferFailure) -> Int? {
    while true {
      let received: Int
      do throws(SystemCallError) {
        received = try shimCall("recv") { tk_receive(descriptor, buffer.baseAddress!, buffer.count) }
      } catch {
        switch error.code {
        case .interrupted: continue
        case .tryAgain, .wouldBlock: return nil
        case .connectionReset: throw .peerClosed
        default: throw .system(error)
        }
      }
      if received == 0 { throw .peerClosed }
      return received
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
    do throws(SystemCallError) {
      var time = deadline.timespec
      result = try shimCall("ppoll") {
        deadline == .distantFuture ? tk_poll_one(descriptor, events, nil) : tk_poll_one(descriptor, events, &time)
      }
    } catch {
      throw .system(error)
    }
    if result == 0 { throw .timedOut }
  }
}
