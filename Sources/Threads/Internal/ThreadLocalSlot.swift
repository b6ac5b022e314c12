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

  override func destroy() {
    destructor?(value)
  }
}
