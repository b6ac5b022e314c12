import CThreadingShims
import Sync

#if canImport(Glibc)
  import Glibc
#endif

/// Turns a pthread-style result (0 or an errno) into a thrown ``SystemCallError``, through
/// Sync's `pthreadCall`.
@inline(__always)
func check(_ result: Int32, _ call: String) throws(SystemCallError) {
  try pthreadCall(call) { result }
}

/// For calls whose failure leaves no way to continue correctly (destroying an attribute
/// object, joining a valid handle): stops the process with the call and the error code,
/// through Sync's `pthreadCall` and `mustSucceed`.
@usableFromInline
func checkOrDie(_ result: Int32, _ call: String) {
  mustSucceed("Threads") { () throws(SystemCallError) in try pthreadCall(call) { result } }
}

/// For CThreadingShims calls (0 or a negated errno) whose failure leaves no way to continue
/// correctly: stops the process with the call and the error code, through Sync's `shimCall`
/// and `mustSucceed`.
func shimCallOrDie(_ call: String, _ body: () -> Int32) {
  mustSucceed("Threads") { () throws(SystemCallError) in _ = try shimCall(call, body) }
}

/// Writes `text` to standard error with one `write` (no stdio: `stderr` is a global C
/// variable Swift 6 refuses to share, and a single write keeps lines from interleaving).
func writeToStandardError(_ text: String) {
  var text = text
  text.withUTF8 { bytes in
    var offset = 0
    while offset < bytes.count {
      let written = write(2, bytes.baseAddress! + offset, bytes.count - offset)
      if written < 0 {
        if errno == EINTR { continue }
        return  // standard error is gone; nowhere left to report to
      }
      offset += written
    }
  }
}
