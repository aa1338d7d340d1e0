import CoreMetrics
import TokendCore

/// Counts a provider's grants by outcome (`tokend_grants_total`) and times them
/// (`tokend_grant_duration_seconds`, a histogram), around the real refresher.
struct MeasuredRefresher: ProviderRefresher {
    let inner: any ProviderRefresher
    private let succeeded: Counter
    private let transient: Counter
    private let permanent: Counter
    private let unanswered: Counter
    private let duration: Timer

    init(provider: String, inner: any ProviderRefresher, factory: any MetricsFactory = MetricsSystem.factory) {
        self.inner = inner
        func counter(_ outcome: String) -> Counter {
            Counter(
                label: MetricName.grants, dimensions: [("provider", provider), ("outcome", outcome)], factory: factory)
        }
        succeeded = counter("success")
        transient = counter("transient")
        permanent = counter("permanent")
        unanswered = counter("unanswered")
        duration = Timer(label: MetricName.grantDuration, dimensions: [("provider", provider)], factory: factory)
    }

    func refresh(
        _ credential: Credential, narrowing: TokenNarrowing?, stormPacing: Duration, now: @escaping @Sendable () -> Timestamp
    ) async -> GrantOutcome {
        let start = ContinuousClock.now
        let outcome = await inner.refresh(credential, narrowing: narrowing, stormPacing: stormPacing, now: now)
        let elapsed = ContinuousClock.now - start
        duration.recordNanoseconds(
            elapsed.components.seconds * 1_000_000_000 + elapsed.components.attoseconds / 1_000_000_000)
        switch outcome {
        case .success: succeeded.increment()
        case .transient: transient.increment()
        case .permanent: permanent.increment()
        case .unanswered: unanswered.increment()
        }
        return outcome
    }

    func revoke(_ credential: Credential) async -> RevocationOutcome {
        await inner.revoke(credential)
    }
}
