import RunLoop
import Sync

extension RunLoop {
  /// The readiness of `descriptor` as an async sequence, watched by this loop's thread while
  /// it runs in one of `modes`: each element is the set of events found ready (which may
  /// include `.error` and `.hangUp`).
  ///
  /// ```swift
  /// for await events in worker.runLoop.readiness(of: socket, events: .readable) {
  ///   if events.contains(.readable) { drain(socket) }
  ///   if events.contains(.hangUp) { break }
  /// }
  /// ```
  ///
  /// Watching a descriptor the kernel cannot poll, or one another source of this loop already
  /// watches (an earlier sequence of it included, until ``FileDescriptorReadiness/invalidate()``
  /// returns or it is released), stops the process when the sequence is created (as for
  /// ``/RunLoop/FileDescriptorSource``); so does an empty `modes` (misuse: nothing would ever
  /// report the descriptor, and the sequence would not end with the loop's thread), and so
  /// do `events` without `.readable` or `.writable` (`[]`, or only `.error`/`.hangUp`, which
  /// are reported with those, never requested alone: misuse, as every `next()` would wait
  /// until its task is cancelled).
  public func readiness(
    of descriptor: Int32, events: FileDescriptorSource.Events = .readable, inModes modes: [RunLoopMode] = [.common]
  ) -> FileDescriptorReadiness {
    FileDescriptorReadiness(descriptor: descriptor, events: events, runLoop: self, modes: modes)
  }
}

/// A descriptor's readiness as an async sequence (`RunLoop.readiness(of:events:inModes:)`).
///
/// **One report per call.** The sequence's ``/RunLoop/FileDescriptorSource`` is enabled only
/// while a task waits in `next()`; the loop reports the ready events to the oldest waiter and
/// the source is disabled again when nobody waits. Readiness is a level, not a message: what
/// you do not read is reported again at the next `next()` call, so a slow consumer makes the
/// loop neither spin nor lose anything.
///
/// **Cancellation.** A waiting task that is cancelled stops waiting: `next()` returns nil and
/// its waiter is removed. A report the loop handed to the waiter before the cancellation
/// took effect is returned by that same call; one made while no task waits is kept for the
/// next `next()` call (from any task).
///
/// **The descriptor** must stay open while the sequence exists, as for
/// ``/RunLoop/FileDescriptorSource``: once it is closed (with no duplicate left) the kernel
/// stops reporting it, so a waiting task waits until it is cancelled or the sequence ends.
/// Call ``invalidate()`` (or leave the loop) before closing the descriptor.
///
/// **End.** The sequence does not end for the descriptor (a hang-up is reported as
/// `.hangUp`); leave the loop when done. It ends (`next()` returns nil, for waiting tasks at
/// once) when the run loop's thread ends, or had ended when the sequence was created:
/// nothing would ever report the descriptor again. ``invalidate()``, or releasing the
/// sequence, invalidates its source (the descriptor is not closed: it is not the
/// sequence's).
public final class FileDescriptorReadiness: AsyncSequence, Sendable {
  /// The events found ready.
  public typealias Element = FileDescriptorSource.Events
  /// Iterating never throws.
  public typealias Failure = Never

  /// The watched descriptor (not owned).
  public let descriptor: Int32
  /// The events of interest.
  public let events: FileDescriptorSource.Events

  private let mailbox = AsyncMailbox<FileDescriptorSource.Events>()
  private let source: FileDescriptorSource
  /// Switches the source's interest with the demand; closed by `deinit`.
  private let demand: ReadinessDemand
  /// Ends the mailbox when the loop's thread ends.
  private let loopEnd: LoopEndWatch

  init(descriptor: Int32, events: FileDescriptorSource.Events, runLoop: RunLoop, modes: [RunLoopMode]) {
    checkModesNotEmpty(modes, "FileDescriptorReadiness", "nothing would report the descriptor, nor end the sequence")
    // The source is enabled only for `.readable`/`.writable`; without either it is never
    // called, not even for a hang-up, so every `next()` would wait until cancelled.
    if events.intersection([.readable, .writable]).isEmpty {
      concurrencyMisuse(
        "FileDescriptorReadiness",
        "created with no event of interest (events: \(events.rawValue)): nothing would ever be reported; request .readable or .writable (.error and .hangUp are reported with them, never requested alone)"
      )
    }
    self.descriptor = descriptor
    self.events = events
    // The callbacks hold the switch, not the sequence: one running on the loop's thread must
    // not keep a sequence the caller released alive, or its deinit (which stops watching the
    // descriptor, making room for a new sequence of it) would run later, on that thread.
    let demand = ReadinessDemand(events: events, mailbox: mailbox)
    self.demand = demand
    source = FileDescriptorSource(descriptor: descriptor, events: []) { [mailbox] _, ready in
      // Nobody waits (the last waiter left before the source was disabled): the level is
      // reported again once someone does.
      guard mailbox.hasWaiters else {
        demand.update()
        return
      }
      mailbox.deliver(ready)
    }
    demand.attach(source)
    mailbox.demandChanged = { demand.update() }
    loopEnd = LoopEndWatch(runLoop: runLoop, modes: modes, name: "FileDescriptorReadiness end") { [mailbox] in
      mailbox.finish()
    }
    for mode in modes { runLoop.add(source, forMode: mode) }
  }

  deinit {
    invalidate()
  }

  /// Whether ``invalidate()`` has run (set once, by whichever call runs it).
  private let invalidated = AtomicBool(false)

  /// Ends the sequence now, as releasing it would: the loop stops watching the descriptor
  /// before this returns (its source is invalidated; the descriptor is not closed, it is
  /// not the sequence's), tasks waiting in `next()` get nil at once, and every later call
  /// returns nil after a report already made to nobody. Idempotent; any thread.
  ///
  /// Call it before you close the descriptor, or before you create a new sequence for it
  /// on the same loop: dropping the last reference is not enough there, because the Swift
  /// runtime may release a finished task's captures on its own thread after the task's
  /// `value` has been returned, so the old sequence may still watch the descriptor when the
  /// next line creates the new one (which stops the process: one source per descriptor).
  ///
  /// ```swift
  /// let readiness = worker.runLoop.readiness(of: socket)
  /// await Task {
  ///   for await events in readiness where events.contains(.readable) {
  ///     if drain(socket) { break }
  ///   }
  /// }.value
  /// readiness.invalidate()
  /// close(socket)
  /// ```
  public func invalidate() {
    // Relaxed: the flag only picks the one call that tears down; each step below orders
    // itself (locks; the source's invalidation waits for the loop's thread).
    guard !invalidated.exchange(true, ordering: .relaxed) else { return }
    demand.close()
    loopEnd.stop()
    source.invalidate()
    mailbox.finish()
  }

  /// Returns the next readiness report; see the type's "Cancellation".
  public struct AsyncIterator: AsyncIteratorProtocol, Sendable {
    /// The sequence's element.
    public typealias Element = FileDescriptorSource.Events
    /// Iterating never throws.
    public typealias Failure = Never
    let readiness: FileDescriptorReadiness

    /// Waits (suspending the task, blocking no thread) until the descriptor is ready, and
    /// returns the ready events. Nil when the calling task is cancelled while waiting, or
    /// the loop's thread has ended.
    public mutating func next() async -> FileDescriptorSource.Events? {
      await readiness.mailbox.next()
    }
  }

  /// An iterator over the readiness reports; several may exist, each report goes to one.
  public func makeAsyncIterator() -> AsyncIterator {
    AsyncIterator(readiness: self)
  }
}

/// Enables the source's events while a task waits in the sequence's mailbox, disables them
/// otherwise; nothing once closed (the sequence released). Holds the source (whose callback
/// holds this) until closed.
private final class ReadinessDemand: @unchecked Sendable {
  // @unchecked: `source` and `mailbox` are protected by `lock`.
  /// Serializes the switches, so the last one reflects the latest demand.
  private let lock = Lock()
  private let events: FileDescriptorSource.Events
  private var source: FileDescriptorSource?
  private var mailbox: AsyncMailbox<FileDescriptorSource.Events>?

  init(events: FileDescriptorSource.Events, mailbox: AsyncMailbox<FileDescriptorSource.Events>) {
    self.events = events
    self.mailbox = mailbox
  }

  /// Gives the switch its source, before the source is added to a loop.
  func attach(_ source: FileDescriptorSource) {
    lock.withLock { self.source = source }
  }

  /// Enables the events while a task waits, disables them otherwise; nothing once closed.
  func update() {
    lock.withLock {
      guard let source, let mailbox else { return }
      if mailbox.hasWaiters {
        source.enable(events)
      } else {
        source.disable(events)
      }
    }
  }

  /// Switches nothing from now on and lets go of the source (ending the cycle).
  func close() {
    let released: (FileDescriptorSource?, AsyncMailbox<FileDescriptorSource.Events>?) = lock.withLock {
      defer {
        source = nil
        mailbox = nil
      }
      return (source, mailbox)
    }
    // Released after the lock.
    withExtendedLifetime(released) {}
  }
}
