/// An integer type ``AtomicInteger`` can hold: `Int32`, `UInt32`, `Int64`, `UInt64`, `Int`
/// and `UInt`. Each is stored as the unsigned primitive of its width.
public protocol AtomicIntegerValue: FixedWidthInteger, Sendable {
  /// The libatomic_ops width that stores this type.
  associatedtype AtomicStorage: AtomicPrimitive
  /// This value's bit pattern as storage.
  static func atomicEncode(_ value: Self) -> AtomicStorage
  /// The value with `storage`'s bit pattern.
  static func atomicDecode(_ storage: AtomicStorage) -> Self
}

/// Stored as itself.
extension UInt32: AtomicIntegerValue {
  /// The storage width.
  public typealias AtomicStorage = UInt32
  /// Identity.
  @inlinable
  public static func atomicEncode(_ value: UInt32) -> UInt32 { value }
  /// Identity.
  @inlinable
  public static func atomicDecode(_ storage: UInt32) -> UInt32 { storage }
}

/// Stored as its `UInt32` bit pattern.
extension Int32: AtomicIntegerValue {
  /// The storage width.
  public typealias AtomicStorage = UInt32
  /// The bit pattern.
  @inlinable
  public static func atomicEncode(_ value: Int32) -> UInt32 { UInt32(bitPattern: value) }
  /// From the bit pattern.
  @inlinable
  public static func atomicDecode(_ storage: UInt32) -> Int32 { Int32(bitPattern: storage) }
}

/// Stored as itself.
extension UInt64: AtomicIntegerValue {
  /// The storage width.
  public typealias AtomicStorage = UInt64
  /// Identity.
  @inlinable
  public static func atomicEncode(_ value: UInt64) -> UInt64 { value }
  /// Identity.
  @inlinable
  public static func atomicDecode(_ storage: UInt64) -> UInt64 { storage }
}

/// Stored as its `UInt64` bit pattern.
extension Int64: AtomicIntegerValue {
  /// The storage width.
  public typealias AtomicStorage = UInt64
  /// The bit pattern.
  @inlinable
  public static func atomicEncode(_ value: Int64) -> UInt64 { UInt64(bitPattern: value) }
  /// From the bit pattern.
  @inlinable
  public static func atomicDecode(_ storage: UInt64) -> Int64 { Int64(bitPattern: storage) }
}

/// Stored as a `UInt64` (the toolkit supports 64-bit platforms).
extension UInt: AtomicIntegerValue {
  /// The storage width.
  public typealias AtomicStorage = UInt64
  /// The bit pattern.
  @inlinable
  public static func atomicEncode(_ value: UInt) -> UInt64 { UInt64(value) }
  /// From the bit pattern.
  @inlinable
  public static func atomicDecode(_ storage: UInt64) -> UInt { UInt(storage) }
}

/// Stored as its `UInt64` bit pattern.
extension Int: AtomicIntegerValue {
  /// The storage width.
  public typealias AtomicStorage = UInt64
  /// The bit pattern.
  @inlinable
  public static func atomicEncode(_ value: Int) -> UInt64 { UInt64(bitPattern: Int64(value)) }
  /// From the bit pattern.
  @inlinable
  public static func atomicDecode(_ storage: UInt64) -> Int { Int(Int64(bitPattern: storage)) }
}

/// An integer that many threads may read and modify at once, on libatomic_ops: the guide's
/// Table 4-3 (`OSAtomicAdd32`, `OSAtomicCompareAndSwap32`, `OSAtomicTestAndSet`, ...) for
/// 32-bit, 64-bit and word-sized integers.
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
  @usableFromInline
  let storage: UnsafeMutablePointer<Value.AtomicStorage>

  /// Creates an atomic integer holding `initialValue`.
  public init(_ initialValue: Value) {
    let raw = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64)
    storage = raw.bindMemory(to: Value.AtomicStorage.self, capacity: 1)
    storage.initialize(to: Value.atomicEncode(initialValue))
  }

  deinit {
    storage.deinitialize(count: 1)
    UnsafeMutableRawPointer(storage).deallocate()
  }

  /// Reads the value.
  @inlinable
  public func load(ordering: AtomicLoadOrdering) -> Value {
    Value.atomicDecode(Value.AtomicStorage.atomicLoad(at: storage, ordering: ordering))
  }

  /// Writes `value`.
  @inlinable
  public func store(_ value: Value, ordering: AtomicStoreOrdering) {
    Value.AtomicStorage.atomicStore(Value.atomicEncode(value), at: storage, ordering: ordering)
  }

  /// Writes `value` and returns the value it replaced.
  @inlinable
  @discardableResult
  public func exchange(_ value: Value, ordering: AtomicUpdateOrdering) -> Value {
    Value.atomicDecode(
      Value.AtomicStorage.atomicExchange(Value.atomicEncode(value), at: storage, ordering: ordering))
  }

  /// Replaces the value with `desired` if it equals `expected`; returns whether it did. The
  /// guide's `OSAtomicCompareAndSwap32` (`AO_compare_and_swap`).
  @inlinable
  @discardableResult
  public func compareAndSwap(expected: Value, desired: Value, ordering: AtomicUpdateOrdering) -> Bool {
    Value.AtomicStorage.atomicCompareAndSwap(
      expected: Value.atomicEncode(expected), desired: Value.atomicEncode(desired), at: storage,
      ordering: ordering)
  }

  /// Replaces the value with `desired` if it equals `expected`. Returns whether it did and
  /// the value seen, so a retry loop needs no extra load (`AO_fetch_compare_and_swap`).
  @inlinable
  public func compareExchange(expected: Value, desired: Value, ordering: AtomicUpdateOrdering)
    -> (exchanged: Bool, original: Value)
  {
    let expectedBits = Value.atomicEncode(expected)
    let seen = Value.AtomicStorage.atomicCompareExchange(
      expected: expectedBits, desired: Value.atomicEncode(desired), at: storage, ordering: ordering)
    return (seen == expectedBits, Value.atomicDecode(seen))
  }

  /// Adds `operand` (wrapping) and returns the value before.
  @inlinable
  @discardableResult
  public func fetchAdd(_ operand: Value, ordering: AtomicUpdateOrdering) -> Value {
    Value.atomicDecode(
      Value.AtomicStorage.atomicFetchAdd(Value.atomicEncode(operand), at: storage, ordering: ordering))
  }

  /// Subtracts `operand` (wrapping) and returns the value before.
  @inlinable
  @discardableResult
  public func fetchSubtract(_ operand: Value, ordering: AtomicUpdateOrdering) -> Value {
    Value.atomicDecode(
      Value.AtomicStorage.atomicFetchAdd(
        0 &- Value.atomicEncode(operand), at: storage, ordering: ordering))
  }

  /// Adds `operand` (wrapping) and returns the value after: the guide's `OSAtomicAdd32`.
  @inlinable
  @discardableResult
  public func add(_ operand: Value, ordering: AtomicUpdateOrdering) -> Value {
    fetchAdd(operand, ordering: ordering) &+ operand
  }

  /// Subtracts `operand` (wrapping) and returns the value after.
  @inlinable
  @discardableResult
  public func subtract(_ operand: Value, ordering: AtomicUpdateOrdering) -> Value {
    fetchSubtract(operand, ordering: ordering) &- operand
  }

  /// Adds one (wrapping) and returns the value after: the guide's `OSAtomicIncrement32`.
  @inlinable
  @discardableResult
  public func increment(ordering: AtomicUpdateOrdering) -> Value {
    add(1, ordering: ordering)
  }

  /// Subtracts one (wrapping) and returns the value after: the guide's `OSAtomicDecrement32`.
  @inlinable
  @discardableResult
  public func decrement(ordering: AtomicUpdateOrdering) -> Value {
    subtract(1, ordering: ordering)
  }

  /// Bitwise-ands `operand` in and returns the value before.
  @inlinable
  @discardableResult
  public func fetchAnd(_ operand: Value, ordering: AtomicUpdateOrdering) -> Value {
    Value.atomicDecode(
      Value.AtomicStorage.atomicFetchAnd(Value.atomicEncode(operand), at: storage, ordering: ordering))
  }

  /// Bitwise-ors `operand` in and returns the value before.
  @inlinable
  @discardableResult
  public func fetchOr(_ operand: Value, ordering: AtomicUpdateOrdering) -> Value {
    Value.atomicDecode(
      Value.AtomicStorage.atomicFetchOr(Value.atomicEncode(operand), at: storage, ordering: ordering))
  }

  /// Bitwise-xors `operand` in and returns the value before.
  @inlinable
  @discardableResult
  public func fetchXor(_ operand: Value, ordering: AtomicUpdateOrdering) -> Value {
    Value.atomicDecode(
      Value.AtomicStorage.atomicFetchXor(Value.atomicEncode(operand), at: storage, ordering: ordering))
  }

  /// Bitwise-ands `operand` in and returns the value after: the guide's `OSAtomicAnd32`.
  @inlinable
  @discardableResult
  public func and(_ operand: Value, ordering: AtomicUpdateOrdering) -> Value {
    fetchAnd(operand, ordering: ordering) & operand
  }

  /// Bitwise-ors `operand` in and returns the value after: the guide's `OSAtomicOr32`.
  @inlinable
  @discardableResult
  public func or(_ operand: Value, ordering: AtomicUpdateOrdering) -> Value {
    fetchOr(operand, ordering: ordering) | operand
  }

  /// Bitwise-xors `operand` in and returns the value after: the guide's `OSAtomicXor32`.
  @inlinable
  @discardableResult
  public func xor(_ operand: Value, ordering: AtomicUpdateOrdering) -> Value {
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
    let byteMask: Value.AtomicStorage = 0x80 >> Value.AtomicStorage(n & 7)
    return Value.atomicDecode(byteMask << Value.AtomicStorage((n >> 3) * 8))
  }

  /// Sets bit `n` (the guide's numbering, see ``guideBitMask(_:)``) and returns whether it
  /// was already set: the guide's `OSAtomicTestAndSet`. Traps when `n` is outside the value.
  @inlinable
  @discardableResult
  public func testAndSet(bit n: Int, ordering: AtomicUpdateOrdering) -> Bool {
    let mask = Self.guideBitMask(n)
    return fetchOr(mask, ordering: ordering) & mask != 0
  }

  /// Clears bit `n` (the guide's numbering, see ``guideBitMask(_:)``) and returns whether it
  /// was set: the guide's `OSAtomicTestAndClear`. Traps when `n` is outside the value.
  @inlinable
  @discardableResult
  public func testAndClear(bit n: Int, ordering: AtomicUpdateOrdering) -> Bool {
    let mask = Self.guideBitMask(n)
    return fetchAnd(~mask, ordering: ordering) & mask != 0
  }
}
