import TokendConfig
import TokendCore
import TokendOAuth
import TokendProtocol

extension CredentialRegistry {
    /// Verifies the token of an `AddCredential` (or a finished HAT login) for a `hat` provider:
    /// RS256 signature against the PDA's public key, `alg`, `iss`, `application`, `exp`.
    /// - Returns: whether the provider is a HAT PDA (false: nothing was checked).
    /// - Throws: `InvalidCredential` with the specific reason; `RefreshFailed` when the PDA's
    ///   key cannot be fetched right now.
    func verifyHATEnrolment(_ request: AddCredentialRequest) async throws(VarlinkError) -> Bool {
        guard case .hat? = settings.current.providers[request.provider]?.kind else { return false }
        guard let verifier = refreshers.hatVerifiers[request.provider] else {
            throw .invalidCredential("provider \(request.provider) is not ready; try again")
        }
        guard request.refreshToken == nil else {
            throw .invalidCredential("a HAT PDA issues no refresh token; add only the token")
        }
        do {
            let verified = try await verifier.verify(request.accessToken, now: now())
            logger.info(
                "HAT token verified",
                metadata: [
                    "user_identifier": "\(request.userIdentifier)", "provider": "\(request.provider)",
                    "expires_in": "\(DurationFormat.humanReadable(verified.expiresAt - now()))",
                ])
            return true
        } catch {
            logger.notice(
                "HAT token refused",
                metadata: [
                    "user_identifier": "\(request.userIdentifier)", "provider": "\(request.provider)", "problem": "\(error)",
                ])
            if error.isTransient {
                throw .refreshFailed(request.userIdentifier, reason: error.description, retryAt: nil)
            }
            throw .invalidCredential(error.description)
        }
    }
}
