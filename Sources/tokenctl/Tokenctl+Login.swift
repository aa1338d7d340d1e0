import ArgumentParser
import TokenctlSupport
import TokendClient

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

extension Tokenctl {
    /// `tokenctl login USER [--provider NAME] [--device] [--no-browser] [--port N] [--reader …] [--replace]`.
    struct Login: AsyncParsableCommand {
        /// `expires in 20s`, `has expired` or `does not expire`.
        static func expiry(_ expiresAt: Int64, now: Int64) -> String {
            switch DurationText.expiresIn(expiresAt, now: now) {
            case "expired": "has expired"
            case "never": "does not expire"
            case let left: "expires in \(left)"
            }
        }

        static let configuration = CommandConfiguration(
            abstract: "Log a user in at a provider and store the resulting credential.",
            discussion: """
                tokend runs the login itself, so the tokens go from the provider straight into \
                its store; tokenctl never sees or prints them.

                OAuth 2.0 providers: with a device authorization endpoint, tokenctl shows a URL \
                and a code to enter on any device (RFC 8628; --device forces it). Otherwise it \
                prints an authorization URL to open in a browser and waits for the browser to \
                come back to a one-shot listener on 127.0.0.1 (PKCE, RFC 7636 and RFC 8252). \
                HAT PDA providers: tokenctl prints the PDA's login page; the PDA sends the \
                browser to the application's registered redirect, which tokenctl listens on \
                when it is a loopback URL.

                With --no-browser (or when the redirect is not a loopback URL), paste the URL \
                the browser ended up on (it may show an error page) when asked.

                Administrators may log in anyone; other users only themselves (the credential's \
                only reader is then their own uid).

                On a user that has a credential, login renews it in place: the new tokens go \
                under the same name, with the same provider, readers and owner, so token files \
                and programs watching it get the new token, and tokend revokes the old refresh \
                token at the provider. Only the uid that enrolled the credential, or an \
                administrator, may renew it; --provider may be left out. --replace instead \
                replaces it with a new credential of your own.
                """
        )

        @OptionGroup var global: GlobalOptions

        @Argument(help: "The user identifier the credential is for.")
        var user: String

        @Option(
            name: .long,
            help: ArgumentHelp(
                "The provider in tokend's configuration to log in at (default: the existing credential's, to renew it).", valueName: "name")
        )
        var provider: String?

        @Flag(name: .long, help: "Use the device authorization grant (a code to enter on another device).")
        var device = false

        @Flag(name: .customLong("no-browser"), help: "Do not listen for the redirect; paste the redirect URL instead.")
        var noBrowser = false

        @Option(
            name: .long, help: ArgumentHelp("The 127.0.0.1 port to listen on for the redirect (default: any free port).", valueName: "port")
        )
        var port: Int?

        @Option(
            name: .customLong("reader"),
            help: ArgumentHelp(
                ReaderOptions.help, valueName: "reader")
        )
        var readers: [String] = []

        @Flag(name: .long, help: "Replace the user's existing credential.")
        var replace = false

        func validate() throws {
            try UserArgument.validate(user)
            if let provider, !Identifier.isValid(provider) {
                throw ValidationError("The provider name must be 1 to 255 printable ASCII characters without spaces or '/'.")
            }
            if let port, !(1...65535).contains(port) { throw ValidationError("--port must be between 1 and 65535.") }
            if device, noBrowser || port != nil {
                throw ValidationError("--device does not use a browser redirect; drop --no-browser and --port.")
            }
            try ReaderOptions.validate(readers)
        }

        func run() async throws {
            let client = global.makeClient()
            let (provider, held) = try await providerToLogInAt(client)
            // Listening before BeginLogin: the authorization URL must name the port.
            var listener: LoopbackListener?
            var redirectPort = port
            if !device {
                if noBrowser {
                    redirectPort = try port ?? LoopbackListener(port: 0).port
                } else {
                    do {
                        let opened = try LoopbackListener(port: port ?? 0)
                        listener = opened
                        redirectPort = opened.port
                    } catch {
                        throw Terminal.failInput(error.description)
                    }
                }
            }
            let request = BeginLoginRequest(
                userIdentifier: user, provider: provider, flow: device ? .device : nil, redirectPort: redirectPort,
                readers: ReaderOptions.canonical(readers), replace: replace
            )
            let challenge: LoginChallenge
            do {
                challenge = try await client.beginLogin(request)
            } catch {
                var error = error
                if error.code == .credentialExists { error.message += "; use --replace to overwrite it" }
                throw Terminal.fail(error)
            }
            await client.close()
            // Before the person spends time on the login: a reader that will grant nothing here.
            Terminal.warn(challenge.warnings)
            let renewing = !replace && held

            let status: CredentialStatus
            switch challenge.flow {
            case .device:
                listener?.close()
                status = try await completeDevice(challenge)
            case .code, .hat:
                status = try await completeBrowser(challenge, listener: listener)
            }
            let now = Terminal.now()
            Terminal.writeOutput(
                "Logged in: \(renewing ? "renewed" : "stored") the credential of user '\(status.userIdentifier)' (provider \(status.provider)); its token \(Self.expiry(status.expiresAt, now: now))."
            )
        }

        /// `--provider`, or the provider of the credential under the name (a renewal), and
        /// whether the caller sees a credential there. Without `--provider`, a credential the
        /// caller may not see is refused as tokend refuses it.
        private func providerToLogInAt(_ client: TokendClient) async throws -> (String, held: Bool) {
            if let provider {
                let held = (try? await client.status(userIdentifier: user).credentials.isEmpty) == false
                return (provider, held)
            }
            do throws(TokendClientError) {
                guard let held = try await client.status(userIdentifier: user).credentials.first else {
                    throw TokendClientError(code: .unknownUser, message: "no credential '\(user)'")
                }
                return (held.provider, true)
            } catch {
                var error = error
                // A missing credential and someone else's look alike to a non-administrator.
                if error.code == .unknownUser || error.code == .permissionDenied {
                    error.message += "; to log in under a new name, give --provider"
                }
                throw Terminal.fail(error)
            }
        }

        /// A client whose calls may wait until the login expires.
        private func loginClient(_ challenge: LoginChallenge) -> TokendClient {
            let remaining = max(challenge.expiresAt - Terminal.now(), 0)
            return global.makeClient(callTimeout: .seconds(remaining + 90 + Int64(global.timeout)))
        }

        private func completeDevice(_ challenge: LoginChallenge) async throws -> CredentialStatus {
            Terminal.writeOutput("To log in, open \(challenge.verificationURI ?? "the provider's device page") and enter the code below.")
            Terminal.writeOutput("User code: \(challenge.userCode ?? "?")")
            if let complete = challenge.verificationURIComplete { Terminal.writeOutput("Or open: \(complete)") }
            Terminal.writeOutput(
                "Waiting for the login to be approved (the code \(Self.expiry(challenge.expiresAt, now: Terminal.now())))...")
            let client = loginClient(challenge)
            defer { Task { await client.close() } }
            do {
                return try await client.completeLogin(challenge.loginID)
            } catch {
                throw Terminal.fail(error)
            }
        }

        private func completeBrowser(_ challenge: LoginChallenge, listener opened: LoopbackListener?) async throws -> CredentialStatus {
            let client = loginClient(challenge)
            defer { Task { await client.close() } }
            let url = challenge.authorizationURL ?? ""
            let redirect = challenge.redirectURI.flatMap(LoopbackRedirect.loopback)
            var listener = opened
            if let redirect, let current = listener, current.port != redirect.port {
                // The provider's configuration fixes the port (a registered redirect URI).
                current.close()
                listener = nil
                do {
                    listener = try LoopbackListener(port: redirect.port)
                } catch {
                    await cancel(challenge, client)
                    throw Terminal.failInput(error.description)
                }
            }
            if redirect == nil {
                listener?.close()
                listener = nil
            }

            Terminal.writeOutput("Open this URL in a browser to log in:")
            Terminal.writeOutput(url)
            guard let listener, let redirect else {
                return try await completePasted(challenge, client)
            }
            Terminal.writeOutput("Waiting for the browser to come back to \(challenge.redirectURI ?? "")...")
            let state = challenge.flow == .code ? LoopbackRedirect.queryValues("state", in: url).first : nil
            // The hatlogin page takes its parameters in the fragment (`/#/hatlogin?…`).
            let hatQuery = url.split(separator: "#", maxSplits: 1).last.map(String.init) ?? url
            let fallbackPath = LoopbackRedirect.queryValues("fallback", in: hatQuery).first.flatMap(LoopbackRedirect.loopback)
                .flatMap { $0.port == redirect.port ? $0.path : nil }
            let rule = LoopbackRedirect(path: redirect.path, fallbackPath: challenge.flow == .hat ? fallbackPath : nil, state: state)
            let received: (target: String, connection: Int32)
            do {
                received = try listener.waitForRedirect(rule, deadline: challenge.expiresAt)
            } catch {
                listener.close()
                await cancel(challenge, client)
                throw Terminal.fail(TokendClientError(code: .loginFailed, message: "the login failed: \(error.description)"))
            }
            listener.close()
            do {
                let status = try await client.completeLogin(
                    challenge.loginID, redirectURL: "http://127.0.0.1:\(redirect.port)\(received.target)")
                LoopbackListener.respond(
                    received.connection, status: 200, body: "Logged in. You can close this window and return to the terminal.")
                return status
            } catch {
                LoopbackListener.respond(received.connection, status: 400, body: "The login failed; see the terminal for why.")
                throw Terminal.fail(error)
            }
        }

        private func completePasted(_ challenge: LoginChallenge, _ client: TokendClient) async throws -> CredentialStatus {
            Terminal.writeError("After logging in, paste the full URL the browser was sent to (from its address bar), then press Enter:")
            guard let line = Self.readLine(limit: 65536), !line.isEmpty else {
                await cancel(challenge, client)
                throw Terminal.failInput("no redirect URL was pasted")
            }
            do {
                return try await client.completeLogin(challenge.loginID, redirectURL: line)
            } catch {
                throw Terminal.fail(error)
            }
        }

        private func cancel(_ challenge: LoginChallenge, _ client: TokendClient) async {
            try? await client.cancelLogin(challenge.loginID)
        }

        /// One line from stdin without its newline, at most `limit` bytes; nil at end of input.
        static func readLine(limit: Int) -> String? {
            var bytes: [UInt8] = []
            var byte: UInt8 = 0
            while bytes.count < limit {
                let count = read(0, &byte, 1)
                if count < 0, errno == EINTR { continue }
                guard count == 1 else { break }
                if byte == UInt8(ascii: "\n") { break }
                bytes.append(byte)
            }
            if bytes.last == UInt8(ascii: "\r") { bytes.removeLast() }
            return bytes.isEmpty && byte != UInt8(ascii: "\n") ? nil : String(decoding: bytes, as: UTF8.self).trimmingCharacters()
        }
    }
}

extension String {
    fileprivate func trimmingCharacters() -> String {
        var s = Substring(self)
        while s.first == " " || s.first == "\t" { s.removeFirst() }
        while s.last == " " || s.last == "\t" { s.removeLast() }
        return String(s)
    }
}
