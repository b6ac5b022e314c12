import CAtomicOps

/// The unsigned storage words libatomic_ops operates on (`UInt8`, `UInt16`, `UInt32`,
/// `UInt64`), as the raw layer of the toolkit's own locks. Package-only: the integer types
/// gain no public members.
///
/// Each operation takes a pointer to properly aligned memory that is only ever accessed
/// atomically, and an explicit ordering; all of them forward to ``AtomicBits``.
@usableFromInline
package protocol AtomicPrimitive: FixedWidthInteger, UnsignedInteger, Sendable {}

extension UInt8: AtomicPrimitive {}
extension UInt16: AtomicPrimitive {}
extension UInt32: AtomicPrimitive {}
extension UInt64: AtomicPrimitive {}

extension AtomicPrimitive {
  /// Loads the value at `pointer` (`AO_load` / `AO_load_acquire`).
  @inlinable
  @inline(__always)
  package static func atomicLoad(at pointer: UnsafeMutablePointer<Self>, ordering: MemoryOrder.Load) -> Self {
    AtomicBits.load(UnsafeMutableRawPointer(pointer), ordering: ordering)
  }

  /// Stores `value` at `pointer` (`AO_store` / `AO_store_release`).
  @inlinable
  @inline(__always)
  package static func atomicStore(_ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: MemoryOrder.Store) {
    AtomicBits.store(value, UnsafeMutableRawPointer(pointer), ordering: ordering)
  }

  /// Replaces `expected` with `desired` if present and returns the value seen
  /// (`AO_fetch_compare_and_swap`): the exchange happened when it equals `expected`. The raw
  /// word form of ``AtomicInteger/compareExchange(expected:desired:ordering:)``, kept bare
  /// because the toolkit's retry loops feed the value seen straight back in.
  @inlinable
  @inline(__always)
  package static func atomicCompareExchange(
    expected: Self, desired: Self, at pointer: UnsafeMutablePointer<Self>, ordering: MemoryOrder.Update
  ) -> Self {
    AtomicBits.fetchCompareAndSwap(
      expected: expected, desired: desired, UnsafeMutableRawPointer(pointer), ordering: ordering)
  }

  /// Replaces `expected` with `desired` if present; returns whether it did (`AO_compare_and_swap`).
  @inlinable
  @inline(__always)
  package static func atomicCompareAndSwap(
    expected: Self, desired: Self, at pointer: UnsafeMutablePointer<Self>, ordering: MemoryOrder.Update
  ) -> Bool {
    AtomicBits.compareAndSwap(
      expected: expected, desired: desired, UnsafeMutableRawPointer(pointer), ordering: ordering)
  }

  /// Stores `value` and returns the previous value.
  @inlinable
  @inline(__always)
  package static func atomicExchange(
    _ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: MemoryOrder.Update
  ) -> Self {
    AtomicBits.update(.exchange, value, UnsafeMutableRawPointer(pointer), ordering: ordering)
  }

  /// Adds `value` with wrap-around and returns the previous value (`AO_fetch_and_add`).
  @inlinable
  @inline(__always)
  package static func atomicFetchAdd(
    _ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: MemoryOrder.Update
  ) -> Self {
    AtomicBits.update(.add, value, UnsafeMutableRawPointer(pointer), ordering: ordering)
  }

  /// Bitwise-ands `value` in and returns the previous value.
  @inlinable
  @inline(__always)
  package static func atomicFetchAnd(
    _ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: MemoryOrder.Update
  ) -> Self {
    AtomicBits.update(.and, value, UnsafeMutableRawPointer(pointer), ordering: ordering)
  }

  /// Bitwise-ors `value` in and returns the previous value.
  @inlinable
  @inline(__always)
  package static func atomicFetchOr(_ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: MemoryOrder.Update)
    -> Self
  {
    AtomicBits.update(.or, value, UnsafeMutableRawPointer(pointer), ordering: ordering)
  }

  /// Bitwise-xors `value` in and returns the previous value.
  @inlinable
  @inline(__always)
  package static func atomicFetchXor(
    _ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: MemoryOrder.Update
  ) -> Self {
    AtomicBits.update(.xor, value, UnsafeMutableRawPointer(pointer), ordering: ordering)
  }
}

/// The one implementation of every atomic operation, for any 8-, 16-, 32- or 64-bit integer
/// type `V`: the memory at the pointer holds `V`'s bit pattern as the unsigned word of its
/// width (`V(truncatingIfNeeded:)` both ways), and the operation is libatomic_ops' for that
/// width (`AO_char_*`, `AO_short_*`, `AO_int_*`, `AO_*`).
///
/// `V.bitWidth`, the operation and the ordering are constants once the generic code is
/// specialized, so a release build folds each call to the one C function it names; no
/// switch survives. A type wider than 64 bits never gets here (``AtomicInteger`` checks).
@usableFromInline
enum AtomicBits {
  /// The value-returning read-modify-write operations.
  @usableFromInline
  enum Operation {
    case exchange, add, and, or, xor
  }

  /// Whether `V` is a width the C layer has.
  @inlinable
  static func supports<V: FixedWidthInteger>(_: V.Type) -> Bool {
    switch V.bitWidth {
    case 8, 16, 32, 64: return true
    default: return false
    }
  }

  @inlinable
  @inline(__always)
  static func load<V: FixedWidthInteger>(_ p: UnsafeMutableRawPointer, ordering: MemoryOrder.Load) -> V {
    let o = ordering.rawValue
    switch V.bitWidth {
    case 8:
      return V(truncatingIfNeeded: tk_atomic_u8_load(p.assumingMemoryBound(to: UInt8.self), o))
    case 16:
      return V(truncatingIfNeeded: tk_atomic_u16_load(p.assumingMemoryBound(to: UInt16.self), o))
    case 32:
      return V(truncatingIfNeeded: tk_atomic_u32_load(p.assumingMemoryBound(to: UInt32.self), o))
    default:
      return V(truncatingIfNeeded: tk_atomic_u64_load(p.assumingMemoryBound(to: UInt64.self), o))
    }
  }

  @inlinable
  @inline(__always)
  static func store<V: FixedWidthInteger>(_ value: V, _ p: UnsafeMutableRawPointer, ordering: MemoryOrder.Store) {
    let o = ordering.rawValue
    switch V.bitWidth {
    case 8:
      tk_atomic_u8_store(p.assumingMemoryBound(to: UInt8.self), UInt8(truncatingIfNeeded: value), o)
    case 16:
      tk_atomic_u16_store(p.assumingMemoryBound(to: UInt16.self), UInt16(truncatingIfNeeded: value), o)
    case 32:
      tk_atomic_u32_store(p.assumingMemoryBound(to: UInt32.self), UInt32(truncatingIfNeeded: value), o)
    default:
      tk_atomic_u64_store(p.assumingMemoryBound(to: UInt64.self), UInt64(truncatingIfNeeded: value), o)
    }
  }

  @inlinable
  @inline(__always)
  static func fetchCompareAndSwap<V: FixedWidthInteger>(
    expected: V, desired: V, _ p: UnsafeMutableRawPointer, ordering: MemoryOrder.Update
  ) -> V {
    let o = ordering.rawValue
    switch V.bitWidth {
    case 8:
      return V(
        truncatingIfNeeded: tk_atomic_u8_fetch_compare_and_swap(
          p.assumingMemoryBound(to: UInt8.self), UInt8(truncatingIfNeeded: expected),
          UInt8(truncatingIfNeeded: desired), o))
    case 16:
      return V(
        truncatingIfNeeded: tk_atomic_u16_fetch_compare_and_swap(
          p.assumingMemoryBound(to: UInt16.self), UInt16(truncatingIfNeeded: expected),
          UInt16(truncatingIfNeeded: desired), o))
    case 32:
      return V(
        truncatingIfNeeded: tk_atomic_u32_fetch_compare_and_swap(
          p.assumingMemoryBound(to: UInt32.self), UInt32(truncatingIfNeeded: expected),
          UInt32(truncatingIfNeeded: desired), o))
    default:
      return V(
        truncatingIfNeeded: tk_atomic_u64_fetch_compare_and_swap(
          p.assumingMemoryBound(to: UInt64.self), UInt64(truncatingIfNeeded: expected),
          UInt64(truncatingIfNeeded: desired), o))
    }
  }

  @inlinable
  @inline(__always)
  static func compareAndSwap<V: FixedWidthInteger>(
    expected: V, desired: V, _ p: UnsafeMutableRawPointer, ordering: MemoryOrder.Update
  ) -> Bool {
    let o = ordering.rawValue
    switch V.bitWidth {
    case 8:
      return tk_atomic_u8_compare_and_swap(
        p.assumingMemoryBound(to: UInt8.self), UInt8(truncatingIfNeeded: expected), UInt8(truncatingIfNeeded: desired),
        o)
    case 16:
      return tk_atomic_u16_compare_and_swap(
        p.assumingMemoryBound(to: UInt16.self), UInt16(truncatingIfNeeded: expected),
        UInt16(truncatingIfNeeded: desired), o)
    case 32:
      return tk_atomic_u32_compare_and_swap(
        p.assumingMemoryBound(to: UInt32.self), UInt32(truncatingIfNeeded: expected),
        UInt32(truncatingIfNeeded: desired), o)
    default:
      return tk_atomic_u64_compare_and_swap(
        p.assumingMemoryBound(to: UInt64.self), UInt64(truncatingIfNeeded: expected),
        UInt64(truncatingIfNeeded: desired), o)
    }
  }

  @inlinable
  @inline(__always)
  static func update<V: FixedWidthInteger>(
    _ operation: Operation, _ value: V, _ p: UnsafeMutableRawPointer, ordering: MemoryOrder.Update
  ) -> V {
    let o = ordering.rawValue
    switch V.bitWidth {
    case 8:
      let w = p.assumingMemoryBound(to: UInt8.self)
      let v = UInt8(truncatingIfNeeded: value)
      switch operation {
      case .exchange: return V(truncatingIfNeeded: tk_atomic_u8_exchange(w, v, o))
      case .add: return V(truncatingIfNeeded: tk_atomic_u8_fetch_add(w, v, o))
      case .and: return V(truncatingIfNeeded: tk_atomic_u8_fetch_and(w, v, o))
      case .or: return V(truncatingIfNeeded: tk_atomic_u8_fetch_or(w, v, o))
      case .xor: return V(truncatingIfNeeded: tk_atomic_u8_fetch_xor(w, v, o))
      }
    case 16:
      let w = p.assumingMemoryBound(to: UInt16.self)
      let v = UInt16(truncatingIfNeeded: value)
      switch operation {
      case .exchange: return V(truncatingIfNeeded: tk_atomic_u16_exchange(w, v, o))
      case .add: return V(truncatingIfNeeded: tk_atomic_u16_fetch_add(w, v, o))
      case .and: return V(truncatingIfNeeded: tk_atomic_u16_fetch_and(w, v, o))
      case .or: return V(truncatingIfNeeded: tk_atomic_u16_fetch_or(w, v, o))
      case .xor: return V(truncatingIfNeeded: tk_atomic_u16_fetch_xor(w, v, o))
      }
    case 32:
      let w = p.assumingMemoryBound(to: UInt32.self)
      let v = UInt32(truncatingIfNeeded: value)
      switch operation {
      case .exchange: return V(truncatingIfNeeded: tk_atomic_u32_exchange(w, v, o))
      case .add: return V(truncatingIfNeeded: tk_atomic_u32_fetch_add(w, v, o))
      case .and: return V(truncatingIfNeeded: tk_atomic_u32_fetch_and(w, v, o))
      case .or: return V(truncatingIfNeeded: tk_atomic_u32_fetch_or(w, v, o))
      case .xor: return V(truncatingIfNeeded: tk_atomic_u32_fetch_xor(w, v, o))
      }
    default:
      let w = p.assumingMemoryBound(to: UInt64.self)
      let v = UInt64(truncatingIfNeeded: value)
      switch operation {
      case .exchange: return V(truncatingIfNeeded: tk_atomic_u64_exchange(w, v, o))
      case .add: return V(truncatingIfNeeded: tk_atomic_u64_fetch_add(w, v, o))
      case .and: return V(truncatingIfNeeded: tk_atomic_u64_fetch_and(w, v, o))
      case .or: return V(truncatingIfNeeded: tk_atomic_u64_fetch_or(w, v, o))
      case .xor: return V(truncatingIfNeeded: tk_atomic_u64_fetch_xor(w, v, o))
      }
    }
  }
}
