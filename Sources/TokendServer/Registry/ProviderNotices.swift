import Logging
import TokendConfig
import TokendCore

/// Journal lines said once per provider rather than once per credential: a provider whose
/// tokens live no longer than its margin, a provider whose answers do not say when tokens
/// expire.
struct ProviderNotices {
    private var said: Set<[String]> = []
    let logger: Logger

    init(logger: Logger) { self.logger = logger }

    /// A provider's tokens live no longer than its `refresh_margin`: the margin is shortened to
    /// a third of the lifetime (``RefreshPolicy/plan(issuedAt:deadline:lastGrantAt:jitter:)``);
    /// per credential, status and metrics show it (``ViewEntry/shorterThanMargin``).
    mutating func shortLivedTokens(provider: ProviderConfiguration, lifetime: Duration) {
        sayOnce(
            "tokens live no longer than refresh_margin; refreshing at two thirds of their lifetime instead", provider: provider,
            [
                "token_lifetime": "\(DurationFormat.humanReadable(lifetime))",
                "refresh_margin": "\(DurationFormat.humanReadable(provider.refreshPolicy.minimumMargin))",
            ])
    }

    /// A provider's answer did not say when its token expires: `assumed_lifetime` is used.
    mutating func assumedLifetime(provider: ProviderConfiguration, reason: String) {
        sayOnce(
            "token lifetime unknown; assuming assumed_lifetime", provider: provider,
            ["problem": "\(reason)", "assumed_lifetime": "\(DurationFormat.humanReadable(provider.refreshPolicy.assumedLifetime))"])
    }

    private mutating func sayOnce(_ message: Logger.Message, provider: ProviderConfiguration, _ metadata: Logger.Metadata) {
        guard said.insert(["\(message)", provider.name]).inserted else { return }
        logger.warning(message, metadata: metadata.merging(["provider": "\(provider.name)"]) { current, _ in current })
    }
}
