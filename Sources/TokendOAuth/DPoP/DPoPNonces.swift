import Synchronization
import TokendCore
import TokendJSON

/// The nonces servers hand out for DPoP proofs (RFC 9449 §8), by endpoint: each response's
/// `DPoP-Nonce` replaces the one before, and the next proof to that endpoint carries it.
/// Nonces are not secrets; they are bounded in size and number all the same.
final class DPoPNonces: Sendable {
    private let nonces = Mutex<[String: String]>([:])

    /// At most this many endpoints are remembered; more clear the table (a nonce is only an
    /// optimisation: a server that wants one says so, and the proof is sent again).
    static let maximumEndpoints = 256

    func nonce(for endpoint: String) -> String? { nonces.withLock { $0[endpoint] } }

    /// Keeps `header`, the value of a response's `DPoP-Nonce`, if it is a valid nonce
    /// (``DPoPNonce/isValid(_:)``).
    /// - Returns: the nonce, or nil if the header was absent or not a nonce.
    @discardableResult
    func remember(_ header: String?, for endpoint: String) -> String? {
        guard let header, DPoPNonce.isValid(header) else { return nil }
        nonces.withLock { table in
            if table.count >= Self.maximumEndpoints, table[endpoint] == nil { table.removeAll() }
            table[endpoint] = header
        }
        return header
    }
}

/// What the DPoP exchange with a token endpoint needs of an answer.
protocol DPoPAnswer {
    var status: Int { get }
    var dpopNonce: String? { get }
    var body: [UInt8] { get }
}

extension DPoPAnswer {
    /// Whether the server refused the proof for want of a (new) nonce: `use_dpop_nonce`
    /// (RFC 9449 §8), in which case it did not act on the request.
    var demandsDPoPNonce: Bool {
        (status == 400 || status == 401) && TokenErrorResponse.parse(body)?.error == "use_dpop_nonce"
    }
}

extension FormPostResponse: DPoPAnswer {}

/// Why a request with a DPoP proof could not be sent.
struct DPoPSendFailure<Failure: Error>: Error {
    enum Kind {
        case proof(DPoPKey.Problem)
        case transport(Failure)
    }
    let kind: Kind
}

extension DPoPNonces {
    /// Sends a request to `endpoint` with a proof of `key` (none without a key), and once more
    /// with the server's new nonce when it answers `use_dpop_nonce` (RFC 9449 §8): that answer
    /// means the server did not act on the request, so sending it again is safe. A second
    /// demand, or one without a usable nonce, is returned as it is; the caller says so.
    /// - Returns: the last answer, and whether the request was sent again with a nonce.
    func send<Answer: DPoPAnswer, Failure: Error>(
        to endpoint: String, key: DPoPKey?, now: () -> Timestamp, _ send: (_ proof: String?) async throws(Failure) -> Answer
    ) async throws(DPoPSendFailure<Failure>) -> (answer: Answer, retried: Bool) {
        guard let key else {
            do { return (try await send(nil), false) } catch { throw DPoPSendFailure(kind: .transport(error)) }
        }
        let target: DPoPTarget
        do {
            target = try DPoPTarget(method: "POST", uri: endpoint)
        } catch {
            throw DPoPSendFailure(kind: .proof(DPoPKey.Problem(description: "the endpoint \(endpoint) \(error.description)")))
        }
        var nonce = self.nonce(for: endpoint)
        var attempt = 0
        while true {
            attempt += 1
            let proof: String
            do { proof = try key.proof(for: target, now: now(), nonce: nonce) } catch { throw DPoPSendFailure(kind: .proof(error)) }
            let answer: Answer
            do { answer = try await send(proof) } catch { throw DPoPSendFailure(kind: .transport(error)) }
            let fresh = remember(answer.dpopNonce, for: endpoint)
            // One retry, and only with a nonce the server has not already seen refused.
            guard attempt == 1, answer.demandsDPoPNonce, let fresh, fresh != nonce else { return (answer, attempt > 1) }
            nonce = fresh
        }
    }
}
