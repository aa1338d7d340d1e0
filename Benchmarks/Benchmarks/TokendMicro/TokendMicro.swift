import Benchmark
import Foundation
import NIOCore
import Synchronization
import TokendCore
import TokendJSON
import TokendProtocol
import TokendStorage

// Micro-benchmarks of the pieces on tokend's paths (issue 7, point 5). Every benchmark reports
// time and allocations per operation (package-benchmark's malloc interposer).
//
//   cd Benchmarks && swift package --scratch-path .build-bench benchmark

let opaqueToken = String(repeating: "A1b2C3d4E5", count: 4)  // 40 bytes
let jwtToken = String(repeating: "eyJhbGciOiJSUzI1NiJ9.", count: 47).prefix(1024).description  // 1 KiB

let request = Array(
    #"{"method":"io.tokend.TokenProvider.ProvideTokenReplacement","parameters":{"userIdentifier":"bench-user"}}"#.utf8)

func replyWire(_ token: String) -> VarlinkReply {
    let wire = Credentials(
        userIdentifier: "bench-user", accessToken: token, tokenType: "Bearer", expiresAt: 1_900_000_000,
        issuedAt: 1_800_000_000, scope: "read")
    return VarlinkReply(parameters: ["credentials": .object(wire.json)])
}

let keyring = Keyring(current: try! MasterKey(bytes: [UInt8](repeating: 7, count: 32)))
let cipher = CredentialCipher(keyring: keyring)
let salt = CredentialCipher.makeSalt()
let binding = SealBinding(userIdentifier: "bench-user", provider: "bench", column: .accessToken)

func credential(_ user: String, token: String) -> Credential {
    let now = Timestamp(millisecondsSince1970: Int64(Date().timeIntervalSince1970 * 1000))
    return Credential(
        userIdentifier: user, provider: "bench", accessToken: SecretString(token), refreshToken: SecretString(opaqueToken),
        tokenType: "Bearer", scope: "read", expiresAt: now + .seconds(86_400), issuedAt: now, sessionStartedAt: now,
        readers: [.uid(1000)], enrolment: Enrolment(uid: 1000, pid: 1, at: now))
}

let storeDirectories = Mutex<[String]>([])

/// Deletes every store directory `makeStore` made (the stores are dropped with the process).
func removeStoreDirectories() {
    for directory in storeDirectories.withLock({ $0 }) { try? FileManager.default.removeItem(atPath: directory) }
}

/// A store in a fresh temporary directory with `count` credentials (user-0 …).
func makeStore(count: Int) async throws -> (SQLiteCredentialStore, String) {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tokend-micro-\(UUID().uuidString)").path
    storeDirectories.withLock { $0.append(directory) }
    let store = try SQLiteCredentialStore(stateDirectory: directory, keyring: keyring)
    try await store.insertBulk((0..<count).map { credential("user-\($0)", token: opaqueToken) })
    return (store, directory)
}

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .cpuTotal, .mallocCountTotal, .throughput],
        warmupIterations: 100,
        maxDuration: .seconds(3),
        maxIterations: 1_000_000
    )

    // MARK: Varlink codec

    Benchmark("Varlink decode: ProvideTokenReplacement call") { benchmark in
        for _ in benchmark.scaledIterations { blackHole(try VarlinkCall.decode(request)) }
    }
    Benchmark("Varlink encode: credentials reply, 40 B token") { benchmark in
        let reply = replyWire(opaqueToken)
        for _ in benchmark.scaledIterations {
            var bytes: [UInt8] = []
            bytes.reserveCapacity(256)
            reply.encode(into: &bytes)
            blackHole(bytes)
        }
    }
    Benchmark("Varlink encode: credentials reply, 1 KiB JWT") { benchmark in
        let reply = replyWire(jwtToken)
        for _ in benchmark.scaledIterations {
            var bytes: [UInt8] = []
            bytes.reserveCapacity(1280)
            reply.encode(into: &bytes)
            blackHole(bytes)
        }
    }
    Benchmark("Varlink decode: credentials reply, 40 B token (client side)") { benchmark in
        var bytes: [UInt8] = []
        replyWire(opaqueToken).encode(into: &bytes)
        let frame = bytes.last == 0 ? Array(bytes.dropLast()) : bytes  // without a NUL
        for _ in benchmark.scaledIterations { blackHole(try VarlinkReply.decode(frame)) }
    }

    // MARK: AES-GCM

    for (name, token) in [("40 B token", opaqueToken), ("1 KiB JWT", jwtToken)] {
        let secret = SecretString(token)
        Benchmark("AES-GCM seal (HKDF subkey + seal), \(name)") { benchmark in
            for _ in benchmark.scaledIterations { blackHole(try cipher.seal(secret, salt: salt, binding: binding)) }
        }
        let sealed = try! cipher.seal(secret, salt: salt, binding: binding)
        Benchmark("AES-GCM open (HKDF subkey + open), \(name)") { benchmark in
            for _ in benchmark.scaledIterations { blackHole(try cipher.open(sealed, salt: salt, binding: binding)) }
        }
    }

    // MARK: Store

    Benchmark(
        "Store read: load one credential (1000 stored)",
        configuration: .init(maxDuration: .seconds(3), maxIterations: 100_000)
    ) { benchmark, context in
        for index in benchmark.scaledIterations {
            blackHole(try await context.0.load(userIdentifier: "user-\(index % 1000)"))
        }
    } setup: {
        try await makeStore(count: 1000)
    } teardown: {
        removeStoreDirectories()
    }

    Benchmark(
        "Store durable write: update one credential (fsync)",
        configuration: .init(maxDuration: .seconds(5), maxIterations: 2_000)
    ) { benchmark, context in
        var current = try await context.0.load(userIdentifier: "user-0")!
        for _ in benchmark.scaledIterations {
            current = try await context.0.update(current, expectedGeneration: current.generation)
        }
    } setup: {
        try await makeStore(count: 1000)
    } teardown: {
        removeStoreDirectories()
    }

    Benchmark(
        "Store start-up index: loadIndex of 10k credentials",
        configuration: .init(scalingFactor: .one, maxDuration: .seconds(5), maxIterations: 50)
    ) { benchmark, context in
        for _ in benchmark.scaledIterations { blackHole(try await context.0.loadIndex()) }
    } setup: {
        try await makeStore(count: 10_000)
    } teardown: {
        removeStoreDirectories()
    }

    Benchmark(
        "Store loadAll (decrypts every token) of 10k credentials",
        configuration: .init(scalingFactor: .one, maxDuration: .seconds(5), maxIterations: 20)
    ) { benchmark, context in
        for _ in benchmark.scaledIterations { blackHole(try await context.0.loadAll()) }
    } setup: {
        try await makeStore(count: 10_000)
    } teardown: {
        removeStoreDirectories()
    }
}
