// libFuzzer target for the named-port server's connection handling (NamedPortListener:
// accepting, reading, decoding, answering, buffering replies, limits, dropping peers), built
// with the Sync, Threads and RunLoop sources and run by `scripts/fuzz`.
//
// Input: byte 0 picks how the rest is cut into writes (1...512 bytes, varying); byte 1's
// low bit says whether the peer reads the replies. The rest is what one peer sends to a
// listener in a private directory, served on this thread with passes that never wait. The
// listener answers a request for msgid m with `m & 0x3FFF` bytes, so replies larger than
// the peer's socket buffer (with a reader that does not read) and the per-peer limit
// (16 KiB here) happen. Checked, beyond "no crash, no memory error" (the address
// sanitizer):
// - the listener stays valid whatever the peer sends;
// - once the peer closes, the listener drops it, and the bytes it held for peers and the
//   deadlines it keeps return to zero (its accounting is exact);
// - the handler ran at most once per request or one-way message the stream could hold.

import Glibc
import Sync

@testable import RunLoop

final class Harness: @unchecked Sendable {
  let path: String
  let directory: PortDirectory
  let listener: NamedPortListener
  let handled: AtomicInteger<Int>

  init() {
    var template = Array("/tmp/tk-fuzz-XXXXXX".utf8CString)
    precondition(template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) } != nil)
    path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    directory = try! PortDirectory.prepare(path: path)
    let handled = AtomicInteger<Int>(0)
    self.handled = handled
    listener = try! NamedPortListener(
      name: "fuzz", directory: directory, limits: Frame.Limits(maximumPayload: 4096),
      serverLimits: MessagePort.ServerLimits(maximumBufferedBytesPerPeer: 16 << 10, slowPeerTimeout: .seconds(5))
    ) { frame in
      handled.increment(ordering: .relaxed)
      return [UInt8](repeating: 0xA5, count: Int(UInt32(bitPattern: frame.msgid) & 0x3FFF))
    }
  }

  /// One pass that does not wait.
  func poll() {
    do {
      _ = try listener.serveOnce(before: .distantPast)
    } catch {
      preconditionFailure("the listener failed: \(error)")
    }
  }
}

let harness = Harness()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
  if size < 2 { return 0 }
  let input = Array(UnsafeBufferPointer(start: data, count: size))
  let seed = Int(input[0])
  let reads = input[1] & 1 == 1
  let stream = Array(input[2...])
  let before = harness.handled.load(ordering: .relaxed)

  var peer: UnixSocket? = try! UnixSocket.connect(
    to: harness.directory.socketPath(for: "fuzz"), before: .after(.seconds(5)))
  let accepted = MonotonicInstant.after(.seconds(5))
  while harness.listener.peerCount == 0 && !accepted.hasPassed { harness.poll() }
  precondition(harness.listener.peerCount == 1, "the peer was not accepted")

  var scratch = [UInt8](repeating: 0, count: 64 << 10)
  var offset = 0
  var step = 0
  var stalls = 0
  while offset < stream.count, let socket = peer {
    let length = min(stream.count - offset, 1 + (seed &* 37 &+ step &* 13) % 512)
    step += 1
    let sent: Int
    do {
      sent = try socket.sendAvailable(Array(stream[offset..<offset + length]), from: 0)
    } catch {
      peer = nil  // dropped by the listener: the rest of the stream cannot be sent
      break
    }
    offset += sent
    // A listener that stopped reading (a reply this peer does not take) leaves the socket
    // full: give up on the rest after a few passes.
    stalls = sent == 0 ? stalls + 1 : 0
    if stalls > 8 { break }
    harness.poll()
    if reads {
      while let count = try? scratch.withUnsafeMutableBytes({ buffer in
        try Result { () throws(TransferFailure) in try socket.receiveAvailable(into: buffer) }.get()
      }), count > 0 {}
    }
  }
  harness.poll()
  peer = nil  // closes the connection
  let gone = MonotonicInstant.after(.seconds(5))
  while harness.listener.peerCount > 0 && !gone.hasPassed { harness.poll() }
  precondition(harness.listener.isValid, "the listener became invalid")
  precondition(harness.listener.peerCount == 0, "the closed peer was not dropped")
  let held = harness.listener.heldBytesAndTimedPeers
  precondition(held.bytes == 0 && held.timedPeers == 0, "held for no peer: \(held)")
  let handled = harness.handled.load(ordering: .relaxed) - before
  precondition(handled <= stream.count / Frame.headerSize, "\(handled) messages from \(stream.count) bytes")
  return 0
}
