import Testing
import TokendCore

@testable import TokendConfig

/// `[load_credential]`: off by default, its settings, and a bad value named by its key.
struct LoadCredentialConfigurationTests {
    @Test func offByDefault() throws {
        let configuration = try parseConfig("")
        #expect(configuration.loadCredentialSocketPath == nil)
        #expect(configuration.loadCredential == LoadCredentialSettings())
        #expect(configuration.loadCredential.minimumValidity == .seconds(60))
        #expect(configuration.loadCredential.timeout == .seconds(20))
        #expect(try parseConfig("[load_credential]\nsocket = \"\"").loadCredentialSocketPath == nil)
    }

    @Test func parsesTheSocketTheSettingsAndTheIDs() throws {
        let configuration = try parseConfig(
            """
            [load_credential]
            socket = "../run/credential"
            min_valid = "5m"
            timeout = "45s"
            format = "json"

            [load_credential.ids.report-api]
            credential = "reports"

            [load_credential.ids."backup token"]
            format = "token"
            """)
        #expect(configuration.loadCredentialSocketPath == "/srv/tokend/run/credential")
        let settings = configuration.loadCredential
        #expect(settings.minimumValidity == .seconds(300) && settings.timeout == .seconds(45) && settings.format == .json)
        #expect(settings.target(of: "report-api") == ("reports", .json))
        #expect(settings.target(of: "backup token") == ("backup token", .token))
        #expect(settings.target(of: "other") == ("other", .json))
    }

    @Test(arguments: [
        ("[load_credential]\nformat = \"text\"", "load_credential.format", #""text" is not "token" or "json""#),
        ("[load_credential]\ntimeout = \"11m\"", "load_credential.timeout", "must be at most 10m (the unit waits meanwhile)"),
        ("[load_credential]\nmin_valid = \"31d\"", "load_credential.min_valid", "must be at most 30d"),
        (
            "[load_credential]\nsocket = \"/run/tokend/io.tokend\"", "load_credential.socket",
            "is the path of another of tokend's sockets (daemon.socket or daemon.admin_socket)"
        ),
        (
            "[load_credential]\nsocket = \"/run/tokend/io.tokend.admin\"", "load_credential.socket",
            "is the path of another of tokend's sockets (daemon.socket or daemon.admin_socket)"
        ),
        (
            "[load_credential]\nsocket = \"/\(String(repeating: "s", count: 110))\"", "load_credential.socket",
            "/\(String(repeating: "s", count: 110)) is longer than a Unix socket address holds (107 bytes)"
        ),
        (
            "[load_credential.ids.\"a:b\"]\ncredential = \"x\"", "load_credential.ids.a:b",
            "is not a credential ID systemd takes (1–255 printable ASCII characters, no '/' or ':')"
        ),
        ("[load_credential.ids.x]\ncredential = \"\"", "load_credential.ids.x.credential", "must not be empty"),
        ("[load_credential.ids.x]\ncredentail = \"y\"", "load_credential.ids.x.credentail", "unknown key"),
        ("[load_credential]\nids = 1", "load_credential.ids", "expected a table, found an integer"),
    ])
    func aBadValueIsNamedByItsKey(text: String, key: String, problem: String) {
        let error = configError(text)
        #expect(error?.key == key, "\(String(describing: error))")
        #expect(error?.problem == problem, "\(String(describing: error))")
    }
}
