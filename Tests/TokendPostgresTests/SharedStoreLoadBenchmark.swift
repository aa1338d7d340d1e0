import Foundation
import Logging
import Testing
import TokendCore
import TokendTestSupport

@testable import TokendPostgres
@testable import TokendStorage

/// What a node's start-up costs per credential of the shared store: opening it, loading every
/// row (authenticated, checked against the node's floors) and the first reconciliation, for a
/// node that never ran (no floors yet) and one restarted (floors kept). Prints numbers, asserts
/// nothing; runs only with `TOKEND_BENCH=1` (`TOKEND_BENCH_CREDENTIALS`, default 50,000).
@Suite(.serialized, .enabled(if: BenchmarkRequest.isOn, "run with TOKEND_BENCH=1"))
struct SharedStoreLoadBenchmark {
    static func milliseconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
    }

    @Test func startUpLoad() async throws {
        let count = Int(ProcessInfo.processInfo.environment["TOKEND_BENCH_CREDENTIALS"] ?? "") ?? 50_000
        try await withServer { server in
            let writer = try await Fixture.open(server, node: "writer")
            let workers = 16
            try await withThrowingTaskGroup(of: Void.self) { group in
                for worker in 0..<workers {
                    group.addTask {
                        for index in stride(from: worker, to: count, by: workers) {
                            _ = try await writer.insert(Fixture.credential("user\(index)"), replacing: false)
                        }
                    }
                }
                try await group.waitForAll()
            }
            try await writer.close()
            var rows: [(String, Double)] = []
            for round in 0..<3 {
                let directory = server.directory + "/bench-node-\(round)"
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
                for phase in ["first start", "restart"] {
                    var settings = Fixture.settings(server, node: "node-\(round)")
                    // Loading tens of thousands of rows takes longer than one operation's usual bound.
                    settings.operationTimeoutMilliseconds = 600_000
                    settings.stateDirectory = directory
                    let start = ContinuousClock.now
                    let store = try await PostgresCredentialStore.open(
                        settings: settings, keyring: Fixture.keyring, logger: Logger(label: "bench"))
                    let loaded = try await store.loadIndex().count
                    _ = try await store.generations()
                    let elapsed = ContinuousClock.now - start
                    try await store.close()
                    precondition(loaded == count, "loaded \(loaded) of \(count)")
                    rows.append(("\(phase), round \(round + 1)", Self.milliseconds(elapsed)))
                }
            }
            print("\nshared store start-up load (\(count) credentials, PostgreSQL 15 on 127.0.0.1)")
            for (name, value) in rows {
                print(
                    name.padding(toLength: 26, withPad: " ", startingAt: 0)
                        + String(format: "%8.0f ms  %6.1f µs per credential", value, value * 1000 / Double(count)))
            }
        }
    }

    /// The part of start-up the floors add, without the database: writing the floors of
    /// `count` credentials seen for the first time and reading them back at the next start, as
    /// a node keeps them (`shared-store.sqlite`) and as earlier versions did (one JSON file,
    /// rewritten whole at each reconciliation that found a change).
    @Test func floorBookkeeping() async throws {
        let count = Int(ProcessInfo.processInfo.environment["TOKEND_BENCH_CREDENTIALS"] ?? "") ?? 50_000
        let floors = Dictionary(uniqueKeysWithValues: (0..<count).map { ("user\($0)", Int64($0 + 1)) })
        var rows: [(String, Double)] = []
        for round in 1...3 {
            let directory = NSTemporaryDirectory() + "tokend-floors-bench-\(UInt64.random(in: 0...UInt64.max))"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: directory) }
            // Earlier versions: the whole JSON file, written and read.
            let file = directory + "/shared-store-generations.json"
            var start = ContinuousClock.now
            try StateFile.replace(file, with: try GenerationFloors(store: "s", floors: floors).encoded())
            rows.append(("JSON file, write all, round \(round)", Self.milliseconds(ContinuousClock.now - start)))
            start = ContinuousClock.now
            let read = GenerationFloors.decoded(try StateFile.read(file, limit: 256 << 20) ?? [])
            precondition(read?.floors.count == count)
            rows.append(("JSON file, read all, round \(round)", Self.milliseconds(ContinuousClock.now - start)))
            // This version: one batch raised (one transaction, one fsync), then opened again.
            let path = directory + "/" + SharedStoreMemory.fileName
            let memory = try SharedStoreMemory(path: path, keyring: Fixture.keyring)
            start = ContinuousClock.now
            try await memory.raise(floors.mapValues { SharedStoreMemory.Floor(generation: $0) })
            rows.append(("shared-store.sqlite, raise all, round \(round)", Self.milliseconds(ContinuousClock.now - start)))
            start = ContinuousClock.now
            let reopened = try SharedStoreMemory(path: path, keyring: Fixture.keyring)
            precondition(reopened.floors().count == count)
            rows.append(("shared-store.sqlite, open and read all, round \(round)", Self.milliseconds(ContinuousClock.now - start)))
            // One floor raised again (a grant): its own transaction and fsync.
            var single: [Double] = []
            for index in 0..<200 {
                start = ContinuousClock.now
                try await memory.raise(["user\(index)": SharedStoreMemory.Floor(generation: Int64(count + index))])
                single.append(Self.milliseconds(ContinuousClock.now - start))
            }
            rows.append(("shared-store.sqlite, one floor, median, round \(round)", single.sorted()[single.count / 2]))
        }
        print("\nfloor bookkeeping (\(count) credentials, \(NSTemporaryDirectory()))")
        for (name, value) in rows {
            print(
                name.padding(toLength: 52, withPad: " ", startingAt: 0)
                    + String(format: "%9.2f ms  %6.2f µs per credential", value, value * 1000 / Double(count)))
        }
    }
}
