import CThreadingShims
import Sync

#if canImport(Glibc)
  import Glibc
#endif

/// A bounded first-in first-out queue of messages between threads, with send and receive
/// deadlines, invalidation, and an `eventfd` that is readable while messages wait.
///
/// Bounded on purpose: a receiver that stops draining makes senders wait, then fail with a
/// send timeout at their deadline, so memory never grows without limit.
///
/// State (all protected by `mutex`, a ``Sync/Lock`` paired with two ``Sync/ConditionVariable``s):
///
/// | field | meaning |
/// |---|---|
/// | `buffer`, `head`, `count` | ring buffer of at most `capacity` elements; it starts small and doubles when full, up to `capacity` |
/// | `invalidated` | set once; afterwards sends fail, waiters wake, pending elements are dropped |
/// | `readiness` | the eventfd, created on first request (-1 before) |
/// | `signalled` | whether `readiness` currently holds a count (queue non-empty or invalidated) |
///
/// `readinessDescriptor` is for poll/epoll users (the run loop): it is readable exactly when
/// an element or the invalidation is waiting. Blocking users wait on the condition variables
/// instead; both paths keep `signalled` in step with the queue.
///
/// Waking receivers (several threads may block in ``receive(before:)`` at once) passes a
/// baton: a send that makes the queue non-empty signals one waiting receiver, and every take
/// that leaves elements behind while receivers wait signals the next one. So while elements
/// wait and a receiver sleeps, some receiver is always on its way to take one: the one woken
/// last (a wake-up is never lost to a receiver that leaves, since a receiver leaves only
/// when the queue is empty or invalidated). Sends into a non-empty queue signal nobody, so a
/// burst into one busy receiver costs no wake-ups. Senders need no baton: every take frees
/// one slot and signals one waiting sender.
final class MessageQueue<Element: Sendable>: @unchecked Sendable {
  // @unchecked: every stored var is read and written only with `mutex` held.
  private let mutex = Lock()
  private let notEmpty = ConditionVariable()
  private let notFull = ConditionVariable()
  private var buffer: [Element?]
  private var head = 0
  private var count = 0
  private var invalidated = false
  private var signalled = false
  private var waitingSenders = 0
  private var waitingReceivers = 0
  /// Test seam, nil outside tests; see ``TestHooks``.
  private var testHooks: TestHooks?

  /// Calls a test makes into a blocking receiver, to reproduce an interleaving on purpose.
  struct TestHooks: Sendable {
    /// Called with the mutex held once a receiver has registered as waiting, just before it
    /// sleeps (a send can only follow once it sleeps).
    var receiverWillWait: (@Sendable () -> Void)?
    /// Called without the mutex each time a receiver's wait ends, before it looks at the
    /// queue again: holding it back lets more elements arrive meanwhile.
    var receiverWoke: (@Sendable () -> Void)?
  }

  /// Installs (or removes) the test seam.
  func setTestHooks(_ hooks: TestHooks?) {
    lock()
    testHooks = hooks
    unlock()
  }

  /// The most elements the queue holds; a sender finding it full waits.
  let capacity: Int

  /// The process that created the queue (see `ForkDetection`): in a child of `fork()` the
  /// readiness eventfd is the parent's, and the queue leaves it alone.
  let creatorProcess = ForkDetection.start()

  /// The ring's size when the queue is created: the whole capacity for small queues, so
  /// they never grow; larger queues grow by doubling when a send finds the ring full.
  static var initialRingSize: Int { 64 }

  /// The `eventfd` behind ``readinessDescriptor``; -1 until first asked for, so queues that
  /// nobody polls (blocking receivers, run-loop sources woken by `wakeUp`) pay no system
  /// calls for it.
  private var readiness: Int32 = -1

  /// What a send did.
  enum SendOutcome: Equatable {
    case enqueued
    case timedOut
    /// The queue was invalid before the send started.
    case invalid
    /// The queue was invalidated while the sender waited for room.
    case becameInvalid
  }

  /// What a receive found.
  enum ReceiveOutcome {
    case element(Element)
    case timedOut
    case invalid
  }

  /// Creates an empty queue holding at most `capacity` elements (1 through
  /// ``Port/maximumCapacity``; anything else is misuse). Allocates a ring of at most
  /// `initialRingSize` slots; it grows on demand.
  init(capacity: Int) {
    if capacity < 1 || capacity > Port.maximumCapacity {
      reportMisuse(
        "Port", "capacity must be from 1 through Port.maximumCapacity (\(Port.maximumCapacity)), got \(capacity)")
    }
    self.capacity = capacity
    buffer = Array(repeating: nil, count: Swift.min(capacity, MessageQueue.initialRingSize))
  }

  deinit {
    if readiness >= 0 { closeDescriptor(readiness) }
  }

  /// An `eventfd` readable exactly while an element or the invalidation waits (for poll and
  /// epoll users), created on first use.
  func readinessDescriptor() throws(SystemCallError) -> Int32 {
    lock()
    defer { unlock() }
    if readiness >= 0 { return readiness }
    let descriptor = try shimCall("eventfd") { tk_eventfd_create() }
    readiness = descriptor
    if count > 0 || invalidated {
      signalled = false
      raiseReadiness()
    }
    return descriptor
  }

  /// Appends `element`, waiting while the queue is full until `deadline`.
  func send(_ element: Element, before deadline: MonotonicInstant) -> SendOutcome {
    lock()
    if invalidated {
      unlock()
      return .invalid
    }
    while count == capacity {
      waitingSenders += 1
      let timedOut = !wait(notFull, before: deadline)
      waitingSenders -= 1
      if invalidated {
        unlock()
        return .becameInvalid
      }
      if timedOut && count == capacity {
        unlock()
        return .timedOut
      }
    }
    if count == buffer.count { growRing() }
    buffer[(head + count) % buffer.count] = element
    count += 1
    var wakeReceiver = false
    if count == 1 {
      raiseReadiness()
      wakeReceiver = waitingReceivers > 0
    }
    unlock()
    // Signalled after unlocking, so the woken receiver does not run straight into the held
    // mutex and sleep again (the state change it needs is already published by the unlock).
    if wakeReceiver { notEmpty.signal() }
    return .enqueued
  }

  /// Removes the oldest element if there is one, without waiting (nil when empty; `.invalid`
  /// once invalidated).
  func tryReceive() -> ReceiveOutcome? {
    tryReceiveCounting().0
  }

  /// ``tryReceive()`` that also says how many elements remain after it (0 when it found
  /// none), so a drainer needs no separate count.
  func tryReceiveCounting() -> (ReceiveOutcome?, remaining: Int) {
    lock()
    if invalidated {
      unlock()
      return (.invalid, 0)
    }
    if count == 0 {
      unlock()
      return (nil, 0)
    }
    let (element, wakeSender, wakeReceiver) = takeHead()
    let remaining = count
    unlock()
    if wakeSender { notFull.signal() }
    if wakeReceiver { notEmpty.signal() }
    return (.element(element), remaining)
  }

  /// Removes the oldest element, waiting until one arrives, the queue is invalidated, or
  /// `deadline` passes.
  func receive(before deadline: MonotonicInstant) -> ReceiveOutcome {
    lock()
    while true {
      if invalidated {
        unlock()
        return .invalid
      }
      if count > 0 {
        let (element, wakeSender, wakeReceiver) = takeHead()
        unlock()
        if wakeSender { notFull.signal() }
        if wakeReceiver { notEmpty.signal() }
        return .element(element)
      }
      waitingReceivers += 1
      testHooks?.receiverWillWait?()
      let timedOut = !wait(notEmpty, before: deadline)
      waitingReceivers -= 1
      if let woke = testHooks?.receiverWoke {
        unlock()
        woke()
        lock()
      }
      if timedOut && count == 0 && !invalidated {
        unlock()
        return .timedOut
      }
    }
  }

  /// Whether the queue has been invalidated.
  var isInvalidated: Bool {
    lock()
    defer { unlock() }
    return invalidated
  }

  /// How many elements wait.
  var pendingCount: Int {
    lock()
    defer { unlock() }
    return count
  }

  /// Marks the queue invalid, drops pending elements and wakes every waiter (blocked
  /// senders get `.becameInvalid`, receivers `.invalid`) and pollers. Returns whether this
  /// call did it (false when it was already invalid).
  @discardableResult
  func invalidate() -> Bool {
    var dropped: [Element?] = []
    lock()
    if invalidated {
      unlock()
      return false
    }
    invalidated = true
    // Release the elements outside the lock: their deinit may run arbitrary code.
    dropped = buffer
    buffer = []
    count = 0
    head = 0
    raiseReadiness()
    notEmpty.broadcast()
    notFull.broadcast()
    unlock()
    dropped.removeAll()
    return true
  }

  // MARK: - Plumbing (all called with `mutex` held)

  /// Removes the head; also says whether a sender waits for room and whether another
  /// receiver must be woken for the elements left behind (the baton, see the type's doc),
  /// both to be signalled after unlocking.
  private func takeHead() -> (Element, wakeSender: Bool, wakeReceiver: Bool) {
    let element = buffer[head]!
    buffer[head] = nil
    head = head + 1 == buffer.count ? 0 : head + 1
    count -= 1
    if count == 0 { lowerReadiness() }
    return (element, waitingSenders > 0, count > 0 && waitingReceivers > 0)
  }

  /// Doubles the ring (at most to `capacity`), moving the elements to its start in order.
  /// Called by a send that found the ring full while the queue is not.
  private func growRing() {
    let newSize = Swift.min(buffer.count * 2, capacity)
    var grown: [Element?] = []
    grown.reserveCapacity(newSize)
    for offset in 0..<count { grown.append(buffer[(head + offset) % buffer.count]) }
    grown.append(contentsOf: repeatElement(nil, count: newSize - count))
    buffer = grown
    head = 0
  }

  private func raiseReadiness() {
    if signalled || readiness < 0 || ForkDetection.isInherited(creatorProcess) { return }
    signalled = true
    // An eventfd write of 1 fails only when the counter would overflow, which `signalled`
    // rules out; anything else is a broken descriptor.
    _ = mustSucceed("RunLoop: port queue") { () throws(SystemCallError) in
      try shimCall("write(eventfd)") { tk_eventfd_signal(readiness) }
    }
  }

  private func lowerReadiness() {
    if !signalled || ForkDetection.isInherited(creatorProcess) { return }
    signalled = false
    _ = mustSucceed("RunLoop: port queue") { () throws(SystemCallError) in
      try shimCall("read(eventfd)") { tk_counter_fd_drain(readiness) }
    }
  }

  private func lock() {
    mutex.lock()
  }

  private func unlock() {
    mutex.unlock()
  }

  /// Waits on `condition` until signalled or `deadline` (monotonic); returns false when it
  /// timed out.
  private func wait(_ condition: ConditionVariable, before deadline: MonotonicInstant) -> Bool {
    condition.wait(mutex, before: deadline)
  }
}
