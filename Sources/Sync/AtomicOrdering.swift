/// The memory orderings of the toolkit's atomics: ``MemoryOrder/Load`` for loads,
/// ``MemoryOrder/Store`` for stores and ``MemoryOrder/Update`` for read-modify-write
/// operations. There is no default: every operation names one.
///
/// Each ordering is a struct with static members (`.relaxed`, `.acquiring`, `.releasing`,
/// `.full`), not an enum, so an ordering can be added later without breaking a `switch` in
/// client code. The names differ from the toolchain's `Synchronization` module
/// (`AtomicLoadOrdering`...), whose cases differ too, so both modules can be imported in one
/// file without qualification.
public enum MemoryOrder {
  /// The memory ordering of an atomic load.
  ///
  /// | member | guarantees | libatomic_ops | C++ |
  /// |---|---|---|---|
  /// | `relaxed` | atomicity only | `AO_load` | `memory_order_relaxed` |
  /// | `acquiring` | later loads and stores stay after this load | `AO_load_acquire` | `memory_order_acquire` |
  /// | `full` | a full barrier, then an acquiring load | `AO_nop_full` + `AO_load_acquire` | `memory_order_seq_cst` |
  @frozen
  public struct Load: Sendable, Hashable {
    /// The `TK_ORDER_*` value the C layer switches on.
    @usableFromInline
    let rawValue: Int32

    @inlinable
    init(rawValue: Int32) { self.rawValue = rawValue }

    /// Atomicity only; orders nothing around it.
    @inlinable
    public static var relaxed: Self { Self(rawValue: 0) }
    /// Pairs with a releasing store: what was written before that store is visible after
    /// this load.
    @inlinable
    public static var acquiring: Self { Self(rawValue: 1) }
    /// Sequentially consistent: a full memory barrier before an acquiring load.
    @inlinable
    public static var full: Self { Self(rawValue: 3) }
  }

  /// The memory ordering of an atomic store.
  ///
  /// | member | guarantees | libatomic_ops | C++ |
  /// |---|---|---|---|
  /// | `relaxed` | atomicity only | `AO_store` | `memory_order_relaxed` |
  /// | `releasing` | earlier loads and stores stay before this store | `AO_store_release` | `memory_order_release` |
  /// | `full` | a full barrier (an atomic exchange) | `AO_fetch_compare_and_swap_full` (+ a full fence except on x86) | `memory_order_seq_cst` |
  @frozen
  public struct Store: Sendable, Hashable {
    /// The `TK_ORDER_*` value the C layer switches on.
    @usableFromInline
    let rawValue: Int32

    @inlinable
    init(rawValue: Int32) { self.rawValue = rawValue }

    /// Atomicity only; orders nothing around it.
    @inlinable
    public static var relaxed: Self { Self(rawValue: 0) }
    /// Publishes: what this thread wrote before the store is visible to an acquiring load
    /// that sees the stored value.
    @inlinable
    public static var releasing: Self { Self(rawValue: 2) }
    /// Sequentially consistent: performed as an exchange with a full barrier.
    @inlinable
    public static var full: Self { Self(rawValue: 3) }
  }

  /// The memory ordering of an atomic read-modify-write operation (add, and, or, xor,
  /// exchange, compare-and-swap, test-and-set).
  ///
  /// libatomic_ops has no separate acquire-release variant; the guide's "barrier" variants
  /// (`OSAtomicAdd32Barrier`...) are `full`, which also gives acquire-release semantics.
  /// `full` is libatomic_ops' `_full` operation followed, on processors other than x86, by a
  /// full fence (`dmb ish` on arm64), because there `_full` alone is only acquire-release; on
  /// x86 the locked instruction is already a full barrier and nothing is added.
  ///
  /// | member | libatomic_ops suffix | C++ |
  /// |---|---|---|
  /// | `relaxed` | none | `memory_order_relaxed` |
  /// | `acquiring` | `_acquire` | `memory_order_acquire` |
  /// | `releasing` | `_release` | `memory_order_release` |
  /// | `full` | `_full` (+ a full fence except on x86) | `memory_order_seq_cst` + `atomic_thread_fence(seq_cst)` |
  @frozen
  public struct Update: Sendable, Hashable {
    /// The `TK_ORDER_*` value the C layer switches on.
    @usableFromInline
    let rawValue: Int32

    @inlinable
    init(rawValue: Int32) { self.rawValue = rawValue }

    /// Atomicity only. Right for statistics counters nobody synchronizes on.
    @inlinable
    public static var relaxed: Self { Self(rawValue: 0) }
    /// The operation reads like an acquiring load (for taking ownership, as a lock does).
    @inlinable
    public static var acquiring: Self { Self(rawValue: 1) }
    /// The operation writes like a releasing store (for handing ownership over).
    @inlinable
    public static var releasing: Self { Self(rawValue: 2) }
    /// A full barrier on both sides: no load or store before the operation moves after it,
    /// and none after it moves before it, relaxed and plain accesses included (so a relaxed
    /// load after a `full` increment of another variable is not satisfied early). The
    /// guide's "barrier" variants. Use it in threaded code when in doubt. A compare-and-swap
    /// that fails writes nothing: it is an acquiring load followed by a full barrier, so an
    /// earlier store may still become visible after its read (as with Linux's `cmpxchg`);
    /// retry from a `full` load when the failure path needs that order.
    @inlinable
    public static var full: Self { Self(rawValue: 3) }
  }
}
