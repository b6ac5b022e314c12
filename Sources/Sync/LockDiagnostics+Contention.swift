#if canImport(Glibc)
  import Glibc
#endif

extension Diagnostics {
  /// The contention figures of one named lock (all diagnosed locks with the same name, or
  /// created at the same site), since statistics were switched on or last reset.
  ///
  /// Counts and total wait are estimates: one acquisition in ``lockContentionSampling`` is
  /// measured, and counts that many times (Go's rule), so a figure is exact when sampling is
  /// 1 and unbiased otherwise. The maximum wait is the largest measured.
  public struct LockContention: Sendable, Equatable {
    /// The lock's name, or its creation site `fileID:line`.
    public var name: String
    /// Acquisitions (blocking and timed; `tryLock` is not counted). An acquisition that did
    /// not wait is counted when its hold ends (with the hold time), so a lock held right now
    /// may be one short.
    public var acquisitions: Int
    /// Acquisitions that found the lock held and had to wait.
    public var contendedAcquisitions: Int
    /// The time those acquisitions waited, in all.
    public var totalWait: Duration
    /// The longest measured wait.
    public var maxWait: Duration
    /// Hold times in log2 buckets: element `i` counts holds of `2^i` up to `2^(i+1)`
    /// nanoseconds (element 0 includes shorter ones); 48 buckets.
    public var holdTimeHistogram: [Int]
    /// Which threads held the lock when a waiter blocked (`"name" (#identity)`), and how
    /// often.
    public var blockingHolders: [String: Int]

    /// The holds counted in ``holdTimeHistogram``.
    public var holds: Int { holdTimeHistogram.reduce(0, +) }
  }

  /// How ``lockContentionReport(as:)`` (and the dump at exit) writes the figures.
  public enum LockContentionFormat: Sendable, Hashable {
    /// One line per lock, most waited-for first, then its hold-time buckets and holders.
    case text
    /// One JSON object: `{"sampling": N, "locks": [{"name": ..., "acquisitions": ...,
    /// "contendedAcquisitions": ..., "totalWaitNanoseconds": ..., "maxWaitNanoseconds": ...,
    /// "holdTimeLog2Histogram": [...], "blockingHolders": {...}}]}`.
    case json
  }

  /// The contention figures per named lock now, most waited-for first; empty while
  /// ``collectsLockContention`` was never on. Callable from any thread at any time.
  ///
  /// Figures are kept per name, and a name's entry (with its ``LockContention/blockingHolders``,
  /// one per holding thread) stays after its locks are gone, until
  /// ``resetLockContention()``: the table grows with the number of distinct names and
  /// holding threads. Name locks by role (`"connection pool"`), not by instance
  /// (`"connection \(id)"`), or reset the figures now and then in a long-running process.
  public static func lockContention() -> [LockContention] {
    ContentionTable.shared.snapshot()
  }

  /// Empties the contention figures (collection goes on if it is on).
  public static func resetLockContention() {
    ContentionTable.shared.reset()
  }

  /// The figures of ``lockContention()`` as text or JSON.
  public static func lockContentionReport(as format: LockContentionFormat) -> String {
    let figures = lockContention()
    switch format {
    case .text: return ContentionTable.text(figures)
    case .json: return ContentionTable.json(figures)
    }
  }
}

/// The contention figures by lock label, under a word lock (never a diagnosed lock). Only
/// sampled acquisitions and holds reach it.
///
/// A sample finds its entry through the lock's identity number (one integer lookup); only a
/// lock's first sample computes its label (a name look-up or the `fileID:line` string) and
/// finds or adds the label's entry. Locks with the same label share an entry, also across
/// the lock's destruction: a destroyed lock leaves only the number-to-entry cache.
final class ContentionTable: @unchecked Sendable {
  // @unchecked: `entries`, `indexByLabel` and `indexByLock` are protected by `word`.
  private let word: UnsafeMutablePointer<UInt32>
  private var entries: [Diagnostics.LockContention] = []
  private var indexByLabel: [String: Int] = [:]
  private var indexByLock: [UInt64: Int] = [:]
  static let buckets = 48

  private init() {
    word = .allocate(capacity: 1)
    word.initialize(to: 0)
  }

  /// Never freed: the process's one table.
  static let shared = ContentionTable()

  private func withEntry(_ lock: LockIdentity, _ body: (inout Diagnostics.LockContention) -> Void) {
    let found = WordLock.withLock(word) {
      guard let index = indexByLock[lock.id] else { return false }
      body(&entries[index])
      return true
    }
    if found { return }
    // First sample of this lock: its label is computed outside the table's lock (a name
    // look-up takes `LockNames`' lock).
    let label = lock.label
    UInt64.atomicStore(1, at: Diagnostics.OptionSlot.contentionUsed.pointer, ordering: .relaxed)
    WordLock.withLock(word) {
      let index: Int
      if let existing = indexByLabel[label] {
        index = existing
      } else {
        index = entries.count
        entries.append(
          Diagnostics.LockContention(
            name: label, acquisitions: 0, contendedAcquisitions: 0, totalWait: .zero, maxWait: .zero,
            holdTimeHistogram: Array(repeating: 0, count: ContentionTable.buckets), blockingHolders: [:]))
        indexByLabel[label] = index
      }
      indexByLock[lock.id] = index
      body(&entries[index])
    }
  }

  /// Forgets the destroyed lock numbered `id` (its figures stay under its label).
  func forget(_ id: UInt64) {
    _ = WordLock.withLock(word) { indexByLock.removeValue(forKey: id) }
  }

  /// A sampled acquisition of weight `weight`; `waited` is -1 when it did not wait.
  func recordAcquisition(of lock: LockIdentity, weight: Int, waited: Int64, holder: String?, acquired: Bool) {
    withEntry(lock) { entry in
      if acquired { entry.acquisitions += weight }
      guard waited >= 0 else { return }
      entry.contendedAcquisitions += weight
      let wait = Duration.nanoseconds(waited)
      entry.totalWait += wait * weight
      if wait > entry.maxWait { entry.maxWait = wait }
      if let holder { entry.blockingHolders[holder, default: 0] += weight }
    }
  }

  /// A sampled hold of `nanoseconds`; `countsAcquisition`: its acquisition did not wait and
  /// is counted here.
  func recordHold(of lock: LockIdentity, nanoseconds: Int64, weight: Int, countsAcquisition: Bool) {
    let bucket = nanoseconds <= 1 ? 0 : Swift.min(ContentionTable.buckets - 1, 63 - nanoseconds.leadingZeroBitCount)
    withEntry(lock) { entry in
      entry.holdTimeHistogram[bucket] += weight
      if countsAcquisition { entry.acquisitions += weight }
    }
  }

  func snapshot() -> [Diagnostics.LockContention] {
    let all = WordLock.withLock(word) { entries }
    return all.sorted { ($0.totalWait, $1.name) > ($1.totalWait, $0.name) }
  }

  func reset() {
    // The old tables are released after the lock.
    let old = WordLock.withLock(word) {
      let old = (entries, indexByLabel, indexByLock)
      entries = []
      indexByLabel = [:]
      indexByLock = [:]
      return old
    }
    withExtendedLifetime(old) {}
  }

  // MARK: Formats

  static func text(_ figures: [Diagnostics.LockContention]) -> String {
    var text = "threading-toolkit lock contention (sampling 1 in \(Diagnostics.lockContentionSampling)):\n"
    if figures.isEmpty { text += "    no diagnosed lock was acquired\n" }
    for entry in figures {
      text +=
        "    \"\(entry.name)\": \(entry.acquisitions) acquisitions, \(entry.contendedAcquisitions) contended, "
        + "wait total \(describe(entry.totalWait)), max \(describe(entry.maxWait))\n"
      let buckets = entry.holdTimeHistogram.enumerated().filter { $0.element != 0 }
      if !buckets.isEmpty {
        text += "        hold times: "
        text += buckets.map { "<\(describe(.nanoseconds(Int64(1) << ($0.offset + 1)))): \($0.element)" }
          .joined(separator: ", ")
        text += "\n"
      }
      if !entry.blockingHolders.isEmpty {
        text += "        held by, when a waiter blocked: "
        text += entry.blockingHolders.sorted { ($0.value, $1.key) > ($1.value, $0.key) }
          .map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        text += "\n"
      }
    }
    return text
  }

  static func json(_ figures: [Diagnostics.LockContention]) -> String {
    func quote(_ string: String) -> String {
      var out = "\""
      for scalar in string.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        default:
          if scalar.value < 0x20 {
            let hex = String(scalar.value, radix: 16)
            out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
          } else {
            out.unicodeScalars.append(scalar)
          }
        }
      }
      return out + "\""
    }
    let locks = figures.map { entry in
      let holders = entry.blockingHolders.sorted { $0.key < $1.key }.map { "\(quote($0.key)): \($0.value)" }
      return "{\"name\": \(quote(entry.name)), \"acquisitions\": \(entry.acquisitions), "
        + "\"contendedAcquisitions\": \(entry.contendedAcquisitions), "
        + "\"totalWaitNanoseconds\": \(MonotonicInstant.nanoseconds(of: entry.totalWait)), "
        + "\"maxWaitNanoseconds\": \(MonotonicInstant.nanoseconds(of: entry.maxWait)), "
        + "\"holdTimeLog2Histogram\": [\(entry.holdTimeHistogram.map(String.init).joined(separator: ", "))], "
        + "\"blockingHolders\": {\(holders.joined(separator: ", "))}}"
    }
    return "{\"sampling\": \(Diagnostics.lockContentionSampling), \"locks\": [\(locks.joined(separator: ", "))]}\n"
  }

  /// `1.5 ms`, `420 µs`, `87 ns`.
  static func describe(_ duration: Duration) -> String {
    let nanoseconds = MonotonicInstant.nanoseconds(of: duration)
    if nanoseconds >= 1_000_000_000 { return "\(Double(nanoseconds / 1_000_000) / 1000) s" }
    if nanoseconds >= 1_000_000 { return "\(Double(nanoseconds / 1000) / 1000) ms" }
    if nanoseconds >= 1000 { return "\(nanoseconds / 1000) µs" }
    return "\(nanoseconds) ns"
  }
}

extension LockDiagnostics {
  /// Writes the contention figures to standard error when the process exits normally.
  /// Called once, when the environment variable asks for it.
  static func dumpContentionAtExit(as format: Diagnostics.LockContentionFormat) {
    UInt64.atomicStore(
      format == .json ? 2 : 1, at: Diagnostics.OptionSlot.contentionDump.pointer, ordering: .relaxed)
    // A failing atexit (no room left) leaves no dump; nothing else depends on it.
    if atexit({ LockDiagnostics.dumpContention() }) != 0 {}
  }

  /// The atexit handler.
  static func dumpContention() {
    let stored = UInt64.atomicLoad(at: Diagnostics.OptionSlot.contentionDump.pointer, ordering: .relaxed)
    let text = Diagnostics.lockContentionReport(as: stored == 2 ? .json : .text)
    var remaining = Array(text.utf8)[...]
    while !remaining.isEmpty {
      let written = remaining.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
      if written < 0 && errno == EINTR { continue }
      // A failing standard error leaves nowhere to say so.
      if written <= 0 { return }
      remaining = remaining.dropFirst(written)
    }
  }
}
