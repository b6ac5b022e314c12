// Reading what an exit test's child printed. Plain Swift, nothing of the toolkit, like the
// fork helpers beside it.

/// The integers an exit test's child printed, one array per line of `output` that starts
/// with `prefix`, in order: every field after the prefix that reads as an integer once a
/// trailing `:`, `,` or `;` is dropped. `"round 2: 16"` after `"round "` gives `[2, 16]`.
///
/// A child that judges its own figures and fails returns no output to the parent
/// (`#expect(processExitsWith:)` gives nil), so exit tests that measure something print the
/// figures and let the parent judge them: a failure then shows them.
public func printedFigures(_ output: [UInt8], after prefix: String) -> [[Int]] {
  String(decoding: output, as: UTF8.self).split(separator: "\n").compactMap { line in
    guard line.hasPrefix(prefix) else { return nil }
    return line.dropFirst(prefix.count).split(separator: " ").compactMap { field in
      Int(field.last.map { ":,;".contains($0) } == true ? field.dropLast() : field)
    }
  }
}
