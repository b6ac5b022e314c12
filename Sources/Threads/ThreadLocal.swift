#if canImport(Glibc)
  import Glibc
#endif

/// A typed value each thread has its own copy of: POSIX thread-specific data
/// (`pthread_key_create`, `pthread_getspecific`), with an initial value and a destructor.
///
/// Declare one, usually as a global or static constant, and every thread that reads
/// ``value`` gets its own copy, created by `initialValue` on that thread's first read (a
/// first write sets the copy without calling `initialValue`).
/// When a thread that has a copy ends, `destructor` runs on that thread with the final value
/// (the POSIX key destructor). Copies never cross threads, so `Value` need not be `Sendable`.
///
/// ```swift
/// let scratch = ThreadLocal<[UInt8]>(initialValue: { [UInt8](repeating: 0, count: 4096) })
/// let requests = ThreadLocal<Int>(initialValue: { 0 }, destructor: { count in
///     log("this thread served \(count) requests")
/// })
/// requests.value += 1
/// ```
///
/// Notes:
/// - Destructors run when a thread ends; not for the main thread at process exit (POSIX
///   runs no key destructors in `exit`), and not for copies left when the `ThreadLocal`
///   itself is deinitialized (the key is deleted; those copies are leaked).
/// - Linux offers at most 1024 keys per process (`PTHREAD_KEYS_MAX`); creating more
///   stops the process. Make thread-locals long-lived constants, not per-object values.
/// - Inside a destructor, ``Thread/current`` may already be a fresh object (the order in
///   which POSIX runs key destructors is unspecified).
/// - Only the copy a thread holds when it ends goes to `destructor`: assigning ``value``
///   replaces the copy without passing the old one to it, and ``removeValue()`` drops the
///   copy without it (GLib's `g_private_set`, not `g_private_replace`). Clean up a value
///   yourself before replacing it when it needs that.
/// - A copy created while the thread is ending (by a destructor reading or setting a
///   thread-local, its own included) is destroyed in a further round; POSIX runs at most 4
///   rounds (`PTHREAD_DESTRUCTOR_ITERATIONS`), and a copy created in the last one is leaked.
///   So a destructor that sets its own thread-local runs 4 times, then leaks that copy.
/// - An `initialValue` that assigns ``value`` itself sees its assignment replaced by the
///   value it returns (the assigned one is released, not passed to `destructor`).
public final class ThreadLocal<Value>: @unchecked Sendable {
  // @unchecked: the key is immutable; each thread's slot is reached only from its thread;
  // the closures are Sendable.
  private let key: pthread_key_t
  private let initialValue: @Sendable () -> Value
  private let destructor: (@Sendable (Value) -> Void)?

  /// Creates a thread-local whose copies start as `initialValue()` (called on each thread's
  /// first access) and are passed to `destructor` when their thread ends.
  ///
  /// Stops the process if the system has no key left (`pthread_key_create` `EAGAIN`: 1024
  /// keys, a programming error) or no memory.
  public init(
    initialValue: @escaping @Sendable () -> Value, destructor: (@Sendable (Value) -> Void)? = nil
  ) {
    var key = pthread_key_t()
    checkOrDie(
      pthread_key_create(&key) { slot in
        guard let slot else { return }
        Unmanaged<ThreadLocalSlot>.fromOpaque(slot).takeRetainedValue().destroy()
      }, "pthread_key_create")
    self.key = key
    self.initialValue = initialValue
    self.destructor = destructor
  }

  deinit {
    checkOrDie(pthread_key_delete(key), "pthread_key_delete")
  }

  /// The calling thread's copy, created from `initialValue` on first access. Assigning
  /// replaces it; the replaced value is not passed to `destructor` (see the notes above). It
  /// is released once the new value is in place, so its deinitializer may use this
  /// thread-local (it sees the new value).
  public var value: Value {
    get { slot().value }
    set {
      // A thread without a copy gets `newValue` as its copy: `initialValue` does not run
      // for a value that would be thrown away (as `g_private_set`, which calls nothing).
      if let existing = existingSlot() {
        existing.replaceValue(with: newValue)
      } else {
        _ = install(TypedThreadLocalSlot(value: newValue, destructor: destructor))
      }
    }
  }

  /// Runs `body` with in-place access to the calling thread's copy (no copy of a large value).
  ///
  /// `body` holds exclusive access to the copy while it runs: using this thread-local again
  /// inside it (``value`` or `withValue`), also from the deinitializer of a value `body`
  /// replaces (released inside the access), is an overlapping access, and Swift's exclusivity
  /// check stops the process. Assign through ``value`` instead when the replaced value's
  /// deinitializer uses the thread-local: that releases it after the new value is in place.
  public func withValue<Result, Failure: Error>(
    _ body: (inout Value) throws(Failure) -> Result
  ) throws(Failure) -> Result {
    let slot = slot()
    return try body(&slot.value)
  }

  /// Whether the calling thread has a copy yet.
  public var hasValue: Bool {
    pthread_getspecific(key) != nil
  }

  /// Removes the calling thread's copy without running the destructor; the next access
  /// starts again from `initialValue`.
  public func removeValue() {
    guard let slot = pthread_getspecific(key) else { return }
    checkOrDie(pthread_setspecific(key, nil), "pthread_setspecific")
    Unmanaged<ThreadLocalSlot>.fromOpaque(slot).release()
  }

  private func slot() -> TypedThreadLocalSlot<Value> {
    if let existing = existingSlot() { return existing }
    let initial = initialValue()
    // `initialValue` may have given this thread a copy itself (it assigned `value`): the
    // initial value replaces that copy, as any later assignment would, instead of a second
    // slot taking the key and leaking the first one (never released, never destroyed).
    if let existing = existingSlot() {
      existing.replaceValue(with: initial)
      return existing
    }
    return install(TypedThreadLocalSlot(value: initial, destructor: destructor))
  }

  /// The calling thread's copy, if it has one.
  private func existingSlot() -> TypedThreadLocalSlot<Value>? {
    guard let slot = pthread_getspecific(key) else { return nil }
    return unsafeDowncast(
      Unmanaged<ThreadLocalSlot>.fromOpaque(slot).takeUnretainedValue(), to: TypedThreadLocalSlot<Value>.self)
  }

  /// Makes `slot` the calling thread's copy (it has none) and returns it.
  private func install(_ slot: TypedThreadLocalSlot<Value>) -> TypedThreadLocalSlot<Value> {
    let retained = Unmanaged<ThreadLocalSlot>.passRetained(slot)
    let result = pthread_setspecific(key, retained.toOpaque())
    if result != 0 {
      retained.release()
      checkOrDie(result, "pthread_setspecific")
    }
    return slot
  }
}
