extension Diagnostics {
  /// What a `THREADING_TOOLKIT_DIAGNOSTICS` value asks for (see ``Diagnostics`` for the
  /// grammar): the switches word without its undecided bit, and the options it sets.
  package struct Settings: Equatable, Sendable {
    /// Two bits per kind, and `metricsBit`.
    package var switches: UInt32 = 0
    /// `stall-ms=N`, if given.
    package var stallThreshold: Duration? = nil
    /// `deadlock-ms=N`, if given.
    package var deadlockCheckInterval: Duration? = nil
    /// `blocking-ms=N`, if given.
    package var blockingInTaskThreshold: Duration? = nil
    /// `contention-sample=N`, if given.
    package var lockContentionSampling: Int? = nil
    /// `contention-dump[=text|json]`, if given.
    package var contentionDump: LockContentionFormat? = nil

    /// Nothing on, no option given.
    package init() {}

    /// The mode the settings give `kind`.
    package func mode(of kind: Kind) -> Mode {
      Mode(bits: (switches >> (kind.index * 2)) & 3)
    }

    /// Whether the settings switch run-loop metrics on.
    package var collectsRunLoopMetrics: Bool { switches & Diagnostics.metricsBit != 0 }

    /// Whether the settings switch lock contention statistics on.
    package var collectsLockContention: Bool { switches & Diagnostics.contentionBit != 0 }

    mutating func set(_ mode: Mode, for kind: Kind) {
      let shift = kind.index * 2
      switches = (switches & ~(3 << shift)) | (mode.bits << shift)
    }
  }

  /// Why a value was refused: names the item and what was expected.
  package struct SettingsError: Error, Equatable {
    package var message: String
  }

  /// Parses an environment value (comma-separated items, later ones overriding earlier
  /// ones). An empty value asks for nothing. Refuses unknown names, bad numbers and empty
  /// items.
  package static func parse(_ text: String) -> Result<Settings, SettingsError> {
    var settings = Settings()
    // Set but empty: nothing on.
    if text.isEmpty { return .success(settings) }
    let kindNames = Kind.every.map(\.name).joined(separator: ", ")
    for item in text.split(separator: ",", omittingEmptySubsequences: false) {
      let parts = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
      let name = String(parts[0])
      let value = parts.count == 2 ? String(parts[1]) : nil
      if name.isEmpty {
        return .failure(SettingsError(message: "empty item (items are separated by single commas)"))
      }
      switch name {
      case "metrics":
        guard value == nil else {
          return .failure(SettingsError(message: "metrics takes no value"))
        }
        settings.switches |= Diagnostics.metricsBit
      case "contention":
        guard value == nil else {
          return .failure(SettingsError(message: "contention takes no value"))
        }
        settings.switches |= Diagnostics.contentionBit
      case "contention-dump":
        switch value {
        case nil, "text": settings.contentionDump = .text
        case "json": settings.contentionDump = .json
        case let other?:
          return .failure(SettingsError(message: "contention-dump=\(other): expected text or json"))
        }
        settings.switches |= Diagnostics.contentionBit
      case "contention-sample":
        guard let value, let interval = Int(value), interval > 0, interval <= Diagnostics.maximumLockContentionSampling
        else {
          return .failure(SettingsError(message: "contention-sample expects a whole number from 1 to 1000000000"))
        }
        settings.lockContentionSampling = interval
      case "deadlock-ms":
        guard let value, let milliseconds = Int64(value), milliseconds > 0, milliseconds <= 86_400_000 else {
          return .failure(
            SettingsError(message: "deadlock-ms expects a whole number of milliseconds from 1 to 86400000"))
        }
        settings.deadlockCheckInterval = .milliseconds(milliseconds)
      case "blocking-ms":
        guard let value, let milliseconds = Int64(value), milliseconds > 0, milliseconds <= 86_400_000 else {
          return .failure(
            SettingsError(message: "blocking-ms expects a whole number of milliseconds from 1 to 86400000"))
        }
        settings.blockingInTaskThreshold = .milliseconds(milliseconds)
      case "stall-ms":
        guard let value, let milliseconds = Int64(value), milliseconds > 0, milliseconds <= 86_400_000 else {
          return .failure(SettingsError(message: "stall-ms expects a whole number of milliseconds from 1 to 86400000"))
        }
        settings.stallThreshold = .milliseconds(milliseconds)
      default:
        let mode: Mode
        switch value {
        case nil, "report": mode = .report
        case "stop": mode = .stop
        case "off": mode = .off
        case let other?:
          return .failure(SettingsError(message: "\(name)=\(other): expected report, stop or off"))
        }
        if name == "all" {
          for kind in Kind.all { settings.set(mode, for: kind) }
        } else if let kind = Kind.every.first(where: { $0.name == name }) {
          settings.set(mode, for: kind)
        } else {
          return .failure(
            SettingsError(
              message:
                "unknown item \(name) (expected \(kindNames), all, metrics, stall-ms=N, deadlock-ms=N, blocking-ms=N, contention, contention-sample=N or contention-dump)"
            ))
        }
      }
    }
    return .success(settings)
  }
}
