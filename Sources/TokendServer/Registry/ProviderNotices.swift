import Logging
import TokendConfig
import TokendCore

/// Journal lines said once per provider rather than once per credential: a provider whose
/// tokens live no longer than its margin, a provider whose answers do not say when tokens
/// expire.
struct ProviderNotices {
    private var said: Set<[String]> = []
    /// Providers seen narrowing a credential's refresh token after a narrowed grant.
    private var narrowingRefreshTokens: Set<String> = []
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

    /// A credential's own refresh came back with less scope than it had, after narrowed grants:
    /// the provider narrowed the refresh token itself (RFC 6749 §6 says its scope stays). From
    /// now on no narrowed token is asked of it, so that no other credential loses scope.
    mutating func refreshTokenNarrowed(provider: ProviderConfiguration, userIdentifier: String, lost: [String]) {
        narrowingRefreshTokens.insert(provider.name)
        logger.error(
            "the provider narrowed a refresh token after a narrowed grant; narrowed tokens of this provider are refused from now on",
            metadata: [
                "provider": "\(provider.name)", "user_identifier": "\(userIdentifier)", "scope_lost": "\(lost.joined(separator: " "))",
                "remedy": "log the user in again to get the scope back; set narrowed_tokens = false for this provider",
            ])
    }

    func narrowsRefreshTokens(_ provider: ProviderConfiguration) -> Bool { narrowingRefreshTokens.contains(provider.name) }

    private mutating func sayOnce(_ message: Logger.Message, provider: ProviderConfiguration, _ metadata: Logger.Metadata) {
        guard said.insert(["\(message)", provider.name]).inserted else { return }
        logger.warning(message, metadata: metadata.merging(["provider": "\(provider.name)"]) { current, _ in current })
    }
}
