import Foundation
import NIOCore
import NIOPosix
import Synchronization
import Testing
import TokendTestSupport

@testable import TokendOAuth

@Suite struct PacingStateTests {
    @Test func napsRunWhileStormRequestsAreOutstandingAndEndWithTheLast() {
        var state = PacingState()
        do {
            let nap = state.nextNap()
            #expect(nap == nil)
        }
        state.requestStarted(interval: .milliseconds(50))
        state.requestStarted(interval: .milliseconds(50))
        #expect(state.outstanding == 2)
        do {
            let nap = state.nextNap()
            #expect(nap == .milliseconds(50))
        }
        state.requestFinished()
        do {
            let nap = state.nextNap()
            #expect(nap == .milliseconds(50))
        }
        state.requestFinished()
        do {
            let nap = state.nextNap()
            #expect(nap == nil)
        }
    }

    @Test func theShortestIntervalAskedForWinsUntilTheStormEnds() {
        var state = PacingState()
        state.requestStarted(interval: .milliseconds(50))
        state.requestStarted(interval: .milliseconds(20))
        state.requestStarted(interval: .milliseconds(80))
        do {
            let nap = state.nextNap()
            #expect(nap == .milliseconds(20))
        }
        for _ in 0..<3 { state.requestFinished() }
        do {
            let nap = state.nextNap()
            #expect(nap == nil)
        }
        state.requestStarted(interval: .milliseconds(80))
        do {
            let nap = state.nextNap()
            #expect(nap == .milliseconds(80))
        }
    }

    @Test func moreFinishesThanStartsDoNotGoBelowZero() {
        var state = PacingState()
        state.requestFinished()
        #expect(state.outstanding == 0)
        state.requestStarted(interval: .milliseconds(50))
        #expect(state.outstanding == 1)
    }
}

@Suite struct StormPacerTests {
    /// A one-loop group paced by `pacer`, as ``HTTPClientPool`` makes it.
    static func pacedGroup(_ pacer: StormPacer) -> MultiThreadedEventLoopGroup {
        MultiThreadedEventLoopGroup(numberOfThreads: 1, metricsDelegate: pacer)
    }

    /// While paced, the loop still runs what it is given and polls its sockets (between naps),
    /// and the naps end once no storm request is outstanding.
    @Test func aPacedLoopKeepsWorkingAndStopsPacingAfterTheStorm() async throws {
        let pacer = StormPacer()
        let group = Self.pacedGroup(pacer)
        let loop = group.next()
        pacer.requestStarted(pacing: .milliseconds(5))
        var finished = false
        defer { if !finished { pacer.requestFinished(pacing: .milliseconds(5)) } }
        #expect(pacer.isPacing)
        // Tasks and timers still run on a paced loop.
        for _ in 0..<5 {
            try await loop.submit {}.get()
            try await loop.scheduleTask(in: .milliseconds(1)) {}.futureResult.get()
        }
        // And so do its sockets: a connection to a listener on the same loop completes.
        let server = try await ServerBootstrap(group: group).bind(host: "127.0.0.1", port: 0).get()
        let client = try await ClientBootstrap(group: group).connectTimeout(.seconds(5))
            .connect(to: try #require(server.localAddress)).get()
        try await client.close()
        try await server.close()
        #expect(pacer.isPacing)
        pacer.requestFinished(pacing: .milliseconds(5))
        finished = true
        #expect(!pacer.isPacing)
        // Unpaced again: a hundred ticks in a row, none of them followed by a nap, run quickly
        // (a bound by count; the nap would be 5 ms each).
        for _ in 0..<100 { try await loop.submit {}.get() }
        try await group.shutdownGracefully()
    }

    /// The loop busy with work handed to it from other threads — as a storm's grants hand it
    /// requests — still polls its sockets between naps. (A nap scheduled as a task could
    /// fall due again before the loop polled, when the work queued during a nap took longer
    /// than the gap: naps then ran back to back and a connect here timed out.)
    @Test func aBusyPacedLoopStillPollsBetweenNaps() async throws {
        let pacer = StormPacer()
        let group = Self.pacedGroup(pacer)
        let loop = group.next()
        pacer.requestStarted(pacing: .milliseconds(5))
        defer { pacer.requestFinished(pacing: .milliseconds(5)) }
        let stop = StopFlag()
        // Every 2 ms, a task that keeps the loop busy for 0.3 ms: about three queue up during
        // each nap. Bounded: at most 3,000 tasks (6 s), fewer once the connect is done.
        let feeder = Task.detached {
            for _ in 0..<3000 where !stop.isRaised {
                loop.execute {
                    let until = DispatchTime.now().uptimeNanoseconds + 300_000
                    while DispatchTime.now().uptimeNanoseconds < until {}
                }
                try? await Task.sleep(for: .milliseconds(2))
            }
        }
        defer { stop.raise() }
        let server = try await ServerBootstrap(group: group).bind(host: "127.0.0.1", port: 0).get()
        let started = ContinuousClock.now
        let connected: Result<any Channel, any Error> = await Result {
            try await ClientBootstrap(group: group).connectTimeout(.seconds(5))
                .connect(to: try #require(server.localAddress)).get()
        }
        let took = ContinuousClock.now - started
        stop.raise()
        await feeder.value
        if case .success(let client) = connected { try await client.close() }
        try await server.close()
        #expect(throws: Never.self, "connected in \(took)") { try connected.get() }
        try await group.shutdownGracefully()
    }

    @Test func requestsWithoutPacingLeaveTheLoopAlone() async throws {
        let pacer = StormPacer()
        let group = Self.pacedGroup(pacer)
        pacer.requestStarted(pacing: .zero)
        #expect(!pacer.isPacing)
        pacer.requestFinished(pacing: .zero)
        try await group.shutdownGracefully()
    }
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
