package tokend_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tokend.io/tokend"
)

func TestTransportReplacesARejectedTokenOnce(t *testing.T) {
	p, _, c := setUp(t)
	// The IdP's token dies after 2 s, but tokend is told it lives an hour (as when a provider
	// revokes tokens early): the API will refuse a token tokend still deems valid.
	minted := p.mint(t, 1, 2)[0]
	minted.ExpiresIn = idpLifetime
	enrolMinted(t, c, "alice", minted)
	server := newAPI(t, p)
	httpClient := &http.Client{Transport: tokend.NewTransport("alice", tokend.WithClient(c)), Timeout: 20 * time.Second}

	// Once the IdP's token has expired, the API answers 401; the transport reports the token to
	// tokend, which refreshes, and the request (body included) goes once more.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		active, err := p.active(minted.AccessToken)
		if err == nil && !active {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the IdP's 2 s token is still active after 10 s (%v)", err)
		}
	}
	before := p.grants(t)
	resp, err := httpClient.Post(server.URL+"/resource", "text/plain", strings.NewReader("payload"))
	if err != nil {
		t.Fatalf("POST with the expired token: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("POST with the expired token: status %d, want 200 after one retry", resp.StatusCode)
	}
	seen, bodies := server.tokens(), server.bodies()
	if len(seen) != 2 || seen[0] != minted.AccessToken || seen[1] == minted.AccessToken || seen[1] == "" {
		t.Errorf("the API saw %d requests, want 2: the stored token (401), then a new one", len(seen))
	}
	if len(bodies) == 2 && (bodies[0] != "payload" || bodies[1] != "payload") {
		t.Errorf("the POSTs carried bodies %q, want payload twice", bodies)
	}
	if after := p.grants(t); after != before+1 {
		t.Errorf("the 401 made %d grants, want exactly 1", after-before)
	}
	current, err := c.Token(contextWithTimeout(t, 10*time.Second), "alice", 0, "")
	if err != nil || len(seen) != 2 || current.AccessToken != seen[1] {
		t.Errorf("tokend's current token is not the one the retry used (%v)", err)
	}
}

func TestTransportRetriesExactlyOnce(t *testing.T) {
	p, _, c := setUp(t)
	minted := enrol(t, c, p, "alice")

	// An API that refuses every token.
	var requests atomic.Int32
	var lastToken atomic.Value
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		lastToken.Store(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		http.Error(w, "go away", http.StatusUnauthorized)
	}))
	defer server.Close()
	httpClient := &http.Client{Transport: tokend.NewTransport("alice", tokend.WithClient(c)), Timeout: 20 * time.Second}

	before := p.grants(t)
	resp, err := httpClient.Get(server.URL)
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "go away") {
		t.Errorf("GET: status %d, want the API's own 401", resp.StatusCode)
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("the API saw %d requests, want exactly 2 (one retry)", n)
	}
	if last, _ := lastToken.Load().(string); last == minted.AccessToken || last == "" {
		t.Errorf("the retry did not carry a new token")
	}
	if after := p.grants(t); after != before+1 {
		t.Errorf("%d grants, want exactly 1", after-before)
	}

	// A credential that needs a new login: the transport says so instead of sending.
	bob := enrol(t, c, p, "bob")
	p.revokeRefreshToken(t, bob.RefreshToken)
	_, err = c.Token(contextWithTimeout(t, 10*time.Second), "bob", 2*time.Hour, "")
	if !errors.Is(err, tokend.ErrReauthenticationRequired) {
		t.Fatalf("forcing a refresh with a revoked refresh token: %v", err)
	}
	requests.Store(0)
	bobClient := &http.Client{Transport: tokend.NewTransport("bob", tokend.WithClient(c)), Timeout: 20 * time.Second}
	resp, err = bobClient.Get(server.URL)
	var reauth *tokend.ReauthenticationRequiredError
	if !errors.As(err, &reauth) || reauth.UserIdentifier != "bob" {
		t.Errorf("GET with a credential that needs a new login: %v, want *ReauthenticationRequiredError", err)
	}
	if resp != nil {
		resp.Body.Close()
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the API saw %d requests with a credential that needs a new login, want 0", n)
	}
}
