import Sync

#if canImport(Glibc)
  import Glibc
#endif

/// A running thread that can be joined for its result: what ``Thread/spawn(name:configuration:_:)``
/// returns.
///
/// The guide's joinable thread: its resources are kept until it is joined, and it hands its
/// result to the joiner - the way to make sure critical work finished. ``join()`` waits for the
/// body to return and gives back its value, or rethrows its error with its static type
/// (`Failure` is `Never` for a body that cannot throw, so no `try` is needed).
///
/// The handle is noncopyable, and ``join()`` and ``detach()`` consume it (as Rust's
/// `JoinHandle::join(self)`): a second join, a join after a detach, or a second detach does
/// not compile. Move the handle where it is needed (`consume`, an `Optional` you `take()`
/// from, a noncopyable container); it cannot be put in an `Array`.
///
/// A handle dropped without ``join()`` or ``detach()`` (its last use goes out of scope)
/// detaches the thread, as Rust does: the thread runs on, its resources are reclaimed when it
/// ends, its result is dropped, and an error its body throws goes to
/// ``Thread/detachedErrorHandler``. Call ``detach()`` to say so in the code.
///
/// A thread joining itself would wait forever; that stops the process (misuse).
///
/// ```swift
/// let low = try Thread.spawn(name: "sum-low") { sum(of: data, half: 0) }
/// let high = try Thread.spawn(name: "sum-high") { sum(of: data, half: 1) }
/// let total = low.join() + high.join()
/// ```
///
/// The corresponding C functions are `pthread_join` and `pthread_detach`.
@frozen  // lets the inlinable `join()` end the handle with `discard self`
public struct JoinableThread<Value: Sendable, Failure: Error>: ~Copyable, @unchecked Sendable {
  // @unchecked: the stored references are to Sendable objects (`Thread`, `JoinOutcome`);
  // they are unmanaged (retained by `init`, released by `join`, `detach` or `deinit`) so the
  // consuming methods can end the handle with `discard self`, which requires trivially
  // destroyed stored properties.

  @usableFromInline
  let retainedThread: Unmanaged<Thread>
  @usableFromInline
  let handle: pthread_t
  @usableFromInline
  let retainedOutcome: Unmanaged<JoinOutcome<Value, Failure>>

  @usableFromInline
  init(thread: Thread, handle: pthread_t, outcome: JoinOutcome<Value, Failure>) {
    retainedThread = .passRetained(thread)
    self.handle = handle
    retainedOutcome = .passRetained(outcome)
  }

  /// Dropped without a join or detach: detaches the thread.
  deinit {
    detachThread(handle, outcome: retainedOutcome, thread: retainedThread)
  }

  /// The thread's object: its name, id, dictionary, exit requests and exit handlers. Stays
  /// usable after the handle is consumed (keep a reference before joining).
  public var thread: Thread {
    retainedThread.takeUnretainedValue()
  }

  /// Waits for the thread's body to finish and returns its value, or rethrows its error.
  /// Consumes the handle.
  ///
  /// Blocks the calling thread until the thread has ended: its body has returned and its
  /// exit handlers (``Thread/onExit(_:)``) have run. Stops the process when called on the
  /// thread itself (it would wait forever). The corresponding C function is `pthread_join`.
  ///
  /// While a lock detector of ``/Sync/Diagnostics`` is on, the joiner is listed as waiting
  /// for this thread, so the deadlock watchdog (``/Sync/Diagnostics/Kind/deadlocks``)
  /// reports a cycle such as "A joins B while B waits for a lock A holds", naming the joined
  /// thread ("joins thread X"), and with ``/Sync/Diagnostics/Kind/blockingInTask`` on a
  /// join inside a task that outlasts its threshold is reported ("waiting for the end of
  /// thread X"). Off, the check costs one relaxed load and a branch.
  @available(*, noasync, message: "blocks the thread until the joined thread ends")
  @inlinable
  public consuming func join() throws(Failure) -> Value {
    let handle = self.handle
    let outcome = retainedOutcome
    let thread = retainedThread
    discard self
    if pthread_equal(handle, pthread_self()) != 0 {
      reportMisuse("JoinableThread", "a thread cannot join itself (it would wait forever)")
    }
    // Diagnostics off: one relaxed load, a test and a not-taken branch.
    if LockDiagnostics.joinHooksMayRun {
      joinDiagnosed(handle, thread: thread.takeUnretainedValue())
    } else {
      checkOrDie(pthread_join(handle, nil), "pthread_join")
    }
    thread.release()
    // pthread_join returned: the body has stored its outcome, and the thread has ended.
    let result = outcome.takeUnretainedValue().take()
    outcome.release()
    return try result.get()
  }

  /// Lets the thread run on unjoined: its resources are reclaimed when it ends, and its
  /// result is dropped. An error its body throws (or has already thrown) goes to
  /// ``Thread/detachedErrorHandler``. Never blocks; consumes the handle. The corresponding C
  /// function is `pthread_detach`.
  public consuming func detach() {
    let handle = self.handle
    let outcome = retainedOutcome
    let thread = retainedThread
    discard self
    detachThread(handle, outcome: outcome, thread: thread)
  }
}

/// Detaches a spawned thread and releases the handle's references (`detach()` and a dropped
/// handle).
func detachThread<Value, Failure>(
  _ handle: pthread_t, outcome: Unmanaged<JoinOutcome<Value, Failure>>, thread: Unmanaged<Thread>
) {
  outcome.takeUnretainedValue().detach(thread: thread.takeUnretainedValue())
  checkOrDie(pthread_detach(handle), "pthread_detach")
  outcome.release()
  thread.release()
}

/// The hooked path of `join()` (see `LockDiagnostics.joinHooksMayRun`): the join, with the
/// joiner marked as waiting for `thread` for the deadlock watchdog while a lock detector is
/// on.
@usableFromInline
@inline(never)
func joinDiagnosed(_ handle: pthread_t, thread: Thread) {
  LockDiagnostics.join(thread: thread.lockIdentity, name: thread.name ?? "") {
    checkOrDie(pthread_join(handle, nil), "pthread_join")
  }
}
