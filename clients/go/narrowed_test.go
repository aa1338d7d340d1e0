package tokend_test

// Narrowed tokens against the real tokend and the real test IdP: a daemon whose provider
// narrowed (narrowedProvider) is the IdP with narrowed_tokens = true, and credentials minted
// with the scope "read write". What the IdP issued is checked with its introspection.
//
// django-oauth-toolkit narrows the refresh token itself on a narrowed grant (and drops the
// access token issued before it), so each test has a daemon and credentials of its own, and no
// test refreshes a credential's own token after a narrowed grant.

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tokend.io/tokend"
)

// narrowedResource is the API narrowed tokens are asked for (RFC 8707).
const narrowedResource = "https://api.example.com/v1"

// pastForcedRefreshInterval is longer than the daemon's forced_refresh_interval (1 s), which
// counts from the narrowed grant: until then tokend refuses to replace a narrowed token it just
// got (*RefreshFailedError), as it does for a credential's token it just refreshed.
const pastForcedRefreshInterval = 1200 * time.Millisecond

// setUpNarrowed is setUp with the provider narrowed.
func setUpNarrowed(t *testing.T, extra ...string) (*identityProvider, *daemon, *tokend.Client) {
	t.Helper()
	p := idp(t)
	d := startDaemonWithProviders(t, p, narrowedProviderSection(p), extra...)
	c := d.client()
	t.Cleanup(func() { c.Close() })
	return p, d, c
}

// enrolNarrowable stores a freshly minted credential of narrowedProvider, with the scope
// "read write", for user.
func enrolNarrowable(t *testing.T, c *tokend.Client, p *identityProvider, user string) tokenResponse {
	t.Helper()
	minted := p.mintScoped(t, 1, 0, "read write")[0]
	if minted.Scope != "read write" {
		t.Fatalf("idp.py mint --scope 'read write' made a token with scope %q", minted.Scope)
	}
	return enrolMintedFor(t, c, user, narrowedProvider, minted)
}

func TestNarrowedTokenHasTheNarrowedScopeAndIsCached(t *testing.T) {
	p, _, c := setUpNarrowed(t)
	minted := enrolNarrowable(t, c, p, "alice")
	ctx := contextWithTimeout(t, 30*time.Second)
	before := p.grants(t)

	narrowed, err := c.NarrowedToken(ctx, "alice", 0, "", tokend.WithScope("read"))
	if err != nil {
		t.Fatalf("NarrowedToken(WithScope(read)): %v", err)
	}
	if narrowed.UserIdentifier != "alice" || narrowed.Scope != "read" || narrowed.TokenType != "Bearer" {
		t.Errorf("NarrowedToken(WithScope(read)) = %v, want alice's, with scope read", narrowed)
	}
	if narrowed.AccessToken == minted.AccessToken {
		t.Errorf("the narrowed token is the credential's own token")
	}
	if left := time.Until(narrowed.ExpiresAt); left < (idpLifetime-120)*time.Second || left > (idpLifetime+5)*time.Second {
		t.Errorf("the narrowed token's ExpiresAt is %s away, want about %d s", left, idpLifetime)
	}
	if after := p.grants(t); after != before+1 {
		t.Errorf("the narrowed token took %d grants, want exactly 1", after-before)
	}
	if answer, err := p.introspect(narrowed.AccessToken); err != nil || !answer.Active || answer.Scope != "read" {
		t.Errorf("the IdP says of the narrowed token: %+v (%v), want active with scope read", answer, err)
	}

	// Asked again, by a call or a TokenSource: the same token, from tokend's memory.
	again, err := c.NarrowedToken(ctx, "alice", time.Minute, "", tokend.WithScope("read"))
	if err != nil || again.AccessToken != narrowed.AccessToken || again.Scope != "read" {
		t.Errorf("NarrowedToken(WithScope(read)) again: %v (the same token: %t)", err, err == nil && again.AccessToken == narrowed.AccessToken)
	}
	token, err := tokend.TokenSource("alice", tokend.WithClient(c), tokend.WithScope("read")).Token()
	if err != nil || token.AccessToken != narrowed.AccessToken {
		t.Errorf("TokenSource(WithScope(read)).Token: %v (the same token: %t)", err, err == nil && token.AccessToken == narrowed.AccessToken)
	} else if scope, _ := token.Extra("scope").(string); scope != "read" {
		t.Errorf("TokenSource(WithScope(read)).Token: scope %q, want read", scope)
	}
	// The credential's own token is still the one stored, with its whole scope.
	own, err := c.Token(ctx, "alice", 0, "")
	if err != nil || own.AccessToken != minted.AccessToken || own.Scope != "read write" {
		t.Errorf("Token after the narrowed one: %v (the stored token: %t)", own, err == nil && own.AccessToken == minted.AccessToken)
	}
	if after := p.grants(t); after != before+1 {
		t.Errorf("%d grants in all, want exactly 1", after-before)
	}
	for _, format := range []string{"%v", "%+v", "%#v"} {
		mustNotContain(t, "fmt "+format+" of narrowed *Credentials", fmt.Sprintf(format, narrowed), narrowed.AccessToken)
	}
}

func TestNarrowedTokenForAResource(t *testing.T) {
	p, _, c := setUpNarrowed(t)
	ctx := contextWithTimeout(t, 30*time.Second)

	// A resource alone: the token is for that API (its audience at the IdP).
	minted := enrolNarrowable(t, c, p, "alice")
	before := p.grants(t)
	forAPI, err := c.NarrowedToken(ctx, "alice", 0, "", tokend.WithResource(narrowedResource))
	if err != nil {
		t.Fatalf("NarrowedToken(WithResource): %v", err)
	}
	if forAPI.AccessToken == minted.AccessToken {
		t.Errorf("the token for %s is the credential's own token", narrowedResource)
	}
	if answer, err := p.introspect(forAPI.AccessToken); err != nil || !answer.Active || fmt.Sprint(answer.Aud) != fmt.Sprint([]string{narrowedResource}) {
		t.Errorf("the IdP says of the token for %s: %+v (%v), want active with that audience", narrowedResource, answer, err)
	}
	again, err := c.NarrowedToken(ctx, "alice", 0, "", tokend.WithResource(narrowedResource))
	if err != nil || again.AccessToken != forAPI.AccessToken {
		t.Errorf("NarrowedToken(WithResource) again: %v (the same token: %t)", err, err == nil && again.AccessToken == forAPI.AccessToken)
	}
	if after := p.grants(t); after != before+1 {
		t.Errorf("%d grants, want exactly 1", after-before)
	}

	// Both: the scope and the audience.
	enrolNarrowable(t, c, p, "bob")
	both, err := c.NarrowedToken(ctx, "bob", 0, "", tokend.WithScope("read"), tokend.WithResource(narrowedResource))
	if err != nil {
		t.Fatalf("NarrowedToken(WithScope, WithResource): %v", err)
	}
	if both.Scope != "read" {
		t.Errorf("NarrowedToken(WithScope(read), WithResource): scope %q, want read", both.Scope)
	}
	if answer, err := p.introspect(both.AccessToken); err != nil || !answer.Active || answer.Scope != "read" ||
		fmt.Sprint(answer.Aud) != fmt.Sprint([]string{narrowedResource}) {
		t.Errorf("the IdP says of bob's narrowed token: %+v (%v), want active, scope read, audience %s", answer, err, narrowedResource)
	}
}

func TestNarrowedTokenThroughATransport(t *testing.T) {
	p, _, c := setUpNarrowed(t)
	minted := enrolNarrowable(t, c, p, "alice")
	ctx := contextWithTimeout(t, 30*time.Second)

	// An API that checks each token at the IdP accepts the narrowed token.
	api := newAPI(t, p)
	httpClient := &http.Client{Transport: tokend.NewTransport("alice", tokend.WithClient(c), tokend.WithScope("read")), Timeout: 20 * time.Second}
	resp, err := httpClient.Get(api.URL + "/resource")
	if err != nil {
		t.Fatalf("GET with the narrowed token: %v", err)
	}
	resp.Body.Close()
	narrowed, err := c.NarrowedToken(ctx, "alice", 0, "", tokend.WithScope("read"))
	if err != nil {
		t.Fatalf("NarrowedToken(WithScope(read)): %v", err)
	}
	if seen := api.tokens(); resp.StatusCode != http.StatusOK || len(seen) != 1 || seen[0] != narrowed.AccessToken {
		t.Errorf("GET: status %d; the API saw %d requests, want 1 with the narrowed token", resp.StatusCode, len(seen))
	}

	// An API that refuses every token: the narrowed token is reported as rejected, tokend
	// replaces it (one grant), and the request goes exactly once more with the new one.
	time.Sleep(pastForcedRefreshInterval)
	var requests atomic.Int32
	var lastToken atomic.Value
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		lastToken.Store(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		http.Error(w, "go away", http.StatusUnauthorized)
	}))
	defer refusing.Close()
	before := p.grants(t)
	resp, err = httpClient.Get(refusing.URL)
	if err != nil {
		t.Fatalf("GET to the refusing API: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "go away") || requests.Load() != 2 {
		t.Errorf("GET to the refusing API: status %d after %d requests, want its own 401 after exactly 2", resp.StatusCode, requests.Load())
	}
	if after := p.grants(t); after != before+1 {
		t.Errorf("the 401 made %d grants, want exactly 1", after-before)
	}
	fresh, err := c.NarrowedToken(ctx, "alice", 0, "", tokend.WithScope("read"))
	if last, _ := lastToken.Load().(string); err != nil || last != fresh.AccessToken || last == narrowed.AccessToken || fresh.Scope != "read" {
		t.Errorf("the retry did not carry tokend's new narrowed token (%v)", err)
	}
	// The credential's own token was not touched.
	if own, err := c.Token(ctx, "alice", 0, ""); err != nil || own.AccessToken != minted.AccessToken {
		t.Errorf("Token after the narrowed token was replaced: %v (the stored token: %t)", err, err == nil && own.AccessToken == minted.AccessToken)
	}
}

func TestNarrowedTokenErrorsFromTokend(t *testing.T) {
	p, _, c := setUpNarrowed(t)
	ctx := contextWithTimeout(t, 30*time.Second)
	minted := enrolNarrowable(t, c, p, "alice")
	enrol(t, c, p, "plain") // of the provider example: narrowed_tokens is off
	before := p.grants(t)

	// A scope the credential lacks, and a provider without narrowed tokens.
	for _, tc := range []struct{ user, scope string }{{"alice", "admin"}, {"alice", "read admin"}, {"plain", "read"}} {
		_, err := c.NarrowedToken(ctx, tc.user, 0, "", tokend.WithScope(tc.scope))
		var invalid *tokend.InvalidCredentialError
		if !errors.As(err, &invalid) || !errors.Is(err, tokend.ErrInvalidCredential) || invalid.Reason == "" {
			t.Errorf("NarrowedToken(%s, WithScope(%q)): %v (%T), want *InvalidCredentialError", tc.user, tc.scope, err, err)
		}
	}
	// What tokend refuses to read, by parameter.
	for _, tc := range []struct {
		opts      []tokend.CallOption
		parameter string
	}{
		{[]tokend.CallOption{tokend.WithResource("not a uri")}, "resource"},
		{[]tokend.CallOption{tokend.WithResource(narrowedResource + "#part")}, "resource"},
		{[]tokend.CallOption{tokend.WithScope("read"), tokend.WithResource("/relative")}, "resource"},
		{[]tokend.CallOption{tokend.WithScope(`read "write"`)}, "scope"},
		{[]tokend.CallOption{tokend.WithScope("   ")}, "scope"},
	} {
		_, err := c.NarrowedToken(ctx, "alice", 0, "", tc.opts...)
		var refused *tokend.VarlinkError
		if !errors.Is(err, tokend.ErrInvalidParameter) || !errors.As(err, &refused) ||
			refused.Name != "org.varlink.service.InvalidParameter" || refused.Parameters["parameter"] != tc.parameter {
			t.Errorf("NarrowedToken with a bad %s: %v (%T), want InvalidParameter %s", tc.parameter, err, err, tc.parameter)
		}
	}
	_, err := c.NarrowedToken(ctx, "nobody", 0, "", tokend.WithScope("read"))
	if !errors.Is(err, tokend.ErrUnknownUser) {
		t.Errorf("NarrowedToken(nobody): %v, want ErrUnknownUser", err)
	}
	if after := p.grants(t); after != before {
		t.Errorf("the refused calls made %d grants, want 0", after-before)
	}

	// A scope tokend allows (the credential says it has it) but the provider refuses: the token
	// was minted with the scope read alone.
	claimed := p.mint(t, 1, 0)[0]
	claimed.Scope = "read write"
	enrolMintedFor(t, c, "claimed", narrowedProvider, claimed)
	_, err = c.NarrowedToken(ctx, "claimed", 0, "", tokend.WithScope("write"))
	var refreshFailed *tokend.RefreshFailedError
	if !errors.As(err, &refreshFailed) || refreshFailed.UserIdentifier != "claimed" || refreshFailed.Reason == "" {
		t.Errorf("NarrowedToken(WithScope(write)) refused by the provider: %v (%T), want *RefreshFailedError", err, err)
	}
	if after := p.grants(t); after != before+1 {
		t.Errorf("the refused narrowing made %d grants, want exactly 1", after-before)
	}
	// Neither credential is the worse for it.
	if own, err := c.Token(ctx, "claimed", 0, ""); err != nil || own.AccessToken != claimed.AccessToken {
		t.Errorf("Token(claimed) after the refusal: %v", err)
	}
	if own, err := c.Token(ctx, "alice", 0, ""); err != nil || own.AccessToken != minted.AccessToken {
		t.Errorf("Token(alice) after the errors: %v", err)
	}
}
