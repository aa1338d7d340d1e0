// tokend-storegen: writes an encrypted tokend credential store directly, with the daemon's own
// TokendStorage code (same schema, same sealing, one generation per credential), so the scale
// and refresh-storm benchmarks can start tokend over 10k…1M credentials in seconds.
//
//   tokend-storegen --state-dir DIR --key-file FILE --count N [options]
//
// With --postgres URL it writes a shared store instead (PostgresCredentialStore: the real
// schema, row tags and generations), for the fleet benchmark (bench/fleet.py).
//
// Tokens are random (or, with --tokens-file, read from `idp.py mint` output); they are never
// printed. With --traceable they name their credential and expiry (`at.<user>.0.<exp>.…`,
// `rt.<user>.0`), so that bench/floor/grant_endpoint.c can count grants per credential and a
// client can tell an expired token from the token itself. Every loop is bounded by --count.
import Foundation
import Logging
import TokendCore
import TokendPostgres
import TokendStorage

struct Options {
    var stateDirectory = ""
    var keyFile = ""
    var count = 0
    var prefix = "user-"
    var provider = "bench"
    var reader = "uid:\(getuid())"
    var tokenBytes = 40
    var jwtBytes = 0
    var expiresIn: Int64 = 86_400
    var issuedAgo: Int64 = 0
    var tokensFile: String?
    var batch = 20_000
    var withRefreshToken = true
    var timeLoad = false
    /// The shared store's URL (`postgresql://user@host:port/db`), or nil for SQLite.
    var postgresURL: String?
    var passwordFile: String?
    var traceable = false
    /// Issue times spread over this many seconds (earlier), so due points spread as much.
    var spread: Int64 = 0
}

func usage() -> Never {
    FileHandle.standardError.write(
        Data(
            """
            usage: tokend-storegen --state-dir DIR --key-file FILE --count N
                   [--prefix user-] [--provider bench] [--reader uid:N]
                   [--token-bytes 40 | --jwt-bytes 1024] [--no-refresh-token]
                   [--expires-in SECONDS (86400)] [--issued-ago SECONDS (0)]
                   [--tokens-file FILE (JSON lines from `idp.py mint`; one per credential)]
                   [--batch 20000] [--traceable] [--spread SECONDS (0)]
                   [--postgres URL [--password-file FILE]]   (a shared store; --state-dir holds
                   the writer's floors)
            tokend-storegen --state-dir DIR --key-file FILE --time-load [--postgres URL …]
                   (times the daemon's start-up read, loadIndex, of an existing store)

            """.utf8))
    exit(2)
}

func parse(_ arguments: [String]) -> Options {
    var options = Options()
    var index = 0
    func value() -> String {
        index += 1
        guard index < arguments.count else { usage() }
        return arguments[index]
    }
    func number<T: FixedWidthInteger>() -> T {
        guard let number = T(value()), number >= 0 else { usage() }
        return number
    }
    while index < arguments.count {
        switch arguments[index] {
        case "--state-dir": options.stateDirectory = value()
        case "--key-file": options.keyFile = value()
        case "--count": options.count = number()
        case "--prefix": options.prefix = value()
        case "--provider": options.provider = value()
        case "--reader": options.reader = value()
        case "--token-bytes": options.tokenBytes = number()
        case "--jwt-bytes": options.jwtBytes = number()
        case "--expires-in": options.expiresIn = number()
        case "--issued-ago": options.issuedAgo = number()
        case "--tokens-file": options.tokensFile = value()
        case "--batch": options.batch = max(1, number())
        case "--no-refresh-token": options.withRefreshToken = false
        case "--time-load": options.timeLoad = true
        case "--postgres": options.postgresURL = value()
        case "--password-file": options.passwordFile = value()
        case "--traceable": options.traceable = true
        case "--spread": options.spread = number()
        default: usage()
        }
        index += 1
    }
    guard !options.stateDirectory.isEmpty, !options.keyFile.isEmpty, options.count > 0 || options.timeLoad,
        options.count <= 10_000_000, options.tokenBytes >= 8, options.tokenBytes <= 65_536, options.jwtBytes <= 65_536
    else { usage() }
    return options
}

/// A fast, non-cryptographic generator: benchmark tokens need to look random, not be secret.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

func randomText(_ count: Int, _ random: inout SplitMix64) -> String {
    var bytes = [UInt8](repeating: 0, count: count)
    var bits: UInt64 = 0
    var left = 0
    for index in 0..<count {
        if left == 0 {
            bits = random.next()
            left = 10
        }
        bytes[index] = alphabet[Int(bits & 63)]
        bits >>= 6
        left -= 1
    }
    return String(decoding: bytes, as: UTF8.self)
}

func base64URL(_ text: String) -> String {
    Data(text.utf8).base64EncodedString()
        .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        .replacingOccurrences(of: "=", with: "")
}

/// A JWT-shaped token of exactly `total` characters: a real header and claims, random padding
/// in a claim, and a random 342-character "signature" (the length of an RS256 one).
func jwt(total: Int, subject: String, issuedAt: Int64, expiresAt: Int64, _ random: inout SplitMix64) -> String {
    let header = base64URL(#"{"alg":"RS256","typ":"JWT","kid":"bench"}"#)
    let signature = randomText(342, &random)
    func payload(_ padding: Int) -> String {
        base64URL(
            #"{"iss":"https://idp.example","sub":"\#(subject)","aud":"api","iat":\#(issuedAt),"exp":\#(expiresAt),"#
                + #""scope":"read write","pad":"\#(randomText(padding, &random))"}"#)
    }
    let bare = header.count + 2 + signature.count + payload(0).count
    // base64 grows 4/3; aim below and fill the last characters into the signature.
    let padding = max(0, (total - bare) * 3 / 4)
    var token = header + "." + payload(padding) + "." + signature
    if token.count < total { token += randomText(total - token.count, &random) }
    return token
}

struct MintedToken {
    var accessToken: String
    var refreshToken: String?
    var expiresIn: Int64?
    var scope: String?
}

func readTokens(_ path: String, limit: Int) throws -> [MintedToken] {
    let text = try String(contentsOfFile: path, encoding: .utf8)
    var tokens: [MintedToken] = []
    for line in text.split(separator: "\n").prefix(limit) where !line.isEmpty {
        guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
            let access = object["access_token"] as? String
        else {
            throw NSError(domain: "storegen", code: 1, userInfo: [NSLocalizedDescriptionKey: "\(path): a line is not a token response"])
        }
        tokens.append(
            MintedToken(
                accessToken: access, refreshToken: object["refresh_token"] as? String,
                expiresIn: (object["expires_in"] as? NSNumber)?.int64Value, scope: object["scope"] as? String))
    }
    return tokens
}

/// The store written: SQLite in the state directory, or a shared PostgreSQL store.
enum TargetStore {
    case sqlite(SQLiteCredentialStore)
    case postgres(PostgresCredentialStore)

    static func open(_ options: Options, keyring: Keyring) async throws -> TargetStore {
        guard let url = options.postgresURL else {
            return .sqlite(try SQLiteCredentialStore(stateDirectory: options.stateDirectory, keyring: keyring))
        }
        let password = try options.passwordFile.map { file in
            try String(contentsOfFile: file, encoding: .utf8).trimmingCharacters(in: .newlines)
        }
        var logger = Logger(label: "storegen")
        logger.logLevel = .warning
        let settings = PostgresStoreSettings(
            url: url, password: password, leaseMilliseconds: 30_000, nodeName: "storegen",
            // A batch of 2,000 rows, or a whole load when timing it, on a busy machine.
            operationTimeoutMilliseconds: 600_000, stateDirectory: options.stateDirectory)
        return .postgres(try await PostgresCredentialStore.open(settings: settings, keyring: keyring, logger: logger))
    }

    func loadIndex() async throws -> Int {
        switch self {
        case .sqlite(let store): try await store.loadIndex().count
        case .postgres(let store): try await store.loadIndex().count
        }
    }

    func insertBulk(_ batch: [Credential], batchSize: Int) async throws -> Int {
        switch self {
        case .sqlite(let store): try await store.insertBulk(batch, batchSize: batchSize)
        case .postgres(let store): try await store.insertBulk(batch, batchSize: min(batchSize, 1_000))
        }
    }

    func close() async throws {
        switch self {
        case .sqlite(let store): try await store.close()
        case .postgres(let store): try await store.close()
        }
    }
}

func run() async throws {
    let options = parse(Array(CommandLine.arguments.dropFirst()))
    guard let reader = Reader(options.reader) else { usage() }
    let loaded = try KeyringLoader.load(credentialsDirectory: nil, keyFile: options.keyFile, expectedOwner: geteuid())
    let store = try await TargetStore.open(options, keyring: loaded.keyring)
    if options.timeLoad {
        for _ in 0..<3 {
            let clock = ContinuousClock()
            var count = 0
            let elapsed = try await clock.measure { count = try await store.loadIndex() }
            print(
                #"{"load_index_credentials":\#(count),"seconds":\#(Double(elapsed.components.attoseconds) / 1e18 + Double(elapsed.components.seconds))}"#
            )
        }
        try await store.close()
        return
    }
    let minted = try options.tokensFile.map { try readTokens($0, limit: options.count) }
    if let minted, minted.count < options.count {
        FileHandle.standardError.write(Data("storegen: \(options.tokensFile!) has only \(minted.count) tokens\n".utf8))
        exit(1)
    }
    var random = SplitMix64(state: UInt64.random(in: .min ... .max))
    let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
    let baseIssuedAt = Timestamp(millisecondsSince1970: nowMs - options.issuedAgo * 1000)
    let width = String(options.count - 1).count
    // A stride coprime with the count spreads issue times over --spread in an order unrelated
    // to the names (so that due credentials are not neighbours in the table).
    var stride = 7_919
    while options.count % stride == 0 { stride += 2 }
    let started = Date()
    var written = 0
    var start = 0
    while start < options.count {
        let end = min(start + options.batch, options.count)
        var batch: [Credential] = []
        batch.reserveCapacity(end - start)
        for index in start..<end {
            let number = String(index)
            let user = options.prefix + String(repeating: "0", count: width - number.count) + number
            let position = Int64((index * stride) % options.count)
            let issuedAt = baseIssuedAt - .milliseconds(options.spread * 1000 * position / Int64(options.count))
            var expiresAt = issuedAt + .seconds(options.expiresIn)
            let access: String
            var refresh: String?
            var scope: String? = "read"
            if let minted {
                let token = minted[index]
                access = token.accessToken
                refresh = token.refreshToken
                scope = token.scope
                if let expiresIn = token.expiresIn { expiresAt = issuedAt + .seconds(min(expiresIn, options.expiresIn)) }
            } else if options.jwtBytes > 0 {
                access = jwt(
                    total: options.jwtBytes, subject: user, issuedAt: issuedAt.secondsSince1970,
                    expiresAt: expiresAt.secondsSince1970, &random)
                refresh = options.withRefreshToken ? refreshToken(user, options, &random) : nil
            } else if options.traceable {
                let named = "at.\(user).0.\(expiresAt.secondsSince1970)."
                access = named + randomText(max(0, options.tokenBytes - named.count), &random)
                refresh = options.withRefreshToken ? refreshToken(user, options, &random) : nil
            } else {
                access = randomText(options.tokenBytes, &random)
                refresh = options.withRefreshToken ? refreshToken(user, options, &random) : nil
            }
            batch.append(
                Credential(
                    userIdentifier: user, provider: options.provider, accessToken: SecretString(access),
                    refreshToken: refresh.map(SecretString.init), tokenType: "Bearer", scope: scope,
                    expiresAt: expiresAt, issuedAt: issuedAt, sessionStartedAt: issuedAt, readers: [reader],
                    enrolment: Enrolment(uid: getuid(), pid: getpid(), at: issuedAt)))
        }
        written += try await store.insertBulk(batch, batchSize: options.batch)
        start = end
    }
    try await store.close()
    let seconds = Date().timeIntervalSince(started)
    print(#"{"credentials":\#(written),"seconds":\#(String(format: "%.2f", seconds)),"state_dir":"\#(options.stateDirectory)"}"#)
}

/// A refresh token: random, or with --traceable `rt.<user>.0` (the grant endpoint stand-in
/// counts grants by the credential it names).
func refreshToken(_ user: String, _ options: Options, _ random: inout SplitMix64) -> String {
    options.traceable ? "rt.\(user).0" : randomText(options.tokenBytes, &random)
}

do {
    try await run()
} catch {
    FileHandle.standardError.write(Data("storegen: \(error)\n".utf8))
    exit(1)
}
