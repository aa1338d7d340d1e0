package tokend_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"tokend.io/tokend"
)

func TestTokenReturnsTheStoredCredential(t *testing.T) {
	p, _, c := setUp(t)
	minted := enrol(t, c, p, "alice")
	before := p.grants(t)

	credentials, err := c.Token(contextWithTimeout(t, 10*time.Second), "alice", time.Minute, "")
	if err != nil {
		t.Fatalf("Token: %v", err)
	}
	if credentials.AccessToken != minted.AccessToken {
		t.Errorf("Token returned another access token than the one stored")
	}
	if credentials.UserIdentifier != "alice" || credentials.TokenType != "Bearer" || credentials.Scope != "read" {
		t.Errorf("Token returned %v", credentials)
	}
	if left := time.Until(credentials.ExpiresAt); left < (idpLifetime-120)*time.Second || left > (idpLifetime+5)*time.Second {
		t.Errorf("ExpiresAt is %s away, want about %d s", left, idpLifetime)
	}
	if got := credentials.AuthorizationHeader(); got != "Bearer "+minted.AccessToken {
		t.Errorf("AuthorizationHeader is not 'Bearer <token>'")
	}
	if active, err := p.active(credentials.AccessToken); err != nil || !active {
		t.Errorf("the IdP says the token is not active (%v)", err)
	}
	// A token that stays valid long enough comes from tokend's memory: no grant.
	if after := p.grants(t); after != before {
		t.Errorf("Token made %d grants, want 0", after-before)
	}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		mustNotContain(t, "fmt "+format+" of *Credentials", fmt.Sprintf(format, credentials), minted.AccessToken)
		mustNotContain(t, "fmt "+format+" of Credentials", fmt.Sprintf(format, *credentials), minted.AccessToken)
	}
	request := tokend.AddCredentialRequest{UserIdentifier: "x", AccessToken: minted.AccessToken, RefreshToken: minted.RefreshToken}
	for _, format := range []string{"%v", "%+v", "%#v"} {
		mustNotContain(t, "fmt "+format+" of AddCredentialRequest", fmt.Sprintf(format, request), minted.AccessToken, minted.RefreshToken)
	}
}

func TestTokenSourceAuthorizesAnOAuth2HTTPClient(t *testing.T) {
	p, d, c := setUp(t)
	minted := enrol(t, c, p, "alice")
	api := newAPI(t, p)

	source := tokend.TokenSource("alice", tokend.WithSocket(d.socket), tokend.WithMinValid(time.Minute))
	token, err := source.Token()
	if err != nil {
		t.Fatalf("TokenSource.Token: %v", err)
	}
	if token.AccessToken != minted.AccessToken || token.Type() != "Bearer" || !token.Valid() {
		t.Errorf("TokenSource.Token: wrong token (type %q, expiry %s)", token.Type(), token.Expiry)
	}
	if scope, _ := token.Extra("scope").(string); scope != "read" {
		t.Errorf("TokenSource.Token: scope %q, want read", scope)
	}

	// Concurrent requests through one oauth2 client: every one is authorized.
	httpClient := oauth2.NewClient(contextWithTimeout(t, 20*time.Second), source)
	for _, err := range concurrently(8, 5, func() error {
		resp, err := httpClient.Get(api.URL + "/resource")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}) {
		t.Errorf("request through oauth2.NewClient: %v", err)
	}
	if seen := api.tokens(); len(seen) != 40 || seen[0] != minted.AccessToken {
		t.Errorf("the API saw %d requests, want 40 with the stored token", len(seen))
	}

	// Wrapped in ReuseTokenSource, as the docs allow.
	reused := oauth2.NewClient(context.Background(), oauth2.ReuseTokenSource(nil, source))
	resp, err := reused.Get(api.URL + "/resource")
	if err != nil {
		t.Fatalf("request through ReuseTokenSource: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Errorf("request through ReuseTokenSource: status %d", resp.StatusCode)
	}
	resp.Body.Close()

	// An unknown user: the typed error comes through oauth2 and net/http.
	unknown := oauth2.NewClient(context.Background(), tokend.TokenSource("nobody", tokend.WithSocket(d.socket)))
	resp, err = unknown.Get(api.URL + "/resource")
	var unknownUser *tokend.UnknownUserError
	if !errors.As(err, &unknownUser) || unknownUser.UserIdentifier != "nobody" {
		t.Errorf("request for an unknown user: %v, want *UnknownUserError", err)
	}
	if resp != nil {
		resp.Body.Close()
	}
}

func TestMinValidForcesExactlyOneRefresh(t *testing.T) {
	// Within forced_refresh_interval of a refresh, asking for more validity than the provider
	// gives gets the current token; 30 s leaves room for a slow machine between the calls.
	p, _, c := setUp(t, `forced_refresh_interval = "30s"`)
	minted := enrol(t, c, p, "alice")
	ctx := contextWithTimeout(t, 20*time.Second)
	before := p.grants(t)

	// The stored token has about an hour left; asking for two hours makes tokend refresh.
	fresh, err := c.Token(ctx, "alice", 2*time.Hour, "")
	if err != nil {
		t.Fatalf("Token(minValid 2h): %v", err)
	}
	if fresh.AccessToken == minted.AccessToken {
		t.Fatalf("Token(minValid 2h) returned the old token")
	}
	if after := p.grants(t); after != before+1 {
		t.Fatalf("Token(minValid 2h) made %d grants, want exactly 1", after-before)
	}
	// The provider's tokens are as fresh as they get: asking again does not grant again.
	again, err := c.Token(ctx, "alice", 2*time.Hour, "")
	if err != nil || again.AccessToken != fresh.AccessToken {
		t.Errorf("second Token(minValid 2h): %v (same token: %t)", err, err == nil && again.AccessToken == fresh.AccessToken)
	}
	plain, err := tokend.TokenSource("alice", tokend.WithClient(c)).Token()
	if err != nil || plain.AccessToken != fresh.AccessToken {
		t.Errorf("TokenSource after the refresh: %v", err)
	}
	if after := p.grants(t); after != before+1 {
		t.Errorf("%d grants in all, want exactly 1", after-before)
	}
	// The refresh was real: the IdP dropped the old access token and knows the new one.
	if active, err := p.active(minted.AccessToken); err != nil || active {
		t.Errorf("the old token is still active at the IdP (%v)", err)
	}
	if active, err := p.active(fresh.AccessToken); err != nil || !active {
		t.Errorf("the new token is not active at the IdP (%v)", err)
	}
	status, err := c.Status(ctx, "alice")
	if err != nil || len(status.Credentials) != 1 {
		t.Fatalf("Status(alice): %v %v", status, err)
	}
	if s := status.Credentials[0]; s.RefreshCount != 1 || s.State != "valid" || s.Provider != "example" || s.LastRefreshAt.IsZero() {
		t.Errorf("Status(alice) after one refresh: %+v", s)
	}
}

func TestUnknownUserIsATypedError(t *testing.T) {
	_, _, c := setUp(t)
	const secret = "go-rejected-secret-0123456789"

	_, err := c.Token(contextWithTimeout(t, 10*time.Second), "nobody", 0, secret)
	var unknown *tokend.UnknownUserError
	if !errors.As(err, &unknown) || unknown.UserIdentifier != "nobody" {
		t.Fatalf("Token(nobody): %v (%T), want *UnknownUserError for nobody", err, err)
	}
	if !errors.Is(err, tokend.ErrUnknownUser) || errors.Is(err, tokend.ErrDaemonUnavailable) {
		t.Errorf("errors.Is does not match ErrUnknownUser alone")
	}
	mustNotContain(t, "the error", err.Error()+fmt.Sprintf(" %v %+v %#v", err, err, err), secret)

	// The connection stays usable after an error reply, and the same client works on.
	if err := c.RemoveCredential(contextWithTimeout(t, 10*time.Second), "nobody"); !errors.Is(err, tokend.ErrUnknownUser) {
		t.Errorf("RemoveCredential(nobody): %v, want ErrUnknownUser", err)
	}
	// An identifier tokend could never accept is refused before it is sent.
	if _, err := c.Token(context.Background(), "no body", 0, ""); !errors.Is(err, tokend.ErrInvalidParameter) {
		t.Errorf("Token(\"no body\"): %v, want ErrInvalidParameter", err)
	}
}

func TestAddCredentialErrors(t *testing.T) {
	p, _, c := setUp(t)
	ctx := contextWithTimeout(t, 20*time.Second)
	minted := enrol(t, c, p, "alice")
	request := tokend.AddCredentialRequest{UserIdentifier: "alice", Provider: "example",
		AccessToken: minted.AccessToken, RefreshToken: minted.RefreshToken, ExpiresIn: time.Hour}

	err := c.AddCredential(ctx, request)
	var exists *tokend.CredentialExistsError
	if !errors.As(err, &exists) || exists.UserIdentifier != "alice" {
		t.Errorf("second AddCredential: %v, want *CredentialExistsError", err)
	}
	request.Provider = "nowhere"
	request.UserIdentifier = "bob"
	err = c.AddCredential(ctx, request)
	var provider *tokend.UnknownProviderError
	if !errors.As(err, &provider) || provider.Provider != "nowhere" {
		t.Errorf("AddCredential(provider nowhere): %v, want *UnknownProviderError", err)
	}
	for _, err := range []error{exists, provider} {
		if err != nil {
			mustNotContain(t, "the error", err.Error(), minted.AccessToken, minted.RefreshToken)
		}
	}
	request.Provider = "example"
	request.UserIdentifier = "alice"
	request.Replace = true
	if err := c.AddCredential(ctx, request); err != nil {
		t.Errorf("AddCredential with Replace: %v", err)
	}

	status, err := c.Status(ctx, "")
	if err != nil {
		t.Fatalf("Status(): %v", err)
	}
	if status.Daemon == nil || status.Daemon.Version == "" || status.Daemon.StartedAt.IsZero() || status.Daemon.Credentials != 1 {
		t.Errorf("Status().Daemon = %+v", status.Daemon)
	}
	if len(status.Credentials) != 1 || status.Credentials[0].UserIdentifier != "alice" || status.Credentials[0].ExpiresAt.IsZero() {
		t.Errorf("Status().Credentials = %+v", status.Credentials)
	}

	if err := c.RemoveCredential(ctx, "alice"); err != nil {
		t.Fatalf("RemoveCredential: %v", err)
	}
	if _, err := c.Token(ctx, "alice", 0, ""); !errors.Is(err, tokend.ErrUnknownUser) {
		t.Errorf("Token after RemoveCredential: %v, want ErrUnknownUser", err)
	}
}

func TestRevokedRefreshTokenMeansReauthenticationRequired(t *testing.T) {
	p, _, c := setUp(t)
	minted := enrol(t, c, p, "alice")
	p.revokeRefreshToken(t, minted.RefreshToken)
	ctx := contextWithTimeout(t, 20*time.Second)

	_, err := c.Token(ctx, "alice", 2*time.Hour, "")
	var reauth *tokend.ReauthenticationRequiredError
	if !errors.As(err, &reauth) {
		t.Fatalf("Token after the refresh token was revoked: %v (%T), want *ReauthenticationRequiredError", err, err)
	}
	if reauth.UserIdentifier != "alice" || !strings.HasPrefix(reauth.Reason, "invalid_grant") {
		t.Errorf("ReauthenticationRequiredError = %+v, want alice and a reason starting with invalid_grant", *reauth)
	}
	if !errors.Is(err, tokend.ErrReauthenticationRequired) {
		t.Errorf("errors.Is(err, ErrReauthenticationRequired) is false")
	}
	mustNotContain(t, "the error", err.Error(), minted.AccessToken, minted.RefreshToken)
	status, err := c.Status(ctx, "alice")
	if err != nil || len(status.Credentials) != 1 || status.Credentials[0].State != "reauthentication_required" {
		t.Errorf("Status(alice) = %+v, %v; want state reauthentication_required", status, err)
	}
	// Through a TokenSource, the same typed error.
	_, err = tokend.TokenSource("alice", tokend.WithClient(c), tokend.WithMinValid(2*time.Hour)).Token()
	if !errors.As(err, &reauth) {
		t.Errorf("TokenSource.Token: %v, want *ReauthenticationRequiredError", err)
	}
}

func TestMissingDaemonIsErrDaemonUnavailable(t *testing.T) {
	dir, err := scratch("tokend-go-missing-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)

	missing := filepath.Join(dir, "no-such.sock")
	refused := filepath.Join(dir, "refused.sock")
	listener, err := net.ListenUnix("unix", &net.UnixAddr{Name: refused, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	listener.SetUnlinkOnClose(false)
	listener.Close() // the socket file stays; nothing listens on it

	for _, path := range []string{missing, refused} {
		c := tokend.NewClient(tokend.WithSocket(path))
		var err error
		elapsed := timed(func() { _, err = c.Token(contextWithTimeout(t, 10*time.Second), "alice", 0, "") })
		var unavailable *tokend.DaemonUnavailableError
		if !errors.Is(err, tokend.ErrDaemonUnavailable) || !errors.As(err, &unavailable) || unavailable.SocketPath != path {
			t.Errorf("Token via %s: %v (%T), want ErrDaemonUnavailable", path, err, err)
			continue
		}
		if !strings.Contains(err.Error(), path) {
			t.Errorf("the error does not name the socket %s: %q", path, err)
		}
		if elapsed > 2*time.Second {
			t.Errorf("Token via %s took %s to fail", path, elapsed)
		}
		if _, err := tokend.Dial(context.Background(), tokend.WithSocket(path)); !errors.Is(err, tokend.ErrDaemonUnavailable) {
			t.Errorf("Dial(%s): %v, want ErrDaemonUnavailable", path, err)
		}
		if _, err := tokend.TokenSource("alice", tokend.WithSocket(path)).Token(); !errors.Is(err, tokend.ErrDaemonUnavailable) {
			t.Errorf("TokenSource via %s: %v, want ErrDaemonUnavailable", path, err)
		}
	}
	// $TOKEND_SOCKET is the default socket.
	t.Setenv(tokend.SocketEnvironmentVariable, missing)
	if got := tokend.NewClient().SocketPath(); got != missing {
		t.Errorf("NewClient() uses %s, want $TOKEND_SOCKET %s", got, missing)
	}
	t.Setenv(tokend.SocketEnvironmentVariable, "")
	if got := tokend.NewClient().SocketPath(); got != "/run/tokend/io.tokend" {
		t.Errorf("NewClient() without $TOKEND_SOCKET uses %s", got)
	}
}

// silentServer accepts connections on a Unix socket, reads, and never answers.
func silentServer(t *testing.T) string {
	t.Helper()
	return tokend.ServeUnixForTest(t, "tokend-go-silent-", func(nc net.Conn) {
		buffer := make([]byte, 4096)
		for {
			if _, err := nc.Read(buffer); err != nil {
				return
			}
		}
	})
}

func TestSilentServerCallsEndByTheirDeadline(t *testing.T) {
	path := silentServer(t)
	c := tokend.NewClient(tokend.WithSocket(path))

	check := func(name string, limit time.Duration, call func() error) {
		t.Helper()
		var err error
		elapsed := timed(func() { err = call() })
		if !errors.Is(err, tokend.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v (%T), want a timeout", name, err, err)
		}
		if elapsed > limit {
			t.Errorf("%s returned after %s, past its deadline", name, elapsed)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	check("Token with a 300 ms context", 2*time.Second, func() error { _, err := c.Token(ctx, "alice", 0, ""); return err })

	short := tokend.NewClient(tokend.WithSocket(path), tokend.WithTimeout(300*time.Millisecond))
	check("Token with WithTimeout(300ms)", 2*time.Second, func() error {
		_, err := short.Token(context.Background(), "alice", 0, "")
		return err
	})
	check("Status with WithTimeout(300ms)", 2*time.Second, func() error { _, err := short.Status(context.Background(), ""); return err })
	check("Watch with WithTimeout(300ms)", 2*time.Second, func() error { _, err := short.Watch(context.Background(), "alice"); return err })
	check("TokenSource with WithTimeout(300ms)", 2*time.Second, func() error {
		_, err := tokend.TokenSource("alice", tokend.WithSocket(path), tokend.WithTimeout(300*time.Millisecond)).Token()
		return err
	})

	// Cancelling (not a deadline) ends the call at once, with context.Canceled.
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	var err error
	elapsed := timed(func() { _, err = c.Token(ctx, "alice", 0, "") })
	if !errors.Is(err, context.Canceled) || elapsed > 2*time.Second {
		t.Errorf("cancelled Token: %v after %s, want context.Canceled soon after 200 ms", err, elapsed)
	}
}

func TestWatchFollowsTheToken(t *testing.T) {
	p, _, c := setUp(t)
	minted := enrol(t, c, p, "alice")

	ctx := contextWithTimeout(t, 30*time.Second)
	watch, err := c.Watch(ctx, "alice")
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer watch.Close()
	first, err := watch.Next()
	if err != nil || first.AccessToken != minted.AccessToken {
		t.Fatalf("first Watch reply: %v (the stored token: %t)", err, err == nil && first.AccessToken == minted.AccessToken)
	}

	// A change: a refresh forced through another connection.
	fresh, err := c.Token(ctx, "alice", 2*time.Hour, "")
	if err != nil || fresh.AccessToken == minted.AccessToken {
		t.Fatalf("forcing a refresh: %v", err)
	}
	next, err := nextWithin(watch, 10*time.Second)
	if err != nil || next.AccessToken != fresh.AccessToken {
		t.Fatalf("Watch reply after the refresh: %v (the new token: %t)", err, err == nil && next.AccessToken == fresh.AccessToken)
	}

	// Removing the credential ends the stream with UnknownUser.
	if err := c.RemoveCredential(ctx, "alice"); err != nil {
		t.Fatalf("RemoveCredential: %v", err)
	}
	if _, err := nextWithin(watch, 10*time.Second); !errors.Is(err, tokend.ErrUnknownUser) {
		t.Errorf("Watch after RemoveCredential: %v, want ErrUnknownUser", err)
	}
	if _, err := watch.Next(); !errors.Is(err, tokend.ErrUnknownUser) {
		t.Errorf("Next after the end: %v, want the same ErrUnknownUser", err)
	}

	// Watching a user without a credential fails at once.
	if _, err := c.Watch(ctx, "nobody"); !errors.Is(err, tokend.ErrUnknownUser) {
		t.Errorf("Watch(nobody): %v, want ErrUnknownUser", err)
	}
}

func TestWatchEndsWithCloseAndContext(t *testing.T) {
	p, _, c := setUp(t)
	enrol(t, c, p, "alice")

	watch, err := c.Watch(contextWithTimeout(t, 30*time.Second), "alice")
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	if _, err := watch.Next(); err != nil {
		t.Fatalf("first Next: %v", err)
	}
	time.AfterFunc(200*time.Millisecond, func() { watch.Close() })
	if _, err := nextWithin(watch, 5*time.Second); !errors.Is(err, tokend.ErrWatchClosed) {
		t.Errorf("Next across Close: %v, want ErrWatchClosed", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	watch, err = c.Watch(ctx, "alice")
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer watch.Close()
	if _, err := watch.Next(); err != nil {
		t.Fatalf("first Next: %v", err)
	}
	time.AfterFunc(200*time.Millisecond, cancel)
	if _, err := nextWithin(watch, 5*time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("Next across cancel: %v, want context.Canceled", err)
	}
}

// nextWithin is watch.Next, failing with an error when it takes longer than limit.
func nextWithin(watch *tokend.Watcher, limit time.Duration) (*tokend.Credentials, error) {
	type result struct {
		credentials *tokend.Credentials
		err         error
	}
	done := make(chan result, 1)
	go func() {
		credentials, err := watch.Next()
		done <- result{credentials, err}
	}()
	select {
	case r := <-done:
		return r.credentials, r.err
	case <-time.After(limit):
		watch.Close()
		<-done
		return nil, fmt.Errorf("Watcher.Next did not return within %s", limit)
	}
}

func TestConcurrentCallsAndADaemonRestart(t *testing.T) {
	p, d, c := setUp(t)
	minted := enrol(t, c, p, "alice")
	ctx := contextWithTimeout(t, 30*time.Second)

	for _, err := range concurrently(16, 10, func() error {
		credentials, err := c.Token(ctx, "alice", 0, "")
		if err == nil && credentials.AccessToken != minted.AccessToken {
			err = errors.New("another token")
		}
		return err
	}) {
		t.Errorf("concurrent Token: %v", err)
	}

	// The client's idle connections die with the daemon; the next call connects again, and
	// the credential survived in tokend's store.
	d.restart(t)
	credentials, err := c.Token(ctx, "alice", 0, "")
	if err != nil || credentials.AccessToken != minted.AccessToken {
		t.Errorf("Token after a daemon restart: %v", err)
	}
}

// api is an HTTP API on 127.0.0.1 that accepts a bearer token when the IdP says it is active.
type api struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
	body []string
}

func newAPI(t *testing.T, p *identityProvider) *api {
	a := &api{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		var body strings.Builder
		if r.Body != nil {
			buffer := make([]byte, 1024)
			n, _ := r.Body.Read(buffer)
			body.Write(buffer[:n])
		}
		a.mu.Lock()
		a.seen = append(a.seen, token)
		a.body = append(a.body, body.String())
		a.mu.Unlock()
		if active, err := p.active(token); err != nil || !active || !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			http.Error(w, "invalid token", http.StatusUnauthorized)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *api) tokens() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

func (a *api) bodies() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.body...)
}
