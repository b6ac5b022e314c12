import RunLoop
import Sync

extension Port {
  /// The port's messages as an async sequence, delivered by `runLoop`'s thread while it runs
  /// in one of `modes`:
  ///
  /// ```swift
  /// for await message in port.messages(on: worker.runLoop) {
  ///   handle(message)
  /// }
  /// ```
  ///
  /// The sequence owns the port's handler and invalidation handler (see ``PortMessages``), so a
  /// port has one sequence at a time: creating a second while the first exists stops the process
  /// (misuse: the two would take each other's handlers, and one would wait for ever); iterate the
  /// one sequence from several tasks instead, or end it first with ``PortMessages/invalidate()``.
  /// An empty `modes` stops the process too (misuse: nothing would take messages from the port, and
  /// the sequence would not end with the loop's thread).
  public func messages(on runLoop: RunLoop, inModes modes: [RunLoopMode] = [.common]) -> PortMessages {
    PortMessages(port: self, runLoop: runLoop, modes: modes)
  }
}

/// A port's messages as an async sequence (`Port.messages(on:inModes:)`).
///
/// **How messages arrive.** The port is added to `runLoop` in `modes`, and its handler is
/// set only while a task waits in `next()`: a message is taken from the port by the loop's
/// thread and handed to the oldest waiting task. While nobody waits, messages stay in the
/// port, so its capacity still bounds them and senders wait (backpressure). Messages are
/// returned in the order they were sent.
///
/// **Cancellation.** A waiting task that is cancelled stops waiting: `next()` returns nil
/// (ending that `for await` loop) and its waiter is removed. No message is lost: a message
/// the loop handed to the waiter before the cancellation took effect is returned by that
/// same call (the task sees it and can check `Task.isCancelled` after); one that arrives
/// while no task waits stays in the sequence for the next `next()` call (a new `for await`
/// over the same sequence, from any task).
///
/// **End.** The sequence ends (`next()` returns nil) once the port is invalidated and the
/// messages already taken from it are returned; messages still queued in the port at its
/// invalidation are dropped, as ``/RunLoop/Port/invalidate()`` says. It also ends once the
/// run loop's thread has ended (also before the sequence was created): nothing would take
/// messages from the port again; those still queued stay in the port.
///
/// The sequence keeps the port alive and owns its handler and invalidation handler while it
/// exists (setting either elsewhere breaks the sequence). Invalidated (``invalidate()``) or
/// released, it removes the port from the run loop's modes and clears both handlers;
/// messages it had taken from the port but not yet returned are then dropped when it is
/// released (an invalidated sequence still returns them).
public final class PortMessages: AsyncSequence, Sendable {
  /// Each element is a message of the port.
  public typealias Element = PortMessage
  /// Iterating never throws.
  public typealias Failure = Never

  /// The port read from.
  public let port: Port
  /// The run loop whose thread takes messages from the port.
  public let runLoop: RunLoop
  /// The modes in which it does.
  public let modes: [RunLoopMode]

  private let mailbox = AsyncMailbox<PortMessage>()
  /// Switches the port's handler with the demand; closed by `deinit`.
  private let demand: PortDemand
  /// Ends the mailbox when the loop's thread ends; stopped when the port leaves the modes.
  private let loopEnd: LoopEndWatch

  init(port: Port, runLoop: RunLoop, modes: [RunLoopMode]) {
    checkModesNotEmpty(modes, "PortMessages", "nothing would take its messages, nor end the sequence")
    // Acquiring: pairs with the releasing clear in a previous sequence's deinit, so that
    // sequence's clearing of the handlers comes before this one sets them (on arm64 too).
    if port.hasMessageSequence.exchange(true, ordering: .acquiring) {
      concurrencyMisuse(
        "PortMessages",
        "a second message sequence created for \(port) while another exists (they would take each other's handlers); iterate the one sequence from several tasks, or release it first"
      )
    }
    self.port = port
    self.runLoop = runLoop
    self.modes = modes
    // The mailbox's callback holds the switch, not the sequence: a switch running on the
    // loop's thread must not keep a sequence the caller released alive, or its deinit (which
    // makes room for a new sequence of the port) would run later, on that thread.
    let demand = PortDemand(port: port, mailbox: mailbox)
    self.demand = demand
    mailbox.demandChanged = { demand.update() }
    let loopEnd = LoopEndWatch(runLoop: runLoop, modes: modes, name: "PortMessages end") { [mailbox] in
      mailbox.finish()
    }
    self.loopEnd = loopEnd
    // The watch leaves the modes with the port, so it never keeps a run going that the
    // invalidated port's departure would end. A loop's thread may have taken a message just
    // before the invalidation and not handed it to the mailbox yet: the end waits for that
    // hand-over (the handler only buffers or resumes, so the wait is short), or the waiting
    // tasks would see the end before that message, and the next call the message after it.
    port.setInvalidationHandler { [mailbox, loopEnd] port in
      port.waitForDeliveriesInProgress()
      mailbox.finish()
      loopEnd.stop()
    }
    for mode in modes { runLoop.add(port, forMode: mode) }
    if !port.isValid {
      mailbox.finish()
      loopEnd.stop()
    }
  }

  deinit {
    invalidate()
  }

  /// Whether ``invalidate()`` has run (set once, by whichever call runs it).
  private let invalidated = AtomicBool(false)

  /// Ends the sequence now, as releasing it would: removes the port from the run loop's
  /// modes and clears its handler and invalidation handler, so that a new sequence of the
  /// port can be created as soon as this returns. Idempotent; any thread, but not from the
  /// port's handler.
  ///
  /// Why call it rather than drop the last reference: the Swift runtime may release a
  /// finished task's captures on its own thread after the task's `value` has been
  /// returned, so the sequence a task iterated may still exist when the next line of the
  /// awaiting code creates a new one for the same port (which stops the process: one
  /// sequence per port).
  ///
  /// Messages still queued in the port stay there for the next sequence; those the loop's
  /// thread had already taken from the port are still returned by this sequence's `next()`
  /// calls, then every call returns nil (tasks waiting at the moment get nil at once).
  ///
  /// ```swift
  /// let messages = port.messages(on: worker.runLoop)
  /// let first = await Task { () -> PortMessage? in
  ///   var iterator = messages.makeAsyncIterator()
  ///   return await iterator.next()
  /// }.value
  /// messages.invalidate()
  /// let again = port.messages(on: worker.runLoop)  // never "a second message sequence"
  /// ```
  public func invalidate() {
    // Relaxed: the flag only picks the one call that tears down; each step below orders
    // itself (locks, the releasing store at the end).
    guard !invalidated.exchange(true, ordering: .relaxed) else { return }
    demand.close()
    port.setInvalidationHandler(nil)
    for mode in modes { runLoop.remove(port, forMode: mode) }
    loopEnd.stop()
    mailbox.finish()
    // After the handlers are cleared: a sequence created next sets its own. Releasing: pairs
    // with the next sequence's acquiring exchange (see `init`).
    port.hasMessageSequence.store(false, ordering: .releasing)
  }

  /// Returns the port's next message; see the type's "Cancellation" and "End".
  public struct AsyncIterator: AsyncIteratorProtocol, Sendable {
    /// The sequence's element.
    public typealias Element = PortMessage
    /// Iterating never throws.
    public typealias Failure = Never
    let messages: PortMessages

    /// The next message: waits (suspending the task, blocking no thread) until one arrives.
    /// Nil when the calling task is cancelled while waiting, the port was invalidated, or
    /// the loop's thread has ended.
    public mutating func next() async -> PortMessage? {
      await messages.mailbox.next()
    }
  }

  /// An iterator over the sequence's messages; several may exist, each message goes to one.
  public func makeAsyncIterator() -> AsyncIterator {
    AsyncIterator(messages: self)
  }
}

/// Sets the port's handler while a task waits in the sequence's mailbox, clears it
/// otherwise; once closed (the sequence released), clears it for good. Holds the mailbox
/// and the handler (which holds the mailbox, whose callback holds this) until closed.
private final class PortDemand: @unchecked Sendable {
  // @unchecked: `mailbox` and `handler` are protected by `lock`.
  /// Serializes the switches, so the last one reflects the latest demand.
  private let lock = Lock()
  private let port: Port
  private var mailbox: AsyncMailbox<PortMessage>?
  private var handler: (@Sendable (PortMessage) -> Void)?

  init(port: Port, mailbox: AsyncMailbox<PortMessage>) {
    self.port = port
    self.mailbox = mailbox
    handler = { [mailbox] message in mailbox.deliver(message) }
  }

  /// Sets the handler while a task waits, clears it otherwise; nothing once closed.
  func update() {
    lock.withLock {
      guard let mailbox, let handler else { return }
      port.setHandler(mailbox.hasWaiters ? handler : nil)
    }
  }

  /// Clears the handler for good and lets go of the mailbox (ending the cycle).
  func close() {
    let (released, closure): (AsyncMailbox<PortMessage>?, (@Sendable (PortMessage) -> Void)?) = lock.withLock {
      defer {
        mailbox = nil
        handler = nil
      }
      port.setHandler(nil)
      return (mailbox, handler)
    }
    // Released after the lock.
    withExtendedLifetime((released, closure)) {}
  }
}
