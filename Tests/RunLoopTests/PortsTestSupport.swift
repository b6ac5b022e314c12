import Glibc
import Sync
import TestSupport

@testable import RunLoop

/// A fresh private directory (mkdtemp, mode 0700) under /tmp, removed with its files by
/// `removePortsTestDirectory`.
func makePortsTestDirectory() -> String {
  var template = Array("/tmp/tkpt-XXXXXX".utf8CString)
  let result = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
  precondition(result != nil, "mkdtemp failed: \(errno)")
  return template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
}

/// Removes the files directly inside `path`, then `path`.
func removePortsTestDirectory(_ path: String) {
  guard let directory = opendir(path) else { return }
  var names: [String] = []
  while let entry = readdir(directory) {
    let name = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
    if name != "." && name != ".." { names.append(name) }
  }
  precondition(closedir(directory) == 0)
  for name in names { _ = unlink(path + "/" + name) }
  _ = rmdir(path)
}

/// Mode bits of `path` (lstat), or nil when it does not exist.
func portsFileMode(_ path: String) -> mode_t? {
  var status = stat()
  return lstat(path, &status) == 0 ? status.st_mode : nil
}

/// A name no other test (or test run) uses.
func uniquePortName(_ stem: String) -> String {
  "tk-test-\(stem)-\(getpid())-\(portsNameCounter.fetchAdd(1, ordering: .relaxed))"
}

let portsNameCounter = AtomicInteger<UInt64>(0)

/// A counter for callbacks that run on other threads.
final class PortsCounter: Sendable {
  private let value = AtomicInteger<Int>(0)
  func increment() { _ = value.increment(ordering: .full) }
  var count: Int { value.load(ordering: .acquiring) }
}
