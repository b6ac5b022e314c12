import Glibc
import Sync
import TestSupport
import Testing

@testable import RunLoop

@Suite("Ports: per-user directory", .timeLimit(.minutes(3)))
struct PortsDirectoryTests {
  @Test("a missing directory is created with mode 0700")
  func creates() throws {
    let parent = makePortsTestDirectory()
    defer { removePortsTestDirectory(parent) }
    let path = parent + "/ports"
    let directory = try PortDirectory.prepare(path: path)
    #expect(directory.path == path)
    let mode = try #require(portsFileMode(path))
    #expect(mode & S_IFMT == S_IFDIR)
    #expect(mode & 0o777 == 0o700)
    #expect(directory.socketPath(for: "a.b") == path + "/a.b.sock")
    #expect(directory.lockPath(for: "a.b") == path + "/a.b.lock")
    // Preparing again accepts the existing, correct directory.
    #expect(try PortDirectory.prepare(path: path) == directory)
    _ = rmdir(path)
  }

  @Test(
    "a directory that group or others may access is refused, not repaired", arguments: [0o750, 0o705, 0o777, 0o710])
  func refusesLooseModes(mode: Int) throws {
    let path = makePortsTestDirectory()
    defer { removePortsTestDirectory(path) }
    #expect(chmod(path, mode_t(mode)) == 0)
    let error = #expect(throws: PortError.self) { try PortDirectory.prepare(path: path) }
    #expect(error?.status == .transportError)
    #expect(error?.reason == .directoryNotPrivate)
    #expect(error?.cause == nil, "no system call failed")
    #expect(portsFileMode(path).map { $0 & 0o777 } == mode_t(mode), "the mode is left as found")
  }

  @Test("a symbolic link to a good directory is refused")
  func refusesSymlink() throws {
    let target = makePortsTestDirectory()
    defer { removePortsTestDirectory(target) }
    let link = target + "-link"
    #expect(symlink(target, link) == 0)
    defer { _ = unlink(link) }
    let error = #expect(throws: PortError.self) { try PortDirectory.prepare(path: link) }
    #expect(error?.reason == .directoryNotADirectory)
  }

  @Test("a directory owned by another user is refused", .enabled(if: geteuid() == 0, "chown needs root"))
  func refusesForeignOwner() throws {
    let path = makePortsTestDirectory()
    defer { removePortsTestDirectory(path) }
    #expect(chown(path, 12_345, 12_345) == 0)
    let error = #expect(throws: PortError.self) { try PortDirectory.prepare(path: path) }
    #expect(error?.status == .transportError)
    #expect(error?.reason == .directoryOwnedByAnotherUser)
  }

  @Test("a regular file in the directory's place is refused")
  func refusesFile() throws {
    let parent = makePortsTestDirectory()
    defer { removePortsTestDirectory(parent) }
    let path = parent + "/file"
    let descriptor = open(path, O_CREAT | O_WRONLY, 0o600)
    #expect(descriptor >= 0)
    #expect(close(descriptor) == 0)
    let error = #expect(throws: PortError.self) { try PortDirectory.prepare(path: path) }
    #expect(error?.reason == .directoryNotADirectory)
  }

  @Test("relative or overlong paths are refused")
  func refusesBadPaths() {
    #expect(throws: PortError.self) { try PortDirectory.prepare(path: "relative/dir") }
    let long = "/tmp/" + String(repeating: "d", count: PortDirectory.maximumPathLength)
    let error = #expect(throws: PortError.self) { try PortDirectory.prepare(path: long) }
    #expect(error?.reason == .directoryPathInvalid)
  }

  @Test("the default location is per user and leaves room for the longest name")
  func defaultLocation() throws {
    let directory = try PortDirectory.prepare()
    let path = directory.path
    #expect(
      path.hasSuffix("/threading-toolkit") || path.hasSuffix("/.tk-ports")
        || path == "/tmp/threading-toolkit-\(geteuid())")
    #expect(path.utf8.count <= PortDirectory.maximumPathLength)
    let longest = directory.socketPath(for: String(repeating: "n", count: PortName.maximumLength))
    #expect(longest.utf8.count <= 107)
  }

  @Test("without XDG_RUNTIME_DIR, a squatted /tmp path falls back to the home directory, which then stays chosen")
  func squattedSharedPathFallsBackToHome() throws {
    let root = makePortsTestDirectory()
    defer {
      removePortsTestDirectory(root + "/h/.tk-ports")
      removePortsTestDirectory(root + "/h")
      removePortsTestDirectory(root + "/shared")
      removePortsTestDirectory(root)
    }
    let shared = root + "/shared"
    let home = root + "/h"
    #expect(mkdir(home, 0o700) == 0)
    // Another user's directory would be refused for its owner; one others may write to is
    // refused the same way (and a test can create it).
    #expect(mkdir(shared, 0o777) == 0)
    #expect(chmod(shared, 0o777) == 0)
    let directory = try PortDirectory.prepare(runtimeDirectory: nil, sharedPath: shared, home: home)
    #expect(directory.path == home + "/.tk-ports")
    #expect(portsFileMode(directory.path).map { $0 & 0o777 } == 0o700)
    #expect(portsFileMode(shared).map { $0 & 0o777 } == 0o777, "the squatted path is left alone")
    // Names work there.
    let listener = try NamedPortListener(name: "fallback", directory: directory) { _ in [5] }
    let client = try NamedPortConnection(name: "fallback", directory: directory)
    #expect(client.isValid)
    listener.invalidate()
    // The squat ends: every process keeps using the fallback, so they still agree.
    #expect(rmdir(shared) == 0)
    #expect(try PortDirectory.prepare(runtimeDirectory: nil, sharedPath: shared, home: home) == directory)
    #expect(portsFileMode(shared) == nil, "the /tmp path is no longer created")
  }

  @Test("the runtime directory comes first; the /tmp path is used while it is safe; no fallback without HOME")
  func locationOrder() throws {
    let root = makePortsTestDirectory()
    defer {
      removePortsTestDirectory(root + "/r/threading-toolkit")
      removePortsTestDirectory(root + "/r")
      removePortsTestDirectory(root + "/shared")
      removePortsTestDirectory(root)
    }
    #expect(mkdir(root + "/r", 0o700) == 0)
    let runtime = try PortDirectory.prepare(runtimeDirectory: root + "/r", sharedPath: root + "/shared", home: root)
    #expect(runtime.path == root + "/r/threading-toolkit")
    let shared = try PortDirectory.prepare(runtimeDirectory: "relative", sharedPath: root + "/shared", home: "relative")
    #expect(shared.path == root + "/shared")
    #expect(chmod(root + "/shared", 0o755) == 0)
    let error = #expect(throws: PortError.self) {
      try PortDirectory.prepare(runtimeDirectory: nil, sharedPath: root + "/shared", home: nil)
    }
    #expect(error?.reason == .directoryNotPrivate)
    #expect(error?.detail.contains("XDG_RUNTIME_DIR") == true)
  }

  @Test(
    "a malformed name is invalid for local and remote ports alike, even when the port directory is unsafe",
    .runsExitTests)
  func malformedNamesAreInvalidWhateverTheDirectory() async {
    await #expect(processExitsWith: .success) {
      blocking {
        // A runtime directory whose port directory others may enter: every directory check
        // fails with transportError.
        let root = makePortsTestDirectory()
        precondition(mkdir(root + "/threading-toolkit", 0o755) == 0 && chmod(root + "/threading-toolkit", 0o755) == 0)
        precondition(setenv("XDG_RUNTIME_DIR", root, 1) == 0)
        let names = ["", String(repeating: "n", count: 65), "a/b", "a\u{0}b", "caf\u{e9}", ".hidden", "../x"]
        var wrong: [String] = []
        for name in names {
          do throws(PortError) {
            _ = try MessagePort.local(name: name) { _ in nil }
            wrong.append("local \(name.debugDescription): registered")
          } catch {
            if error.status != .invalid { wrong.append("local \(name.debugDescription): \(error)") }
          }
          do throws(PortError) {
            _ = try MessagePort.remote(name: name)
            wrong.append("remote \(name.debugDescription): connected")
          } catch {
            if error.status != .invalid { wrong.append("remote \(name.debugDescription): \(error)") }
          }
        }
        // The name itself is fine: the directory is what fails.
        do throws(PortError) {
          _ = try MessagePort.local(name: "good-name") { _ in nil }
          wrong.append("a port was registered in an unsafe directory")
        } catch {
          if error.reason != .directoryNotPrivate { wrong.append("good-name: \(error)") }
        }
        removePortsTestDirectory(root + "/threading-toolkit")
        removePortsTestDirectory(root)
        for line in wrong { print(line) }
        exit(wrong.isEmpty ? 0 : 1)
      }
    }
  }
}
