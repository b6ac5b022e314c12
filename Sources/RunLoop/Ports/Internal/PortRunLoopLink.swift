import Sync
import Threads

/// What ties an in-process ``Port`` to the run loops it is scheduled in: a version-0
/// ``RunLoopSource`` in the port's modes, the run loops to wake when a message arrives, the
/// message handler and the invalidation handler.
///
/// A send signals the source and wakes each run loop (one `futex_wake`, or an eventfd write
/// when the loop sleeps in epoll, or nothing when it is awake); the loop's next pass in one of
/// the port's modes fires the source, whose perform callback delivers every queued message to
/// the handler on the run-loop thread. No descriptor of its own: the run loop's wake-up is
/// the only kernel object on the path.
final class PortRunLoopLink: @unchecked Sendable {
  // Protected by `lock` (taken before a run loop's lock and a source's lock, never after).
  private let lock = Sync.Lock()
  private var source: RunLoopSource?
  /// The run loops the source is scheduled in, with how many of their modes. Strong: a loop
  /// leaves this list when the source leaves its last mode, which every loop does when its
  /// thread ends (so no loop outlives its thread here), and a sender then wakes it without
  /// a weak-reference load.
  private var loops: [(runLoop: RunLoop, modes: Int)] = []
  private var handler: (@Sendable (PortMessage) -> Void)?
  private var invalidationHandler: (@Sendable () -> Void)?
  private var invalidated = false
  /// Nonzero while the port is scheduled somewhere: lets `messageArrived` skip the lock for
  /// ports that are only received from directly.
  private let scheduledLoops = AtomicInteger<Int>(0)
  /// Run-loop deliveries under way: counted from before a delivery takes its message from
  /// the queue until the handler it was given returns (see `waitForDeliveriesInProgress`).
  private let deliveriesInProgress = AtomicInteger<Int>(0)
  /// Test seam, nil outside tests: runs on the delivering thread between the take of a
  /// message from the queue and its hand-over to the handler. Set before the port is
  /// scheduled in a run loop (the add's locks order the write before the deliveries' reads).
  var messageTakenForTesting: (@Sendable () -> Void)?

  /// The source to add to run-loop modes, created on first use; nil once invalidated.
  /// Stops the process for a port inherited through `fork()` (see ``Port``). The source
  /// holds `port` weakly (a run loop does not keep a port alive) and its queue strongly.
  func runLoopSource(for port: Port) -> RunLoopSource? {
    let queue = port.queue
    if ForkDetection.isInherited(queue.creatorProcess) {
      ForkDetection.reportInheritedUse("Port", "port", "RunLoop.add(port)", creator: queue.creatorProcess)
    }
    return lock.withLock {
      if invalidated { return nil }
      if let source { return source }
      let created = RunLoopSource(
        order: 0,
        schedule: { [weak self, queue] runLoop, _ in self?.scheduled(in: runLoop, holding: queue) },
        cancel: { [weak self] runLoop, _ in self?.cancelled(in: runLoop) },
        signalledByRunLoop: false,
        reportingPerform: { [weak self, receiver = WeakPort(port), queue] in
          self?.deliver(from: queue, receivedBy: receiver) ?? false
        })
      source = created
      return created
    }
  }

  /// Waits (yielding) until the run-loop deliveries under way when it is called have
  /// returned from their handlers. Called once the queue is invalidated, no delivery can take
  /// another message, so this returns once each message taken before the invalidation has
  /// been handed over. Must not be called from the port's message handler (it would wait for
  /// itself).
  ///
  /// Why a taken message is seen: a delivery counts itself before its take, which is under
  /// the queue's mutex; a take that came before the invalidation (also under that mutex) is
  /// ordered before it, so the acquiring load here, after the invalidation, sees the count
  /// until the releasing decrement after the handler returned.
  func waitForDeliveriesInProgress() {
    while deliveriesInProgress.load(ordering: .acquiring) != 0 { Thread.yield() }
  }

  /// The source if one was created (for removal).
  var existingSource: RunLoopSource? { lock.withLock { source } }

  /// Sets the message handler; on an invalidated port it is not kept (it could never run),
  /// and is released on return. A replaced handler is released after the lock.
  func setHandler(_ newHandler: (@Sendable (PortMessage) -> Void)?) {
    var replaced: (@Sendable (PortMessage) -> Void)? = nil
    let wake: [RunLoop] = lock.withLock {
      if invalidated { return [] }
      replaced = handler
      handler = newHandler
      return loops.map(\.runLoop)
    }
    withExtendedLifetime(replaced) {}
    // Messages that waited for a handler are delivered now.
    if newHandler != nil, let source = existingSource {
      source.signal()
      for runLoop in wake { runLoop.wakeUp() }
    }
  }

  /// Sets the invalidation handler; on an invalidated port it is not kept (see
  /// ``Port/setInvalidationHandler(_:)``). A replaced handler is released after the lock.
  func setInvalidationHandler(_ newHandler: (@Sendable () -> Void)?) {
    var replaced: (@Sendable () -> Void)? = nil
    lock.withLock {
      if invalidated { return }
      replaced = invalidationHandler
      invalidationHandler = newHandler
    }
    withExtendedLifetime(replaced) {}
  }

  /// A message was queued: signal the source and wake the loops that may deliver it.
  func messageArrived() {
    if scheduledLoops.load(ordering: .acquiring) == 0 { return }
    // The usual case is one run loop: take it without building an array.
    let (current, first, more): (RunLoopSource?, RunLoop?, [RunLoop]) = lock.withLock {
      if loops.count == 1 { return (self.source, loops[0].runLoop, []) }
      return (self.source, nil, loops.map(\.runLoop))
    }
    guard let current else { return }
    current.signal()
    first?.wakeUp()
    for runLoop in more { runLoop.wakeUp() }
  }

  /// The port was invalidated: leave every run loop (waking them, so a run whose mode became
  /// empty returns), tell the invalidation handler, once, and release both handlers (with
  /// what they capture, which may be the port itself) on this thread, after the lock. A
  /// delivery already running on the run-loop thread keeps its own reference to the message
  /// handler until it returns.
  func invalidate() {
    var messageHandler: (@Sendable (PortMessage) -> Void)? = nil
    let (current, wake, handler): (RunLoopSource?, [RunLoop], (@Sendable () -> Void)?) = lock.withLock {
      if invalidated { return (nil, [], nil) }
      invalidated = true
      let taken = invalidationHandler
      invalidationHandler = nil
      messageHandler = self.handler
      self.handler = nil
      return (self.source, loops.map(\.runLoop), taken)
    }
    withExtendedLifetime(messageHandler) {}
    current?.invalidate()
    for runLoop in wake { runLoop.wakeUp() }
    handler?()
  }

  /// The source entered a mode of `runLoop` (it is already in the mode: run loops call
  /// `schedule` after inserting). Messages sent before, or while the add raced with their
  /// send, found no loop to wake: signal the source for them and wake this loop.
  ///
  /// Why no message is missed: a sender enqueues under the queue's mutex and then loads
  /// `scheduledLoops`; this increments `scheduledLoops` and then reads the count under the
  /// same mutex. If this read comes first in the mutex's order, the increment happens-before
  /// the sender's load (program order, then the mutex's release/acquire), so the sender sees
  /// a scheduled loop and signals; otherwise this read sees the message. Either way someone
  /// signals, on any architecture.
  private func scheduled(in runLoop: RunLoop, holding queue: MessageQueue<QueuedPortMessage>) {
    let current: RunLoopSource? = lock.withLock {
      if let index = loops.firstIndex(where: { $0.runLoop === runLoop }) {
        loops[index].modes += 1
      } else {
        loops.append((runLoop, 1))
        _ = scheduledLoops.increment(ordering: .releasing)
      }
      return source
    }
    guard queue.pendingCount > 0, let current else { return }
    current.signal()
    runLoop.wakeUp()
  }

  private func cancelled(in runLoop: RunLoop) {
    lock.withLock {
      guard let index = loops.firstIndex(where: { $0.runLoop === runLoop }) else { return }
      loops[index].modes -= 1
      if loops[index].modes == 0 {
        loops.remove(at: index)
        _ = scheduledLoops.decrement(ordering: .releasing)
      }
    }
  }

  /// Delivers the messages queued when the pass began (later ones signal again), in order,
  /// on the run-loop thread. Returns whether the handler ran: a signal whose messages a
  /// blocking `receive` took first, or a port without a handler, handles no source.
  private func deliver(from queue: MessageQueue<QueuedPortMessage>, receivedBy port: WeakPort) -> Bool {
    guard let handler = lock.withLock({ handler }) else { return false }
    // One queue lock per message: the first take also says how many more were queued.
    guard var budget = deliverNext(to: handler, from: queue, receivedBy: port) else { return false }
    // The handler is read again before each message: a handler cleared (or replaced) by the
    // previous one leaves the rest in the port, as `Port.setHandler` promises.
    while budget > 0, let current = lock.withLock({ self.handler }),
      deliverNext(to: current, from: queue, receivedBy: port) != nil
    {
      budget -= 1
    }
    return true
  }

  /// Takes one message and hands it to `handler`; returns how many remained queued after it,
  /// or nil when there was none. The message is released when this returns, before the next
  /// one is delivered (a later handler may run the loop nested, or for long).
  private func deliverNext(
    to handler: @Sendable (PortMessage) -> Void, from queue: MessageQueue<QueuedPortMessage>, receivedBy port: WeakPort
  ) -> Int? {
    // Relaxed: the queue's mutex, taken next, orders it (see `waitForDeliveriesInProgress`).
    _ = deliveriesInProgress.increment(ordering: .relaxed)
    defer { _ = deliveriesInProgress.decrement(ordering: .releasing) }
    guard case (.element(let message)?, let remaining) = queue.tryReceiveCounting() else { return nil }
    messageTakenForTesting?()
    handler(message.message(receivedBy: port))
    return remaining
  }
}
