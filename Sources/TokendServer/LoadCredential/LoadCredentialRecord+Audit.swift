import Logging
import TokendCore

extension LoadCredentialRecord {
    /// `AUDIT_METHOD` of a `LoadCredential=` delivery.
    static let auditMethod = "LoadCredential"

    /// The record in the audit trail too: a delivery as a release of `entry`'s token, a refusal
    /// with its reason. Called beside ``log(_:)``, for every answer on the socket.
    ///
    /// - Parameters:
    ///   - trail: The audit trail.
    ///   - entry: The entry whose token was delivered; nil for a refusal.
    func audit(_ trail: AuditTrail, delivered entry: ViewEntry?) {
        guard trail.isEnabled else { return }
        var extra: Logger.Metadata = [:]
        if let id = request?.credentialID { extra["audit_credential_id"] = .string(id) }
        if let asked = request?.unit, asked != callerUnit { extra["audit_requested_unit"] = .string(asked) }
        let refusal: String?
        switch result {
        case .delivered: refusal = nil
        case .refused(let why): refusal = why.description
        }
        let fingerprint = refusal == nil ? entry?.fingerprint : nil
        trail.delivery(
            credential: credential ?? "-", method: Self.auditMethod, unit: callerUnit, uid: uid, pid: pid, fingerprint: fingerprint,
            refusal: refusal ?? (fingerprint == nil ? "the stored token cannot be read" : nil), extra: extra)
    }
}
