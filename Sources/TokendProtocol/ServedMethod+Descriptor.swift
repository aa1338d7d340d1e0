/// What the daemon needs to know about a method before it runs it: whether it writes, who may
/// call it, whether it must be called with `more`, and how it is counted. docs/protocol.md's
/// table of methods states the same facts, and a test holds the two together.
public struct MethodDescriptor: Sendable, Hashable {
    /// Who may call a method, and where that is checked.
    public enum Callers: Sendable, Hashable, CaseIterable {
        /// Anyone; nothing is checked.
        case anyone
        /// Anyone; the reply holds only the credentials the caller may inspect (their readers
        /// and administrators), filtered by the handler.
        case anyoneSeeingWhatTheyMayInspect
        /// The readers of the credential named in the call (administrators are no exception),
        /// checked by the handler against the credential it answers with.
        case credentialReaders
        /// Administrators, and anyone for a credential read only by their own uid (self-enrolment),
        /// checked by the credential registry (for a renewal: its owner or an administrator).
        case credentialManagers
        /// Administrators only, checked by the router before anything else.
        case administrators
        /// The caller (uid) that began the login, checked by the open logins.
        case loginOwner

        /// The text of the "who may call" column of docs/protocol.md's table of methods.
        public var summary: String {
            switch self {
            case .anyone: "anyone"
            case .anyoneSeeingWhatTheyMayInspect: "anyone; each credential only to its readers and admins"
            case .credentialReaders: "readers of the credential"
            case .credentialManagers: "admins; anyone for a credential read only by their own uid"
            case .administrators: "admins"
            case .loginOwner: "the caller (uid) that began the login"
            }
        }
    }

    /// The method changes stored credentials: later calls on its connection are evaluated only
    /// after it has finished, so that they see its effect.
    public var isWrite: Bool
    public var callers: Callers
    /// The method streams its replies and is refused (`ExpectedMore`) without `more`.
    public var requiresMore: Bool
    /// The `method` label of `tokend_requests_total`.
    public var metricsLabel: String

    public init(isWrite: Bool, callers: Callers, requiresMore: Bool = false, metricsLabel: String) {
        self.isWrite = isWrite
        self.callers = callers
        self.requiresMore = requiresMore
        self.metricsLabel = metricsLabel
    }
}

extension ServedMethod {
    /// This method's one descriptor. A `switch` without `default:`: a new method has to be
    /// described here before anything compiles. The labels are literals (no allocation on the
    /// hot path) and are part of the metrics interface.
    public var descriptor: MethodDescriptor {
        switch self {
        case .tokenProvider(.provideTokenReplacement):
            MethodDescriptor(isWrite: false, callers: .credentialReaders, metricsLabel: "ProvideTokenReplacement")
        case .tokenProvider(.provideDPoPProof):
            MethodDescriptor(isWrite: false, callers: .credentialReaders, metricsLabel: "ProvideDPoPProof")
        case .tokenProvider(.watch):
            MethodDescriptor(isWrite: false, callers: .credentialReaders, requiresMore: true, metricsLabel: "Watch")
        case .tokenProvider(.status):
            MethodDescriptor(isWrite: false, callers: .anyoneSeeingWhatTheyMayInspect, metricsLabel: "Status")
        case .tokenProvider(.watchReloginWarnings):
            MethodDescriptor(
                isWrite: false, callers: .anyoneSeeingWhatTheyMayInspect, requiresMore: true, metricsLabel: "WatchReloginWarnings")
        case .tokenProvider(.addCredential):
            MethodDescriptor(isWrite: true, callers: .credentialManagers, metricsLabel: "AddCredential")
        case .tokenProvider(.removeCredential):
            MethodDescriptor(isWrite: true, callers: .credentialManagers, metricsLabel: "RemoveCredential")
        case .tokenProvider(.rotateKey):
            MethodDescriptor(isWrite: true, callers: .administrators, metricsLabel: "RotateKey")
        case .tokenProvider(.backup):
            MethodDescriptor(isWrite: false, callers: .administrators, requiresMore: true, metricsLabel: "Backup")
        case .tokenProvider(.reload):
            // A barrier: later calls on the connection see the configuration it applied.
            MethodDescriptor(isWrite: true, callers: .administrators, metricsLabel: "Reload")
        case .tokenProvider(.adoptStore):
            MethodDescriptor(isWrite: true, callers: .administrators, metricsLabel: "AdoptStore")
        case .tokenProvider(.beginLogin):
            // Nothing is stored until the login completes.
            MethodDescriptor(isWrite: false, callers: .credentialManagers, metricsLabel: "BeginLogin")
        case .tokenProvider(.completeLogin):
            MethodDescriptor(isWrite: true, callers: .loginOwner, metricsLabel: "CompleteLogin")
        case .tokenProvider(.cancelLogin):
            MethodDescriptor(isWrite: false, callers: .loginOwner, metricsLabel: "CancelLogin")
        case .varlinkService(.getInfo):
            MethodDescriptor(isWrite: false, callers: .anyone, metricsLabel: "GetInfo")
        case .varlinkService(.getInterfaceDescription):
            MethodDescriptor(isWrite: false, callers: .anyone, metricsLabel: "GetInterfaceDescription")
        }
    }
}
