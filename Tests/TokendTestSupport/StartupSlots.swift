/// At most a few heavy start-ups at once (a Django IdP, a PostgreSQL cluster's initdb and first
/// start).
///
/// Swift Testing starts every test at once. On a 2-core machine, dozens of IdPs and database
/// clusters starting together share the CPU until none of them is ready within its limit, and
/// the tests fail at random although nothing is wrong. Queued start-ups run one after another at
/// full speed instead; a test's own time limits start once its start-up has a slot.
public actor StartupSlots {
    /// The slots every test process shares.
    public static let shared = StartupSlots(width: 3)

    private let width: Int
    private var busy = 0
    private var waiting: [CheckedContinuation<Void, Never>] = []

    public init(width: Int) { self.width = width }

    /// Waits for a slot; give it back with ``release()``.
    public func acquire() async {
        if busy < width {
            busy += 1
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    /// Gives a slot back, to the longest waiting start-up if there is one.
    public func release() {
        if waiting.isEmpty {
            busy -= 1
        } else {
            waiting.removeFirst().resume()
        }
    }

    /// Runs `work` in a slot.
    public static func run<Result: Sendable>(_ work: () async throws -> Result) async throws -> Result {
        await shared.acquire()
        do {
            let result = try await work()
            await shared.release()
            return result
        } catch {
            await shared.release()
            throw error
        }
    }
}
