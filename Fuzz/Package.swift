// swift-tools-version: 6.2
import PackageDescription

/// libFuzzer targets over tokend's pure modules (issue 8, point 1).
///
/// The targets compile the root package's `TokendJSON`, `TokendCore` and `TokendProtocol` sources
/// (and `TokendConfig` without its TOML reader) directly: `Sources/<Module>` here are symlinks to
/// `../../Sources/<Module>`, because SwiftPM rejects a target `path:` outside the package root. A
/// sanitizer build so rebuilds only those and NIOCore, never GRDB, BoringSSL, AsyncHTTPClient or
/// TOMLKit. Build and run with `scripts/fuzz`; the committed corpora in
/// `Corpus/<target>/` and the minimised crashes in `Crashes/<target>/` are replayed without
/// sanitizers by the root package's `FuzzCorpusReplayTests`.
///
///     swift build -c release --package-path Fuzz \
///         -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny")
]

let package = Package(
    name: "tokend-fuzz",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.0")
    ],
    targets: [
        .target(name: "TokendJSON", swiftSettings: swiftSettings),
        .target(name: "TokendReaders", swiftSettings: swiftSettings),
        .target(name: "TokendCore", dependencies: ["TokendJSON", "TokendReaders"], swiftSettings: swiftSettings),
        .target(
            name: "TokendProtocol",
            dependencies: ["TokendJSON", "TokendReaders", .product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: swiftSettings
        ),
        // Configuration validation without the TOML reader (TOMLKit and its C++ stay out).
        .target(
            name: "TokendConfig",
            dependencies: ["TokendCore"],
            exclude: ["TOMLDocument.swift", "ConfigurationLoader.swift"],
            swiftSettings: swiftSettings
        ),
        // libFuzzer's `LLVMFuzzerRunDriver`, declared for Swift, and the glue every target shares.
        .target(name: "CLibFuzzer"),
        .target(name: "FuzzSupport", dependencies: ["CLibFuzzer"], swiftSettings: swiftSettings),
        // One executable per input kind; each defines `LLVMFuzzerTestOneInput`.
        .executableTarget(
            name: "fuzz-varlink",
            dependencies: ["FuzzSupport", "TokendProtocol", "TokendJSON", .product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: swiftSettings
        ),
        .executableTarget(name: "fuzz-json", dependencies: ["FuzzSupport", "TokendJSON"], swiftSettings: swiftSettings),
        .executableTarget(
            name: "fuzz-token-response", dependencies: ["FuzzSupport", "TokendCore", "TokendJSON"], swiftSettings: swiftSettings),
        .executableTarget(name: "fuzz-config", dependencies: ["FuzzSupport", "TokendConfig", "TokendJSON"], swiftSettings: swiftSettings),
        .executableTarget(name: "fuzz-jwt", dependencies: ["FuzzSupport", "TokendCore", "TokendJSON"], swiftSettings: swiftSettings),
        .executableTarget(name: "fuzz-hat", dependencies: ["FuzzSupport", "TokendCore", "TokendJSON"], swiftSettings: swiftSettings),
    ]
)
