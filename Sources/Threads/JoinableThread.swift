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
/// Each handle is joined or detached exactly once. **Misuse stops the process**: joining
/// twice, joining after ``detach()``, detaching twice or after joining, and a thread joining
/// itself (which would wait forever). A handle released without being joined or detached
/// detaches the thread (its error, if any, goes to ``Thread/detachedErrorHandler``).
///
/// ```swift
/// let halves = try [0, 1].map { half in
///     try Thread.spawn(name: "sum-\(half)") { sum(of: data, half: half) }
/// }
/// let total = halves.map { $0.join() }.reduce(0, +)
/// ```
///
/// The corresponding C functions are `pthread_join` and `pthread_detach`.
public final class JoinableThread<Value: Sendable, Failure: Error>: @unchecked Sendable {
  // @unchecked: immutable; the join/detach state lives in `outcome`, under its lock.

  /// The thread's object: its name, id, dictionary and exit requests.
  public let thread: Thread

  @usableFromInline
  let handle: pthread_t
  @usableFromInline
  let outcome: JoinOutcome<Value, Failure>

  @usableFromInline
  init(thread: Thread, handle: pthread_t, outcome: JoinOutcome<Value, Failure>) {
    self.thread = thread
    self.handle = handle
    self.outcome = outcome
  }

  deinit {
    if outcome.detach(thread: thread) == JoinState.joinable {
      checkOrDie(pthread_detach(handle), "pthread_detach")
    }
  }

  /// Waits for the thread's body to finish and returns its value, or rethrows its error.
  ///
  /// Blocks the calling thread until the body returns. Stops the process when called twice,
  /// after ``detach()``, or from the thread itself. The corresponding C function is
  /// `pthread_join`.
  @available(*, noasync, message: "blocks the thread until the joined thread ends")
  @inlinable
  public func join() throws(Failure) -> Value {
    if pthread_equal(handle, pthread_self()) != 0 {
      threadsMisuse("JoinableThread", "a thread cannot join itself (it would wait forever)")
    }
    let previous = outcome.beginJoin()
    if previous != JoinState.joinable {
      threadsMisuse(
        "JoinableThread",
        previous == JoinState.joined
          ? "join() called twice on the same thread" : "join() called on a detached thread")
    }
    checkOrDie(pthread_join(handle, nil), "pthread_join")
    return try outcome.take().get()
  }

  /// Lets the thread run on unjoined: its resources are reclaimed when it ends, and its
  /// result is dropped. An error its body throws (or has already thrown) goes to
  /// ``Thread/detachedErrorHandler``. Never blocks.
  ///
  /// Stops the process when called twice or after ``join()``. The corresponding C function
  /// is `pthread_detach`.
  public func detach() {
    let previous = outcome.detach(thread: thread)
    if previous != JoinState.joinable {
      threadsMisuse(
        "JoinableThread",
        previous == JoinState.joined
          ? "detach() called on a joined thread" : "detach() called twice on the same thread")
    }
    checkOrDie(pthread_detach(handle), "pthread_detach")
  }
}
