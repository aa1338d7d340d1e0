import NIOCore
import NIOPosix
import Synchronization
import Testing
@testable import TokendOAuth

@Suite struct PacingStateTests {
    @Test func theFirstStormRequestStartsTheNapsAndLaterOnesJoinThem() {
        var state = PacingState()
        let first = state.requestStarted(interval: .milliseconds(50))
        #expect(first)
        let second = state.requestStarted(interval: .milliseconds(50))
        #expect(!second)
        #expect(state.outstanding == 2)
        #expect(state.napping)
    }

    @Test func napsGoOnWhileRequestsAreOutstandingAndEndWithTheLast() {
        var state = PacingState()
        _ = state.requestStarted(interval: .milliseconds(50))
        _ = state.requestStarted(interval: .milliseconds(50))
        do { let nap = state.nextNap(); #expect(nap == .milliseconds(50)) }
        state.requestFinished()
        do { let nap = state.nextNap(); #expect(nap == .milliseconds(50)) }
        state.requestFinished()
        do { let nap = state.nextNap(); #expect(nap == nil) }
        #expect(!state.napping)
        // The next storm starts them again.
        let first = state.requestStarted(interval: .milliseconds(50))
        #expect(first)
    }

    @Test func theShortestIntervalAskedForWinsUntilTheStormEnds() {
        var state = PacingState()
        _ = state.requestStarted(interval: .milliseconds(50))
        _ = state.requestStarted(interval: .milliseconds(20))
        _ = state.requestStarted(interval: .milliseconds(80))
        do { let nap = state.nextNap(); #expect(nap == .milliseconds(20)) }
        for _ in 0..<3 { state.requestFinished() }
        do { let nap = state.nextNap(); #expect(nap == nil) }
        _ = state.requestStarted(interval: .milliseconds(80))
        do { let nap = state.nextNap(); #expect(nap == .milliseconds(80)) }
    }

    @Test func moreFinishesThanStartsDoNotGoBelowZero() {
        var state = PacingState()
        state.requestFinished()
        #expect(state.outstanding == 0)
        _ = state.requestStarted(interval: .milliseconds(50))
        #expect(state.outstanding == 1)
    }
}

@Suite struct StormPacerTests {
    /// While paced, the loop still runs what it is given and polls its sockets (between naps),
    /// and the naps end once no storm request is outstanding.
    @Test func aPacedLoopKeepsWorkingAndStopsPacingAfterTheStorm() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let pacer = StormPacer(loop: loop)
        pacer.requestStarted(pacing: .milliseconds(5))
        var finished = false
        defer { if !finished { pacer.requestFinished(pacing: .milliseconds(5)) } }
        #expect(pacer.isPacing)
        // Tasks and timers still run on a paced loop.
        for _ in 0..<5 {
            try await loop.submit {}.get()
            try await loop.scheduleTask(in: .milliseconds(1)) {}.futureResult.get()
        }
        // And so do its sockets: a connection to a listener on the same loop completes (a nap
        // loop that starved the poll would end this in the connect timeout instead).
        let server = try await ServerBootstrap(group: group).bind(host: "127.0.0.1", port: 0).get()
        let client = try await ClientBootstrap(group: group).connectTimeout(.seconds(5))
            .connect(to: try #require(server.localAddress)).get()
        try await client.close()
        try await server.close()
        #expect(pacer.isPacing)
        pacer.requestFinished(pacing: .milliseconds(5))
        finished = true
        // The nap under way ends and no other follows; bounded by count, not by a timing claim.
        var rounds = 0
        while pacer.isPacing, rounds < 1000 {
            try await loop.scheduleTask(in: .milliseconds(5)) {}.futureResult.get()
            rounds += 1
        }
        #expect(!pacer.isPacing)
        try await group.shutdownGracefully()
    }

    @Test func requestsWithoutPacingLeaveTheLoopAlone() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let pacer = StormPacer(loop: group.next())
        pacer.requestStarted(pacing: .zero)
        #expect(!pacer.isPacing)
        pacer.requestFinished(pacing: .zero)
        try await group.shutdownGracefully()
    }
}
