/// A value computed on first use, exactly once, safely across threads; built on ``Once``.
///
/// The first read of ``value`` runs the initializer; readers that arrive meanwhile block
/// until it finishes; later reads cost one acquiring atomic load plus the read of the
/// stored value. Use it instead of double-checked locking (which the guide rejects) for a
/// shared cache, table or connection that is expensive to build and may not be needed.
///
/// ```swift
/// let primes = Lazy { computePrimes(below: 1_000_000) }
/// // on any thread, any number of times:
/// let count = primes.value.count
/// ```
///
/// **Misuse**: reading ``value`` from inside the initializer stops the process with a
/// message (it would wait for itself).
public final class Lazy<Value: Sendable>: @unchecked Sendable {
  // @unchecked: `storage` is written once, and `initializer` taken once, by the thread
  // running `once`, before `once` publishes completion with a releasing store; `storage` is
  // read only after an acquiring load has seen completion, `initializer` never again.
  @usableFromInline
  let once = Once()
  @usableFromInline
  let storage: UnsafeMutablePointer<Value>
  /// Taken (and released) by the call that computes the value: what it captures does not
  /// live on with the value.
  @usableFromInline
  var initializer: (@Sendable () -> Value)?

  /// Creates a lazy value that `initializer` computes on first use.
  public init(_ initializer: @escaping @Sendable () -> Value) {
    self.initializer = initializer
    storage = .allocate(capacity: 1)
  }

  deinit {
    if once.isCompleted { storage.deinitialize(count: 1) }
    storage.deallocate()
  }

  /// The value, computed by the initializer on the first read. Blocks while another
  /// thread is computing it. The initializer, and what it captures, is released once it
  /// has run, after the value is published (a capture's deinit may read ``value``).
  @inlinable
  public var value: Value {
    if !once.isCompleted { computeValue() }
    return storage.pointee
  }

  /// The first read: runs the initializer under `once` and releases it afterwards.
  @usableFromInline
  func computeValue() {
    var ran: (@Sendable () -> Value)? = nil
    once.run {
      // Only the thread running `once` touches `initializer`.
      ran = initializer.take()
      guard let ran else { fatalError("Lazy: initializer missing before the value was computed") }
      storage.initialize(to: ran())
    }
    withExtendedLifetime(ran) {}
  }

  /// Whether the value has been computed.
  @inlinable
  public var isInitialized: Bool {
    once.isCompleted
  }
}
