import TokendCore

/// Why a credential is being refreshed now.
enum RefreshReason: Sendable, Hashable, CustomStringConvertible {
    /// The planned point before the deadline was reached.
    case proactive
    /// A caller needs the token valid for longer than it is.
    case tooShortLived(minimumValidity: Duration)
    /// A caller reported that an API refused the token of this generation.
    case rejectedByAPI(generation: Int64)
    /// A grant was in flight when the daemon stopped; its outcome is unknown.
    case recovery

    var isCallerTriggered: Bool {
        switch self {
        case .tooShortLived, .rejectedByAPI: true
        case .proactive, .recovery: false
        }
    }

    /// A caller reported the token as refused by an API.
    var isRejection: Bool {
        if case .rejectedByAPI = self { return true }
        return false
    }

    var description: String {
        switch self {
        case .proactive: "proactive"
        case .tooShortLived(let validity): "a caller needs \(DurationFormat.humanReadable(validity)) of validity"
        case .rejectedByAPI: "an API rejected the token"
        case .recovery: "recovering an interrupted grant"
        }
    }
}
