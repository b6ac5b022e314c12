// Ports rows (issue 6's speed goals): message round trips through this toolkit's ports
// beside the raw kernel mechanism they are built on, measured in the same run.
//
//   ports.roundtrip.inprocess   Port between two threads      vs raw eventfd ping-pong
//   ports.roundtrip.xprocess    MessagePort request/reply     vs raw Unix-socket ping-pong
//                               between two processes            between two processes
//
// The second process is a fork of this one, made while no other thread runs (every row
// joins its threads), so the child inherits a quiescent runtime; it serves, then _exits.

import CThreadingShims
import RunLoop
import Sync

#if canImport(Glibc)
  import Glibc
#endif

func registerPortsBenchmarks(_ harness: Harness) {
  portsInProcessRows(harness)
  portsCrossProcessRows(harness)
}

private func portsCheck(_ condition: Bool, _ what: String) {
  if !condition { fatalError("cost-tables (ports): \(what) failed: errno \(errno)") }
}

/// Starts a pthread running `body`; returns it for `pthread_join`.
private func portsStartThread(_ body: @escaping @Sendable () -> Void) -> pthread_t {
  final class Box: @unchecked Sendable {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
  }
  var thread = pthread_t()
  let box = Unmanaged.passRetained(Box(body)).toOpaque()
  let result = pthread_create(&thread, nil, { raw in
    Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue().body()
    return nil
  }, box)
  portsCheck(result == 0, "pthread_create")
  return thread
}

// MARK: - In-process

private func portsInProcessRows(_ harness: Harness) {
  let group = "Ports"
  let id = "ports.roundtrip.inprocess"
  guard harness.wants(id) else { return }

  // Raw: two blocking eventfds, one per direction; the peer reads one and writes the other.
  do {
    let toPeer = tk_port_eventfd()
    let fromPeer = tk_port_eventfd()
    portsCheck(toPeer >= 0 && fromPeer >= 0, "eventfd")
    // Blocking reads: the cheapest way one thread can sleep until another signals it.
    for descriptor in [toPeer, fromPeer] { portsCheck(fcntl(descriptor, F_SETFL, 0) == 0, "fcntl") }
    let stop = UInt64.max - 1
    let peer = portsStartThread {
      var value: UInt64 = 0
      while true {
        portsCheck(read(toPeer, &value, 8) == 8, "read(eventfd)")
        if value == stop { return }
        portsCheck(write(fromPeer, &value, 8) == 8, "write(eventfd)")
      }
    }
    harness.measure(id: id, subject: "raw eventfd", group: group, operations: 20_000) { iterations in
      var value: UInt64 = 1
      for _ in 0..<iterations {
        value = 1
        portsCheck(write(toPeer, &value, 8) == 8, "write(eventfd)")
        portsCheck(read(fromPeer, &value, 8) == 8, "read(eventfd)")
      }
    }
    var value = stop
    portsCheck(write(toPeer, &value, 8) == 8, "write(eventfd)")
    portsCheck(pthread_join(peer, nil) == 0, "pthread_join")
    portsCheck(close(toPeer) == 0 && close(fromPeer) == 0, "close")
  }

  // Ours: two ports; the peer receives on one and answers on the other.
  do {
    let toPeer = Port(capacity: 16)
    let fromPeer = Port(capacity: 16)
    let peer = portsStartThread {
      while let message = try? toPeer.receive(before: .distantFuture) {
        do { try fromPeer.send(message, before: .distantFuture) } catch { fatalError("port send: \(error)") }
      }
    }
    let ping = PortMessage(msgid: 1, payload: [1, 2, 3, 4])
    harness.measure(id: id, subject: "RunLoop.Port (blocking receive)", group: group, operations: 20_000) { iterations in
      for _ in 0..<iterations {
        do {
          try toPeer.send(ping, before: .distantFuture)
          _ = try fromPeer.receive(before: .distantFuture)
        } catch {
          fatalError("port round trip: \(error)")
        }
      }
    }
    toPeer.invalidate()
    portsCheck(pthread_join(peer, nil) == 0, "pthread_join")
  }
}

// MARK: - Across processes

/// Forks a child that runs `body` and then `_exit`s with its result; returns the child's pid.
private func portsFork(_ body: () -> Int32) -> pid_t {
  let pid = fork()
  portsCheck(pid >= 0, "fork")
  if pid == 0 { _exit(body()) }
  return pid
}

private func portsReap(_ pid: pid_t) {
  var status: Int32 = 0
  portsCheck(waitpid(pid, &status, 0) == pid, "waitpid")
  if status != 0 { fatalError("cost-tables (ports): child process ended with status \(status)") }
}

private func portsCrossProcessRows(_ harness: Harness) {
  let group = "Ports"
  let id = "ports.roundtrip.xprocess"
  guard harness.wants(id) else { return }
  let payload = [UInt8](repeating: 7, count: 32)

  // Raw: a connected Unix stream socket pair; the child echoes 32-byte messages.
  do {
    var pair: [Int32] = [-1, -1]
    portsCheck(tk_unix_stream_socketpair(&pair) == 0, "socketpair")
    // Blocking mode, as a hand-written ping-pong would use.
    for descriptor in pair { portsCheck(fcntl(descriptor, F_SETFL, 0) == 0, "fcntl") }
    let child = portsFork {
      // The parent's end must close here too, or the child never sees end of stream.
      if close(pair[0]) != 0 { return 4 }
      var buffer = [UInt8](repeating: 0, count: 32)
      while true {
        var got = 0
        while got < 32 {
          let count = buffer.withUnsafeMutableBytes { read(pair[1], $0.baseAddress! + got, 32 - got) }
          if count <= 0 { return 0 }  // parent closed: done
          got += count
        }
        if buffer.withUnsafeBytes({ write(pair[1], $0.baseAddress!, 32) }) != 32 { return 1 }
      }
    }
    portsCheck(close(pair[1]) == 0, "close")
    var buffer = payload
    harness.measure(id: id, subject: "raw Unix socket", group: group, operations: 10_000) { iterations in
      for _ in 0..<iterations {
        portsCheck(buffer.withUnsafeBytes { write(pair[0], $0.baseAddress!, 32) } == 32, "write")
        var got = 0
        while got < 32 {
          let count = buffer.withUnsafeMutableBytes { read(pair[0], $0.baseAddress! + got, 32 - got) }
          portsCheck(count > 0, "read")
          got += count
        }
      }
    }
    portsCheck(close(pair[0]) == 0, "close")
    portsReap(child)
  }

  // Ours: the child registers a named local port and serves it; the parent sends requests
  // through a remote port and waits for each reply.
  do {
    let name = "cost-tables-ports-\(getpid())"
    let child = portsFork {
      guard let port = try? MessagePort.local(name: name, handler: { message in
        if message.msgid == 0 { _exit(0) }
        return message.payload
      }) else { return 2 }
      while true {
        do { try port.serve(before: .after(.seconds(120))) } catch { return 3 }
      }
    }
    var remote: MessagePort?
    let giveUp = MonotonicInstant.after(.seconds(30))
    while remote == nil {
      remote = try? MessagePort.remote(name: name)
      if remote == nil {
        if giveUp.hasPassed { fatalError("cost-tables (ports): the child never registered \(name)") }
        sched_yield()
      }
    }
    harness.measure(id: id, subject: "RunLoop.MessagePort request/reply", group: group, operations: 10_000) { iterations in
      for _ in 0..<iterations {
        do {
          _ = try remote!.send(msgid: 1, data: payload, sendTimeout: .seconds(10), receiveTimeout: .seconds(10), replyMode: .awaitReply)
        } catch {
          fatalError("cost-tables (ports): request failed: \(error)")
        }
      }
    }
    do {
      try remote!.send(msgid: 0, sendTimeout: .seconds(10), receiveTimeout: .zero, replyMode: .oneWay)
    } catch {
      fatalError("cost-tables (ports): stop message failed: \(error)")
    }
    portsReap(child)
  }
}
