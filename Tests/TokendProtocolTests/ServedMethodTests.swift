import Foundation
import Testing

@testable import TokendProtocol

struct ServedMethodTests {
    @Test(arguments: ServedMethod.allCases)
    func roundTripsThroughItsName(method: ServedMethod) {
        #expect(ServedMethod(method.name) == method)
        #expect(VarlinkCall.isValidMethodName(method.name))
        #expect(VarlinkCall(method: method.name).memberName == method.memberName)
    }

    @Test func everyMethodOnce() {
        let names = ServedMethod.allCases.map(\.name)
        #expect(Set(names).count == names.count)
        #expect(names.count == TokenProviderMethod.allCases.count + VarlinkServiceMethod.allCases.count)
    }

    @Test(arguments: [
        ("io.tokend.TokenProvider.Unheard", VarlinkError.methodNotFound("io.tokend.TokenProvider.Unheard")),
        // Names are case-sensitive.
        ("io.tokend.TokenProvider.status", VarlinkError.methodNotFound("io.tokend.TokenProvider.status")),
        ("org.varlink.service.GetMachineId", VarlinkError.methodNotFound("org.varlink.service.GetMachineId")),
        ("io.tokend.Other.Status", VarlinkError.interfaceNotFound("io.tokend.Other")),
        ("com.example.Interface.ProvideTokenReplacement", VarlinkError.interfaceNotFound("com.example.Interface")),
    ])
    func aMethodNotServedIsNamedInItsError(name: String, error: VarlinkError) {
        #expect(ServedMethod(name) == nil)
        #expect(ServedMethod.notServed(name) == error)
    }

    @Test func metricsLabelsAreTheMemberNamesAndUnique() {
        for method in ServedMethod.allCases {
            #expect(method.descriptor.metricsLabel == String(method.memberName), "\(method)")
        }
        let labels = ServedMethod.allCases.map(\.descriptor.metricsLabel)
        #expect(Set(labels).count == labels.count)
    }

    /// A streaming method is refused without `more`; such a method cannot also be a write,
    /// whose barrier would hold the connection for as long as the stream runs.
    @Test(arguments: ServedMethod.allCases)
    func streamingMethodsDoNotWrite(method: ServedMethod) {
        let descriptor = method.descriptor
        #expect(!(descriptor.requiresMore && descriptor.isWrite), "\(method)")
    }
}

/// The interface files and docs/protocol.md against the methods the daemon serves.
struct MethodTableDocumentationTests {
    static let repositoryRoot = InterfaceDefinitionTests.repositoryRoot

    /// The member names declared with `method Name(` in an interface definition.
    static func declaredMethods(_ definition: String) -> [String] {
        definition.split(separator: "\n").compactMap { line in
            guard line.hasPrefix("method ") else { return nil }
            return String(line.dropFirst("method ".count).prefix(while: { $0 != "(" }))
        }
    }

    @Test func theVarlinkFileDeclaresExactlyTheTokenProviderMethods() throws {
        let file = Self.repositoryRoot.appendingPathComponent("interfaces/io.tokend.TokenProvider.varlink")
        let declared = Self.declaredMethods(try String(contentsOf: file, encoding: .utf8))
        let served = TokenProviderMethod.allCases.map { String(ServedMethod.tokenProvider($0).memberName) }
        #expect(declared.count == Set(declared).count, "a method is declared twice")
        #expect(Set(declared) == Set(served), "declared \(declared.sorted()), served \(served.sorted())")
    }

    @Test func theServiceInterfaceDeclaresExactlyTheServiceMethods() {
        let declared = Self.declaredMethods(VarlinkServiceInterface.description)
        let served = VarlinkServiceMethod.allCases.map { String(ServedMethod.varlinkService($0).memberName) }
        #expect(Set(declared) == Set(served))
    }

    /// One row of the table of methods.
    struct Row: Sendable {
        var method: String
        var needsMore: Bool
        var writes: String
        var callers: String
    }

    /// The rows of the table under `## Methods` in docs/protocol.md.
    static func documentedRows() throws -> [Row] {
        let text = try String(contentsOf: repositoryRoot.appendingPathComponent("docs/protocol.md"), encoding: .utf8)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard let heading = lines.firstIndex(of: "## Methods") else { return [] }
        let table = lines[(heading + 1)...].drop(while: { !$0.hasPrefix("|") }).prefix(while: { $0.hasPrefix("|") })
        let cells = table.map { line in
            line.split(separator: "|", omittingEmptySubsequences: false).dropFirst().dropLast()
                .map { $0.trimmingCharacters(in: .whitespaces) }
        }
        guard let header = cells.first, header == ["method", "parameters", "reply", "writes", "who may call"] else {
            Issue.record(
                "the table of methods has the columns \(cells.first ?? []); expected method, parameters, reply, writes, who may call")
            return []
        }
        return cells.dropFirst(2).map { row in
            let first = row[0]
            // "`Watch` (needs `more`)": the name between the first pair of backticks.
            let name = first.split(separator: "`", omittingEmptySubsequences: false).dropFirst().first.map(String.init) ?? first
            return Row(method: name, needsMore: first.contains("(needs `more`)"), writes: row[3], callers: row[4])
        }
    }

    /// The name of `method` in the table: the member name for io.tokend.TokenProvider, the
    /// full name for others.
    static func documentedName(_ method: ServedMethod) -> String {
        switch method {
        case .tokenProvider: String(method.memberName)
        case .varlinkService: method.name
        }
    }

    @Test func theDocumentedTableListsEveryServedMethodOnce() throws {
        let documented = try Self.documentedRows().map(\.method)
        let served = ServedMethod.allCases.map(Self.documentedName)
        #expect(documented.count == Set(documented).count, "a method has two rows: \(documented)")
        #expect(Set(documented) == Set(served), "documented \(documented.sorted()), served \(served.sorted())")
    }

    @Test(arguments: ServedMethod.allCases)
    func theDocumentedRowAgreesWithTheDescriptor(method: ServedMethod) throws {
        let rows = try Self.documentedRows()
        guard let row = rows.first(where: { $0.method == Self.documentedName(method) }) else {
            Issue.record("docs/protocol.md has no row for \(method)")
            return
        }
        let descriptor = method.descriptor
        #expect(row.writes == (descriptor.isWrite ? "yes" : "no"), "\(method): writes")
        #expect(row.needsMore == descriptor.requiresMore, "\(method): (needs `more`)")
        // The summary, alone or followed by a parenthesised detail.
        let summary = descriptor.callers.summary
        let agrees = row.callers == summary || (row.callers.hasPrefix(summary + " (") && row.callers.hasSuffix(")"))
        #expect(agrees, "\(method): who may call is \"\(row.callers)\", the descriptor says \"\(summary)\"")
    }
}
