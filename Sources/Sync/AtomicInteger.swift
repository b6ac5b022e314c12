/// An integer type ``AtomicInteger`` can hold: `Int8`, `UInt8`, `Int16`, `UInt16`, `Int32`,
/// `UInt32`, `Int64`, `UInt64`, `Int` and `UInt`.
///
/// The protocol has no requirements, so conforming adds no members to the integer types:
/// ``AtomicInteger`` keeps each value as the unsigned bit pattern of its width
/// (`init(truncatingIfNeeded:)` both ways) and operates on it with libatomic_ops' operation
/// for that width. Another `FixedWidthInteger` of 8, 16, 32 or 64 bits may conform; a wider
/// one is misuse that ``AtomicInteger/init(_:)`` reports.
public protocol AtomicIntegerValue: FixedWidthInteger, Sendable {}

extension Int8: AtomicIntegerValue {}
extension UInt8: AtomicIntegerValue {}
extension Int16: AtomicIntegerValue {}
extension UInt16: AtomicIntegerValue {}
extension Int32: AtomicIntegerValue {}
extension UInt32: AtomicIntegerValue {}
extension Int64: AtomicIntegerValue {}
extension UInt64: AtomicIntegerValue {}
extension Int: AtomicIntegerValue {}
extension UInt: AtomicIntegerValue {}

/// An integer that many threads may read and modify at once, on libatomic_ops: the guide's
/// Table 4-3 (`OSAtomicAdd32`, `OSAtomicCompareAndSwap32`, `OSAtomicTestAndSet`, ...) for
/// 8-, 16-, 32-, 64-bit and word-sized integers (`AO_char_*`, `AO_short_*`, `AO_int_*`, `AO_*`).
///
/// Every operation names its memory ordering; none defaults to a full barrier silently. The
/// guide's "barrier" variants are `ordering: .full`. Arithmetic wraps around on overflow, as
/// the C operations do. The value lives in its own heap allocation (a 64-byte cache line),
/// so its address never moves and neighbours do not share its cache line; instances are
/// shared between threads by reference.
///
/// Which value an operation returns is in its name: `fetchAdd` returns the value before,
/// `add` (the guide's `OSAtomicAdd32`) returns the value after.
///
/// ```swift
/// let hits = AtomicInteger<Int64>(0)
/// hits.increment(ordering: .relaxed)        // a statistic: no ordering needed
/// let ready = AtomicInteger<UInt32>(0)
/// ready.store(1, ordering: .releasing)      // publish what was written before
/// ```
public final class AtomicInteger<Value: AtomicIntegerValue>: @unchecked Sendable {
  // @unchecked: the storage is only ever accessed through libatomic_ops operations.
  /// The value's bit pattern as the unsigned word of its width, at the start of a 64-byte
  /// block of its own.
  @usableFromInline
  let storage: UnsafeMutableRawPointer

  /// Creates an atomic integer holding `initialValue`.
  ///
  /// A `Value` wider than 64 bits (a custom conformance to ``AtomicIntegerValue``) is misuse
  /// and stops the process.
  public init(_ initialValue: Value) {
    guard AtomicBits.supports(Value.self) else {
      reportMisuse("AtomicInteger", "\(Value.self) is \(Value.bitWidth) bits wide; atomics hold 8, 16, 32 or 64 bits")
    }
    storage = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64)
    switch Value.bitWidth {
    case 8: storage.initializeMemory(as: UInt8.self, to: UInt8(truncatingIfNeeded: initialValue))
    case 16: storage.initializeMemory(as: UInt16.self, to: UInt16(truncatingIfNeeded: initialValue))
    case 32: storage.initializeMemory(as: UInt32.self, to: UInt32(truncatingIfNeeded: initialValue))
    default: storage.initializeMemory(as: UInt64.self, to: UInt64(truncatingIfNeeded: initialValue))
    }
  }

  deinit {
    storage.deallocate()  // a trivial word: nothing to deinitialize
  }

  /// Reads the value.
  @inlinable
  public func load(ordering: MemoryOrder.Load) -> Value {
    AtomicBits.load(storage, ordering: ordering)
  }

  /// Writes `value`.
  @inlinable
  public func store(_ value: Value, ordering: MemoryOrder.Store) {
    AtomicBits.store(value, storage, ordering: ordering)
  }

  /// Writes `value` and returns the value it replaced.
  @inlinable
  @discardableResult
  public func exchange(_ value: Value, ordering: MemoryOrder.Update) -> Value {
    AtomicBits.update(.exchange, value, storage, ordering: ordering)
  }

  /// Replaces the value with `desired` if it equals `expected`; returns whether it did. The
  /// guide's `OSAtomicCompareAndSwap32` (`AO_compare_and_swap`).
  @inlinable
  @discardableResult
  public func compareAndSwap(expected: Value, desired: Value, ordering: MemoryOrder.Update) -> Bool {
    AtomicBits.compareAndSwap(expected: expected, desired: desired, storage, ordering: ordering)
  }

  /// Replaces the value with `desired` if it equals `expected`. Returns whether it did and
  /// the value seen, so a retry loop needs no extra load (`AO_fetch_compare_and_swap`).
  @inlinable
  public func compareExchange(expected: Value, desired: Value, ordering: MemoryOrder.Update)
    -> (exchanged: Bool, original: Value)
  {
    let seen: Value = AtomicBits.fetchCompareAndSwap(expected: expected, desired: desired, storage, ordering: ordering)
    return (seen == expected, seen)
  }

  /// Adds `operand` (wrapping) and returns the value before.
  @inlinable
  @discardableResult
  public func fetchAdd(_ operand: Value, ordering: MemoryOrder.Update) -> Value {
    AtomicBits.update(.add, operand, storage, ordering: ordering)
  }

  /// Subtracts `operand` (wrapping) and returns the value before.
  @inlinable
  @discardableResult
  public func fetchSubtract(_ operand: Value, ordering: MemoryOrder.Update) -> Value {
    AtomicBits.update(.add, 0 &- operand, storage, ordering: ordering)
  }

  /// Adds `operand` (wrapping) and returns the value after: the guide's `OSAtomicAdd32`.
  @inlinable
  @discardableResult
  public func add(_ operand: Value, ordering: MemoryOrder.Update) -> Value {
    fetchAdd(operand, ordering: ordering) &+ operand
  }

  /// Subtracts `operand` (wrapping) and returns the value after.
  @inlinable
  @discardableResult
  public func subtract(_ operand: Value, ordering: MemoryOrder.Update) -> Value {
    fetchSubtract(operand, ordering: ordering) &- operand
  }

  /// Adds one (wrapping) and returns the value after: the guide's `OSAtomicIncrement32`.
  @inlinable
  @discardableResult
  public func increment(ordering: MemoryOrder.Update) -> Value {
    add(1, ordering: ordering)
  }

  /// Subtracts one (wrapping) and returns the value after: the guide's `OSAtomicDecrement32`.
  @inlinable
  @discardableResult
  public func decrement(ordering: MemoryOrder.Update) -> Value {
    subtract(1, ordering: ordering)
  }

  /// Bitwise-ands `operand` in and returns the value before.
  @inlinable
  @discardableResult
  public func fetchAnd(_ operand: Value, ordering: MemoryOrder.Update) -> Value {
    AtomicBits.update(.and, operand, storage, ordering: ordering)
  }

  /// Bitwise-ors `operand` in and returns the value before.
  @inlinable
  @discardableResult
  public func fetchOr(_ operand: Value, ordering: MemoryOrder.Update) -> Value {
    AtomicBits.update(.or, operand, storage, ordering: ordering)
  }

  /// Bitwise-xors `operand` in and returns the value before.
  @inlinable
  @discardableResult
  public func fetchXor(_ operand: Value, ordering: MemoryOrder.Update) -> Value {
    AtomicBits.update(.xor, operand, storage, ordering: ordering)
  }

  /// Bitwise-ands `operand` in and returns the value after: the guide's `OSAtomicAnd32`.
  @inlinable
  @discardableResult
  public func and(_ operand: Value, ordering: MemoryOrder.Update) -> Value {
    fetchAnd(operand, ordering: ordering) & operand
  }

  /// Bitwise-ors `operand` in and returns the value after: the guide's `OSAtomicOr32`.
  @inlinable
  @discardableResult
  public func or(_ operand: Value, ordering: MemoryOrder.Update) -> Value {
    fetchOr(operand, ordering: ordering) | operand
  }

  /// Bitwise-xors `operand` in and returns the value after: the guide's `OSAtomicXor32`.
  @inlinable
  @discardableResult
  public func xor(_ operand: Value, ordering: MemoryOrder.Update) -> Value {
    fetchXor(operand, ordering: ordering) ^ operand
  }

  /// The mask of bit `n` in the guide's numbering: bit `n` is `0x80 >> (n & 7)` in byte
  /// `n >> 3` of the value's little-endian bytes. So for a 32-bit value bit 0 is 128, bit 7 is
  /// 1, bit 15 is 256. Traps when `n` is outside the value.
  @inlinable
  public static func guideBitMask(_ n: Int) -> Value {
    guard n >= 0, n < Value.bitWidth else {
      fatalError("AtomicInteger: bit \(n) is outside a \(Value.bitWidth)-bit value (valid: 0..<\(Value.bitWidth))")
    }
    // On the unsigned word of the width, so that bit 7 of the top byte is no sign bit.
    let byteMask: UInt64 = 0x80 >> UInt64(n & 7)
    return Value(truncatingIfNeeded: byteMask << UInt64((n >> 3) * 8))
  }

  /// Sets bit `n` (the guide's numbering, see ``guideBitMask(_:)``) and returns whether it
  /// was already set: the guide's `OSAtomicTestAndSet`. Traps when `n` is outside the value.
  @inlinable
  @discardableResult
  public func testAndSet(bit n: Int, ordering: MemoryOrder.Update) -> Bool {
    let mask = Self.guideBitMask(n)
    return fetchOr(mask, ordering: ordering) & mask != 0
  }

  /// Clears bit `n` (the guide's numbering, see ``guideBitMask(_:)``) and returns whether it
  /// was set: the guide's `OSAtomicTestAndClear`. Traps when `n` is outside the value.
  @inlinable
  @discardableResult
  public func testAndClear(bit n: Int, ordering: MemoryOrder.Update) -> Bool {
    let mask = Self.guideBitMask(n)
    return fetchAnd(~mask, ordering: ordering) & mask != 0
  }
}
