import Testing

@testable import TokendCore

/// Which credentials tokend takes for a DPoP provider: none it could not refresh or prove.
struct DPoPEnrolmentTests {
    typealias Row = (DPoPEnrolment.Source, dpop: Bool, bindsOnRefresh: Bool, bound: String?, held: String?, accepted: Bool)

    @Test(
        arguments: [
            // A login's tokens, bound to tokend's key or opaque: kept.
            (.login, true, false, "k1", "k1", true),
            (.login, true, false, nil, "k1", true),
            (.login, false, false, nil, nil, true),
            // A login's token bound to another key (a provider that ignored the proof's key).
            (.login, true, false, "k2", "k1", false),
            // AddCredential to a bearer provider: as before.
            (.added, false, false, nil, nil, true),
            (.added, false, true, nil, nil, true),
            // A token bound to someone's key, for any provider.
            (.added, false, false, "k2", nil, false),
            (.added, true, true, "k2", nil, false),
            // A bearer credential for a DPoP provider: only where the provider binds at refresh.
            (.added, true, false, nil, nil, false),
            (.added, true, true, nil, nil, true),
        ] as [Row])
    func decides(row: Row) {
        let decision = DPoPEnrolment.decide(
            source: row.0, providerUsesDPoP: row.dpop, providerBindsOnRefresh: row.bindsOnRefresh, boundThumbprint: row.bound,
            heldThumbprint: row.held)
        switch decision {
        case .accept:
            #expect(row.accepted)
        case .refuse(let reason):
            #expect(!row.accepted)
            #expect(reason.contains("tokenctl login"), "the refusal says what to do")
        }
    }

    @Test func aBearerCredentialForADPoPProviderIsToldWhichKeyAllowsIt() {
        let decision = DPoPEnrolment.decide(
            source: .added, providerUsesDPoP: true, providerBindsOnRefresh: false, boundThumbprint: nil, heldThumbprint: nil)
        #expect(decision == .refuse(reason: DPoPEnrolment.bearerForDPoPProvider))
        #expect(DPoPEnrolment.bearerForDPoPProvider.contains("dpop_bind_on_refresh"))
    }
}
