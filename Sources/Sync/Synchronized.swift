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
  SynchronizedStripes.enter(stripe)
  defer { SynchronizedStripes.exit(stripe) }
  return try body()
}

/// The number of lock stripes ``synchronized(_:_:)`` spreads objects over. Two objects
/// collide with probability about 1 in this number.
public let synchronizedStripeCount = 128

/// The stripe table behind ``synchronized(_:_:)``: recursive futex locks (the
/// ``RecursiveMutex`` algorithm) in one allocation that lives for the whole process. Plain
/// lock words rather than `RecursiveMutex` objects, so that entering a section costs no
/// reference counting.
@usableFromInline
enum SynchronizedStripes {
  // nonisolated(unsafe): written once by the lazy global initializer (swift_once), then
  // only read; each stripe's words are reached only through atomics or by their holder.
  @usableFromInline
  nonisolated(unsafe) static let table: UnsafeMutablePointer<FutexLock> = {
    let table = UnsafeMutablePointer<FutexLock>.allocate(capacity: synchronizedStripeCount)
    for index in 0..<synchronizedStripeCount {
      (table + index).initialize(to: FutexLock())
    }
    return table
  }()

  /// The stripe for `object`: its address through a multiplicative (Fibonacci) hash, so
  /// neighbouring allocations spread over the table; the top 7 bits of the product index
  /// the 128 (2^7) stripes.
  @inlinable
  @inline(__always)
  static func stripe(for object: AnyObject) -> FutexLock {
    let address = UInt64(UInt(bitPattern: ObjectIdentifier(object)))
    let index = Int(truncatingIfNeeded: (address &* 0x9E37_79B9_7F4A_7C15) >> 57)
    return table[index]
  }

  /// Acquires `stripe`, or adds a level if the calling thread holds it already.
  @inlinable
  @inline(__always)
  static func enter(_ stripe: FutexLock) {
    if stripe.isHeldByCurrentThread {
      stripe.depth.pointee += 1
      return
    }
    _ = stripe.acquire(before: .distantFuture, spins: Mutex.spinsBeforeSleeping, typeName: "synchronized")
    stripe.depth.pointee = 1
  }

  /// Removes one level; releases `stripe` when none remain.
  @inlinable
  @inline(__always)
  static func exit(_ stripe: FutexLock) {
    stripe.depth.pointee -= 1
    if stripe.depth.pointee == 0 {
      stripe.release(checkOwner: false, typeName: "synchronized")
    }
  }
}
