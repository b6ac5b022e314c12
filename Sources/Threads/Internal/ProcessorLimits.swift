import Sync

#if canImport(Glibc)
  import Glibc
#endif

/// How many CPUs this process may actually use: the CPUs in its affinity mask, capped by its
/// cgroup's CPU quota (a container limited to 1.5 CPUs on a 64-core host may use 2, not 64).
///
/// The quota comes from the process's own cgroup, named in `/proc/self/cgroup`:
/// - cgroup v2 (the `0::/path` line): `cpu.max` (`"<quota> <period>"` or `"max <period>"`)
///   in `/sys/fs/cgroup/<path>` and each of its ancestors (a parent's limit applies to its
///   children); the smallest wins.
/// - cgroup v1 (the line whose controllers include `cpu`): `cpu.cfs_quota_us` (`-1` for no
///   limit) and `cpu.cfs_period_us` in `/sys/fs/cgroup/<controllers>/<path>`, then in the
///   mount's root (inside a container the path names the host's hierarchy while the mount
///   shows the container's own group).
///
/// A quota of `q` microseconds per period `p` allows `ceil(q / p)` CPUs. Files that are
/// missing or unreadable mean no limit from that source: the affinity mask alone decides.
enum ProcessorLimits {
  /// The CPUs the calling thread may run on (its affinity mask, which it inherits from the
  /// process unless changed), capped by the cgroup CPU quota; at least 1.
  static func usableProcessorCount() -> Int {
    let affinity = (try? Thread.currentCPUAffinity().count) ?? 0
    var count = affinity > 0 ? affinity : onlineProcessorCount()
    if let quota = cgroupQuotaProcessorCount(), quota < count { count = quota }
    return max(1, count)
  }

  /// `sysconf(_SC_NPROCESSORS_ONLN)`, at least 1: the fallback when the affinity mask cannot
  /// be read.
  static func onlineProcessorCount() -> Int {
    max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN)))
  }

  /// The CPUs the cgroup quota allows, or `nil` when no quota applies or none can be read.
  static func cgroupQuotaProcessorCount() -> Int? {
    guard let membership = readSmallFile("/proc/self/cgroup") else { return nil }
    var best: Int? = nil
    for limit in quotaCandidates(membership: membership) {
      if let count = limit, count < (best ?? Int.max) { best = count }
    }
    return best
  }

  /// Every quota the membership lines point at (`nil` entries: no limit there).
  private static func quotaCandidates(membership: String) -> [Int?] {
    var results: [Int?] = []
    for entry in parseMembership(membership) {
      if entry.controllers.isEmpty && entry.hierarchy == "0" {
        // cgroup v2: the group and its ancestors.
        for directory in ancestorDirectories(of: entry.path, under: "/sys/fs/cgroup") {
          if let text = readSmallFile(directory + "/cpu.max") {
            results.append(processorCount(cpuMax: text))
          }
        }
      } else if entry.controllers.contains("cpu") {
        // The first directory holding both files decides for this hierarchy.
        let mount = "/sys/fs/cgroup/" + entry.controllers.joined(separator: ",")
        let subpath = entry.path == "/" ? "" : entry.path
        let directories = [mount + subpath, mount, "/sys/fs/cgroup/cpu" + subpath, "/sys/fs/cgroup/cpu"]
        if let directory = directories.first(where: { readSmallFile($0 + "/cpu.cfs_quota_us") != nil }),
          let quota = readSmallFile(directory + "/cpu.cfs_quota_us"),
          let period = readSmallFile(directory + "/cpu.cfs_period_us")
        {
          results.append(processorCount(quotaMicroseconds: quota, periodMicroseconds: period))
        }
      }
    }
    return results
  }

  /// One line of `/proc/self/cgroup`: `hierarchy-id:controller-list:path`.
  struct Membership: Equatable {
    var hierarchy: String
    var controllers: [String]
    var path: String
  }

  /// Parses `/proc/self/cgroup`. Malformed lines are skipped.
  static func parseMembership(_ text: String) -> [Membership] {
    var entries: [Membership] = []
    for line in text.split(separator: "\n") {
      // The path may itself contain ':', so split only at the first two.
      let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
      guard fields.count == 3, fields[2].hasPrefix("/") else { continue }
      let controllers = fields[1].split(separator: ",").map(String.init)
      entries.append(Membership(hierarchy: String(fields[0]), controllers: controllers, path: String(fields[2])))
    }
    return entries
  }

  /// `root + path` and each ancestor up to `root`, innermost first.
  static func ancestorDirectories(of path: String, under root: String) -> [String] {
    var components = path.split(separator: "/").map(String.init)
    var directories: [String] = []
    while true {
      directories.append(components.isEmpty ? root : root + "/" + components.joined(separator: "/"))
      if components.isEmpty { break }
      components.removeLast()
    }
    return directories
  }

  /// The CPUs a cgroup v2 `cpu.max` allows: `"max 100000"` is no limit (`nil`);
  /// `"150000 100000"` is 2 (`ceil(1.5)`). Unparsable text is no limit.
  static func processorCount(cpuMax text: String) -> Int? {
    let fields = text.split(whereSeparator: { $0 == " " || $0 == "\n" })
    guard fields.count >= 1, fields[0] != "max", let quota = Int(fields[0]) else { return nil }
    let period = fields.count >= 2 ? Int(fields[1]) ?? 100_000 : 100_000
    return processorCount(quota: quota, period: period)
  }

  /// The CPUs a cgroup v1 quota allows: `cpu.cfs_quota_us` `-1` is no limit (`nil`).
  static func processorCount(quotaMicroseconds: String, periodMicroseconds: String) -> Int? {
    func number(_ text: String) -> Int? { Int(text.trimmingSuffixNewlines()) }
    guard let quota = number(quotaMicroseconds), let period = number(periodMicroseconds) else { return nil }
    return processorCount(quota: quota, period: period)
  }

  /// `ceil(quota / period)`, at least 1; `nil` for a non-positive quota or period.
  private static func processorCount(quota: Int, period: Int) -> Int? {
    guard quota > 0, period > 0 else { return nil }
    // Not `(quota + period - 1) / period`: that sum overflows for numbers near `Int.max`,
    // which a damaged or unusual file may hold.
    return max(1, quota / period + (quota % period == 0 ? 0 : 1))
  }

  /// A small text file's contents, at most `limit` bytes (`/proc` and `/sys` files report a
  /// size of 0 or 4096, so this reads until end of file), or `nil` when it cannot be opened
  /// or read.
  static func readSmallFile(_ path: String, limit: Int = 65536) -> String? {
    let descriptor: Int32
    do throws(SystemCallError) {
      descriptor = try systemCall("open", retryingInterrupts: true) { open(path, O_RDONLY | O_CLOEXEC) }
    } catch {
      return nil
    }
    defer { _ = close(descriptor) }  // read-only: nothing can be lost, and EINTR must not be retried
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while bytes.count < limit {
      let count: Int
      do throws(SystemCallError) {
        count = try systemCall("read", retryingInterrupts: true) {
          buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        }
      } catch {
        return nil
      }
      if count == 0 { break }
      bytes.append(contentsOf: buffer[0..<count])
    }
    return String(decoding: bytes, as: UTF8.self)
  }
}

extension String {
  /// The string without trailing newlines and spaces (sysfs values end with one).
  fileprivate func trimmingSuffixNewlines() -> String {
    var text = Substring(self)
    while let last = text.last, last == "\n" || last == " " { text.removeLast() }
    return String(text)
  }
}
