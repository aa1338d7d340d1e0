// Package tokend is the Go client of tokend, the daemon that keeps OAuth credentials fresh
// and serves access tokens to the programs of a host over a Varlink Unix socket
// (/run/tokend/io.tokend, or $TOKEND_SOCKET).
//
//	client := tokend.NewClient()
//	credentials, err := client.Token(ctx, "alice", time.Minute, "")
//	req.Header.Set("Authorization", credentials.AuthorizationHeader())
//
// With golang.org/x/oauth2:
//
//	httpClient := oauth2.NewClient(ctx, tokend.TokenSource("alice", tokend.WithMinValid(time.Minute)))
//
// A token narrowed to part of the credential's scope and/or to one API (RFC 8707), when its
// provider has narrowed_tokens = true (WithScope and WithResource work for a TokenSource and a
// Transport too):
//
//	credentials, err := client.NarrowedToken(ctx, "alice", time.Minute, "", tokend.WithScope("read"))
//
// With a DPoP-bound credential, tokend signs a DPoP proof for each request:
//
//	proof, err := client.DPoPProof(ctx, "alice", http.MethodGet, "https://api.example/resource")
//	proof.SetHeaders(req)
//
// Errors that tokend sends back are typed (*UnknownUserError, *ReauthenticationRequiredError,
// *RefreshFailedError, …) and match sentinels with errors.Is (ErrUnknownUser, …); a daemon
// that is not running gives a *DaemonUnavailableError (ErrDaemonUnavailable) naming the
// socket. Every call ends by its context's deadline or the client's timeout (WithTimeout,
// default 10 s), whichever comes first. No error message and no String or %v of this
// package's types contains a token.
package tokend
