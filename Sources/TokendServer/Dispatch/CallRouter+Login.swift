import NIOCore
import TokendCore
import TokendProtocol

/// `BeginLogin`, `CompleteLogin` and `CancelLogin`. They all leave the event loop: each talks to
/// the provider or waits for the user.
extension CallRouter {
    private var loginService: LoginService {
        LoginService(sessions: loginSessions, registry: registry, view: view, settings: settings, logger: logger, now: now)
    }

    func beginLogin(_ call: VarlinkCall, caller: CallerIdentity, eventLoop: any EventLoop) throws(VarlinkError) -> CallOutcome {
        let request = try BeginLoginRequest(json: call.parameters)
        let service = loginService
        return deferred(
            on: eventLoop, caller: caller, what: "beginning the login",
            timeoutError: { timeout in
                .loginFailed(
                    request.userIdentifier, reason: "the provider did not answer within \(DurationFormat.humanReadable(timeout))",
                    oauthError: nil)
            }
        ) { [reply, readerWarnings] in
            var challenge = try await service.begin(request, caller: caller)
            challenge.warnings = readerWarnings?.problems(texts: request.readers ?? []) ?? []
            return [reply(challenge.json)]
        }
    }

    func completeLogin(_ call: VarlinkCall, caller: CallerIdentity, eventLoop: any EventLoop) throws(VarlinkError) -> CallOutcome {
        let parameters = ParameterReader(call.parameters)
        let id = try parameters.string("loginId")
        let redirectURL = try parameters.optionalString("redirectUrl")
        let service = loginService
        // A device login waits for the user for as long as the device code lives; the
        // service ends it by then, this is only the backstop.
        return deferred(
            on: eventLoop, caller: caller, what: "completing the login", timeout: LoginService.maximumCompletion,
            timeoutError: { _ in
                .loginFailed("-", reason: "the login did not finish in time", oauthError: nil)
            }
        ) { [reply] in
            let status = try await service.complete(id, redirectURL: redirectURL, caller: caller)
            return [reply(["credential": .object(status.json)])]
        }
    }

    func cancelLogin(_ call: VarlinkCall, caller: CallerIdentity, eventLoop: any EventLoop) throws(VarlinkError) -> CallOutcome {
        let id = try ParameterReader(call.parameters).string("loginId")
        return deferred(on: eventLoop, caller: caller, what: "cancelling the login") { [reply, loginSessions, now] in
            _ = try await loginSessions.take(id, caller: caller, now: now())
            return [reply([:])]
        }
    }
}
