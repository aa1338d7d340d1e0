// swift-tools-version: 6.2
import PackageDescription

/// tokend's benchmark tools (issue 7), kept out of the root package so CI never builds them.
///
/// - `TokendMicro`: micro-benchmarks with ordo-one/package-benchmark (Varlink codec, AES-GCM,
///   store read and durable write, allocations per operation). Run with
///   `swift package --scratch-path .build-bench benchmark` from this directory, or `bench/run`.
/// - `tokend-storegen`: writes an encrypted credential store of any size directly with the
///   `TokendStorage` code, for the scale and refresh-storm benchmarks in `bench/`, or a shared
///   PostgreSQL store with the `TokendPostgres` code, for the fleet benchmark.
/// - `nio-floor`: the floor of a SwiftNIO server (canned replies, as `bench/floor/echo_server.c`,
///   served the way tokend serves), for `bench/socket-bench.sh --floor-only`.
///
/// Like `Fuzz/`, the targets compile the root package's module sources directly:
/// `Sources/<Module>` here are symlinks to `../../Sources/<Module>` (SwiftPM rejects a target
/// `path:` outside the package root). Build with its own scratch path, under `nice`:
///
///     nice -n 10 swift build -c release --package-path Benchmarks --scratch-path Benchmarks/.build-bench
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny")
]

let package = Package(
    name: "tokend-benchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.0"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
    ],
    targets: [
        .target(name: "TokendJSON", swiftSettings: swiftSettings),
        .target(name: "CTokendShims"),
        .target(name: "TokendReaders", swiftSettings: swiftSettings),
        .target(name: "TokendCore", dependencies: ["TokendJSON", "TokendReaders"], swiftSettings: swiftSettings),
        .target(
            name: "TokendProtocol",
            dependencies: ["TokendJSON", "TokendReaders", .product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "TokendStorage",
            dependencies: [
                "TokendCore",
                "TokendJSON",
                "CTokendShims",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "TokendPostgres",
            dependencies: [
                "TokendCore", "TokendStorage",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "tokend-storegen",
            dependencies: [
                "TokendStorage", "TokendCore", "TokendJSON", "TokendPostgres", .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "nio-floor",
            dependencies: [.product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio")],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "TokendMicro",
            dependencies: [
                "TokendStorage", "TokendCore", "TokendJSON", "TokendProtocol",
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "Benchmarks/TokendMicro",
            swiftSettings: swiftSettings,
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ]
)
