#if canImport(Glibc)
  import Glibc
#endif

/// Runs an example program of this package (an executable target built beside the test
/// binary, in the same build directory) as a child process with `arguments` and returns its
/// exit status and standard output; nil when the program is not there (the build did not
/// make it).
func runExampleProgram(_ name: String, arguments: [String] = []) -> (status: Int32, output: String)? {
  var exe = [CChar](repeating: 0, count: 4096)
  let length = readlink("/proc/self/exe", &exe, exe.count - 1)
  guard length > 0 else { return nil }
  let testBinary = String(decoding: exe[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
  guard let slash = testBinary.lastIndex(of: "/") else { return nil }
  let path = String(testBinary[..<slash]) + "/" + name
  guard access(path, X_OK) == 0 else { return nil }

  var ends: [Int32] = [-1, -1]
  guard pipe(&ends) == 0 else { return nil }
  var actions = posix_spawn_file_actions_t()
  posix_spawn_file_actions_init(&actions)
  defer { posix_spawn_file_actions_destroy(&actions) }
  posix_spawn_file_actions_adddup2(&actions, ends[1], 1)
  posix_spawn_file_actions_addclose(&actions, ends[0])
  var pid: pid_t = 0
  let argv: [UnsafeMutablePointer<CChar>?] = [strdup(path)] + arguments.map { strdup($0) } + [nil]
  defer { for argument in argv { free(argument) } }
  let spawned = posix_spawn(&pid, path, &actions, nil, argv, environ)
  close(ends[1])
  guard spawned == 0 else {
    close(ends[0])
    return nil
  }
  var output: [UInt8] = []
  var buffer = [UInt8](repeating: 0, count: 4096)
  while true {
    let count = buffer.withUnsafeMutableBytes { read(ends[0], $0.baseAddress!, 4096) }
    if count > 0 {
      output += buffer[0..<count]
    } else if count == 0 || errno != EINTR {
      break
    }
  }
  close(ends[0])
  var status: Int32 = 0
  while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
  // WIFEXITED / WEXITSTATUS are macros: decode by hand (signal in the low 7 bits).
  let exitStatus: Int32 = status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
  return (exitStatus, String(decoding: output, as: UTF8.self))
}
