/// The per-thread cell behind a `ThreadLocal`: a class so the non-generic pthread key
/// destructor can end it through one virtual call.
class ThreadLocalSlot {
  /// Runs the owner's destructor on the value (at thread exit).
  func destroy() {}
}

/// A slot holding one `Value` and the destructor to run on it.
final class TypedThreadLocalSlot<Value>: ThreadLocalSlot {
  var value: Value
  let destructor: ((Value) -> Void)?

  init(value: Value, destructor: ((Value) -> Void)?) {
    self.value = value
    self.destructor = destructor
  }

  /// Stores `newValue` and releases the replaced value after the store's access has ended:
  /// a plain assignment releases it inside that access, where a deinitializer reading the
  /// same thread-local (this slot's `value`) would be a simultaneous access, which stops
  /// the process.
  func replaceValue(with newValue: Value) {
    var replaced = newValue
    swap(&value, &replaced)
    // `replaced` (the old value) is released here, outside any access to `value`.
  }

  override func destroy() {
    destructor?(value)
  }
}
