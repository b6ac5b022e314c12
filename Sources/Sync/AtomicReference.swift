/// An optional strong reference that many threads may read and replace at once: for
/// publishing an object (a configuration, a snapshot, a cache) that readers pick up without
/// a lock of their own.
///
/// ```swift
/// let current = AtomicReference<Config>(Config.defaults)
/// // Readers, on any thread: a retained reference, safe to use after a concurrent store.
/// let config = current.load()
/// // Writer: everything initialized in the new object is visible to a reader that loads it.
/// current.store(Config(reloadedFrom: path))
/// ```
///
/// **Design and cost.** A load must take its own retain on the object it reads before a
/// concurrent store releases the holder's reference: read the address, then retain, with a
/// store and the last release in between, and the retain touches freed memory. This type
/// closes that window with a lock: each operation holds the toolkit's futex lock (a 64-byte
/// block with the reference beside the lock words) for a few instructions, reading or
/// swapping the address and retaining under it. A lock-free alternative (a split reference
/// count or hazard pointers) costs a double-width compare-and-swap or a reclamation scheme;
/// the lock costs one uncontended compare-and-swap and one releasing compare-and-swap per
/// operation (about the price of two ``AtomicInteger`` updates), and readers exclude each
/// other for that span: with many threads loading at a high rate it contends like any lock
/// (a short spin, then the futex). The object a store or exchange replaces is released
/// after the lock is given up, so no deinitializer ever runs under it.
///
/// **Ordering.** There is no ordering parameter: every operation is acquire-release, which
/// is what publishing needs. The lock's acquiring compare-and-swap (`ldaxr`/`casa` on arm64,
/// a `lock cmpxchg` on x86) and its releasing one (`stlxr`/`casl`, `lock cmpxchg`) order
/// each operation after the previous holder's: a thread whose ``load()`` returns an object
/// sees everything the storing thread wrote before its ``store(_:)``, ``exchange(_:)`` or
/// successful ``compareExchange(expected:desired:)`` (the store's unlock is a release, the
/// load's lock an acquire of the same word). All operations on one instance are totally
/// ordered. They are not full fences for other variables: a plain access after an operation
/// may still be performed before it, as with any lock.
///
/// Comparison is by identity (`===`).
public final class AtomicReference<Object: AnyObject> {
  /// The lock words, then the reference, in one 64-byte block.
  let lock: FutexLock
  /// Touched only by the thread holding `lock`.
  let slot: UnsafeMutablePointer<Object?>

  /// Creates the atomic reference holding `initialValue` (retained).
  public init(_ initialValue: Object? = nil) {
    let block = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64)
    lock = FutexLock(wordsAt: block)
    slot = (block + FutexLock.wordsSize).bindMemory(to: Object?.self, capacity: 1)
    slot.initialize(to: initialValue)
  }

  deinit {
    lock.checkNotHeld(typeName: "AtomicReference")
    let last = slot.move()
    lock.base.deallocate()  // the block starts with the lock words
    withExtendedLifetime(last) {}  // released after the block is gone
  }

  private func acquire() {
    _ = lock.acquire(before: .distantFuture, spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "AtomicReference")
  }

  private func release() {
    lock.release(checkOwner: false, typeName: "AtomicReference")
  }

  /// Returns the current object, retained for the caller (safe to use whatever other threads
  /// store afterwards), or nil. Blocks only while another operation on this instance runs.
  public func load() -> Object? {
    acquire()
    let object = slot.pointee  // the copy retains while the lock keeps the holder's reference
    release()
    return object
  }

  /// Replaces the object with `newValue`. The replaced object is released after the lock is
  /// given up. Blocks only while another operation on this instance runs.
  public func store(_ newValue: Object?) {
    let old = exchange(newValue)
    withExtendedLifetime(old) {}
  }

  /// Replaces the object with `newValue` and returns the replaced one (the holder's
  /// reference passes to the caller).
  @discardableResult
  public func exchange(_ newValue: Object?) -> Object? {
    acquire()
    let old = slot.move()
    slot.initialize(to: newValue)
    release()
    return old
  }

  /// Replaces the object with `desired` if the current one is `expected` (by identity; nil
  /// matches nil). Returns whether it did, and the object that was there (retained for the
  /// caller): `expected` itself when it exchanged, the newer object otherwise, so a retry
  /// loop needs no extra load.
  public func compareExchange(expected: Object?, desired: Object?) -> (exchanged: Bool, original: Object?) {
    acquire()
    let exchanged = slot.pointee === expected
    let original: Object?
    if exchanged {
      original = slot.move()
      slot.initialize(to: desired)
    } else {
      original = slot.pointee
    }
    release()
    return (exchanged, original)
  }
}

/// Sendable when the objects are: the reference itself is only touched under the lock, and
/// a loaded object is shared with whichever thread stored it.
extension AtomicReference: @unchecked Sendable where Object: Sendable {}
