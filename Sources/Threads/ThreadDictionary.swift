import Sync

/// A thread's key/value store: the guide's thread dictionary (Cocoa `threadDictionary`).
///
/// Reach it from anywhere on a thread through `Thread.current.threadDictionary`; each thread
/// has its own, so code on different threads never sees each other's entries. Keys are
/// strings, values any `Sendable` value. Every access takes a short internal lock, so another
/// thread holding a ``Thread`` may also read or write its dictionary (the guide's
/// Listing 2-3 sets a worker's exit flag this way); a read-modify-write that must be atomic
/// goes through ``update(_:)``.
///
/// When the thread ends, the toolkit empties its dictionary before the thread's last
/// moment, so values are released then (not when the last reference to the ``Thread`` goes).
/// A released value's deinitializer may add entries (a value that registers another as it
/// goes): they are released in a further round, up to four rounds in all (as POSIX runs
/// thread-specific-data destructors at most `PTHREAD_DESTRUCTOR_ITERATIONS`, 4, times).
/// Entries added by the fourth round's deinitializers, or by another thread after the thread
/// ended, stay until the dictionary itself is released (with the last reference to the
/// ``Thread``).
///
/// ```swift
/// Thread.current.threadDictionary["ThreadShouldExitNow"] = false
/// // ... from another thread:
/// worker.threadDictionary["ThreadShouldExitNow"] = true
/// // ... in the worker's loop:
/// let exitNow = Thread.current.threadDictionary["ThreadShouldExitNow", as: Bool.self] ?? false
/// ```
public final class ThreadDictionary: Sendable {
  private let storage = LockedValue<[String: any Sendable]>([:])

  init() {}

  /// The value stored under `key`, or nil; assigning nil removes the entry.
  public subscript(key: String) -> (any Sendable)? {
    get { storage.withLock { $0[key] } }
    set {
      // The replaced value is released after the lock: its deinitializer may use this
      // dictionary.
      let old = storage.withLock { storage -> (any Sendable)? in
        if let newValue { return storage.updateValue(newValue, forKey: key) }
        return storage.removeValue(forKey: key)
      }
      _ = old
    }
  }

  /// The value stored under `key` if it has type `type`, else nil.
  public subscript<Value: Sendable>(key: String, as type: Value.Type) -> Value? {
    storage.withLock { $0[key] as? Value }
  }

  /// The keys present now, in no particular order.
  public var keys: [String] {
    storage.withLock { Array($0.keys) }
  }

  /// How many entries are stored.
  public var count: Int {
    storage.withLock { $0.count }
  }

  /// Runs `body` with exclusive access to the whole store and returns its result: for
  /// read-modify-write sequences that must not interleave with another thread's access.
  /// Do not touch the same dictionary inside `body` (the lock is not recursive; doing so
  /// stops the process).
  public func update<Result, Failure: Error>(
    _ body: (inout [String: any Sendable]) throws(Failure) -> Result
  ) throws(Failure) -> Result {
    // The entries as they were, kept until after the lock: a value `body` removes or
    // replaces is released here, not under the lock (its deinitializer may use this
    // dictionary, as with the subscript's setter and `removeAll()`).
    var before: [String: any Sendable] = [:]
    let result = try storage.withLock { (storage) throws(Failure) -> Result in
      before = storage
      return try body(&storage)
    }
    withExtendedLifetime(before) {}
    return result
  }

  /// How many times the dictionary is emptied when its thread ends (see the type's doc):
  /// POSIX's `PTHREAD_DESTRUCTOR_ITERATIONS`. Bounded, so values that keep adding values
  /// cannot keep the thread from ending.
  static let endOfThreadRounds = 4

  /// Empties the dictionary as its thread ends: ``removeAll()`` again while the values
  /// released by the previous round added entries, at most ``endOfThreadRounds`` times.
  func emptyAtThreadEnd() {
    for _ in 0..<ThreadDictionary.endOfThreadRounds {
      let old = storage.withLock { storage -> [String: any Sendable] in
        let old = storage
        storage = [:]
        return old
      }
      if old.isEmpty { return }
      // `old` is released here, outside the lock, before the next round looks again.
    }
  }

  /// Removes every entry (releasing the values outside the lock, so their deinitializers may
  /// use the dictionary).
  public func removeAll() {
    let old = storage.withLock { storage -> [String: any Sendable] in
      let old = storage
      storage = [:]
      return old
    }
    _ = old
  }
}
