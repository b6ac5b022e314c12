// SVG charts, written by hand (no packages): one line chart per scaling series (lock
// contention over thread counts and any other "<id>-N" series), one combined chart of this
// toolkit's contended locks, bar charts per group, and the timer-lateness distribution.

import Foundation

/// A tiny SVG writer.
struct SVG {
  let width: Double
  let height: Double
  private var body: [String] = []

  init(width: Double, height: Double) {
    self.width = width
    self.height = height
    body.append("<rect x=\"0\" y=\"0\" width=\"\(n(width))\" height=\"\(n(height))\" fill=\"#ffffff\"/>")
  }

  static func escape(_ text: String) -> String {
    var out = ""
    for character in text {
      switch character {
      case "&": out += "&amp;"
      case "<": out += "&lt;"
      case ">": out += "&gt;"
      case "\"": out += "&quot;"
      default: out.append(character)
      }
    }
    return out
  }

  mutating func line(
    _ x1: Double, _ y1: Double, _ x2: Double, _ y2: Double, stroke: String = "#cccccc", width: Double = 1
  ) {
    body.append(
      "<line x1=\"\(n(x1))\" y1=\"\(n(y1))\" x2=\"\(n(x2))\" y2=\"\(n(y2))\" stroke=\"\(stroke)\" stroke-width=\"\(n(width))\"/>"
    )
  }

  mutating func polyline(_ points: [(Double, Double)], stroke: String, width: Double, dashed: Bool) {
    let list = points.map { n($0.0) + "," + n($0.1) }.joined(separator: " ")
    body.append(
      "<polyline points=\"\(list)\" fill=\"none\" stroke=\"\(stroke)\" stroke-width=\"\(n(width))\""
        + (dashed ? " stroke-dasharray=\"6,4\"" : "") + " stroke-linejoin=\"round\"/>")
  }

  mutating func circle(_ x: Double, _ y: Double, radius: Double, fill: String) {
    body.append("<circle cx=\"\(n(x))\" cy=\"\(n(y))\" r=\"\(n(radius))\" fill=\"\(fill)\"/>")
  }

  mutating func rect(_ x: Double, _ y: Double, _ w: Double, _ h: Double, fill: String, opacity: Double = 1) {
    body.append(
      "<rect x=\"\(n(x))\" y=\"\(n(y))\" width=\"\(n(Swift.max(0, w)))\" height=\"\(n(Swift.max(0, h)))\" fill=\"\(fill)\""
        + (opacity < 1 ? " fill-opacity=\"\(n(opacity))\"" : "") + "/>")
  }

  mutating func text(
    _ x: Double, _ y: Double, _ content: String, size: Double = 12, anchor: String = "start",
    weight: String = "normal", fill: String = "#222222", rotate: Double = 0
  ) {
    let transform = rotate == 0 ? "" : " transform=\"rotate(\(n(rotate)) \(n(x)) \(n(y)))\""
    body.append(
      "<text x=\"\(n(x))\" y=\"\(n(y))\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"\(n(size))\" text-anchor=\"\(anchor)\" font-weight=\"\(weight)\" fill=\"\(fill)\"\(transform)>"
        + SVG.escape(content) + "</text>")
  }

  var document: String {
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      + "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(n(width))\" height=\"\(n(height))\" viewBox=\"0 0 \(n(width)) \(n(height))\">\n"
      + body.joined(separator: "\n") + "\n</svg>\n"
  }

  private func n(_ value: Double) -> String { Format.fixed(value, 1) }
}

/// Axis ticks at 1, 2 or 5 times a power of ten.
func niceTicks(upTo maximum: Double, count: Int = 5) -> [Double] {
  guard maximum > 0, maximum.isFinite else { return [0, 1] }
  let rough = maximum / Double(count)
  let magnitude = pow(10, floor(log10(rough)))
  let step = [1.0, 2, 5, 10].map { $0 * magnitude }.first { $0 >= rough } ?? rough
  var ticks: [Double] = []
  var tick = 0.0
  while tick < maximum + step * 0.999 {
    ticks.append(tick)
    tick += step
  }
  return ticks
}

struct Charts {
  let results: RunResults

  static let oursColors = ["#1f5fbf", "#1a9e4b", "#7b2fbf", "#0f8c8c", "#3a3aa8"]
  static let peerColors = ["#d9541e", "#c9a100", "#b8336a", "#7f7f7f", "#8c564b", "#e377c2"]

  /// Colour per subject: ours in cool colours, peers in warm ones, stable within a chart.
  /// Keyed by label.
  static func colors(for subjects: [(label: String, isToolkit: Bool)]) -> [String: String] {
    var result: [String: String] = [:]
    var ours = 0
    var peers = 0
    for subject in subjects {
      if subject.isToolkit {
        result[subject.label] = oursColors[ours % oursColors.count]
        ours += 1
      } else {
        result[subject.label] = peerColors[peers % peerColors.count]
        peers += 1
      }
    }
    return result
  }

  static func slug(_ text: String) -> String {
    var out = ""
    for character in text.lowercased() {
      if character.isLetter || character.isNumber || character == "." || character == "-" {
        out.append(character)
      } else if out.last != "-" {
        out.append("-")
      }
    }
    return out
  }

  /// Writes every chart this run has data for; returns the file names.
  func write(to directory: String) throws -> [String] {
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    var written: [String] = []
    func save(_ name: String, _ svg: SVG) throws {
      try ResultsFile.writeText(svg.document, to: directory + "/" + name)
      written.append(name)
    }
    let series = Series.all(in: results)
    for entry in series {
      let subjects = entry.subjects(in: results)
      let lines = subjects.map { subject in
        (label: subject.name, ours: subject.isToolkit, points: entry.medians(subject: subject, in: results))
      }
      try save(
        "scaling-" + Charts.slug(entry.base) + ".svg",
        lineChart(
          title: entry.base + "-N: median per operation",
          subtitle: subtitle(for: entry),
          xLabel: Charts.axisLabel(for: entry.base), lines: lines, unit: unit(of: entry)))
    }
    // This toolkit's contended locks on one chart.
    // Bare lock hand-offs only: series with private work between acquisitions have their
    // own scale and chart.
    let contended = series.filter { $0.base.contains("contended") && !$0.base.contains("with-work") }
    let combined = contended.flatMap { entry in
      entry.subjects(in: results).filter(\.isToolkit).map { subject in
        (
          label: subject.name + " (" + entry.base + ")", ours: true,
          points: entry.medians(subject: subject, in: results)
        )
      }
    }
    let pthreadMutex =
      contended.first { $0.base == "mutex.contended" }.map { entry in
        [
          (
            label: "pthread (mutex.contended)", ours: false,
            points: entry.medians(subject: .peer("pthread"), in: results)
          )
        ]
      } ?? []
    if combined.count >= 2 {
      try save(
        "contention-toolkit.svg",
        lineChart(
          title: "This toolkit's locks under contention, with raw pthread_mutex_t",
          subtitle: "ns per increment (wall time / all increments); lower is better; flat = constant throughput",
          xLabel: "threads (N)", lines: combined + pthreadMutex, unit: "ns"))
    }
    let seriesIds = series.reduce(into: Set<String>()) { $0.formUnion($1.ids) }
    for group in results.groups {
      let ids = results.ids.filter { id in
        !seriesIds.contains(id) && !id.hasPrefix("runloop.timer-lateness")
          && results.rows.contains { $0.benchmark == id && $0.group == group }
      }
      if !ids.isEmpty {
        try save("group-" + Charts.slug(group) + ".svg", barChart(title: group, ids: ids))
      }
    }
    // Distributions only: rows of a handful of samples (a p99 per run) are summaries.
    let lateness = results.rows.filter { $0.benchmark.hasPrefix("runloop.timer-lateness") && $0.samples.count >= 5 }
    if !lateness.isEmpty {
      try save("timer-lateness.svg", histogram(rows: lateness))
    }
    return written
  }

  func unit(of series: Series) -> String {
    results.rows(id: series.points[0].id).first?.unit ?? "ns"
  }

  func subtitle(for series: Series) -> String {
    series.base.contains("contended")
      ? "ns per increment (wall time / all increments across threads); lower is better; flat = constant throughput"
      : "median per operation; lower is better"
  }

  /// Lines over N, x on a log2 scale, y linear from 0.
  func lineChart(
    title: String, subtitle: String, xLabel: String,
    lines: [(label: String, ours: Bool, points: [(n: Int, value: Double?)])], unit: String
  ) -> SVG {
    // Legend to the right, sized for its longest label (about 7.5 px per character).
    let longest = Double(lines.map(\.label.count).max() ?? 10)
    let legendWidth = Swift.max(260, 24 + 32 + longest * 7.5 + 20)
    var svg = SVG(width: 80 + 540 + legendWidth, height: 480)
    let left = 80.0
    let top = 70.0
    let plotWidth = 540.0
    let plotHeight = 330.0
    let ns = Array(Set(lines.flatMap { $0.points.map(\.n) })).sorted()
    let maximum = lines.flatMap { $0.points.compactMap(\.value) }.max() ?? 1
    let ticks = niceTicks(upTo: maximum)
    let topTick = ticks.last ?? maximum
    let logMin = log2(Double(Swift.max(1, ns.first ?? 1)))
    let logMax = log2(Double(Swift.max(2, ns.last ?? 2)))
    func x(_ n: Int) -> Double {
      let span = Swift.max(logMax - logMin, 1)
      return left + (log2(Double(Swift.max(1, n))) - logMin) / span * plotWidth
    }
    func y(_ value: Double) -> Double { top + plotHeight - value / topTick * plotHeight }

    svg.text(left, 28, title, size: 17, weight: "bold")
    svg.text(left, 48, subtitle, size: 12, fill: "#555555")
    for tick in ticks {
      svg.line(left, y(tick), left + plotWidth, y(tick), stroke: "#e3e3e3")
      svg.text(left - 8, y(tick) + 4, Format.value(tick, unit: unit), size: 11, anchor: "end")
    }
    for n in ns {
      svg.line(x(n), top, x(n), top + plotHeight, stroke: "#f0f0f0")
      svg.text(x(n), top + plotHeight + 18, String(n), size: 11, anchor: "middle")
    }
    svg.line(left, top + plotHeight, left + plotWidth, top + plotHeight, stroke: "#444444")
    svg.line(left, top, left, top + plotHeight, stroke: "#444444")
    svg.text(left + plotWidth / 2, top + plotHeight + 40, xLabel + " (log scale)", size: 12, anchor: "middle")

    let colors = Charts.colors(for: lines.map { (label: $0.label, isToolkit: $0.ours) })
    var legendY = top + 6
    let legendX = left + plotWidth + 24
    for line in lines {
      let color = colors[line.label] ?? "#000000"
      let points = line.points.compactMap { point in point.value.map { (x(point.n), y($0)) } }
      if points.count >= 2 {
        svg.polyline(points, stroke: color, width: line.ours ? 3 : 2, dashed: !line.ours)
      }
      for point in points { svg.circle(point.0, point.1, radius: line.ours ? 4 : 3, fill: color) }
      svg.line(legendX, legendY, legendX + 26, legendY, stroke: color, width: line.ours ? 3 : 2)
      svg.text(legendX + 32, legendY + 4, line.label, size: 12, weight: line.ours ? "bold" : "normal")
      legendY += 20
    }
    svg.text(legendX, legendY + 10, "solid = this toolkit, dashed = peers", size: 11, fill: "#555555")
    return svg
  }

  /// Horizontal bars: one cluster per id, bars scaled to the slowest subject of that id
  /// (values printed), so ids of very different cost share one chart.
  func barChart(title: String, ids: [String]) -> SVG {
    let clusters = ids.map { ($0, results.rows(id: $0)) }
    let barHeight = 16.0
    let gap = 22.0
    // Subject labels right-aligned before the bars, sized for the longest (about 7 px per
    // character at 12 px).
    let longest = Double(clusters.flatMap { $0.1.map(\.subject.name.count) }.max() ?? 20)
    let labelWidth = Swift.max(180, 28 + longest * 7)
    let plotWidth = 420.0
    let height = 80 + clusters.reduce(0.0) { $0 + Double($1.1.count) * (barHeight + 3) + gap + 14 }
    var svg = SVG(width: labelWidth + plotWidth + 230, height: height)
    svg.text(20, 28, title + ": median per operation", size: 17, weight: "bold")
    svg.text(
      20, 48, "bars scaled within each benchmark; lower is better; blue/green = this toolkit", size: 12,
      fill: "#555555")
    var yPosition = 72.0
    for (id, rows) in clusters {
      svg.text(20, yPosition + 10, id, size: 13, weight: "bold")
      yPosition += 16
      let maximum = rows.map(\.median).filter { !$0.isNaN }.max() ?? 1
      let colors = Charts.colors(for: rows.map { (label: $0.subject.name, isToolkit: $0.subject.isToolkit) })
      for row in rows {
        let best = row.isOurs ? results.comparedPeer(id: id, for: row.subject) : nil
        svg.text(labelWidth - 8, yPosition + barHeight - 4, row.subject.name, size: 12, anchor: "end")
        let length = row.median.isNaN || maximum <= 0 ? 0 : row.median / maximum * plotWidth
        svg.rect(labelWidth, yPosition, length, barHeight, fill: colors[row.subject.name] ?? "#888888")
        var label = Format.value(row.median, unit: row.unit)
        if let best {
          label +=
            "  " + Format.ratio(row.median / best.median)
            + (comparesLikeForLike(id) ? " of best like-for-like peer" : " of best peer")
        }
        svg.text(labelWidth + length + 6, yPosition + barHeight - 4, label, size: 11)
        yPosition += barHeight + 3
      }
      yPosition += gap
    }
    return svg
  }

  /// Distribution of timer lateness: step histograms over log-spaced bins, one per subject
  /// (every recorded sample of every "runloop.timer-lateness*" row).
  func histogram(rows: [BenchmarkRow]) -> SVG {
    var bySubject: [(label: String, isToolkit: Bool, values: [Double])] = []
    for row in rows {
      let label =
        rows.contains { $0.subject == row.subject && $0.benchmark != row.benchmark }
        ? row.subject.name + " (" + row.benchmark + ")" : row.subject.name
      bySubject.append((label, row.subject.isToolkit, row.samples.filter { $0.isFinite }))
    }
    let all = bySubject.flatMap(\.values)
    let positive = all.filter { $0 > 0 }
    let low = Swift.max(1, positive.min() ?? 1)
    let high = Swift.max(low * 10, positive.max() ?? low * 10)
    let logLow = floor(log10(low))
    let logHigh = ceil(log10(high))
    let binsPerDecade = 8.0
    let binCount = Swift.max(1, Int((logHigh - logLow) * binsPerDecade))
    func bin(_ value: Double) -> Int {
      if value <= 0 { return 0 }
      return Swift.min(binCount - 1, Swift.max(0, Int((log10(value) - logLow) * binsPerDecade)))
    }
    let fractions = bySubject.map { entry -> [Double] in
      var counts = [Double](repeating: 0, count: binCount)
      for value in entry.values { counts[bin(value)] += 1 }
      let total = Swift.max(1, Double(entry.values.count))
      return counts.map { $0 / total }
    }
    let maximum = fractions.flatMap { $0 }.max() ?? 1
    var svg = SVG(width: 1080, height: 500)
    let left = 70.0
    let top = 70.0
    let plotWidth = 600.0
    let plotHeight = 340.0
    let ticks = niceTicks(upTo: maximum)
    let yTop = ticks.last ?? maximum
    func x(_ index: Double) -> Double { left + index / Double(binCount) * plotWidth }
    func y(_ fraction: Double) -> Double { top + plotHeight - fraction / yTop * plotHeight }
    svg.text(left, 28, "Timer lateness: fire time minus deadline", size: 17, weight: "bold")
    svg.text(
      left, 48, "share of samples per bin (log-spaced bins); left is better; never early is the goal", size: 12,
      fill: "#555555")
    for tick in ticks {
      svg.line(left, y(tick), left + plotWidth, y(tick), stroke: "#e3e3e3")
      svg.text(left - 8, y(tick) + 4, Format.fixed(tick * 100, 0) + "%", size: 11, anchor: "end")
    }
    var decade = logLow
    while decade <= logHigh {
      let position = x((decade - logLow) * binsPerDecade)
      svg.line(position, top, position, top + plotHeight, stroke: "#e3e3e3")
      svg.text(position, top + plotHeight + 18, Format.value(pow(10, decade), unit: "ns"), size: 11, anchor: "middle")
      decade += 1
    }
    svg.line(left, top + plotHeight, left + plotWidth, top + plotHeight, stroke: "#444444")
    svg.line(left, top, left, top + plotHeight, stroke: "#444444")
    svg.text(left + plotWidth / 2, top + plotHeight + 40, "lateness (log scale)", size: 12, anchor: "middle")
    let colors = Charts.colors(for: bySubject.map { (label: $0.label, isToolkit: $0.isToolkit) })
    var legendY = top + 6
    for (index, entry) in bySubject.enumerated() {
      let color = colors[entry.label] ?? "#000000"
      var points: [(Double, Double)] = [(x(0), y(0))]
      for (binIndex, fraction) in fractions[index].enumerated() {
        points.append((x(Double(binIndex)), y(fraction)))
        points.append((x(Double(binIndex + 1)), y(fraction)))
      }
      points.append((x(Double(binCount)), y(0)))
      let ours = entry.isToolkit
      svg.polyline(points, stroke: color, width: ours ? 2.5 : 2, dashed: !ours)
      let sorted = entry.values.sorted()
      func percentile(_ p: Double) -> String {
        sorted.isEmpty
          ? "n/a" : Format.value(sorted[Swift.min(sorted.count - 1, Int(Double(sorted.count) * p))], unit: "ns")
      }
      let legendX = left + plotWidth + 20
      svg.line(legendX, legendY, legendX + 26, legendY, stroke: color, width: ours ? 3 : 2)
      svg.text(legendX + 32, legendY + 4, entry.label, size: 12, weight: ours ? "bold" : "normal")
      svg.text(
        legendX + 32, legendY + 19,
        "p50 " + percentile(0.5) + ", p99 " + percentile(0.99) + ", max "
          + (sorted.last.map { Format.value($0, unit: "ns") } ?? "n/a")
          + ", n=" + String(sorted.count), size: 11, fill: "#555555")
      legendY += 40
    }
    return svg
  }
}

extension Charts {
  /// What N counts in a scaling series: threads, except for the run-loop and thread-creation
  /// series, which count items or threads already running.
  static func axisLabel(for base: String) -> String {
    if base.hasSuffix("pass-with-timers") { return "timers in the mode (N)" }
    if base.hasSuffix("pass-with-fd-sources") { return "fd sources in the mode (N)" }
    if base.hasSuffix("create-with-existing") { return "threads already running (N)" }
    return "threads (N)"
  }
}
