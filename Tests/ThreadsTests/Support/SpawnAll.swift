import Threads

/// Starts one joinable thread per index, all before joining any, then joins them in order
/// and returns their values. (An `Array` cannot hold the noncopyable handles; each waits in
/// a class box instead.)
func spawnAll<Value: Sendable>(
  _ indices: Range<Int>, _ body: @escaping @Sendable (Int) -> Value
) throws -> [Value] {
  let slots = try indices.map { index in HandleSlot(try Thread.spawn { () throws(Never) in body(index) }) }
  return slots.map { slot in
    guard let handle = slot.handle.take() else { fatalError("spawnAll: handle joined twice") }
    return handle.join()
  }
}

/// One joinable handle in a class, taken out once to be joined (or left to detach).
final class HandleSlot<Value: Sendable>: @unchecked Sendable {
  // @unchecked: tests hand a slot to another thread through a latch, which orders the accesses.
  var handle: JoinableThread<Value, Never>?

  init(_ handle: consuming JoinableThread<Value, Never>? = nil) { self.handle = consume handle }
}
