import Sync
import Threads

/// Hands elements produced on a run loop's thread to tasks awaiting them, first come first
/// served, losing none: an element that finds no waiter (none yet, or the waiter was just
/// cancelled) stays buffered for the next call of ``next()``. The producer learns whether a
/// waiter exists through `demandChanged`, so it can stop producing while nobody waits (the
/// sequences built on it use that for backpressure).
///
/// A cancelled waiter returns nil (when no element is buffered for it) and leaves the
/// mailbox usable: the next call, from the same task or another, gets the next element.
final class AsyncMailbox<Element: Sendable>: @unchecked Sendable {
  // @unchecked: every mutable field is protected by `lock`; continuations are resumed and
  // `demandChanged` is called after the lock is released.
  private struct Waiter {
    let id: UInt64
    let continuation: UnsafeContinuation<Element?, Never>
  }

  private let lock = Lock()
  /// Buffered elements; a taken one is set to nil at once, so the mailbox never keeps an
  /// element it returned (nor releases one under the lock when the array is cleared).
  private var buffer: [Element?] = []
  private var bufferHead = 0
  private var waiters: [Waiter] = []
  private var nextWaiterID: UInt64 = 0
  private var finished = false
  /// Resumes in progress. A task resumed before it suspended can run its next `next()` while
  /// the resuming thread is still inside `resume`, ordered by the runtime in a way
  /// ThreadSanitizer does not see (swiftlang/swift#57803); `next()` waits (briefly) for this
  /// to drop to zero with an acquiring load, paired with the releasing decrement after each
  /// resume, so the order is visible. Resumes stay outside the lock: a cancellation handler
  /// takes the lock while the runtime holds the task's own lock.
  private let resuming = AtomicInteger<Int>(0)

  /// Resumes `continuation` with `element`, counted in `resuming`.
  private func resume(_ continuation: UnsafeContinuation<Element?, Never>, with element: Element?) {
    _ = resuming.increment(ordering: .relaxed)
    continuation.resume(returning: element)
    _ = resuming.decrement(ordering: .releasing)
  }
  /// Called (outside the lock) after the first waiter arrived with nothing buffered, and
  /// after the last waiter was served or left. Calls from different threads may run in any
  /// order, so the producer reads ``hasWaiters`` under a lock of its own instead of trusting
  /// the order of calls. Set once before use.
  var demandChanged: (@Sendable () -> Void)?

  /// Whether a task waits for an element.
  var hasWaiters: Bool { lock.withLock { !waiters.isEmpty } }

  /// Delivers `element` to the oldest waiter, or buffers it. Any thread.
  func deliver(_ element: Element) {
    lock.lock()
    if waiters.isEmpty {
      buffer.append(element)
      lock.unlock()
      return
    }
    let waiter = waiters.removeFirst()
    let demandEnded = waiters.isEmpty
    lock.unlock()
    resume(waiter.continuation, with: element)
    if demandEnded { demandChanged?() }
  }

  /// Ends the mailbox: buffered elements are still returned, then every call returns nil.
  func finish() {
    lock.lock()
    finished = true
    let waiting = waiters
    waiters = []
    lock.unlock()
    for waiter in waiting { resume(waiter.continuation, with: nil) }
  }

  /// The next element: a buffered one at once, otherwise the next delivered. Nil once the
  /// mailbox is finished and empty, or when the calling task is cancelled before an element
  /// reached it (the element then stays for the next call).
  func next() async -> Element? {
    let id: UInt64 = lock.withLock {
      nextWaiterID &+= 1
      return nextWaiterID
    }
    let element = await withTaskCancellationHandler {
      await withUnsafeContinuation { (continuation: UnsafeContinuation<Element?, Never>) in
        lock.lock()
        if bufferHead < buffer.count {
          let element = buffer[bufferHead].take()
          bufferHead += 1
          if bufferHead == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            bufferHead = 0
          }
          lock.unlock()
          continuation.resume(returning: element)
          return
        }
        // Checked under the lock: a cancellation flagged after this check finds the waiter
        // below when its handler takes the lock.
        if finished || Task.isCancelled {
          lock.unlock()
          continuation.resume(returning: nil)
          return
        }
        let demandStarted = waiters.isEmpty
        waiters.append(Waiter(id: id, continuation: continuation))
        lock.unlock()
        if demandStarted { demandChanged?() }
      }
    } onCancel: {
      lock.lock()
      guard let index = waiters.firstIndex(where: { $0.id == id }) else {
        lock.unlock()
        return
      }
      let waiter = waiters.remove(at: index)
      let demandEnded = waiters.isEmpty
      lock.unlock()
      resume(waiter.continuation, with: nil)
      if demandEnded { demandChanged?() }
    }
    while resuming.load(ordering: .acquiring) != 0 { Thread.yield() }
    return element
  }
}
