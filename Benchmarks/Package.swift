// swift-tools-version:6.2
import PackageDescription

// The cost-tables benchmark, a package of its own so the toolkit's package exports no
// Foundation-linked product. It measures the toolkit through its public products, beside
// the peers (raw pthread, Synchronization, Foundation, libatomic_ops) in the same run.
// Run it from the repository root with `scripts/cost-tables` (a release build).

/// Swift 6 language mode (complete strict concurrency), warnings are errors.
let strict: [SwiftSetting] = [
  .swiftLanguageMode(.v6),
  .treatAllWarnings(as: .error),
]

let package = Package(
  name: "swift-threading-toolkit-benchmarks",
  products: [
    .executable(name: "cost-tables", targets: ["CostTables"]),
    .executable(name: "handoff-counts", targets: ["HandOffCounts"]),
  ],
  dependencies: [
    // The toolkit in this checkout, whatever its directory is called.
    .package(name: "swift-threading-toolkit", path: "..")
  ],
  targets: [
    // libatomic_ops as a peer in the atomics rows.
    .systemLibrary(
      name: "CBenchmarkAtomicOps",
      path: "Sources/CBenchmarkAtomicOps",
      pkgConfig: "atomic_ops",
      providers: [.apt(["libatomic-ops-dev"])]
    ),
    // The C calls Swift cannot make directly (GNU-only pthread calls, flag macros).
    .target(name: "CBenchmarkShims", path: "Sources/CBenchmarkShims"),
    // glibc's allocation statistics, for the rows that count bytes allocated per operation.
    .target(name: "CBenchmarkAllocationStats", path: "Sources/CBenchmarkAllocationStats"),

    // The guide's cost tables beside the peers, measured in one run.
    .executableTarget(
      name: "CostTables",
      dependencies: [
        .product(name: "Sync", package: "swift-threading-toolkit"),
        .product(name: "Threads", package: "swift-threading-toolkit"),
        .product(name: "RunLoop", package: "swift-threading-toolkit"),
        .product(name: "RunLoopConcurrency", package: "swift-threading-toolkit"),
        "CBenchmarkAtomicOps",
        "CBenchmarkShims",
        "CBenchmarkAllocationStats",
      ],
      path: "Sources/CostTables",
      swiftSettings: strict
    ),
    // Scheduler counts (migrations, context switches, CPU placement) of the cross-thread
    // hand-offs, for runs under `strace -c -f`; not part of the report.
    .executableTarget(
      name: "HandOffCounts",
      dependencies: [
        .product(name: "Sync", package: "swift-threading-toolkit"),
        .product(name: "Threads", package: "swift-threading-toolkit"),
        .product(name: "RunLoop", package: "swift-threading-toolkit"),
        "CBenchmarkShims",
      ],
      path: "Sources/HandOffCounts",
      swiftSettings: strict
    ),
  ]
)
