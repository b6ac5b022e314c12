/// The memory ordering of an atomic load. There is no default: every load names one.
///
/// | case | guarantees | libatomic_ops | C++ |
/// |---|---|---|---|
/// | `relaxed` | atomicity only | `AO_load` | `memory_order_relaxed` |
/// | `acquiring` | later loads and stores stay after this load | `AO_load_acquire` | `memory_order_acquire` |
/// | `full` | a full barrier, then an acquiring load | `AO_nop_full` + `AO_load_acquire` | `memory_order_seq_cst` |
@frozen
public enum AtomicLoadOrdering: Sendable, Hashable {
  /// Atomicity only; orders nothing around it.
  case relaxed
  /// Pairs with a releasing store: what was written before that store is visible after this load.
  case acquiring
  /// Sequentially consistent: a full memory barrier before an acquiring load.
  case full
}

/// The memory ordering of an atomic store. There is no default: every store names one.
///
/// | case | guarantees | libatomic_ops | C++ |
/// |---|---|---|---|
/// | `relaxed` | atomicity only | `AO_store` | `memory_order_relaxed` |
/// | `releasing` | earlier loads and stores stay before this store | `AO_store_release` | `memory_order_release` |
/// | `full` | a full barrier (an atomic exchange) | `AO_fetch_compare_and_swap_full` (+ a full fence except on x86) | `memory_order_seq_cst` |
@frozen
public enum AtomicStoreOrdering: Sendable, Hashable {
  /// Atomicity only; orders nothing around it.
  case relaxed
  /// Publishes: what this thread wrote before the store is visible to an acquiring load that
  /// sees the stored value.
  case releasing
  /// Sequentially consistent: performed as an exchange with a full barrier.
  case full
}

/// The memory ordering of an atomic read-modify-write operation (add, and, or, xor,
/// exchange, compare-and-swap, test-and-set). There is no default: every operation names one.
///
/// libatomic_ops has no separate acquire-release variant; the guide's "barrier" variants
/// (`OSAtomicAdd32Barrier`...) are `full`, which also gives acquire-release semantics.
/// `full` is libatomic_ops' `_full` operation followed, on processors other than x86, by a
/// full fence (`dmb ish` on arm64), because there `_full` alone is only acquire-release; on
/// x86 the locked instruction is already a full barrier and nothing is added.
///
/// | case | libatomic_ops suffix | C++ |
/// |---|---|---|
/// | `relaxed` | none | `memory_order_relaxed` |
/// | `acquiring` | `_acquire` | `memory_order_acquire` |
/// | `releasing` | `_release` | `memory_order_release` |
/// | `full` | `_full` (+ a full fence except on x86) | `memory_order_seq_cst` + `atomic_thread_fence(seq_cst)` |
@frozen
public enum AtomicUpdateOrdering: Sendable, Hashable {
  /// Atomicity only. Right for statistics counters nobody synchronizes on.
  case relaxed
  /// The operation reads like an acquiring load (for taking ownership, as a lock does).
  case acquiring
  /// The operation writes like a releasing store (for handing ownership over).
  case releasing
  /// A full barrier on both sides: no load or store before the operation moves after it, and
  /// none after it moves before it, relaxed and plain accesses included (so a relaxed load
  /// after a `full` increment of another variable is not satisfied early). The guide's
  /// "barrier" variants. Use it in threaded code when in doubt. A compare-and-swap that
  /// fails writes nothing: it is an acquiring load followed by a full barrier, so an earlier
  /// store may still become visible after its read (as with Linux's `cmpxchg`); retry from a
  /// `full` load when the failure path needs that order.
  case full
}
