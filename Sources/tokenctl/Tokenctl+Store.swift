import ArgumentParser
import TokenctlSupport
import TokendClient

extension Tokenctl {
    /// `tokenctl store …`: the shared PostgreSQL store as a whole.
    struct Store: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "store",
            abstract: "Manage the shared PostgreSQL store as a whole.",
            subcommands: [Adopt.self]
        )
    }
}

extension Tokenctl.Store {
    /// `tokenctl store adopt [--dry-run] [--restored]`.
    struct Adopt: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "adopt",
            abstract: "Confirm the shared store as it is, so that this node serves it.",
            discussion: """
                Administrators only. A node serves none of the shared store's credentials when the \
                store no longer looks like the one it served: its id changed or was deleted, its \
                schema version went down, or this node's record of it cannot be read. It never tags \
                a credential that carries no tag (a store from before row authentication, or a row \
                whose tag was removed). After checking the store, adopt it on each node: its schema \
                is brought up to date, credentials without a tag are tagged as this node's last \
                --dry-run listed them (one changed since, or never listed, stays refused), and the \
                node records the store. Run with --dry-run first: it lists what adoption would do, \
                with who may read each credential it would vouch for, and changes nothing. \
                Adoption reads every credential of the store: for a large store, give --timeout \
                enough seconds (tokend finishes an adoption it has begun either way).
                """
        )

        @OptionGroup var global: GlobalOptions

        @Flag(help: "Show what adoption would do, and change nothing.")
        var dryRun = false

        @Flag(
            help: """
                The database was restored from an older copy on purpose: serve its credentials \
                even where this node had seen newer ones.
                """)
        var restored = false

        func run() async throws {
            let client = global.makeClient()
            let adoption: StoreAdoption
            do {
                adoption = try await client.adoptStore(dryRun: dryRun, restored: restored)
            } catch {
                throw Terminal.fail(error)
            }
            await client.close()
            print(StoreAdoptionText.render(adoption))
        }
    }
}
