import Testing
import TokendCore
import TokendOAuth

struct PKCETests {
    @Test func theRFC7636AppendixBVector() {
        #expect(
            PKCE.challenge(for: SecretString("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"))
                == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")
    }

    @Test func verifiersAreLongEnoughAndDistinct() {
        let a = PKCE.makeVerifier().value
        let b = PKCE.makeVerifier().value
        #expect(a.count == 43 && b.count == 43 && a != b)
        #expect(a.allSatisfy { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" })
    }
}
