import ArgumentParser
import TokenctlSupport
import TokendClient

extension Tokenctl {
    /// `tokenctl rotate-key`.
    struct RotateKey: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rotate-key",
            abstract: "Re-encrypt every stored token under a newly generated master key.",
            discussion: "Administrators only."
        )

        @OptionGroup var global: GlobalOptions

        func run() async throws {
            let client = global.makeClient()
            let result: (keyID: String, reencrypted: Int)
            do {
                result = try await client.rotateKey()
            } catch {
                throw Terminal.fail(error)
            }
            await client.close()
            let tokens = result.reencrypted == 1 ? "1 token" : "\(result.reencrypted) tokens"
            print("Rotated the master key: new key \(result.keyID), \(tokens) re-encrypted.")
        }
    }
}
