/// Runs an initializer exactly once across all threads: the guide's safe replacement for
/// double-checked locking (`pthread_once`).
///
/// The first thread to call ``run(_:)`` runs the body; threads that arrive meanwhile block
/// until it finishes; every later call returns at once. After the body has run, a call is
/// one acquiring atomic load and a branch, inlined into the caller, and the acquire pairs
/// with the releasing store that marked completion, so everything the body wrote is
/// visible to every caller that sees it done.
///
/// If the body throws, the error propagates to that caller, the `Once` is not marked done,
/// and the next call (from any thread, including the waiters) runs the body again.
///
/// ```swift
/// let setup = Once()
/// func sharedTable() -> Table {
///     setup.run { table = buildTable() }
///     return table
/// }
/// ```
///
/// **Misuse** stops the process with a message: calling ``run(_:)`` on the same `Once` from
/// inside its own body (that would wait for itself forever).
///
/// ``Lazy`` wraps a `Once` and a value for the common case. The corresponding C function is
/// `pthread_once`; `Once` uses a futex word instead.
public final class Once: @unchecked Sendable {
  // @unchecked: `state` and `runner` are atomics.
  //
  // | state | meaning |
  // |---|---|
  // | 0 | not run |
  // | 1 | running, nobody waiting |
  // | 2 | running, someone may be sleeping on the futex: the runner must wake all |
  // | 3 | done |
  @usableFromInline
  let state: UnsafeMutablePointer<UInt32>
  /// The running thread's tag, for the re-entrancy check.
  @usableFromInline
  let runner: UnsafeMutablePointer<UInt64>

  @usableFromInline
  static let done: UInt32 = 3

  /// Creates a `Once` whose body has not run.
  public init() {
    let block = UnsafeMutableRawPointer.allocate(byteCount: 16, alignment: 8)
    state = block.bindMemory(to: UInt32.self, capacity: 1)
    state.initialize(to: 0)
    runner = (block + 8).bindMemory(to: UInt64.self, capacity: 1)
    runner.initialize(to: 0)
  }

  deinit {
    UnsafeMutableRawPointer(state).deallocate()
  }

  /// Whether the body has completed.
  @inlinable
  public var isCompleted: Bool {
    UInt32.atomicLoad(at: state, ordering: .acquiring) == Once.done
  }

  /// Runs `body` if no call has completed it yet; otherwise returns at once. Blocks while
  /// another thread is running the body. An error thrown by `body` propagates and leaves
  /// the `Once` not done. Calling `run` from inside `body` stops the process.
  @inlinable
  @inline(__always)
  public func run<Failure: Error>(_ body: () throws(Failure) -> Void) throws(Failure) {
    if UInt32.atomicLoad(at: state, ordering: .acquiring) == Once.done { return }
    try runSlow(body)
  }

  @usableFromInline
  func runSlow<Failure: Error>(_ body: () throws(Failure) -> Void) throws(Failure) {
    let me = currentThreadTag()
    while true {
      let seen = UInt32.atomicCompareExchange(expected: 0, desired: 1, at: state, ordering: .acquiring)
      switch seen {
      case 0:
        UInt64.atomicStore(me, at: runner, ordering: .relaxed)
        do {
          try body()
        } catch {
          finish(with: 0)
          throw error
        }
        finish(with: Once.done)
        return
      case Once.done:
        return
      default:
        if UInt64.atomicLoad(at: runner, ordering: .relaxed) == me {
          reportMisuse("Once", "run() called from inside its own body (it would wait for itself)")
        }
        // Announce a sleeper, then sleep while the body runs; re-check afterwards.
        if seen == 1,
          !UInt32.atomicCompareAndSwap(expected: 1, desired: 2, at: state, ordering: .relaxed)
        {
          continue
        }
        _ = Futex.wait(state, expected: 2, deadline: .distantFuture)
      }
    }
  }

  func finish(with final: UInt32) {
    UInt64.atomicStore(0, at: runner, ordering: .relaxed)
    // Releasing: the body's writes become visible to every acquiring load that sees `done`.
    if UInt32.atomicExchange(final, at: state, ordering: .releasing) == 2 {
      Futex.wake(state, count: Int32.max)
    }
  }
}
