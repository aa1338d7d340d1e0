import Logging
import TokendCore

/// One answer on the `LoadCredential=` socket, as it goes to the log: who asked (as tokend saw
/// them), for which credential, and what they got. Never the token.
///
/// Every delivery and every refusal passes through ``log(_:)`` and nowhere else, so that one
/// place decides what such a record holds and where it goes.
struct LoadCredentialRecord: Sendable {
    enum Result: Sendable {
        /// The token was written; it is served until `expiresAt`.
        case delivered(expiresAt: Timestamp, format: LoadCredentialSettings.Format)
        case refused(LoadCredentialRefusal)
    }

    /// The connecting process.
    var uid: UInt32
    var pid: Int32
    /// What its name asked for, when it was systemd's form.
    var request: LoadCredentialName?
    /// The credential the ID named (after `load_credential.ids`), once known.
    var credential: String?
    var result: Result

    /// The record's journal fields (as metadata: `JournalLogHandler` makes each a field).
    var metadata: Logger.Metadata {
        var metadata: Logger.Metadata = [
            "uid": "\(uid)", "pid": "\(pid)", "unit": "\(request?.unit ?? "-")",
            "credential_id": "\(request?.credentialID ?? "-")",
        ]
        if let credential { metadata["user_identifier"] = "\(credential)" }
        if let seen = callerUnit { metadata["caller_unit"] = "\(seen)" }
        switch result {
        case .delivered(let expiresAt, let format):
            metadata["result"] = "delivered"
            metadata["format"] = "\(format.rawValue)"
            metadata["expires_at"] = "\(expiresAt.secondsSince1970)"
        case .refused(let refusal):
            metadata["result"] = "refused"
            metadata["reason"] = "\(refusal.code)"
            metadata["why"] = "\(refusal)"
        }
        return metadata
    }

    /// The unit tokend found the connecting process in, when it looked (`(none)`: in none).
    var callerUnit: String? {
        switch result {
        case .delivered: request?.unit
        case .refused(.otherUnit(_, let seen)): seen ?? "(none)"
        case .refused(.notAReader), .refused(.noSuchCredential), .refused(.reauthenticationRequired), .refused(.dpopBound),
            .refused(.tooShortLived), .refused(.refreshFailed), .refused(.timedOut), .refused(.storeUnreadable), .refused(.busy):
            // Refused after the caller was checked: it is in the unit it asked for.
            request?.unit
        case .refused(.unnamedPeer), .refused(.malformedName), .refused(.notTheSystemManager), .refused(.unitUnknown): nil
        }
    }

    /// Logs the record: a delivery at `info`, a refusal at `warning` (a unit will start without
    /// its credential, or fail).
    func log(_ logger: Logger) {
        switch result {
        case .delivered: logger.info("LoadCredential: token delivered", metadata: metadata)
        case .refused: logger.warning("LoadCredential: refused, nothing written", metadata: metadata)
        }
    }
}
