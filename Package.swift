// swift-tools-version:6.2
import PackageDescription

/// Library targets: Swift 6 language mode (complete strict concurrency), warnings are errors.
let strict: [SwiftSetting] = [
  .swiftLanguageMode(.v6),
  .treatAllWarnings(as: .error),
]

let package = Package(
  name: "swift-threading-toolkit",
  products: [
    .library(name: "Sync", targets: ["Sync"]),
    .library(name: "Threads", targets: ["Threads"]),
    .library(name: "RunLoop", targets: ["RunLoop"]),
    .library(name: "RunLoopConcurrency", targets: ["RunLoopConcurrency"]),
  ],
  targets: [
    // The only places C is imported.
    .systemLibrary(
      name: "CAtomicOps",
      path: "Sources/CAtomicOps",
      pkgConfig: "atomic_ops",
      providers: [.apt(["libatomic-ops-dev"])]
    ),
    .target(name: "CThreadingShims", path: "Sources/CThreadingShims"),

    // The toolkit. Dependencies point one way: Sync <- Threads <- RunLoop.
    .target(name: "Sync", dependencies: ["CAtomicOps", "CThreadingShims"], swiftSettings: strict),
    .target(name: "Threads", dependencies: ["Sync", "CThreadingShims"], swiftSettings: strict),
    .target(name: "RunLoop", dependencies: ["Threads", "Sync", "CThreadingShims"], swiftSettings: strict),
    // Swift concurrency on run loops (executors, async bridges): above RunLoop, so the base
    // modules stay free of the concurrency runtime's executor machinery.
    .target(
      name: "RunLoopConcurrency", dependencies: ["RunLoop", "Threads", "Sync", "CThreadingShims"],
      swiftSettings: strict),

    // Helpers shared by the test targets above Sync (never by SyncTests or ThreadsTests,
    // which must not trust the primitives they test).
    .target(
      name: "TestSupport", dependencies: ["RunLoop", "RunLoopConcurrency", "Sync", "Threads", "ProcessTestSupport"], path: "Tests/TestSupport",
      exclude: ["Process"], swiftSettings: strict),
    // Fork helpers (wait for a child, bound it with an alarm): Glibc only, so SyncTests and
    // ThreadsTests may use them too.
    .target(name: "ProcessTestSupport", path: "Tests/TestSupport/Process", swiftSettings: strict),

    // Tests: one target per module, the guide's listings, and one target that imports
    // everything beside Foundation and Synchronization so name clashes fail the build.
    .testTarget(name: "SyncTests", dependencies: ["Sync", "ProcessTestSupport"], swiftSettings: strict),
    .testTarget(
      name: "ThreadsTests", dependencies: ["Threads", "Sync", "ProcessTestSupport", "CAllocationStats"],
      swiftSettings: strict),
    // glibc's allocation statistics for tests that prove a path allocates nothing (or that
    // repeated lifecycles leave nothing behind).
    .target(name: "CAllocationStats", path: "Tests/CAllocationStats"),
    .testTarget(
      name: "RunLoopTests",
      dependencies: [
        "RunLoop", "RunLoopConcurrency", "Threads", "Sync", "TestSupport", "ProcessTestSupport", "CAllocationStats",
      ],
      swiftSettings: strict),
    .testTarget(
      name: "RunLoopConcurrencyTests",
      dependencies: [
        "RunLoopConcurrency", "RunLoop", "Threads", "Sync", "TestSupport", "ProcessTestSupport", "CAllocationStats",
      ],
      swiftSettings: strict),
    .testTarget(
      name: "ExampleTests", dependencies: ["RunLoopConcurrency", "RunLoop", "Threads", "Sync", "TestSupport"],
      swiftSettings: strict),
    .testTarget(
      name: "InteropTests", dependencies: ["RunLoopConcurrency", "RunLoop", "Threads", "Sync"], swiftSettings: strict),

    // The guide's perform-on-main-thread with the process's real main thread (a test
    // runner's main thread never runs a run loop); ExampleTests runs it as a child process.
    .executableTarget(
      name: "PerformOnMainExample",
      dependencies: ["RunLoop", "Threads", "Sync"],
      path: "Examples/PerformOnMain",
      swiftSettings: strict
    ),
    // @MainActor code on the real main thread (MainRunLoopExecutor), with a timer and an actor
    // pinned to a worker run-loop thread; ExampleTests runs it as a child process.
    .executableTarget(
      name: "MainActorOnRunLoopExample",
      dependencies: ["RunLoopConcurrency", "RunLoop", "Threads", "Sync"],
      path: "Examples/MainActorOnRunLoop",
      swiftSettings: strict
    ),
  ]
)
