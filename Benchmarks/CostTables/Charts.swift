// SVG charts, written by hand (no packages).

import Foundation

struct Charts {
  let results: RunResults

  /// Writes every chart this run has data for; returns the file names.
  func write(to directory: String) throws -> [String] {
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    return []
  }
}
