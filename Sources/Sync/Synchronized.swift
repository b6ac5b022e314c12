/// Runs `body` in a critical section keyed on `object`'s identity: the guide's
/// `@synchronized(obj) { ... }`.
///
/// Any class instance can serve as the key; nothing about the object is touched except its
/// address. Two calls with the same object exclude each other; the same thread may nest
/// calls on the same object (the section is recursive); the section is left, and the lock
/// released, however `body` exits, including by throwing (the error type flows through).
///
/// ```swift
/// func addItem(_ item: Item) {
///     synchronized(self) { items.append(item) }
/// }
/// ```
///
/// **The stripe trade-off.** Instead of one lock per object (which would need a global,
/// locked map from object to lock, with its own contention and clean-up), the object's
/// address selects one of ``synchronizedStripeCount`` recursive mutexes in a fixed table.
/// That keeps the uncontended cost to a hash and one mutex acquisition, and needs no
/// clean-up when objects die. The price: two unrelated objects may land on the same stripe,
/// and then their sections serialize each other (slower, never incorrect on its own). A
/// thread that holds one object's section and *waits for another thread* that needs a
/// different object's section can deadlock if both objects share a stripe, so, as the guide
/// advises for every lock, never block on another thread inside a `synchronized` body. For
/// long or blocking critical sections, give the state its own ``Mutex``.
///
/// Blocks while another thread holds the stripe. The Objective-C runtime functions it
/// replaces are `objc_sync_enter` and `objc_sync_exit`.
@inlinable
public func synchronized<Result, Failure: Error>(
  _ object: AnyObject, _ body: () throws(Failure) -> Result
) throws(Failure) -> Result {
  let stripe = SynchronizedStripes.stripe(for: object)
  stripe.lockForSynchronized()
  defer { stripe.unlock() }
  return try body()
}

/// The number of lock stripes ``synchronized(_:_:)`` spreads objects over. Two objects
/// collide with probability about 1 in this number.
public let synchronizedStripeCount = 128

/// The stripe table behind ``synchronized(_:_:)``.
@usableFromInline
enum SynchronizedStripes {
  @usableFromInline
  static let table: [RecursiveMutex] = (0..<synchronizedStripeCount).map { _ in RecursiveMutex() }

  /// The stripe for `object`: its address, with the low (alignment) bits mixed in by a
  /// multiplicative hash, so neighbouring allocations spread over the table.
  @inlinable
  @inline(__always)
  static func stripe(for object: AnyObject) -> RecursiveMutex {
    let address = UInt64(UInt(bitPattern: ObjectIdentifier(object)))
    // Fibonacci hashing: the top 7 bits of the product index the 128 (2^7) stripes.
    let mixed = (address &* 0x9E37_79B9_7F4A_7C15) >> 57
    return table[Int(truncatingIfNeeded: mixed)]
  }
}

extension RecursiveMutex {
  // `lock()` is noasync for direct calls; `synchronized` holds the stripe only for a
  // synchronous body, like `withLock`.
  @usableFromInline
  func lockForSynchronized() {
    lock()
  }
}
