import Glibc

/// Runs `body(index)` on `count` raw pthreads and joins them (the Sync listings predate the
/// Threads module; the Threads listings use `Thread.spawn`).
func syncExamplesRunThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
  final class Box: @unchecked Sendable {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
  }
  var threads: [pthread_t] = []
  for index in 0..<count {
    var thread = pthread_t()
    let box = Unmanaged.passRetained(Box { body(index) }).toOpaque()
    let result = pthread_create(&thread, nil, { raw in
      Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue().body()
      return nil
    }, box)
    precondition(result == 0, "pthread_create failed: \(result)")
    threads.append(thread)
  }
  for thread in threads { precondition(pthread_join(thread, nil) == 0) }
}
