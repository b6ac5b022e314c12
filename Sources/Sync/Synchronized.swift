import CThreadingShims

#if canImport(Glibc)
  import Glibc
#endif

/// Runs `body` in a critical section keyed on `object`'s identity: the guide's
/// `@synchronized(obj) { ... }`.
///
/// Any class instance can serve as the key; nothing about the object is touched except its
/// address. Two calls with the same object exclude each other; calls with different objects
/// never do (each object in use has a lock of its own), so sections on objects that a
/// program never nests cannot deadlock each other. The same thread may nest calls on the
/// same object (the section is recursive); the section is left, and the lock released,
/// however `body` exits, including by throwing (the error type flows through).
///
/// ```swift
/// func addItem(_ item: Item) {
///     synchronized(self) { items.append(item) }
/// }
/// ```
///
/// **Per-object locks.** As in the Objective-C runtime, a process-wide side table maps each
/// object that is inside (or waiting for) a section to a recursive lock, with a count of the
/// threads using it; the entry leaves the table when its last user leaves, so the table
/// holds only the objects in use and nothing about an object outlives its sections. The
/// table is split into `SynchronizedTable.bucketCount` buckets by address, each guarded by
/// a short internal lock that is never held while waiting for an object's lock, so unrelated
/// objects only ever share a few instructions' worth of bookkeeping. Entering costs two
/// short bucket sections and one lock acquisition; for hot state, give it its own ``Lock``.
///
/// **Fork.** `fork()` waits until no thread is updating the side table, so the child can use
/// `synchronized` on any object. A section another thread was inside at the fork stays held
/// in the child (which has only the forking thread), as every lock does: the child must not
/// enter it.
///
/// **Diagnostics.** An object's lock is a diagnosed lock (``Diagnostics``: the deadlock
/// watchdog, lock order, contention statistics) for its stay in the side table, from the
/// first user's arrival to the last user's exit, when the lock hooks are on at the arrival.
/// Reports call it by the call site of that first `synchronized` (`fileID:line`, which the
/// defaults capture). An order between two objects is known only while both stay in the
/// table: lock-order detection finds an inversion between sections that overlap in time
/// (threads inside or waiting), not one seen long after the first order's sections ended.
///
/// Blocks while another thread is inside a section on the same object. The Objective-C
/// runtime functions it replaces are `objc_sync_enter` and `objc_sync_exit`.
@inlinable
public func synchronized<Result, Failure: Error>(
  _ object: AnyObject, fileID: StaticString = #fileID, line: UInt = #line, _ body: () throws(Failure) -> Result
) throws(Failure) -> Result {
  // `object` is borrowed for the whole call, so its address cannot be reused by another
  // object while the section (and its table entry) exists.
  let section = SynchronizedTable.enter(object, fileID: fileID, line: line)
  defer { SynchronizedTable.exit(section) }
  return try body()
}

/// One object's entry in the `SynchronizedTable`: its recursive lock and how many threads
/// are using it (inside the section or waiting for it).
@usableFromInline
struct SynchronizedEntry {
  /// The object's address; meaningful while `users > 0`. Guarded by the bucket lock.
  var key: UInt
  /// Threads between `enter` and `exit` for `key`. Guarded by the bucket lock.
  var users: Int
  /// The next entry in the bucket's list (or its free list). Guarded by the bucket lock.
  var next: UnsafeMutablePointer<SynchronizedEntry>?
  /// The object's lock (the ``RecursiveLock`` algorithm). Set once when the entry is
  /// allocated; entries are recycled through the bucket's free list, never freed, so a
  /// thread still waking a sleeper on it after its last `exit` touches valid memory.
  let lock: FutexLock
  /// Who the object's lock is to ``Diagnostics``: a new identity number each time the entry
  /// is given to an object while the lock hooks may run, 0 otherwise (making one costs an
  /// increment of a process-wide counter), and the creation site, the first user's call.
  /// Kept as trivial fields (no `LockIdentity`, whose name would make every copy of the
  /// entry's fields retain). Guarded by the bucket lock; they do not change while the entry
  /// has users.
  var identityID: UInt64 = 0
  var fileID: StaticString = ""
  var line: UInt = 0

  /// The lock's identity, when it has one.
  var identity: LockIdentity? {
    identityID == 0 ? nil : LockIdentity(id: identityID, fileID: fileID, line: line)
  }
}

/// A section opened by ``SynchronizedTable/enter(_:fileID:line:)``, closed by
/// ``SynchronizedTable/exit(_:)``.
@usableFromInline
struct SynchronizedSection {
  @usableFromInline
  let entry: UnsafeMutablePointer<SynchronizedEntry>
  @usableFromInline
  let bucket: Int
}

/// The side table behind ``synchronized(_:fileID:line:_:)``: per-object recursive locks, created when an
/// object's first user arrives and recycled when its last user leaves.
///
/// Each bucket is one cache line: a ``FutexLock`` (the bucket lock, held only for list
/// bookkeeping), the head of its list of entries in use, and the head of its free list.
/// Bucket locks are leaf locks: no other lock is taken, no user code runs and nothing is
/// waited for while one is held (`enter` releases it before it acquires the object's lock).
/// So a thread that is stuck waits for an object's lock, and only while another thread is
/// inside that same object's section: sections deadlock only if two threads nest the same
/// objects in opposite orders.
///
/// Memory ordering: every field of an entry but its lock words is read and written under
/// the bucket lock (acquire/release), and the lock words are the ``RecursiveLock``'s own.
@usableFromInline
enum SynchronizedTable {
  /// How many buckets the table spreads objects over.
  static var bucketCount: Int { 64 }

  /// Bytes per bucket: its lock words, then the list heads.
  static var bucketSize: Int { 64 }

  /// The buckets: static, zero-initialized C storage (all zero is every bucket's initial
  /// state: an unlocked lock, empty lists). Not a lazily initialized Swift global: a fork
  /// that raced its initializer would leave it "in progress" forever in the child.
  @inline(__always)
  static var buckets: UnsafeMutableRawPointer { tk_synchronized_table() }

  /// Registers the fork handlers, once per process, before the first section enters.
  ///
  /// A fork copies the table as it is; a bucket another thread was updating would stay
  /// locked in the child, with nobody to release it, and the child's first section on an
  /// object of that bucket would hang. So fork waits for every bucket to be quiet: the
  /// prepare handler takes all bucket locks (in index order; they are leaf locks held for a
  /// few instructions, so this cannot deadlock), and both sides release them afterwards.
  /// An object's own lock held by another thread at the fork stays held in the child, as
  /// every lock does (POSIX: the child has only the forking thread). The first caller
  /// registers before it takes any bucket lock, so every bucket lock taken in the process
  /// happens after the handlers exist, except those of threads racing that very first call.
  @inline(__always)
  static func registerForkHandlersOnce() {
    guard tk_synchronized_claim_fork_registration() != 0 else { return }
    mustSucceed("synchronized: cannot make the side table fork-safe") { () throws(SystemCallError) in
      try pthreadCall("pthread_atfork") {
        pthread_atfork(
          { SynchronizedTable.lockAllBuckets() },
          { SynchronizedTable.unlockAllBuckets() },
          { SynchronizedTable.resetAllBucketsInChild() })
      }
    }
  }

  /// Takes every bucket lock (the fork prepare handler).
  static func lockAllBuckets() {
    for index in 0..<bucketCount {
      bucketLock(index).acquire(spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "synchronized")
    }
  }

  /// Releases every bucket lock (the fork parent and child handlers).
  static func unlockAllBuckets() {
    for index in 0..<bucketCount {
      bucketLock(index).release(checkOwner: false, typeName: "synchronized")
    }
  }

  /// Frees every bucket lock in the child of a fork (the child handler). Only the forking
  /// thread, which holds them all, exists there, so no other thread can be waiting: the
  /// words are reset to a free lock rather than released, so a starving count of waiters
  /// that stayed in the parent cannot send a bucket to a thread the child does not have.
  static func resetAllBucketsInChild() {
    for index in 0..<bucketCount {
      let lock = bucketLock(index)
      UInt64.atomicStore(0, at: lock.word, ordering: .releasing)
    }
  }

  /// The bucket lock of bucket `index`.
  static func bucketLock(_ index: Int) -> FutexLock {
    FutexLock(existingWordsAt: buckets + index * bucketSize)
  }

  /// The list heads of bucket `index`: `[0]` entries in use, `[1]` free entries.
  static func heads(_ index: Int) -> UnsafeMutablePointer<UnsafeMutablePointer<SynchronizedEntry>?> {
    (buckets + index * bucketSize + FutexLock.wordsSize)
      .assumingMemoryBound(to: UnsafeMutablePointer<SynchronizedEntry>?.self)
  }

  /// The bucket for an address: a multiplicative (Fibonacci) hash, so neighbouring
  /// allocations spread over the table; the top 6 bits of the product pick one of the 64
  /// (2^6) buckets.
  static func bucket(for key: UInt) -> Int {
    Int(truncatingIfNeeded: (UInt64(key) &* 0x9E37_79B9_7F4A_7C15) >> 58)
  }

  /// Registers the calling thread as a user of `object`'s entry (creating it if needed),
  /// then acquires the object's lock, or adds a level if the calling thread holds it.
  /// `fileID:line` is the call site, the lock's creation site for diagnostics when this
  /// call creates the entry.
  @usableFromInline
  static func enter(_ object: AnyObject, fileID: StaticString, line: UInt) -> SynchronizedSection {
    registerForkHandlersOnce()
    let key = UInt(bitPattern: ObjectIdentifier(object))
    let index = bucket(for: key)
    let bucketLock = bucketLock(index)
    let heads = heads(index)
    bucketLock.acquire(spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "synchronized")
    var found = heads[0]
    while let candidate = found, candidate.pointee.key != key {
      found = candidate.pointee.next
    }
    let entry: UnsafeMutablePointer<SynchronizedEntry>
    if let found {
      entry = found
    } else {
      if let free = heads[1] {
        entry = free
        heads[1] = free.pointee.next
      } else {
        entry = UnsafeMutablePointer<SynchronizedEntry>.allocate(capacity: 1)
        entry.initialize(to: SynchronizedEntry(key: 0, users: 0, next: nil, lock: FutexLock()))
      }
      entry.pointee.key = key
      entry.pointee.users = 0
      entry.pointee.next = heads[0]
      if LockDiagnostics.hooksMayRun {
        entry.pointee.identityID = tk_lock_diagnostics_new_id()
        entry.pointee.fileID = fileID
        entry.pointee.line = line
      }
      heads[0] = entry
    }
    entry.pointee.users += 1
    let lock = entry.pointee.lock
    let diagnosed = entry.pointee.identityID != 0
    bucketLock.release(checkOwner: false, typeName: "synchronized")

    if lock.isHeldByCurrentThread {
      lock.depth.pointee += 1
    } else {
      if diagnosed, let identity = entry.pointee.identity {
        _ = lock.acquireHooked(
          identity, before: .distantFuture, spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "synchronized")
      } else {
        lock.acquire(spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "synchronized")
      }
      lock.depth.pointee = 1
    }
    return SynchronizedSection(entry: entry, bucket: index)
  }

  /// Removes one level of the object's lock (releasing it when none remain), then
  /// unregisters the calling thread; the last user takes the entry out of the table.
  @usableFromInline
  static func exit(_ section: SynchronizedSection) {
    let entry = section.entry
    // `lock` is immutable; reading it needs no bucket lock.
    let lock = entry.pointee.lock
    lock.depth.pointee -= 1
    if lock.depth.pointee == 0 {
      // The calling thread is a user: the identity, set before its arrival (under the
      // bucket lock it took then), cannot change until it leaves.
      if entry.pointee.identityID != 0, let identity = entry.pointee.identity {
        lock.releaseHooked(identity, checkOwner: false, typeName: "synchronized")
      } else {
        lock.release(checkOwner: false, typeName: "synchronized")
      }
    }
    let bucketLock = bucketLock(section.bucket)
    let heads = heads(section.bucket)
    bucketLock.acquire(spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "synchronized")
    entry.pointee.users -= 1
    var forgotten: UInt64 = 0
    if entry.pointee.users == 0 {
      // The object leaves the table: its lock, as diagnostics know it, is destroyed.
      forgotten = entry.pointee.identityID
      entry.pointee.identityID = 0
      if heads[0] == entry {
        heads[0] = entry.pointee.next
      } else {
        var previous = heads[0]!
        while previous.pointee.next != entry { previous = previous.pointee.next! }
        previous.pointee.next = entry.pointee.next
      }
      entry.pointee.next = heads[1]
      heads[1] = entry
    }
    bucketLock.release(checkOwner: false, typeName: "synchronized")
    if forgotten != 0 { LockDiagnostics.lockWillBeDestroyed(LockIdentity(id: forgotten, fileID: "", line: 0)) }
  }

  /// How many objects have an entry in the table (for tests): objects inside a section or
  /// waited for.
  static var entriesInUse: Int {
    var count = 0
    for index in 0..<bucketCount {
      let bucketLock = bucketLock(index)
      bucketLock.acquire(spinRounds: Lock.spinRoundsBeforeSleeping, typeName: "synchronized")
      var entry = heads(index)[0]
      while let current = entry {
        count += 1
        entry = current.pointee.next
      }
      bucketLock.release(checkOwner: false, typeName: "synchronized")
    }
    return count
  }
}
