import Synchronization

/// One request for a token made through a completion handler: the handler is called exactly
/// once, and the request can be cancelled.
///
/// The request owns the completion handler and hands it out at most once, under a lock: the
/// first of ``complete(with:)`` and ``cancel()`` takes it and calls it, and every later attempt
/// finds nothing to call. A second call is impossible by construction, whatever races between
/// the reply, the timeout, a lost connection and cancellation.
///
/// Conforming a type of your own to ``TokenProvider`` (a mock in tests, another source of
/// tokens) means creating one of these per call and completing it; the exactly-once guarantee
/// comes with it.
public final class TokenRequest: Sendable {
    /// The completion handler a ``TokenProvider`` calls.
    public typealias Completion = @Sendable (Result<Credentials, any Error>) -> Void

    private struct State {
        var completion: Completion?
        var onCancel: (@Sendable () -> Void)?
        var cancelled = false
    }

    private let state: Mutex<State>

    /// Creates a pending request.
    /// - Parameter completion: called once, with the credentials or the error.
    public init(completion: @escaping Completion) {
        state = Mutex(State(completion: completion))
    }

    /// Whether the completion handler was called (or is being called).
    public var isCompleted: Bool { state.withLock { $0.completion == nil } }

    /// Whether ``cancel()`` was called before the request completed.
    public var isCancelled: Bool { state.withLock { $0.cancelled } }

    /// Calls the completion handler with `result`, unless the request is already complete.
    ///
    /// The handler runs on the calling thread, outside any lock.
    /// - Parameter result: the credentials, or the error.
    /// - Returns: whether this call completed the request (`false`: it was already complete,
    ///   and `result` is dropped).
    @discardableResult
    public func complete(with result: Result<Credentials, any Error>) -> Bool {
        let taken: (completion: Completion?, onCancel: (@Sendable () -> Void)?) = state.withLock { state in
            let completion = state.completion
            state.completion = nil
            // Nothing left to cancel once the request is answered.
            let onCancel = state.onCancel
            state.onCancel = nil
            return (completion, onCancel)
        }
        _ = taken.onCancel  // released outside the lock
        guard let completion = taken.completion else { return false }
        completion(result)
        return true
    }

    /// Gives up on the request: unless it already completed, the completion handler is called
    /// with a ``TokendClientError`` of code `cancelled` before `cancel()` returns, and the work
    /// behind the request is stopped.
    ///
    /// Cancelling a request that already completed does nothing.
    public func cancel() {
        let taken: (completion: Completion?, onCancel: (@Sendable () -> Void)?) = state.withLock { state in
            guard let completion = state.completion else { return (nil, nil) }
            state.completion = nil
            state.cancelled = true
            let onCancel = state.onCancel
            state.onCancel = nil
            return (completion, onCancel)
        }
        guard let completion = taken.completion else { return }
        taken.onCancel?()
        completion(.failure(TokendClientError(code: .cancelled, message: "the token request was cancelled")))
    }

    /// Registers what ``cancel()`` stops (e.g. the task doing the work). When the request was
    /// already cancelled, `handler` runs at once; when it already completed, never.
    /// - Parameter handler: the work to stop; replaces an earlier handler.
    public func setCancellationHandler(_ handler: @escaping @Sendable () -> Void) {
        let runNow = state.withLock { state -> Bool in
            if state.cancelled { return true }
            if state.completion == nil { return false }
            state.onCancel = handler
            return false
        }
        if runNow { handler() }
    }
}
