import Synchronization
import Testing

@testable import TokendServer

/// ``ConfigurationReloads``: reloads one at a time, in the order asked, each waiting caller given
/// the verdict of its own reload, and nobody left waiting when the queue ends.
struct ConfigurationReloadsTests {
    static let applied = ReloadVerdict.applied(file: "/etc/tokend/tokend.toml", providers: ["corp"], restartNeeded: [])

    /// A reload that records when it runs and whether another one ran at the same time.
    final class Recorder: Sendable {
        let runs = Mutex<[Int]>([])
        let running = Atomic<Int>(0)
        let overlapped = Atomic<Bool>(false)

        func reload(verdicts: [ReloadVerdict]) -> @Sendable () async -> ReloadVerdict {
            { [self] in
                if running.add(1, ordering: .sequentiallyConsistent).newValue > 1 { overlapped.store(true, ordering: .relaxed) }
                await Task.yield()
                let index = runs.withLock { runs in
                    runs.append(runs.count)
                    return runs.count - 1
                }
                running.subtract(1, ordering: .sequentiallyConsistent)
                return verdicts[min(index, verdicts.count - 1)]
            }
        }
    }

    @Test func eachCallerGetsTheVerdictOfItsOwnReloadAndReloadsNeverOverlap() async {
        let reloads = ConfigurationReloads()
        let recorder = Recorder()
        let verdicts: [ReloadVerdict] = [Self.applied, .refused("providers.x.refresh_att: unknown key"), Self.applied]
        let loop = Task { await reloads.run(recorder.reload(verdicts: verdicts)) }
        let first = await reloads.requestAndWait()
        reloads.request()  // SIGHUP: nobody waits
        let third = await reloads.requestAndWait()
        #expect(first == Self.applied)
        #expect(third == Self.applied)
        #expect(recorder.runs.withLock { $0 } == [0, 1, 2])
        // Many at once: carried out one after another.
        await withTaskGroup(of: ReloadVerdict.self) { group in
            for _ in 0..<20 { group.addTask { await reloads.requestAndWait() } }
            for await _ in group {}
        }
        #expect(recorder.overlapped.load(ordering: .relaxed) == false)
        #expect(recorder.runs.withLock { $0.count } == 23)
        reloads.finish()
        await loop.value
    }

    @Test func aRefusedFileIsTheCallersVerdict() async {
        let reloads = ConfigurationReloads()
        let loop = Task { await reloads.run { .refused("/etc/tokend/tokend.toml: providers.x.refresh_att: unknown key") } }
        #expect(await reloads.requestAndWait() == .refused("/etc/tokend/tokend.toml: providers.x.refresh_att: unknown key"))
        reloads.finish()
        await loop.value
    }

    @Test func afterTheQueueEndedARequestIsRefusedAtOnce() async {
        let reloads = ConfigurationReloads()
        let loop = Task { await reloads.run { Self.applied } }
        reloads.finish()
        await loop.value
        #expect(await reloads.requestAndWait() == ConfigurationReloads.stopping)
        reloads.request()  // ignored, and no hang
    }

    @Test func requestsQueuedWhenTheQueueEndsAreRefusedNotLeftWaiting() async {
        let reloads = ConfigurationReloads()
        // No loop runs: the requests stay queued until finish().
        let waiting = Task { await reloads.requestAndWait() }
        while !reloads.hasWaitingCallers { await Task.yield() }
        reloads.finish()
        #expect(await waiting.value == ConfigurationReloads.stopping)
    }
}
