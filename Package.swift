// swift-tools-version: 6.2
import PackageDescription

/// One set of Swift settings for every target (as SwiftNIO does): Swift 6 language mode with
/// strict concurrency comes from the tools version; `ExistentialAny` keeps existentials visible.
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny")
]

let package = Package(
    name: "tokend",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "tokend", targets: ["tokend"]),
        .executable(name: "tokenctl", targets: ["tokenctl"]),
        /// The client library other programs link to get fresh tokens. Depends only on the
        /// protocol module and SwiftNIO.
        .library(name: "TokendClient", targets: ["TokendClient"]),
        .library(name: "TokendProtocol", targets: ["TokendProtocol"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/LebJe/TOMLKit.git", from: "0.6.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.7.1"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
    ],
    targets: [
        // Pure logic: credential model, deadlines, access policy, token-response parsing.
        // No I/O, no NIO; time is always passed in.
        .target(name: "TokendCore", dependencies: ["TokendJSON", "TokendReaders"], swiftSettings: swiftSettings),
        // The reader grammar (`uid:N`, `gid:N`, `user:NAME`, `group:NAME`), shared by the model and
        // the wire format. No dependencies.
        .target(name: "TokendReaders", swiftSettings: swiftSettings),
        // A strict, depth-limited JSON reader and writer for small messages. No dependencies.
        .target(name: "TokendJSON", swiftSettings: swiftSettings),
        // Varlink wire format: NUL framing, a strict JSON codec, call/reply types, the interface.
        .target(
            name: "TokendProtocol",
            dependencies: ["TokendJSON", "TokendReaders", .product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: swiftSettings
        ),
        // Configuration file (TOML) → validated, typed configuration.
        .target(
            name: "TokendConfig",
            dependencies: ["TokendCore", .product(name: "TOMLKit", package: "TOMLKit")],
            swiftSettings: swiftSettings
        ),
        // Encrypted credential store (SQLite via GRDB) and the master-key ring.
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
        // Everything that talks to identity providers over HTTP: grants, revocation, discovery.
        .target(
            name: "TokendOAuth",
            dependencies: [
                "TokendCore", "TokendConfig",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                // RSA signatures for private_key_jwt (RS256); Crypto has no RSA.
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // The shared store for several hosts: PostgreSQL through postgres-nio, with refresh
        // leases and change notifications.
        .target(
            name: "TokendPostgres",
            dependencies: [
                "TokendCore", "TokendStorage",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // Linux APIs Swift's Glibc module does not import (timerfd).
        .target(name: "CTokendShims"),
        // libsystemd (sd-daemon, sd-journal) for TokendSystemd.
        .systemLibrary(name: "CSystemd", pkgConfig: "libsystemd", providers: [.apt(["libsystemd-dev"])]),
        // systemd integration: sd_notify (readiness, status, reload, stop, watchdog), socket
        // activation, and a journal log handler.
        .target(
            name: "TokendSystemd",
            dependencies: ["CSystemd", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        // The daemon: socket server, peer credentials, token view, method dispatch.
        .target(
            name: "TokendServer",
            dependencies: [
                "TokendCore", "TokendProtocol", "TokendStorage", "TokendConfig", "TokendOAuth", "CTokendShims",
                "TokendSystemd", "TokendPostgres",
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ],
            swiftSettings: swiftSettings
        ),
        // Public client library: protocol module and SwiftNIO only.
        .target(
            name: "TokendClient",
            dependencies: [
                "TokendProtocol", "TokendJSON",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "tokend",
            dependencies: [
                "TokendServer", "TokendConfig", "TokendOAuth", "TokendSystemd", "TokendClient",
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // What tokenctl decides and renders (exit statuses, status tables, the one-shot parser,
        // the credential-helper formats), tested directly. Part of no product: not client API.
        .target(
            name: "TokenctlSupport",
            dependencies: ["TokendClient", "TokendJSON", "TokendProtocol"],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "tokenctl",
            dependencies: [
                "TokendClient", "TokenctlSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),
        // Helpers every test target shares: loopback ports, child processes, blocking work on
        // threads of its own, a real PostgreSQL server, the fuzz corpus. Not part of any product.
        .target(name: "TokendTestSupport", path: "Tests/TokendTestSupport", swiftSettings: swiftSettings),
        .testTarget(name: "TokendJSONTests", dependencies: ["TokendJSON", "TokendTestSupport"], swiftSettings: swiftSettings),
        .testTarget(name: "TokendCoreTests", dependencies: ["TokendCore", "TokendTestSupport"], swiftSettings: swiftSettings),
        .testTarget(
            name: "TokendServerTests",
            dependencies: ["TokendServer", "TokendCore", "TokendConfig", "TokendOAuth", "CTokendShims", "TokendTestSupport"],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "TokendProtocolTests",
            dependencies: [
                "TokendProtocol", "TokendTestSupport", .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOTestUtils", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "TokendSystemdTests",
            dependencies: ["TokendSystemd", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "TokendOAuthTests",
            dependencies: [
                "TokendOAuth", "TokendCore", "TokendConfig", "TokendJSON", "TokendTestSupport",
                .product(name: "Crypto", package: "swift-crypto"), .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(name: "TokendConfigTests", dependencies: ["TokendConfig", "TokendTestSupport"], swiftSettings: swiftSettings),
        .testTarget(name: "TokendStorageTests", dependencies: ["TokendStorage", "TokendCore"], swiftSettings: swiftSettings),
        .testTarget(
            name: "TokendPostgresTests",
            dependencies: [
                "TokendPostgres", "TokendStorage", "TokendCore", "TokendTestSupport",
                // Rows read directly, to write them back as a node of an earlier version did.
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "TokendClientTests",
            dependencies: [
                "TokendClient", "TokendProtocol", "TokendJSON",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "TokenctlSupportTests",
            dependencies: ["TokenctlSupport", "TokendClient", "TokendProtocol", "TokendJSON", "TokendTestSupport"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "TokendIntegrationTests",
            dependencies: ["TokendClient", "TokendProtocol", "TokendTestSupport"],
            swiftSettings: swiftSettings
        ),
    ]
)
