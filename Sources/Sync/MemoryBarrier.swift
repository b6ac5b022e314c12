import CAtomicOps

/// Standalone memory barriers (the guide's `OSMemoryBarrier`), on libatomic_ops.
///
/// A barrier orders this thread's memory accesses around it; it does not make another
/// thread look, and it is no substitute for a lock. Pair a release barrier before publishing
/// a flag with an acquire barrier after reading it, or prefer an atomic with a releasing
/// store and an acquiring load, which says the same thing on one variable.
///
/// ```swift
/// payload = compute()            // plain write
/// MemoryBarrier.release()        // payload is visible before ready
/// ready.store(1, ordering: .relaxed)
/// ```
public enum MemoryBarrier {
  /// Full barrier: no earlier load or store moves after it and no later one moves before it
  /// (`AO_nop_full`; `mfence` on x86). The guide's `OSMemoryBarrier`.
  @inlinable
  @inline(__always)
  public static func full() { tk_barrier_full() }

  /// Acquire barrier: loads before it complete before any load or store after it (C11's
  /// acquire fence: no instruction on x86, `dmb ishld` on arm64).
  @inlinable
  @inline(__always)
  public static func acquire() { tk_barrier_acquire() }

  /// Release barrier: loads and stores before it complete before any store after it (C11's
  /// release fence: no instruction on x86, `dmb ish` on arm64).
  @inlinable
  @inline(__always)
  public static func release() { tk_barrier_release() }
}
