import Testing
import TokendClient

struct ReconnectBackoffTests {
    @Test func doublesUpToTheCapAndResets() {
        var backoff = ReconnectBackoff(initial: .milliseconds(100), maximum: .seconds(1))
        let full = (0..<6).map { _ in backoff.nextDelay(jitter: 1) }
        #expect(
            full == [
                .milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(800), .seconds(1),
                .seconds(1),
            ])
        backoff.reset()
        #expect(backoff.nextDelay(jitter: 0) == .milliseconds(50), "jitter 0 is half the base")
        #expect(backoff.nextDelay(jitter: 0.5) == .milliseconds(150))
        // Out-of-range jitter is clamped.
        #expect(backoff.nextDelay(jitter: 7) == .milliseconds(400))
        #expect(backoff.nextDelay(jitter: -3) == .milliseconds(400))
    }

    @Test func aMaximumBelowTheInitialDelayIsRaisedToIt() {
        var backoff = ReconnectBackoff(initial: .seconds(2), maximum: .seconds(1))
        #expect(backoff.nextDelay(jitter: 1) == .seconds(2))
        #expect(backoff.nextDelay(jitter: 1) == .seconds(2))
    }
}
