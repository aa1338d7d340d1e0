import Foundation
import Logging
import Synchronization
import Testing
import TokendCore
import TokendPostgres
import TokendStorage
import TokendTestSupport

/// What refresh coordination through PostgreSQL costs: the database work of one grant with and
/// without the lease (take, fenced writes, release), and how many coordinated grants per second
/// three nodes get through, with each node's floors durable (as tokend runs) and in memory
/// only (what durability costs). Prints numbers, asserts nothing; runs only from
/// `bench/shared-store-bench.sh` (`TOKEND_BENCH=1`).
@Suite(.serialized, .enabled(if: BenchmarkRequest.isOn, "run by bench/shared-store-bench.sh"))
struct SharedStoreBenchmark {
    /// One grant's store work: mark in flight, store the refreshed tokens.
    static func grantWrites(_ store: PostgresCredentialStore, _ user: String) async throws {
        guard var credential = try await store.load(userIdentifier: user) else { return }
        credential.status.state = .refreshing
        credential.generation = try await store.updateStatus(
            userIdentifier: user, status: credential.status, expectedGeneration: credential.generation)
        credential.accessToken = SecretString("access-\(UInt64.random(in: 0..<UInt64.max))")
        credential.status.state = .valid
        credential.status.refreshCount += 1
        _ = try await store.update(credential, expectedGeneration: credential.generation)
    }

    static func percentile(_ values: [Double], _ p: Double) -> Double {
        let sorted = values.sorted()
        return sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
    }

    /// Each node's floors on disk in its own state directory (`durable`, as tokend runs), or
    /// kept in memory only: what making them durable before serving costs.
    @Test(arguments: [true, false])
    func coordinationCost(durable: Bool) async throws {
        try await withServer { server in
            let credentials = 300
            var stores: [PostgresCredentialStore] = []
            for index in 0..<3 {
                var settings = Fixture.settings(server, node: "bench-\(index)")
                if durable {
                    settings.stateDirectory = server.directory + "/bench-\(index)"
                    try FileManager.default.createDirectory(atPath: settings.stateDirectory!, withIntermediateDirectories: true)
                }
                stores.append(
                    try await PostgresCredentialStore.open(settings: settings, keyring: Fixture.keyring, logger: Logger(label: "bench")))
            }
            let nodes = stores.map { PostgresRefreshCoordination(store: $0, logger: Logger(label: "bench")) }
            // Adds one after another: each waits for its own floor (and its own fsync).
            var adds: [Double] = []
            for index in 0..<credentials {
                let start = ContinuousClock.now
                _ = try await stores[0].insert(Fixture.credential("user\(index)"), replacing: false)
                let elapsed = ContinuousClock.now - start
                adds.append(Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15)
            }

            // Sequential latency, one node: the grant's writes alone, then inside a lease.
            let rounds = 400
            var plain: [Double] = []
            var leased: [Double] = []
            for round in 0..<rounds {
                let user = "user\(round % credentials)"
                var start = ContinuousClock.now
                try await Self.grantWrites(stores[0], user)
                plain.append(
                    Double((ContinuousClock.now - start).components.attoseconds) / 1e15 + Double(
                        (ContinuousClock.now - start).components.seconds) * 1000)
                start = ContinuousClock.now
                guard case .granted(let lease) = await nodes[0].acquireLease(user) else { continue }
                try await Self.grantWrites(stores[0], user)
                await nodes[0].releaseLease(lease)
                let elapsed = ContinuousClock.now - start
                leased.append(Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15)
            }

            // Throughput: three nodes, eight workers each, all competing for the same credentials.
            let duration = Duration.seconds(10)
            let granted = Counter()
            let refused = Counter()
            let allStores = stores
            let end = ContinuousClock.now + duration
            await withTaskGroup(of: Void.self) { group in
                for (index, node) in nodes.enumerated() {
                    for _ in 0..<8 {
                        group.addTask {
                            while ContinuousClock.now < end {
                                let user = "user\(Int.random(in: 0..<credentials))"
                                switch await node.acquireLease(user) {
                                case .granted(let lease):
                                    try? await Self.grantWrites(allStores[index], user)
                                    await node.releaseLease(lease)
                                    granted.add()
                                default:
                                    refused.add()
                                }
                            }
                        }
                    }
                }
            }
            let perSecond = Double(granted.value) / 10
            let rows: [(String, String)] = [
                ("add a credential, median (ms)", String(format: "%.2f", Self.percentile(adds, 0.5))),
                ("add a credential, p99 (ms)", String(format: "%.2f", Self.percentile(adds, 0.99))),
                ("grant writes alone, median (ms)", String(format: "%.2f", Self.percentile(plain, 0.5))),
                ("grant writes alone, p99 (ms)", String(format: "%.2f", Self.percentile(plain, 0.99))),
                ("with lease take + release, median (ms)", String(format: "%.2f", Self.percentile(leased, 0.5))),
                ("with lease take + release, p99 (ms)", String(format: "%.2f", Self.percentile(leased, 0.99))),
                (
                    "added latency per grant, median (ms)",
                    String(format: "%.2f", Self.percentile(leased, 0.5) - Self.percentile(plain, 0.5))
                ),
                ("coordinated grants/s (3 nodes x 8 workers)", String(format: "%.0f", perSecond)),
                ("lease requests refused (held elsewhere)", "\(refused.value)"),
            ]
            let floors = durable ? "floors durable in each node's state directory" : "floors in memory only"
            print("\nshared store benchmark (PostgreSQL 15 on 127.0.0.1, \(credentials) credentials, \(floors))")
            for (name, value) in rows { print(name.padding(toLength: 46, withPad: " ", startingAt: 0) + value) }
            if let path = ProcessInfo.processInfo.environment["TOKEND_BENCH_OUT"].map({
                durable ? $0 : $0.replacing(".json", with: "-floors-in-memory.json")
            }) {
                let object: [String: Any] = [
                    "benchmark": "shared-store", "credentials": credentials, "sequential_rounds": rounds,
                    "add_ms_median": Self.percentile(adds, 0.5), "add_ms_p99": Self.percentile(adds, 0.99),
                    "grant_writes_ms_median": Self.percentile(plain, 0.5), "grant_writes_ms_p99": Self.percentile(plain, 0.99),
                    "leased_grant_ms_median": Self.percentile(leased, 0.5), "leased_grant_ms_p99": Self.percentile(leased, 0.99),
                    "added_latency_ms_median": Self.percentile(leased, 0.5) - Self.percentile(plain, 0.5),
                    "coordinated_grants_per_second": perSecond, "nodes": 3, "workers_per_node": 8,
                    "refused_lease_requests": refused.value, "durable_floors": durable,
                ]
                try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys]).write(
                    to: URL(fileURLWithPath: path))
            }
            for store in stores { try await store.close() }
        }
    }
}

final class Counter: Sendable {
    private let count = Mutex(0)
    func add() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}

enum BenchmarkRequest {
    static var isOn: Bool { ProcessInfo.processInfo.environment["TOKEND_BENCH"] == "1" && PostgresServer.isAvailable }
}
