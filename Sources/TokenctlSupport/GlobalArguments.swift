import TokendClient

/// Lets tokenctl's global options stand before the subcommand, as with `git -C`,
/// `systemctl --user` or `kubectl --context`: `tokenctl --socket P token alice` becomes
/// `tokenctl token --socket P alice`, which the argument parser understands.
///
/// Pure: the arguments (without the program name) in, the arguments to parse out.
public enum GlobalArguments {
    /// A command line that names no known subcommand where one must stand.
    public struct UsageError: Error, Sendable, Hashable, CustomStringConvertible {
        public var description: String
        public init(description: String) { self.description = description }
    }

    /// Moves the global options found before the first positional argument behind it.
    ///
    /// - The first positional argument must be a subcommand: anything else is a usage error
    ///   that names it (`tokenctl alice` is not `tokenctl status alice`).
    /// - Without a subcommand, global options apply to `defaultSubcommand`.
    /// - Arguments the parser handles itself at the top (`--help`, `--version`, …) leave the
    ///   command line as it is.
    /// - Parameters:
    ///   - arguments: the command line without the program name.
    ///   - subcommands: the subcommand names.
    ///   - optionsWithValue: global options followed by a value (`--socket`).
    ///   - flags: global options without a value (`--json`).
    ///   - defaultSubcommand: the subcommand run when none is named.
    ///   - groups: subcommands that are groups of subcommands (`store` → `adopt`): global options
    ///     before or after the group's name go behind the subcommand of the group.
    public static func normalize(
        _ arguments: [String], subcommands: Set<String>, optionsWithValue: Set<String>, flags: Set<String> = [],
        defaultSubcommand: String, groups: [String: Set<String>] = [:]
    ) throws(UsageError) -> [String] {
        var globals: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            if argument == "--" {
                throw UsageError(description: "a subcommand must come before '--' (see 'tokenctl --help')")
            }
            guard argument.hasPrefix("-"), argument != "-" else {
                guard subcommands.contains(argument) || argument == "help" else {
                    throw UsageError(description: "'\(argument)' is not a tokenctl command (see 'tokenctl --help')")
                }
                let rest = Array(arguments[(index + 1)...])
                // `store --socket P adopt` → `store adopt --socket P`.
                if let members = groups[argument] {
                    let inner: [String]
                    do {
                        inner = try normalize(
                            rest, subcommands: members, optionsWithValue: optionsWithValue, flags: flags, defaultSubcommand: "")
                    } catch {
                        throw UsageError(
                            description: error.description.replacing("a tokenctl command", with: "a 'tokenctl \(argument)' command")
                                .replacing("'tokenctl --help'", with: "'tokenctl \(argument) --help'"))
                    }
                    if let member = inner.first, members.contains(member) { return [argument, member] + globals + inner.dropFirst() }
                }
                return [argument] + globals + rest
            }
            let name = String(argument.prefix { $0 != "=" })
            if optionsWithValue.contains(name) {
                globals.append(argument)
                if name == argument {
                    guard index + 1 < arguments.count else { throw UsageError(description: "\(name) needs a value") }
                    globals.append(arguments[index + 1])
                    index += 1
                }
            } else if flags.contains(argument) {
                globals.append(argument)
            } else {
                // --help, --version, --generate-completion-script…: the parser's own.
                return arguments
            }
            index += 1
        }
        return globals.isEmpty ? arguments : [defaultSubcommand] + globals
    }
}
