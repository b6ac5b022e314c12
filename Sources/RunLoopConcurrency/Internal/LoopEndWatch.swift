import RunLoop
import Sync

/// Tells an async bridge that its run loop's thread has ended, so the tasks awaiting the
/// loop's deliveries stop waiting for a loop that will never run again.
///
/// A source that is never signalled sits in the bridge's modes beside the bridge's own item;
/// a loop whose thread ends drops its sources and calls their `cancel` callbacks, which is
/// when `ended` runs (once, on the ending thread). A loop whose thread had already ended
/// before the watch was added keeps what is added to it without ever dropping it, so that
/// case is checked after the add (`ended` then runs at once, on the creating thread). The
/// source is in no mode the bridge's own item is not in, so it keeps no run going that would
/// otherwise end; `stop()` takes it out together with that item.
final class LoopEndWatch: Sendable {
  private let source: RunLoopSource
  /// Set once `ended` ran or the watch was stopped. Relaxed: it only keeps `ended` to one
  /// call; what `ended` touches has locks of its own.
  private let fired: AtomicBool

  init(runLoop: RunLoop, modes: [RunLoopMode], name: String, ended: @escaping @Sendable () -> Void) {
    let fired = AtomicBool(false)
    self.fired = fired
    let once: @Sendable () -> Void = {
      if !fired.exchange(true, ordering: .relaxed) { ended() }
    }
    // A removal or invalidation also calls `cancel`: only the loop's end counts (the loop
    // sets its flag before it calls the callbacks).
    source = RunLoopSource(name: name, cancel: { loop, _ in if loop.hasThreadEnded { once() } }, perform: {})
    for mode in modes { runLoop.add(source, forMode: mode) }
    if runLoop.hasThreadEnded { once() }
  }

  /// Takes the watch out of the loop; `ended` is not called from then on.
  func stop() {
    fired.store(true, ordering: .relaxed)
    source.invalidate()
  }

  deinit {
    stop()
  }
}
