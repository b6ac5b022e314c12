import Sync

extension MessagePort {
  /// What a local port's server allows its peers, so that a slow, stuck or hostile peer
  /// costs only itself: how many peers, how many bytes held for them, and how long an
  /// unfinished exchange may take.
  ///
  /// A port serves every peer from one thread and never blocks on one of them: a reply the
  /// peer does not read at once waits in that peer's output buffer (the port still reads
  /// and handles the peer's messages meanwhile, and queues their replies behind it), an
  /// incoming frame waits in its input buffer until complete. A peer that breaks a limit is disconnected and reported to
  /// the peer rejection handler (``MessagePort/setPeerRejectionHandler(_:)``); its sender
  /// sees ``PortStatus/becameInvalid``. Every other peer is served as before.
  ///
  /// The defaults let any legitimate exchange through (a request and a reply of the
  /// largest payload, 1 MiB, each) and bound what hostile peers can take:
  ///
  /// | limit | default | why |
  /// |---|---|---|
  /// | ``maximumPeers`` | 256 | a quarter of the usual soft limit of 1,024 descriptors, leaving the rest to the process |
  /// | ``maximumBufferedBytesPerPeer`` | 3 MiB | a whole incoming frame and a whole reply of the largest payload, plus a read |
  /// | ``maximumBufferedBytesTotal`` | 64 MiB | about twenty peers mid-way through the largest exchange at once |
  /// | ``slowPeerTimeout`` | 10 s | a local socket moves a megabyte in milliseconds; only a stalled peer needs seconds |
  ///
  /// Connections with nothing in flight are never timed out: a remote port is a
  /// long-lived handle that may stay quiet between requests.
  ///
  /// When the process runs out of descriptors (`accept` fails with `EMFILE` or `ENFILE`),
  /// the port stops accepting, without spinning: it accepts again once one of its peers
  /// disconnects, or after a back-off (50 ms, doubling up to 1 s); the rejection handler hears
  /// of it once per shortage, not per attempt.
  public struct ServerLimits: Sendable, Hashable {
    /// The most peers connected at once. A connection beyond it is accepted and closed at
    /// once (its sender sees ``PortStatus/becameInvalid``); the rejection handler hears of
    /// it once until a peer disconnects.
    public var maximumPeers: Int

    /// The most bytes held for one peer: its unfinished incoming frame plus the reply it
    /// has not read yet. A peer that would exceed it is disconnected.
    public var maximumBufferedBytesPerPeer: Int

    /// The most bytes held for all peers together. The peer whose input or reply would take
    /// the total past it is disconnected.
    public var maximumBufferedBytesTotal: Int

    /// How long a peer may take to finish a frame it has started sending (counted from its
    /// first byte, or from the previous frame it completed) or to read a reply the port
    /// wrote (counted from when the reply was ready). A peer that takes longer (a slowloris
    /// trickling bytes, a client that never reads) is disconnected.
    public var slowPeerTimeout: Duration

    /// Limits with the documented defaults for the arguments left out.
    ///
    /// Every limit must be positive (stops the process otherwise: a limit of zero would
    /// refuse every peer).
    public init(
      maximumPeers: Int = 256, maximumBufferedBytesPerPeer: Int = 3 << 20, maximumBufferedBytesTotal: Int = 64 << 20,
      slowPeerTimeout: Duration = .seconds(10)
    ) {
      self.maximumPeers = maximumPeers
      self.maximumBufferedBytesPerPeer = maximumBufferedBytesPerPeer
      self.maximumBufferedBytesTotal = maximumBufferedBytesTotal
      self.slowPeerTimeout = slowPeerTimeout
      checkPositive()
    }

    /// Stops the process, naming the limit, unless every limit is positive (checked again
    /// when a port is created, since the properties are settable).
    func checkPositive() {
      if maximumPeers <= 0 || maximumBufferedBytesPerPeer <= 0 || maximumBufferedBytesTotal <= 0
        || slowPeerTimeout <= .zero
      {
        reportMisuse(
          "MessagePort.ServerLimits",
          "every limit must be positive (maximumPeers \(maximumPeers), maximumBufferedBytesPerPeer "
            + "\(maximumBufferedBytesPerPeer), maximumBufferedBytesTotal \(maximumBufferedBytesTotal), "
            + "slowPeerTimeout \(slowPeerTimeout))")
      }
    }

    /// The defaults (see the table above).
    public static var standard: ServerLimits { ServerLimits() }
  }
}
