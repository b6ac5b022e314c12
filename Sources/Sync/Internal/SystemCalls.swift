#if canImport(Glibc)
  import Glibc
#endif

// The toolkit's three C error conventions, each turned into a thrown ``SystemCallError`` in
// one place. Every C call in Sync, Threads and RunLoop goes through one of these (or through
// `mustSucceed` around one of them, when a failure leaves no way to continue):
//
// - `systemCall`: the C library's convention, -1 with the code in `errno` (open, read,
//   listen, sched_yield, ...).
// - `pthreadCall`: the pthread convention, 0 or the error number as the result
//   (pthread_create, pthread_attr_*).
// - `shimCall`: the CThreadingShims convention, a non-negative result or the negated error
//   number (every tk_* function; see the shim headers).

/// Calls `body`, a C library function that returns -1 and sets `errno` on failure, and
/// returns its result.
///
/// With `retryingInterrupts`, a failure with `EINTR` calls `body` again. Pass it only for
/// calls a retry cannot harm (reads, writes, waits with an absolute deadline); never for
/// `close`, whose descriptor Linux releases even when it reports `EINTR`.
///
/// - Throws: ``SystemCallError`` naming `call` with the code `errno` held.
package func systemCall<Result: FixedWidthInteger & SignedInteger>(
  _ call: String, retryingInterrupts: Bool = false, _ body: () -> Result
) throws(SystemCallError) -> Result {
  while true {
    let result = body()
    if result != -1 { return result }
    let code = errno
    if retryingInterrupts && code == EINTR { continue }
    throw SystemCallError(call: call, code: SystemErrorCode(rawValue: code))
  }
}

/// Calls `body`, a function that returns 0 or an error number (the pthread convention).
///
/// - Throws: ``SystemCallError`` naming `call` with the returned code.
package func pthreadCall(_ call: String, _ body: () -> Int32) throws(SystemCallError) {
  let result = body()
  if result != 0 { throw SystemCallError(call: call, code: SystemErrorCode(rawValue: result)) }
}

/// Calls `body`, a CThreadingShims function that returns a non-negative result or a negated
/// error number, and returns the result.
///
/// - Throws: ``SystemCallError`` naming `call` with the negated result as its code.
package func shimCall<Result: FixedWidthInteger & SignedInteger>(
  _ call: String, _ body: () -> Result
) throws(SystemCallError) -> Result {
  let result = body()
  if result < 0 {
    throw SystemCallError(call: call, code: SystemErrorCode(rawValue: Int32(truncatingIfNeeded: -result)))
  }
  return result
}

/// Runs `body` and stops the process if it throws: for calls whose failure leaves no way to
/// continue correctly (a futex or epoll call on a valid object, destroying an attribute
/// object). The message is `"<context>: <error>"`, for example
/// `"RunLoop: epoll_wait failed: EBADF (Bad file descriptor)"`.
package func mustSucceed<Result>(
  _ context: String, _ body: () throws(SystemCallError) -> Result
) -> Result {
  do {
    return try body()
  } catch {
    fatalError("\(context): \(error)")
  }
}
