/// Why ``ThreadPool/run(_:)`` returned no value: the closure threw, or the pool never ran it.
///
/// `Failure` is the closure's own error type, kept with its static type in ``failed(_:)``
/// (`Never` for a closure that cannot throw, so that case cannot occur).
///
/// ```swift
/// do throws(ThreadPoolError<DecodingError>) {
///     let image = try await ThreadPool.shared.run { () throws(DecodingError) in try decode(path) }
///     show(image)
/// } catch .failed(let error) {
///     print("cannot decode: \(error)")      // error: DecodingError
/// } catch .cancelled {
///     return                                 // the task was cancelled before decoding began
/// } catch {
///     print(error)                           // shut down, or no thread could be started
/// }
/// ```
public enum ThreadPoolError<Failure: Error>: Error, CustomStringConvertible {
  /// The closure threw `error` (it ran to its end on a pool thread).
  case failed(Failure)

  /// The submitting task was cancelled before a pool thread started the closure: the closure
  /// never ran and never will. This is the pool's `CancellationError` (``cancellationError``
  /// gives that value, for code that checks for it).
  case cancelled

  /// The pool was shut down (``ThreadPool/shutDown()`` had been called) when the work was
  /// submitted; the closure never ran.
  case shutDown

  /// The pool had no running thread and could not start one (`pthread_create` refused, with
  /// the reason in the ``ThreadStartError``); the closure never ran. Later calls try again.
  case threadStartFailed(ThreadStartError)

  /// The closure's error for ``failed(_:)``, `nil` for the pool's own outcomes.
  public var failure: Failure? {
    if case .failed(let error) = self { return error }
    return nil
  }

  /// A `CancellationError` for ``cancelled``, `nil` otherwise: lets code that tests for
  /// Swift's cancellation error (`catch is CancellationError`) rethrow the pool's
  /// cancellation as that type: `throw error.cancellationError ?? error`.
  public var cancellationError: CancellationError? {
    if case .cancelled = self { return CancellationError() }
    return nil
  }

  /// The closure's error's description, or what the pool did instead of running it.
  public var description: String {
    switch self {
    case .failed(let error): return "\(error)"
    case .cancelled: return "the task was cancelled before the pool ran its work"
    case .shutDown: return "the thread pool is shut down"
    case .threadStartFailed(let error): return "the thread pool could not start a thread: \(error)"
    }
  }
}
