// The UInt32 and UInt64 extensions below are identical but for the width; edit both alike.
import CAtomicOps

/// The two storage widths libatomic_ops provides (`unsigned int` and `AO_t`), as the raw
/// layer under ``AtomicInteger``. Each operation takes a pointer to properly aligned memory
/// that is only ever accessed atomically, and an explicit ordering.
///
/// You rarely call these directly; they exist so generic code specializes into a single
/// libatomic_ops call.
public protocol AtomicPrimitive: FixedWidthInteger, UnsignedInteger, Sendable {
  /// Loads the value at `pointer` (`AO_load` / `AO_load_acquire`).
  static func atomicLoad(at pointer: UnsafeMutablePointer<Self>, ordering: AtomicLoadOrdering) -> Self
  /// Stores `value` at `pointer` (`AO_store` / `AO_store_release`).
  static func atomicStore(_ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicStoreOrdering)
  /// Stores `value` and returns the previous value.
  static func atomicExchange(_ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Self
  /// Replaces `expected` with `desired` if present; returns the value seen
  /// (`AO_fetch_compare_and_swap`). The exchange happened when the result equals `expected`.
  static func atomicCompareExchange(expected: Self, desired: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Self
  /// Replaces `expected` with `desired` if present; returns whether it did (`AO_compare_and_swap`).
  static func atomicCompareAndSwap(expected: Self, desired: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Bool
  /// Adds `value` with wrap-around and returns the previous value (`AO_fetch_and_add`).
  static func atomicFetchAdd(_ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Self
  /// Bitwise-ands `value` in and returns the previous value.
  static func atomicFetchAnd(_ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Self
  /// Bitwise-ors `value` in and returns the previous value.
  static func atomicFetchOr(_ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Self
  /// Bitwise-xors `value` in and returns the previous value.
  static func atomicFetchXor(_ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Self
}

/// `UInt32` atomics map onto libatomic_ops' `AO_int_*` operations.
extension UInt32: AtomicPrimitive {
  /// The libatomic_ops implementation of ``AtomicPrimitive/atomicLoad``.
  @inlinable
  @inline(__always)
  public static func atomicLoad(at pointer: UnsafeMutablePointer<Self>, ordering: AtomicLoadOrdering) -> Self {
    switch ordering {
    case .relaxed: return tk_atomic_u32_load_relaxed(pointer)
    case .acquiring: return tk_atomic_u32_load_acquire(pointer)
    case .full: return tk_atomic_u32_load_full(pointer)
    }
  }

  /// The libatomic_ops implementation of ``AtomicPrimitive/atomicStore``.
  @inlinable
  @inline(__always)
  public static func atomicStore(_ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicStoreOrdering) {
    switch ordering {
    case .relaxed: tk_atomic_u32_store_relaxed(pointer, value)
    case .releasing: tk_atomic_u32_store_release(pointer, value)
    case .full: tk_atomic_u32_store_full(pointer, value)
    }
  }

  /// The libatomic_ops implementation of ``AtomicPrimitive/atomicExchange``.
  @inlinable
  @inline(__always)
  public static func atomicExchange(_ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Self {
    switch ordering {
    case .relaxed: return tk_atomic_u32_exchange_relaxed(pointer, value)
    case .acquiring: return tk_atomic_u32_exchange_acquire(pointer, value)
    case .releasing: return tk_atomic_u32_exchange_release(pointer, value)
    case .full: return tk_atomic_u32_exchange_full(pointer, value)
    }
  }

  /// The libatomic_ops implementation of ``AtomicPrimitive/atomicCompareExchange``.
  @inlinable
  @inline(__always)
  public static func atomicCompareExchange(expected: Self, desired: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Self {
    switch ordering {
    case .relaxed: return tk_atomic_u32_fetch_compare_and_swap_relaxed(pointer, expected, desired)
    case .acquiring: return tk_atomic_u32_fetch_compare_and_swap_acquire(pointer, expected, desired)
    case .releasing: return tk_atomic_u32_fetch_compare_and_swap_release(pointer, expected, desired)
    case .full: return tk_atomic_u32_fetch_compare_and_swap_full(pointer, expected, desired)
    }
  }

  /// The libatomic_ops implementation of ``AtomicPrimitive/atomicCompareAndSwap``.
  @inlinable
  @inline(__always)
  public static func atomicCompareAndSwap(expected: Self, desired: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Bool {
    switch ordering {
    case .relaxed: return tk_atomic_u32_compare_and_swap_relaxed(pointer, expected, desired)
    case .acquiring: return tk_atomic_u32_compare_and_swap_acquire(pointer, expected, desired)
    case .releasing: return tk_atomic_u32_compare_and_swap_release(pointer, expected, desired)
    case .full: return tk_atomic_u32_compare_and_swap_full(pointer, expected, desired)
    }
  }

  /// The libatomic_ops implementation of ``AtomicPrimitive/atomicFetchAdd``.
  @inlinable
  @inline(__always)
  public static func atomicFetchAdd(_ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Self {
    switch ordering {
    case .relaxed: return tk_atomic_u32_fetch_add_relaxed(pointer, value)
    case .acquiring: return tk_atomic_u32_fetch_add_acquire(pointer, value)
    case .releasing: return tk_atomic_u32_fetch_add_release(pointer, value)
    case .full: return tk_atomic_u32_fetch_add_full(pointer, value)
    }
  }

  /// The libatomic_ops implementation of ``AtomicPrimitive/atomicFetchAnd``.
  @inlinable
  @inline(__always)
  public static func atomicFetchAnd(_ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Self {
    switch ordering {
    case .relaxed: return tk_atomic_u32_fetch_and_relaxed(pointer, value)
    case .acquiring: return tk_atomic_u32_fetch_and_acquire(pointer, value)
    case .releasing: return tk_atomic_u32_fetch_and_release(pointer, value)
    case .full: return tk_atomic_u32_fetch_and_full(pointer, value)
    }
  }

  /// The libatomic_ops implementation of ``AtomicPrimitive/atomicFetchOr``.
  @inlinable
  @inline(__always)
  public static func atomicFetchOr(_ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Self {
    switch ordering {
    case .relaxed: return tk_atomic_u32_fetch_or_relaxed(pointer, value)
    case .acquiring: return tk_atomic_u32_fetch_or_acquire(pointer, value)
    case .releasing: return tk_atomic_u32_fetch_or_release(pointer, value)
    case .full: return tk_atomic_u32_fetch_or_full(pointer, value)
    }
  }

  /// The libatomic_ops implementation of ``AtomicPrimitive/atomicFetchXor``.
  @inlinable
  @inline(__always)
  public static func atomicFetchXor(_ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Self {
    switch ordering {
    case .relaxed: return tk_atomic_u32_fetch_xor_relaxed(pointer, value)
    case .acquiring: return tk_atomic_u32_fetch_xor_acquire(pointer, value)
    case .releasing: return tk_atomic_u32_fetch_xor_release(pointer, value)
    case .full: return tk_atomic_u32_fetch_xor_full(pointer, value)
    }
  }
}

/// `UInt64` atomics map onto libatomic_ops' `AO_*` operations.
extension UInt64: AtomicPrimitive {
  /// The libatomic_ops implementation of ``AtomicPrimitive/atomicLoad``.
  @inlinable
  @inline(__always)
  public static func atomicLoad(at pointer: UnsafeMutablePointer<Self>, ordering: AtomicLoadOrdering) -> Self {
    switch ordering {
    case .relaxed: return tk_atomic_u64_load_relaxed(pointer)
    case .acquiring: return tk_atomic_u64_load_acquire(pointer)
    case .full: return tk_atomic_u64_load_full(pointer)
    }
  }

  /// The libatomic_ops implementation of ``AtomicPrimitive/atomicStore``.
  @inlinable
  @inline(__always)
  public static func atomicStore(_ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicStoreOrdering) {
    switch ordering {
    case .relaxed: tk_atomic_u64_store_relaxed(pointer, value)
    case .releasing: tk_atomic_u64_store_release(pointer, value)
    case .full: tk_atomic_u64_store_full(pointer, value)
    }
  }

  /// The libatomic_ops implementation of ``AtomicPrimitive/atomicExchange``.
  @inlinable
  @inline(__always)
  public static func atomicExchange(_ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Self {
    switch ordering {
    case .relaxed: return tk_atomic_u64_exchange_relaxed(pointer, value)
    case .acquiring: return tk_atomic_u64_exchange_acquire(pointer, value)
    case .releasing: return tk_atomic_u64_exchange_release(pointer, value)
    case .full: return tk_atomic_u64_exchange_full(pointer, value)
    }
  }

  /// The libatomic_ops implementation of ``AtomicPrimitive/atomicCompareExchange``.
  @inlinable
  @inline(__always)
  public static func atomicCompareExchange(expected: Self, desired: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Self {
    switch ordering {
    case .relaxed: return tk_atomic_u64_fetch_compare_and_swap_relaxed(pointer, expected, desired)
    case .acquiring: return tk_atomic_u64_fetch_compare_and_swap_acquire(pointer, expected, desired)
    case .releasing: return tk_atomic_u64_fetch_compare_and_swap_release(pointer, expected, desired)
    case .full: return tk_atomic_u64_fetch_compare_and_swap_full(pointer, expected, desired)
    }
  }

  /// The libatomic_ops implementation of ``AtomicPrimitive/atomicCompareAndSwap``.
  @inlinable
  @inline(__always)
  public static func atomicCompareAndSwap(expected: Self, desired: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Bool {
    switch ordering {
    case .relaxed: return tk_atomic_u64_compare_and_swap_relaxed(pointer, expected, desired)
    case .acquiring: return tk_atomic_u64_compare_and_swap_acquire(pointer, expected, desired)
    case .releasing: return tk_atomic_u64_compare_and_swap_release(pointer, expected, desired)
    case .full: return tk_atomic_u64_compare_and_swap_full(pointer, expected, desired)
    }
  }

  /// The libatomic_ops implementation of ``AtomicPrimitive/atomicFetchAdd``.
  @inlinable
  @inline(__always)
  public static func atomicFetchAdd(_ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Self {
    switch ordering {
    case .relaxed: return tk_atomic_u64_fetch_add_relaxed(pointer, value)
    case .acquiring: return tk_atomic_u64_fetch_add_acquire(pointer, value)
    case .releasing: return tk_atomic_u64_fetch_add_release(pointer, value)
    case .full: return tk_atomic_u64_fetch_add_full(pointer, value)
    }
  }

  /// The libatomic_ops implementation of ``AtomicPrimitive/atomicFetchAnd``.
  @inlinable
  @inline(__always)
  public static func atomicFetchAnd(_ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Self {
    switch ordering {
    case .relaxed: return tk_atomic_u64_fetch_and_relaxed(pointer, value)
    case .acquiring: return tk_atomic_u64_fetch_and_acquire(pointer, value)
    case .releasing: return tk_atomic_u64_fetch_and_release(pointer, value)
    case .full: return tk_atomic_u64_fetch_and_full(pointer, value)
    }
  }

  /// The libatomic_ops implementation of ``AtomicPrimitive/atomicFetchOr``.
  @inlinable
  @inline(__always)
  public static func atomicFetchOr(_ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Self {
    switch ordering {
    case .relaxed: return tk_atomic_u64_fetch_or_relaxed(pointer, value)
    case .acquiring: return tk_atomic_u64_fetch_or_acquire(pointer, value)
    case .releasing: return tk_atomic_u64_fetch_or_release(pointer, value)
    case .full: return tk_atomic_u64_fetch_or_full(pointer, value)
    }
  }

  /// The libatomic_ops implementation of ``AtomicPrimitive/atomicFetchXor``.
  @inlinable
  @inline(__always)
  public static func atomicFetchXor(_ value: Self, at pointer: UnsafeMutablePointer<Self>, ordering: AtomicUpdateOrdering) -> Self {
    switch ordering {
    case .relaxed: return tk_atomic_u64_fetch_xor_relaxed(pointer, value)
    case .acquiring: return tk_atomic_u64_fetch_xor_acquire(pointer, value)
    case .releasing: return tk_atomic_u64_fetch_xor_release(pointer, value)
    case .full: return tk_atomic_u64_fetch_xor_full(pointer, value)
    }
  }
}
