import CoreMetrics
import NIOCore
import Synchronization
import TokendCore
import TokendProtocol

/// Metric names, in one place (they are an interface: dashboards and alerts use them).
enum MetricName {
    static let credentials = "tokend_credentials"
    static let grants = "tokend_grants_total"
    static let grantDuration = "tokend_grant_duration_seconds"
    static let requests = "tokend_requests_total"
    static let connections = "tokend_connections"
    static let connectionsAccepted = "tokend_connections_accepted_total"
    static let connectionsRefused = "tokend_connections_refused_total"
    static let nextRefresh = "tokend_next_refresh_seconds"
    /// Credentials whose tokens live no longer than their provider's `refresh_margin`.
    static let shortLived = "tokend_credentials_shorter_than_margin"
    static let reloads = "tokend_reloads_total"
    /// Shared-store rows refused by their integrity check, by `kind` (`altered`, `rolled_back`).
    static let storeIntegrityFailures = "tokend_store_integrity_failures_total"
    /// Seconds until the earliest re-login date, by `provider`, and also by `provider` and
    /// `credential` when `per_credential_labels` is on; -1 when none is ahead.
    static let reloginDeadline = "tokend_credential_relogin_deadline_seconds"
}

/// Counts calls by method and error through swift-metrics (`tokend_requests_total`), labelled
/// by each method's ``MethodDescriptor/metricsLabel`` (`unknown` for a method tokend does not serve).
///
/// Built for the hot path: a cached token answered on the event loop costs one comparison of
/// the parsed method, a look at the reply's first bytes and one atomic increment of a counter
/// made in advance. Error counters are made on first use (errors are not the hot path).
final class RequestMetrics: Sendable {
    private let factory: any MetricsFactory
    /// The success counter of `ProvideTokenReplacement`, the call that matters for speed.
    private let tokenServed: Counter
    /// Success counters of every served method.
    private let served: [ServedMethod: Counter]
    /// The success counter of calls of methods tokend does not serve.
    private let unknownServed: Counter
    /// Error counters, by "method label" + "\u{0}" + "error name".
    private let failures = Mutex<[String: Counter]>([:])

    static let unknownLabel = "unknown"

    /// - Parameter factory: Where counters are made; the bootstrapped `MetricsSystem` by default.
    init(factory: any MetricsFactory = MetricsSystem.factory) {
        self.factory = factory
        var served: [ServedMethod: Counter] = [:]
        for method in ServedMethod.allCases {
            served[method] = Counter(
                label: MetricName.requests, dimensions: [("method", method.descriptor.metricsLabel), ("error", "none")],
                factory: factory)
        }
        unknownServed = Counter(
            label: MetricName.requests, dimensions: [("method", Self.unknownLabel), ("error", "none")], factory: factory)
        self.served = served
        tokenServed = served[.tokenProvider(.provideTokenReplacement)]!
    }

    /// Records one call of `method` (nil: not served) and what the router decided.
    func record(method: ServedMethod?, outcome: CallOutcome) {
        switch outcome {
        case .reply(let message):
            record(method: method, firstReply: message)
        case .replies(let messages):
            if let first = messages.first { record(method: method, firstReply: first) } else { succeeded(method) }
        case .deferred(let future):
            // Off the hot path: the call waits for a refresh or a store write anyway.
            future.whenSuccess { [self] messages in
                if let first = messages.first {
                    self.record(method: method, firstReply: first)
                } else {
                    self.succeeded(method)
                }
            }
        default:
            succeeded(method)
        }
    }

    private func record(method: ServedMethod?, firstReply message: [UInt8]) {
        if let error = Self.errorName(in: message) {
            failed(method, error: error)
        } else {
            succeeded(method)
        }
    }

    private func succeeded(_ method: ServedMethod?) {
        switch method {
        case .tokenProvider(.provideTokenReplacement)?: tokenServed.increment()
        case let method?: served[method]!.increment()
        case nil: unknownServed.increment()
        }
    }

    private func failed(_ method: ServedMethod?, error: String) {
        let methodLabel = method?.descriptor.metricsLabel ?? Self.unknownLabel
        let key = methodLabel + "\u{0}" + error
        let counter = failures.withLock { counters in
            if let counter = counters[key] { return counter }
            let counter = Counter(
                label: MetricName.requests, dimensions: [("method", methodLabel), ("error", error)], factory: factory)
            counters[key] = counter
            return counter
        }
        counter.increment()
    }

    private static let errorPrefix = Array(#"{"error":""#.utf8)

    /// The error name of an encoded reply, or nil for a successful one. Only the names tokend
    /// itself produces are returned as they are, so the label's values stay a small, fixed set.
    static func errorName(in message: [UInt8]) -> String? {
        guard message.count > errorPrefix.count, message.starts(with: errorPrefix) else { return nil }
        let rest = message[errorPrefix.count...]
        guard let end = rest.firstIndex(of: UInt8(ascii: "\"")) else { return "other" }
        let name = String(decoding: rest[..<end], as: UTF8.self)
        let known = name.hasPrefix("io.tokend.TokenProvider.") || name.hasPrefix("org.varlink.service.")
        guard known, name.utf8.count <= 80,
            name.utf8.allSatisfy({
                $0 == UInt8(ascii: ".") || (0x30...0x39).contains($0) || (0x41...0x5A).contains($0)
                    || (0x61...0x7A).contains($0)
            })
        else {
            return "other"
        }
        return name
    }
}

/// Gauges computed from the view and the listener when metrics are read or written, so nothing
/// on the request path updates them.
final class StateGauges: Sendable {
    private let byState: [CredentialState: Gauge]
    private let nextRefresh: Gauge
    private let shortLived: Gauge
    private let connections: Gauge
    private let accepted: Counter
    private let refused: Counter
    private let reported = Mutex<(accepted: Int, refused: Int)>((0, 0))
    private let factory: any MetricsFactory
    private let perCredentialLabels: Bool
    /// Re-login gauges by provider, or by provider and credential, made on first use.
    private let relogin = Mutex<[String: Gauge]>([:])

    init(factory: any MetricsFactory = MetricsSystem.factory, perCredentialLabels: Bool = false) {
        self.factory = factory
        self.perCredentialLabels = perCredentialLabels
        var byState: [CredentialState: Gauge] = [:]
        for state in CredentialState.allCases {
            byState[state] = Gauge(
                label: MetricName.credentials, dimensions: [("state", state.rawValue)], factory: factory)
        }
        self.byState = byState
        nextRefresh = Gauge(label: MetricName.nextRefresh, factory: factory)
        shortLived = Gauge(label: MetricName.shortLived, factory: factory)
        connections = Gauge(label: MetricName.connections, factory: factory)
        accepted = Counter(label: MetricName.connectionsAccepted, factory: factory)
        refused = Counter(label: MetricName.connectionsRefused, factory: factory)
    }

    /// Brings every gauge up to date.
    func update(view: CredentialView, limiters: [ConnectionLimiter], now: Timestamp) {
        var counts: [CredentialState: Int] = [:]
        var next: Timestamp?
        var shorterThanMargin = 0
        var reloginBy: [String: (provider: String, credential: String?, at: Timestamp?)] = [:]
        for entry in view.unsortedSnapshot() {
            let ahead = entry.relogin.flatMap { $0.at > now && entry.status.state != .reauthenticationRequired ? $0.at : nil }
            // The provider's series always (the shipped alerts watch it); each credential's
            // beside it when asked for.
            let known = reloginBy[entry.provider]?.at
            reloginBy[entry.provider] = (entry.provider, nil, [known, ahead].compactMap { $0 }.min())
            if perCredentialLabels {
                reloginBy[entry.provider + "\u{0}" + entry.userIdentifier] = (entry.provider, entry.userIdentifier, ahead)
            }
            counts[entry.effectiveState(now: now), default: 0] += 1
            if entry.shorterThanMargin { shorterThanMargin += 1 }
            if let due = entry.nextRefreshAt, due < (next ?? due + .seconds(1)) { next = due }
        }
        for (state, gauge) in byState { gauge.record(counts[state] ?? 0) }
        updateRelogin(reloginBy, now: now)
        shortLived.record(shorterThanMargin)
        // Seconds until the next planned refresh; -1 when none is planned.
        if let next {
            nextRefresh.record(Double(max(0, (next - now).milliseconds)) / 1000)
        } else {
            nextRefresh.record(-1)
        }
        let totals = limiters.map(\.totals).reduce((open: 0, accepted: 0, refused: 0)) {
            (open: $0.open + $1.open, accepted: $0.accepted + $1.accepted, refused: $0.refused + $1.refused)
        }
        connections.record(totals.open)
        // Counters only go up: add what happened since the last update.
        let (newAccepted, newRefused) = reported.withLock { reported -> (Int, Int) in
            defer { reported = (totals.accepted, totals.refused) }
            return (totals.accepted - reported.accepted, totals.refused - reported.refused)
        }
        if newAccepted > 0 { accepted.increment(by: newAccepted) }
        if newRefused > 0 { refused.increment(by: newRefused) }
    }

    /// `tokend_credential_relogin_deadline_seconds`: seconds until each provider's earliest
    /// re-login date (or each credential's), -1 when none is ahead or the credential is gone.
    private func updateRelogin(_ dates: [String: (provider: String, credential: String?, at: Timestamp?)], now: Timestamp) {
        relogin.withLock { gauges in
            for (key, gauge) in gauges where dates[key] == nil { gauge.record(-1) }
            for (key, date) in dates {
                let gauge: Gauge
                if let known = gauges[key] {
                    gauge = known
                } else {
                    var dimensions = [("provider", date.provider)]
                    if let credential = date.credential { dimensions.append(("credential", credential)) }
                    gauge = Gauge(label: MetricName.reloginDeadline, dimensions: dimensions, factory: factory)
                    gauges[key] = gauge
                }
                gauge.record(date.at.map { Double(($0 - now).milliseconds) / 1000 } ?? -1)
            }
        }
    }
}
