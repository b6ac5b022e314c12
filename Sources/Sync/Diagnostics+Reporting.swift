#if canImport(Glibc)
  import Glibc
#endif

extension Diagnostics {
  /// One thing a detector found: which detector, a one-line summary naming what is to blame
  /// (threads, run loops and items by name), and detail lines.
  public struct Finding: Sendable, CustomStringConvertible {
    /// The detector that found it.
    public var kind: Kind
    /// One line: what happened and who is to blame.
    public var summary: String
    /// Further lines (what each named thing is, durations, thresholds), without
    /// indentation.
    public var details: [String]

    /// A finding of `kind`.
    public init(kind: Kind, summary: String, details: [String] = []) {
      self.kind = kind
      self.summary = summary
      self.details = details
    }

    /// What the default handler writes: `"threading-toolkit [stalls] <summary>"`, then each
    /// detail line indented by four spaces, one line each.
    public var description: String {
      var text = "threading-toolkit [\(kind.name)] \(summary)"
      for line in details { text += "\n    \(line)" }
      return text
    }
  }

  /// A function that receives findings. It runs on the thread that found the problem (a
  /// run loop's thread, a monitor thread), with no toolkit lock held; it should return
  /// promptly, and must not assume it runs on any particular thread.
  public typealias ReportHandler = @Sendable (Finding) -> Void

  /// The default handler: writes the finding's ``Finding/description`` and a newline to
  /// standard error in one `write` call, so concurrent findings do not interleave.
  public static let standardErrorHandler: ReportHandler = { finding in
    let text = finding.description + "\n"
    var remaining = Array(text.utf8)[...]
    while !remaining.isEmpty {
      let written = remaining.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
      // A failing standard error leaves nowhere to say so: the finding is dropped.
      if written < 0 && errno == EINTR { continue }
      if written <= 0 { return }
      remaining = remaining.dropFirst(written)
    }
  }

  /// Where findings go: ``standardErrorHandler`` unless replaced. Settable from any thread at
  /// any time; a finding being delivered meanwhile may still go to the previous handler. The
  /// replaced handler (and what it captures) is released after the switch, outside the
  /// toolkit's lock.
  public static var reportHandler: ReportHandler {
    get { handlerStore.get() }
    set { handlerStore.set(newValue) }
  }

  /// Delivers `finding` to ``reportHandler`` when its kind is on, then stops the process
  /// when the kind's mode is ``Mode/stop``. The detectors' single exit: call it with no
  /// toolkit lock held (the handler is user code).
  package static func report(_ finding: Finding) {
    let mode = mode(of: finding.kind)
    if mode == .off { return }
    let handler = handlerStore.get()
    handler(finding)
    if mode == .stop {
      fatalError("threading-toolkit diagnostics (\(finding.kind.name)=stop): \(finding.summary)")
    }
  }

  /// The handler and the word lock protecting it. The lock is a `WordLock`, not a `Lock`:
  /// diagnostics that watch locks must not watch their own.
  final class HandlerStore: @unchecked Sendable {
    // @unchecked: `handler` is protected by the word lock.
    private let word: UnsafeMutablePointer<UInt32>
    private var handler: ReportHandler = Diagnostics.standardErrorHandler

    init() {
      word = .allocate(capacity: 1)
      word.initialize(to: 0)
    }

    func get() -> ReportHandler {
      WordLock.withLock(word) { handler }
    }

    func set(_ newValue: @escaping ReportHandler) {
      var replaced = newValue
      WordLock.withLock(word) { swap(&handler, &replaced) }
      // `replaced` now holds the old handler, released here after the lock.
      withExtendedLifetime(replaced) {}
    }
  }

  /// Never freed: the process's one handler store.
  static let handlerStore = HandlerStore()
}
