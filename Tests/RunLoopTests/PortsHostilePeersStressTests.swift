import Glibc
import Sync
import TestSupport
import Testing

@testable import RunLoop

/// Pauses a hostile peer between moves: pacing what it does, not waiting for anything.
private func pace(_ microseconds: UInt32) { _ = usleep(microseconds) }

@Suite("Ports: a server among hostile peers", .timeLimit(.minutes(3)))
struct PortsHostilePeersStressTests {
  @Test(
    "garbage senders, non-readers, slowloris peers and a connection flood leave a legitimate client's p99 under 500 ms")
  func legitimateClientKeepsItsLatency() throws {
    let served = try PortsServedListener(
      serverLimits: MessagePort.ServerLimits(maximumPeers: 48, slowPeerTimeout: .milliseconds(300)),
      handler: portsBigReplyHandler)
    let stop = AtomicInteger<Int>(0)
    let roundTrips = Recorder<Duration>()
    let failures = Recorder<String>()
    let hostileConnections = PortsCounter()
    try served.whileServing {
      let client = try served.connect()
      @Sendable func connectHostile() -> UnixSocket? {
        hostileConnections.increment()
        return try? served.rawPeer()
      }
      runThreads(5) { role in
        switch role {
        case 0:
          // The legitimate client: small requests for two seconds, each timed.
          let end = MonotonicInstant.after(.seconds(2))
          var msgid: Int32 = 2
          while !end.hasPassed {
            let start = MonotonicInstant.now
            do {
              let reply = try client.request(msgid, [UInt8](repeating: 1, count: 100), receive: .seconds(10))
              if reply != [UInt8(truncatingIfNeeded: msgid)] { failures.append("wrong reply to \(msgid)") }
            } catch {
              failures.append("\(error)")
              break
            }
            roundTrips.append(MonotonicInstant.now - start)
            msgid = msgid == 100 ? 2 : msgid + 1
          }
          stop.store(1, ordering: .releasing)
        case 1:
          // Garbage: a connection, 200 random bytes, dropped by the server; again.
          var state: UInt64 = 0x9E37_79B9_7F4A_7C15
          while stop.load(ordering: .acquiring) == 0 {
            guard let peer = connectHostile() else { continue }
            let garbage = (0..<200).map { _ -> UInt8 in
              state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
              return UInt8(truncatingIfNeeded: state >> 56)
            }
            try? peer.sendAll(garbage, before: .after(.seconds(1)))
            try? peer.waitUntil(.readable, before: .after(.seconds(1)))
          }
        case 2:
          // Non-readers: four at a time ask for a 1 MiB reply and never read; the oldest is
          // replaced every 150 ms (so each lives past the slow-peer timeout).
          var peers: [UnixSocket] = []
          while stop.load(ordering: .acquiring) == 0 {
            if let peer = connectHostile() {
              try? peer.sendAll(portsRequestBytes(1), before: .after(.seconds(1)))
              peers.append(peer)
            }
            if peers.count > 4 { peers.removeFirst() }
            pace(150_000)
          }
        case 3:
          // Slowloris: four peers each trickle one byte of a frame every 20 ms; one the
          // server dropped is replaced.
          var peers: [UnixSocket?] = Array(repeating: nil, count: 4)
          let frame = portsRequestBytes(2, payload: [UInt8](repeating: 0, count: 64))
          var sent = [Int](repeating: 0, count: 4)
          while stop.load(ordering: .acquiring) == 0 {
            for index in peers.indices {
              if peers[index] == nil {
                peers[index] = connectHostile()
                sent[index] = 0
              }
              guard let peer = peers[index] else { continue }
              do {
                try peer.sendAll([frame[sent[index] % frame.count]], before: .after(.seconds(1)))
                sent[index] += 1
              } catch {
                peers[index] = nil
              }
            }
            pace(20_000)
          }
        default:
          // A flood: forty connections opened at once and held, then replaced, ten times a
          // second (beyond the peer limit, the server closes them at once).
          var held: [UnixSocket] = []
          while stop.load(ordering: .acquiring) == 0 {
            held.removeAll()
            for _ in 0..<40 { if let peer = connectHostile() { held.append(peer) } }
            pace(100_000)
          }
        }
      }
      #expect(client.isValid)
    }
    let sorted = roundTrips.snapshot.sorted()
    #expect(failures.snapshot.isEmpty)
    #expect(sorted.count >= 20, "the client made progress: \(sorted.count) round trips")
    let p99 = sorted.isEmpty ? .zero : sorted[min(sorted.count - 1, sorted.count * 99 / 100)]
    #expect(p99 < .milliseconds(500), "p99 \(p99) over \(sorted.count) round trips")
    #expect(hostileConnections.count > 50)
    let reasons = served.rejections.snapshot
    #expect(reasons.contains { $0.hasPrefix("malformed frame") }, "garbage was dropped")
    #expect(reasons.contains { $0.hasPrefix("slow peer") }, "slow peers were dropped")
  }
}
