import RunLoop
import TestSupport

/// Adds an observer of every activity to `mode` of `runLoop` that records `prefix + name`.
@discardableResult
func recordActivities(
  of runLoop: RunLoop, mode: RunLoopMode = .default, into log: Recorder<String>, prefix: String = ""
) -> RunLoopObserver {
  let observer = RunLoopObserver(activities: .allActivities) { _, activity in
    log.append(prefix + activity.description)
  }
  runLoop.add(observer, forMode: mode)
  return observer
}

/// A source that records `name` when it fires.
func recordingSource(_ name: String, into log: Recorder<String>, order: Int = 0) -> RunLoopSource {
  RunLoopSource(order: order, perform: { log.append(name) })
}
