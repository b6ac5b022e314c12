/// A weak reference to a run loop, so items that remember where they are scheduled do not
/// keep a finished thread's run loop alive.
struct WeakRunLoop {
  weak var value: RunLoop?
}
