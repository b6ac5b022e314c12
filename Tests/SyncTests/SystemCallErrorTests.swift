import Sync
import Testing

#if canImport(Glibc)
  import Glibc
#endif

@Suite("SystemCallError", .timeLimit(.minutes(3)))
struct SystemCallErrorTests {
  @Test("describes the call, the code's C name and the C library's text")
  func description() {
    let error = SystemCallError(call: "pthread_create", code: .tryAgain)
    #expect(error.description == "pthread_create failed: EAGAIN (Resource temporarily unavailable)")
    #expect(error.code.rawValue == EAGAIN)
  }

  @Test("a code without a name is carried and shown as its number")
  func unnamedCode() {
    let code = SystemErrorCode(rawValue: 9999)
    #expect(code.name == nil)
    #expect(code.description.hasPrefix("errno 9999 ("))
    #expect(SystemCallError(call: "x", code: code).description.hasPrefix("x failed: errno 9999 ("))
  }

  @Test("each named code has the number of its C constant and names it")
  func namedCodes() {
    let expected: [(SystemErrorCode, Int32, String)] = [
      (.operationNotPermitted, EPERM, "EPERM"), (.noSuchFileOrDirectory, ENOENT, "ENOENT"),
      (.noSuchProcess, ESRCH, "ESRCH"), (.interrupted, EINTR, "EINTR"), (.ioError, EIO, "EIO"),
      (.badFileDescriptor, EBADF, "EBADF"), (.tryAgain, EAGAIN, "EAGAIN"),
      (.wouldBlock, EWOULDBLOCK, "EAGAIN"), (.noMemory, ENOMEM, "ENOMEM"),
      (.permissionDenied, EACCES, "EACCES"), (.badAddress, EFAULT, "EFAULT"),
      (.resourceBusy, EBUSY, "EBUSY"), (.fileExists, EEXIST, "EEXIST"),
      (.notDirectory, ENOTDIR, "ENOTDIR"), (.isDirectory, EISDIR, "EISDIR"),
      (.invalidArgument, EINVAL, "EINVAL"), (.tooManyOpenFilesInSystem, ENFILE, "ENFILE"),
      (.tooManyOpenFiles, EMFILE, "EMFILE"), (.noSpace, ENOSPC, "ENOSPC"),
      (.readOnlyFileSystem, EROFS, "EROFS"), (.brokenPipe, EPIPE, "EPIPE"),
      (.outOfRange, ERANGE, "ERANGE"), (.deadlock, EDEADLK, "EDEADLK"),
      (.fileNameTooLong, ENAMETOOLONG, "ENAMETOOLONG"), (.notImplemented, ENOSYS, "ENOSYS"),
      (.timedOut, ETIMEDOUT, "ETIMEDOUT"), (.connectionRefused, ECONNREFUSED, "ECONNREFUSED"),
      (.connectionReset, ECONNRESET, "ECONNRESET"), (.socketNotConnected, ENOTCONN, "ENOTCONN"),
      (.addressInUse, EADDRINUSE, "EADDRINUSE"), (.messageTooLong, EMSGSIZE, "EMSGSIZE"),
      (.protocolError, EPROTO, "EPROTO"), (.inProgress, EINPROGRESS, "EINPROGRESS"),
      (.previousOwnerDied, EOWNERDEAD, "EOWNERDEAD"),
    ]
    for (code, number, name) in expected {
      #expect(code.rawValue == number, "\(name)")
      #expect(code.name == name)
      #expect(code.description.hasPrefix("\(name) ("))
    }
  }

  @Test("a thrown error is matched by its named code")
  func matchingByCode() {
    func fail() throws(SystemCallError) { throw SystemCallError(call: "open", code: SystemErrorCode(rawValue: ENOENT)) }
    var matched = false
    do {
      try fail()
    } catch let error where error.code == .noSuchFileOrDirectory {
      matched = error.call == "open"
    } catch {
      Issue.record("unexpected \(error)")
    }
    #expect(matched)
  }

}
