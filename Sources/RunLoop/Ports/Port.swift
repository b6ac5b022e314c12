import Sync

/// An in-process message port: the guide's `NSMachPort` for Linux.
///
/// A port is a bounded mailbox owned by one receiving thread. Any thread may ``send(_:before:)``
/// to it; the owner takes messages out in the order they were sent. Ports are objects with
/// identity, so a port can travel inside a message as its ``PortMessage/replyPort-swift.property``:
/// that is the check-in pattern of Listings 3-12..3-15, where a worker introduces itself to
/// the main thread by sending its own port.
///
/// **Bounded, with deadlines.** The mailbox holds at most ``capacity`` messages. A sender
/// finding it full waits until its deadline and then throws ``PortStatus/sendTimeout``, so a
/// stuck receiver never makes memory grow without limit.
///
/// **Invalidation** (``invalidate()``) is final and informs both sides: blocked senders throw
/// ``PortStatus/becameInvalid``, later sends throw ``PortStatus/invalid``, a blocked
/// ``receive(before:)`` throws ``PortStatus/becameInvalid``, the port leaves every run loop
/// (which is woken), the invalidation handler runs, messages still queued are dropped, and
/// both handlers are released (so a handler that captures its port does not keep it alive
/// past the invalidation). Releasing the last reference to a port invalidates it too, with
/// one difference: the invalidation handler is released without running, because it takes
/// the port, which no longer exists then (nobody can observe the port by then either: a
/// blocked sender or receiver holds a reference). Call ``invalidate()`` for it to run.
/// Messages waiting in the port do not keep it alive, not even one whose reply port is the
/// port itself: a port released with such a message queued is invalidated as any other.
///
/// **Receiving in a run loop** (the guide's way): set a handler with ``setHandler(_:)`` and
/// add the port to modes of the owning thread's run loop with
/// ``RunLoop/add(_:forMode:)-(Port,_)``; each message is delivered to the handler on that
/// thread while the loop runs in one of those modes. A send wakes the loop (no descriptor
/// of the port's own is involved: the loop's wake-up eventfd carries it).
///
/// A run loop does not keep a port alive: keep a reference for as long as it should receive.
///
/// **Receiving without a run loop**, the owning thread calls ``receive(before:)`` (blocking)
/// or ``tryReceive()``; ``readinessDescriptor()`` gives an `eventfd` that is readable while a
/// message or the invalidation waits, for `poll`/`epoll` users.
///
/// ```swift
/// let mainPort = Port()
/// // worker thread:
/// let workerPort = Port()
/// try mainPort.send(PortMessage(msgid: 100, replyPort: .port(workerPort)), timeout: .seconds(1))
/// // main thread, with a run loop:
/// mainPort.setHandler { message in
///     if message.msgid == 100 { store(message.replyPort?.port) }   // Listing 3-13
/// }
/// RunLoop.current.add(mainPort, forMode: .default)
/// // ...or without one:
/// let checkIn = try mainPort.receive(before: .after(.seconds(1)))
/// ```
///
/// **After `fork()`** a port belongs to the process that created it: in the child, sending,
/// receiving or adding the inherited copy to a run loop stops the process with a message
/// (the copy is not the parent's mailbox, and its readiness eventfd is the parent's).
/// Releasing or invalidating the copy in the child is harmless to the parent.
///
/// Built on the toolkit's futex `Lock` and two `ConditionVariable`s, with monotonic-clock
/// deadlines (plus an `eventfd` only when asked for); no Mach ports exist on Linux.
public final class Port: Hashable, Sendable, CustomStringConvertible {
  /// How many messages a port created without an explicit capacity holds.
  public static let defaultCapacity = 256

  /// The largest capacity a port accepts: 16,777,216 messages, far beyond any mailbox a
  /// thread drains. Larger capacities (and capacities below 1) are misuse.
  public static let maximumCapacity = 1 << 24

  /// The mailbox. A message naming this port as its reply port is kept without that
  /// reference (see ``QueuedPortMessage``), so queued messages never keep their port alive.
  let queue: MessageQueue<QueuedPortMessage>
  let link = PortRunLoopLink()
  /// Set while an async message sequence (in the RunLoopConcurrency module) owns the port's
  /// handlers, so a second one can be refused instead of silently starving one of them.
  package let hasMessageSequence = AtomicBool(false)

  /// Creates a valid, empty port holding at most `capacity` messages. Opens no descriptor
  /// (see ``readinessDescriptor()``). Memory follows the messages waiting, not the capacity:
  /// the port starts with room for a few dozen and doubles its buffer as more wait at once,
  /// up to `capacity`, so a large capacity costs nothing until it is used. A `capacity` below
  /// 1 or above ``maximumCapacity`` is misuse and stops the process with a message.
  public init(capacity: Int = Port.defaultCapacity) {
    queue = MessageQueue(capacity: capacity)
  }

  deinit {
    if queue.invalidate() { link.invalidate() }
  }

  /// The most messages the port queues before senders wait.
  public var capacity: Int { queue.capacity }

  /// Whether the port still accepts messages (false after ``invalidate()``).
  public var isValid: Bool { !queue.isInvalidated }

  /// How many messages wait to be received.
  public var pendingMessageCount: Int { queue.pendingCount }

  /// An `eventfd` descriptor that is readable exactly while a message or the invalidation
  /// waits, for code that multiplexes the port with other descriptors in `poll`/`epoll`.
  /// Created on the first call (ports that are only received from, or only scheduled in run
  /// loops, never pay for it); owned by the port: watch it, never read or close it.
  ///
  /// Throws ``/Sync/SystemCallError`` when the system refuses the `eventfd` (`EMFILE`, `ENFILE`).
  public func readinessDescriptor() throws(SystemCallError) -> Int32 {
    checkNotInherited("readinessDescriptor()")
    return try queue.readinessDescriptor()
  }

  /// Queues `message` for the port's owner, waiting while the port is full until `deadline`
  /// (monotonic clock). A deadline in the past makes one attempt, like the guide's
  /// `sendBeforeDate:[NSDate date]`.
  ///
  /// Blocks only while the port is full. Throws ``PortError`` with status
  /// ``PortStatus/sendTimeout`` (still full at the deadline), ``PortStatus/invalid`` (the
  /// port was invalid) or ``PortStatus/becameInvalid`` (invalidated while waiting).
  @available(*, noasync, message: "blocks while the port is full")
  public func send(_ message: PortMessage, before deadline: MonotonicInstant) throws(PortError) {
    checkNotInherited("send")
    switch queue.send(QueuedPortMessage(message, sentTo: self), before: deadline) {
    case .enqueued:
      link.messageArrived()
      return
    case .timedOut:
      throw PortError(.sendTimeout, detail: "port full (\(capacity) messages) until the send deadline")
    case .invalid:
      throw PortError(.invalid, detail: "send to an invalidated port")
    case .becameInvalid:
      throw PortError(.becameInvalid, detail: "port invalidated while the sender waited for room")
    }
  }

  /// Queues `message`, waiting at most `timeout` while the port is full; see
  /// ``send(_:before:)``.
  @available(*, noasync, message: "blocks while the port is full")
  public func send(_ message: PortMessage, timeout: Duration) throws(PortError) {
    try send(message, before: .after(timeout))
  }

  /// Takes the oldest message, waiting until one arrives, the port is invalidated, or
  /// `deadline` (monotonic clock) passes.
  ///
  /// Throws ``PortError`` with ``PortStatus/receiveTimeout`` at the deadline,
  /// ``PortStatus/becameInvalid`` when the port is (or becomes) invalid.
  @available(*, noasync, message: "blocks until a message arrives")
  public func receive(before deadline: MonotonicInstant) throws(PortError) -> PortMessage {
    checkNotInherited("receive")
    switch queue.receive(before: deadline) {
    case .element(let message):
      return message.message(receivedBy: self)
    case .timedOut:
      throw PortError(.receiveTimeout, detail: "no message before the receive deadline")
    case .invalid:
      throw PortError(.becameInvalid, detail: "port invalidated")
    }
  }

  /// Takes the oldest message, waiting at most `timeout` (monotonic clock) for one; see
  /// ``receive(before:)``.
  @available(*, noasync, message: "blocks until a message arrives")
  public func receive(timeout: Duration) throws(PortError) -> PortMessage {
    try receive(before: .after(timeout))
  }

  /// Takes the oldest message if one waits; never blocks. Returns nil when none waits;
  /// throws ``PortStatus/becameInvalid`` once the port is invalid.
  public func tryReceive() throws(PortError) -> PortMessage? {
    checkNotInherited("tryReceive()")
    switch queue.tryReceive() {
    case nil:
      return nil
    case .element(let message)?:
      return message.message(receivedBy: self)
    case .invalid?, .timedOut?:
      throw PortError(.becameInvalid, detail: "port invalidated")
    }
  }

  /// Invalidates the port: it accepts no more messages, queued ones are dropped, and every
  /// waiting sender and receiver wakes with an error. Idempotent; callable from any thread.
  /// Returns whether this call invalidated it.
  @discardableResult
  public func invalidate() -> Bool {
    guard queue.invalidate() else { return false }
    link.invalidate()
    return true
  }

  /// Sets the function that receives the port's messages when it is scheduled in a run loop
  /// (``RunLoop/add(_:forMode:)-(Port,_)``): the guide's `handlePortMessage:` delegate method.
  /// It runs on the thread of the run loop that fires, once per message, in the order they
  /// were sent. Messages that arrive while no handler is set wait in the port (and count
  /// against its capacity); setting a handler delivers them at the loop's next pass.
  ///
  /// The port keeps the handler until it is replaced or the port is invalidated, then
  /// releases it (and what it captures) outside the port's locks; on an invalid port the
  /// handler is not kept at all. A handler may therefore capture its own port: the cycle
  /// ends at ``invalidate()``.
  public func setHandler(_ handler: (@Sendable (PortMessage) -> Void)?) {
    link.setHandler(handler)
  }

  /// Sets the function run once when the port is invalidated by ``invalidate()``, on the
  /// invalidating thread with no toolkit lock held (the guide's
  /// `NSPortDidBecomeInvalidNotification`), then released. Not run, and not kept, if the port
  /// is already invalid. Releasing the last reference to the port without ``invalidate()``
  /// releases the handler without running it (there is no port left to pass to it).
  public func setInvalidationHandler(_ handler: (@Sendable (Port) -> Void)?) {
    guard let handler else {
      link.setInvalidationHandler(nil)
      return
    }
    link.setInvalidationHandler { [weak self] in
      if let self { handler(self) }
    }
  }

  /// Waits until every run-loop delivery that took a message from the port before this call
  /// has returned from its handler. For the async message sequence, whose invalidation
  /// handler calls it so the sequence ends only after the messages taken before the
  /// invalidation reached it; only after ``invalidate()``, and never from the message handler.
  package func waitForDeliveriesInProgress() {
    link.waitForDeliveriesInProgress()
  }

  /// Stops the process when the port was inherited through `fork()`: the child's copy is
  /// not the parent's mailbox (messages sent to it stay in the child) and its readiness
  /// eventfd is the parent's. One relaxed load.
  @inline(__always)
  func checkNotInherited(_ operation: String) {
    if ForkDetection.isInherited(queue.creatorProcess) {
      ForkDetection.reportInheritedUse("Port", "port", operation, creator: queue.creatorProcess)
    }
  }

  /// Ports are equal only to themselves.
  public static func == (lhs: Port, rhs: Port) -> Bool { lhs === rhs }

  /// Hashes the port's identity.
  public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }

  /// `"Port(k/capacity queued)"` or `"Port(invalid)"`.
  public var description: String {
    isValid ? "Port(\(pendingMessageCount)/\(capacity) queued)" : "Port(invalid)"
  }
}
