/// A Boolean that many threads may read and modify at once, on libatomic_ops' byte
/// operations (`AO_char_*`): a flag such as "stop requested" or "initialized".
///
/// Every operation names its memory ordering, as with ``AtomicInteger``. The flag lives in its
/// own 64-byte heap block (a cache line), so its address never moves and neighbours do not
/// share its cache line; instances are shared between threads by reference.
///
/// ```swift
/// let stop = AtomicBool(false)
/// // Worker: poll between work items.
/// while !stop.load(ordering: .relaxed) { work() }
/// // Controller:
/// stop.store(true, ordering: .relaxed)
/// ```
///
/// Orderings on arm64 and x86: a flag that only says "stop" publishes nothing else, so
/// `.relaxed` suffices for it on both (the store becomes visible in bounded time; no other
/// memory is read on its strength). A flag that says "the data is ready" needs a
/// `.releasing` store paired with an `.acquiring` load: on arm64 they are `stlrb` and
/// `ldarb` (on x86 plain moves), and the writer's earlier stores are visible to a reader
/// whose acquiring load sees `true`. ``compareExchange(expected:desired:ordering:)`` with
/// `.acquiring` claims a one-shot job ("the first thread to flip it does the work") and
/// orders the winner's later accesses after the claim.
public final class AtomicBool: @unchecked Sendable {
  // @unchecked: the byte is only ever accessed through libatomic_ops operations.
  /// 0 or 1, at the start of a 64-byte block of its own.
  @usableFromInline
  let storage: UnsafeMutableRawPointer

  /// Creates an atomic Boolean holding `initialValue`.
  public init(_ initialValue: Bool) {
    storage = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64)
    storage.initializeMemory(as: UInt8.self, to: initialValue ? 1 : 0)
  }

  deinit {
    storage.deallocate()  // a trivial byte: nothing to deinitialize
  }

  /// Reads the value.
  @inlinable
  public func load(ordering: MemoryOrder.Load) -> Bool {
    (AtomicBits.load(storage, ordering: ordering) as UInt8) != 0
  }

  /// Writes `value`.
  @inlinable
  public func store(_ value: Bool, ordering: MemoryOrder.Store) {
    AtomicBits.store(UInt8(value ? 1 : 0), storage, ordering: ordering)
  }

  /// Writes `value` and returns the value it replaced.
  @inlinable
  @discardableResult
  public func exchange(_ value: Bool, ordering: MemoryOrder.Update) -> Bool {
    AtomicBits.update(.exchange, UInt8(value ? 1 : 0), storage, ordering: ordering) != 0
  }

  /// Replaces the value with `desired` if it equals `expected`. Returns whether it did and
  /// the value seen (`AO_char_fetch_compare_and_swap`).
  @inlinable
  public func compareExchange(expected: Bool, desired: Bool, ordering: MemoryOrder.Update)
    -> (exchanged: Bool, original: Bool)
  {
    let expectedBits: UInt8 = expected ? 1 : 0
    let seen: UInt8 = AtomicBits.fetchCompareAndSwap(
      expected: expectedBits, desired: desired ? 1 : 0, storage, ordering: ordering)
    return (seen == expectedBits, seen != 0)
  }

  /// Sets the value to `value && operand` and returns the value before.
  @inlinable
  @discardableResult
  public func fetchAnd(_ operand: Bool, ordering: MemoryOrder.Update) -> Bool {
    AtomicBits.update(.and, UInt8(operand ? 1 : 0), storage, ordering: ordering) != 0
  }

  /// Sets the value to `value || operand` and returns the value before.
  @inlinable
  @discardableResult
  public func fetchOr(_ operand: Bool, ordering: MemoryOrder.Update) -> Bool {
    AtomicBits.update(.or, UInt8(operand ? 1 : 0), storage, ordering: ordering) != 0
  }

  /// Sets the value to `value != operand` and returns the value before.
  @inlinable
  @discardableResult
  public func fetchXor(_ operand: Bool, ordering: MemoryOrder.Update) -> Bool {
    AtomicBits.update(.xor, UInt8(operand ? 1 : 0), storage, ordering: ordering) != 0
  }
}
