#if canImport(Glibc)
  import Glibc
#endif

/// Whether the misuse checks that cost time on a lock's fast path run in this process.
///
/// Most misuse is always reported, in every mode, because detecting it costs nothing where
/// it happens: unlocking a lock that is not locked, re-locking a non-recursive lock on its
/// holding thread, destroying a held lock. *Checked* mode adds the checks that cost a
/// little on every call: today, `unlock()` of a ``Lock`` or ``SpinLock`` verifies that the
/// calling thread holds it (unchecked, such an unlock releases the lock on the holder's
/// behalf).
///
/// The mode is decided once per process, on first use (the first lock created with the
/// default mode, or the first read of ``mode``), from, in order:
/// 1. a value set with ``mode`` before that;
/// 2. the environment variable `THREADING_TOOLKIT_CHECKS`, `checked` or `unchecked` (any
///    other value stops the process with a message naming the variable);
/// 3. how the toolkit was compiled: checked in debug builds, unchecked in release builds.
///
/// A lock created with an explicit `checked:` argument ignores the mode.
///
/// ```swift
/// // First thing in main, before any lock exists:
/// MisuseChecking.mode = .checked
///
/// // Or from the shell, without rebuilding:
/// //   THREADING_TOOLKIT_CHECKS=checked ./server
///
/// print(MisuseChecking.mode)   // "checked"
/// ```
public enum MisuseChecking {
  /// One of the two modes.
  public enum Mode: Hashable, Sendable, CustomStringConvertible {
    /// The fast-path checks run: a misuse they detect stops the process with a message.
    case checked
    /// The fast-path checks are skipped (the always-on checks still run).
    case unchecked

    /// `"checked"` or `"unchecked"`, the spelling `THREADING_TOOLKIT_CHECKS` takes.
    public var description: String {
      switch self {
      case .checked: "checked"
      case .unchecked: "unchecked"
      }
    }
  }

  /// The name of the environment variable read when the mode is decided.
  public static let environmentVariable = "THREADING_TOOLKIT_CHECKS"

  /// The mode the toolkit is built with, used when neither ``mode`` was set nor the
  /// environment variable names one: checked in debug builds, unchecked in release builds.
  public static var buildDefault: Mode {
    #if DEBUG
      return .checked
    #else
      return .unchecked
    #endif
  }

  /// The process's mode. Reading it decides the mode if it is not decided yet (see the
  /// type's documentation); every later read returns the same value.
  ///
  /// Setting it decides the mode; do it before the first lock is created. Setting it after
  /// the mode was decided to a different value stops the process with a message (misuse:
  /// locks created earlier would run in the other mode); setting the same value again is
  /// allowed.
  public static var mode: Mode {
    get {
      switch UInt32.atomicLoad(at: decided, ordering: .relaxed) {
      case checkedWord: return .checked
      case uncheckedWord: return .unchecked
      default: return decideFromEnvironment()
      }
    }
    set {
      let word = newValue == .checked ? checkedWord : uncheckedWord
      // Relaxed: the word publishes nothing but itself.
      let previous = UInt32.atomicCompareExchange(
        expected: undecidedWord, desired: word, at: decided, ordering: .relaxed)
      if previous != undecidedWord, previous != word {
        reportMisuse(
          "MisuseChecking",
          "mode set to \(newValue) after the process already runs \(newValue == .checked ? Mode.unchecked : .checked) (set it before the first lock is created)"
        )
      }
    }
  }

  /// Whether ``mode`` is ``Mode/checked``: the default of every lock's `checked:` argument.
  @inlinable
  public static var isChecked: Bool { mode == .checked }

  // The decided mode: 0 undecided, 1 checked, 2 unchecked. One word for the process, never
  // freed.
  private static let undecidedWord: UInt32 = 0
  private static let checkedWord: UInt32 = 1
  private static let uncheckedWord: UInt32 = 2
  nonisolated(unsafe) private static let decided: UnsafeMutablePointer<UInt32> = {
    let word = UnsafeMutablePointer<UInt32>.allocate(capacity: 1)
    word.initialize(to: 0)
    return word
  }()

  private static func decideFromEnvironment() -> Mode {
    let chosen: Mode
    if let raw = getenv(environmentVariable) {
      switch String(cString: raw) {
      case "checked": chosen = .checked
      case "unchecked": chosen = .unchecked
      case let other:
        reportMisuse("MisuseChecking", "\(environmentVariable)=\(other): expected checked or unchecked")
      }
    } else {
      chosen = buildDefault
    }
    let word = chosen == .checked ? checkedWord : uncheckedWord
    // Two first readers may race; the first to decide wins and both return its choice.
    let previous = UInt32.atomicCompareExchange(
      expected: undecidedWord, desired: word, at: decided, ordering: .relaxed)
    if previous == undecidedWord { return chosen }
    return previous == checkedWord ? .checked : .unchecked
  }
}
