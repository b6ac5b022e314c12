// Identity and description: a `Thread` is a reference to one thread, equal only to itself.
extension Thread: Hashable, CustomStringConvertible {
  /// Whether `lhs` and `rhs` are the same thread object (each thread has exactly one).
  public static func == (lhs: Thread, rhs: Thread) -> Bool {
    lhs === rhs
  }

  /// Hashes the thread's ``id``.
  public func hash(into hasher: inout Hasher) {
    hasher.combine(id)
  }

  /// `Thread 3 "decoder"` (or `Thread 1 main` / `Thread 5` without a name), for logs.
  public var description: String {
    if let name { return "Thread \(id) \"\(name)\"" }
    return isMainThread ? "Thread \(id) main" : "Thread \(id)"
  }
}
