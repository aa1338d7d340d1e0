import Testing
import TokendPostgres

@Suite struct PostgresStoreSettingsTests {
    @Test func keepsWhatItIsGiven() {
        let settings = PostgresStoreSettings(url: "postgresql://tokend@127.0.0.1:5432/tokend", password: nil, leaseMilliseconds: 30_000, nodeName: "a")
        #expect(settings.leaseMilliseconds == 30_000)
        #expect(settings.nodeName == "a")
    }
}
