import Synchronization
import Testing
import TokendClient

/// The one-shot box behind the completion-handler API.
struct TokenRequestTests {
    final class Calls: Sendable {
        let results = Mutex<[Result<Credentials, any Error>]>([])
        var count: Int { results.withLock { $0.count } }
        var handler: TokenRequest.Completion { { [self] result in results.withLock { $0.append(result) } } }
    }

    static let credentials = Credentials(
        userIdentifier: "alice", accessToken: "t", tokenType: "Bearer", expiresAt: 2_000_000_000)

    @Test func completesOnceAndDropsLaterResults() {
        let calls = Calls()
        let request = TokenRequest(completion: calls.handler)
        #expect(!request.isCompleted)
        #expect(request.complete(with: .success(Self.credentials)))
        #expect(!request.complete(with: .failure(TokendClientError(code: .timeout))))
        request.cancel()
        #expect(calls.count == 1)
        #expect(request.isCompleted && !request.isCancelled)
    }

    @Test func cancelCompletesAtOnceWithCancelledAndStopsTheWork() {
        let calls = Calls()
        let stopped = Atomic<Int>(0)
        let request = TokenRequest(completion: calls.handler)
        request.setCancellationHandler { stopped.add(1, ordering: .relaxed) }
        request.cancel()
        #expect(calls.count == 1)
        #expect(stopped.load(ordering: .relaxed) == 1)
        guard case .failure(let error)? = calls.results.withLock({ $0.first }) else {
            Issue.record("cancel did not complete with an error")
            return
        }
        #expect((error as? TokendClientError)?.code == .cancelled)
        #expect(!request.complete(with: .success(Self.credentials)))
        request.cancel()
        #expect(calls.count == 1 && stopped.load(ordering: .relaxed) == 1)
        // A handler set after cancellation runs at once; after completion, never.
        let late = Atomic<Int>(0)
        request.setCancellationHandler { late.add(1, ordering: .relaxed) }
        #expect(late.load(ordering: .relaxed) == 1)
        let done = TokenRequest(completion: Calls().handler)
        done.complete(with: .success(Self.credentials))
        done.setCancellationHandler { late.add(1, ordering: .relaxed) }
        done.cancel()
        #expect(late.load(ordering: .relaxed) == 1)
    }

    @Test func racingCompletionsCallTheHandlerExactlyOnce() async {
        for _ in 0..<200 {
            let calls = Calls()
            let request = TokenRequest(completion: calls.handler)
            let wins = await withTaskGroup(of: Int.self) { group in
                for index in 0..<8 {
                    group.addTask {
                        switch index % 3 {
                        case 0: return request.complete(with: .success(Self.credentials)) ? 1 : 0
                        case 1: return request.complete(with: .failure(TokendClientError(code: .timeout))) ? 1 : 0
                        default:
                            request.cancel()
                            return 0
                        }
                    }
                }
                return await group.reduce(0, +)
            }
            #expect(calls.count == 1)
            #expect(wins + (request.isCancelled ? 1 : 0) == 1)
        }
    }
}
