package tokend

// Narrowed tokens on the wire, without the daemon: a Unix socket server in the test records
// each call and answers it with a fixed reply. scope and resource go to ProvideTokenReplacement
// exactly when they are asked for, from NarrowedToken, a TokenSource and a Transport, never from
// Token or DPoPProof; the errors tokend answers with become their typed errors.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

const narrowedCredentials = `{"userIdentifier":"alice","accessToken":"tok-SECRET","tokenType":"Bearer","expiresAt":2000000000,"scope":"read"}`

// sentParameters is the parameters of s's last call, as JSON (keys sorted), and its method.
func (s *replyingServer) sentParameters(t *testing.T) string {
	t.Helper()
	last := s.last()
	if method := last["method"]; method != interfaceName+".ProvideTokenReplacement" {
		t.Errorf("the call was %v, want ProvideTokenReplacement", method)
	}
	parameters, _ := json.Marshal(last["parameters"])
	return string(parameters)
}

func TestNarrowedTokenOnTheWire(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const resource = "https://api.example.com/v1"
	server := startReplyingServer(t, `{"parameters":{"credentials":`+narrowedCredentials+`}}`)
	c := NewClient(WithSocket(server.path), WithTimeout(2*time.Second))
	defer c.Close()

	for _, tc := range []struct {
		name string
		call func() (*Credentials, error)
		want string
	}{
		{"Token", func() (*Credentials, error) { return c.Token(ctx, "alice", 0, "") },
			`{"userIdentifier":"alice"}`},
		{"NarrowedToken without options", func() (*Credentials, error) { return c.NarrowedToken(ctx, "alice", 0, "") },
			`{"userIdentifier":"alice"}`},
		{"NarrowedToken(WithScope)", func() (*Credentials, error) { return c.NarrowedToken(ctx, "alice", 0, "", WithScope("read")) },
			`{"scope":"read","userIdentifier":"alice"}`},
		{"NarrowedToken(WithResource)", func() (*Credentials, error) {
			return c.NarrowedToken(ctx, "alice", 0, "", WithResource(resource))
		}, `{"resource":"` + resource + `","userIdentifier":"alice"}`},
		{"NarrowedToken(everything)", func() (*Credentials, error) {
			return c.NarrowedToken(ctx, "alice", 1500*time.Millisecond, "tok-OLD", WithScope("read write"), WithResource(resource))
		}, `{"minValidSeconds":2,"rejectedToken":"tok-OLD","resource":"` + resource + `","scope":"read write","userIdentifier":"alice"}`},
		{"NarrowedToken(WithScope(\"\"), WithResource(\"\"))", func() (*Credentials, error) {
			return c.NarrowedToken(ctx, "alice", 0, "", WithScope(""), WithResource(""))
		}, `{"userIdentifier":"alice"}`},
	} {
		credentials, err := tc.call()
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if credentials.Scope != "read" || credentials.AccessToken != "tok-SECRET" {
			t.Errorf("%s read %v", tc.name, credentials)
		}
		if got := server.sentParameters(t); got != tc.want {
			t.Errorf("%s sent %s, want %s", tc.name, got, tc.want)
		}
	}

	// A TokenSource asks for the narrowed token on every Token; its scope is the reply's.
	source := TokenSource("alice", WithClient(c), WithScope("read"), WithResource(resource), WithMinValid(time.Minute))
	token, err := source.Token()
	if err != nil {
		t.Fatalf("TokenSource(WithScope, WithResource).Token: %v", err)
	}
	if scope, _ := token.Extra("scope").(string); scope != "read" || token.AccessToken != "tok-SECRET" {
		t.Errorf("TokenSource.Token: scope %q", scope)
	}
	if got, want := server.sentParameters(t), `{"minValidSeconds":60,"resource":"`+resource+`","scope":"read","userIdentifier":"alice"}`; got != want {
		t.Errorf("TokenSource sent %s, want %s", got, want)
	}
	if _, err := c.TokenSource("alice").Token(); err != nil || server.sentParameters(t) != `{"userIdentifier":"alice"}` {
		t.Errorf("TokenSource without WithScope: %v, sent %s", err, server.sentParameters(t))
	}

	// DPoPProof has no scope or resource: the options are ignored there.
	dpop := startReplyingServer(t, `{"parameters":{"credentials":`+narrowedCredentials+`,"proof":"h.c.s"}}`)
	d := NewClient(WithSocket(dpop.path), WithTimeout(2*time.Second))
	defer d.Close()
	if _, err := d.DPoPProof(ctx, "alice", "GET", resource, WithScope("read"), WithResource(resource)); err != nil {
		t.Fatalf("DPoPProof: %v", err)
	}
	if parameters, _ := json.Marshal(dpop.last()["parameters"]); strings.Contains(string(parameters), "scope") || strings.Contains(string(parameters), `"resource"`) {
		t.Errorf("DPoPProof sent %s", parameters)
	}
}

func TestTransportAsksForTheNarrowedTokenAndReportsIt(t *testing.T) {
	const resource = "https://api.example.com/v1"
	server := startReplyingServer(t, `{"parameters":{"credentials":`+narrowedCredentials+`}}`)
	c := NewClient(WithSocket(server.path), WithTimeout(2*time.Second))
	defer c.Close()
	var mu sync.Mutex
	var seen []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		http.Error(w, "refused", http.StatusUnauthorized)
	}))
	defer api.Close()

	transport := NewTransport("alice", WithClient(c), WithScope("read"), WithResource(resource))
	if transport.Scope != "read" || transport.Resource != resource {
		t.Fatalf("NewTransport(WithScope, WithResource) = %+v", transport)
	}
	resp, err := (&http.Client{Transport: transport, Timeout: 10 * time.Second}).Get(api.URL)
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	// The fake tokend answers with the refused token again: the 401 is returned, not retried.
	if resp.StatusCode != http.StatusUnauthorized || len(seen) != 1 || seen[0] != "Bearer tok-SECRET" {
		t.Errorf("GET: status %d, the API saw %d requests", resp.StatusCode, len(seen))
	}
	server.mu.Lock()
	calls := append([]map[string]any(nil), server.calls...)
	server.mu.Unlock()
	var sent []string
	for _, call := range calls {
		parameters, _ := json.Marshal(call["parameters"])
		sent = append(sent, string(parameters))
	}
	want := []string{
		`{"resource":"` + resource + `","scope":"read","userIdentifier":"alice"}`,
		`{"rejectedToken":"tok-SECRET","resource":"` + resource + `","scope":"read","userIdentifier":"alice"}`,
	}
	if fmt.Sprint(sent) != fmt.Sprint(want) {
		t.Errorf("the Transport sent %q, want %q", sent, want)
	}
}

func TestNarrowedTokenErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		reply string
		check func(error) bool
	}{
		{`{"error":"io.tokend.TokenProvider.InvalidCredential","parameters":{"reason":"scope 'admin' is not among the credential's scope 'read write'"}}`,
			func(err error) bool {
				var e *InvalidCredentialError
				return errors.As(err, &e) && errors.Is(err, ErrInvalidCredential) && strings.Contains(e.Reason, "'admin'")
			}},
		{`{"error":"io.tokend.TokenProvider.InvalidCredential","parameters":{"reason":"the provider does not hand out narrowed tokens"}}`,
			func(err error) bool {
				var e *InvalidCredentialError
				return errors.As(err, &e) && strings.Contains(err.Error(), "narrowed tokens")
			}},
		{`{"error":"io.tokend.TokenProvider.RefreshFailed","parameters":{"userIdentifier":"alice","reason":"invalid_scope","retryAt":1700000000}}`,
			func(err error) bool {
				var e *RefreshFailedError
				return errors.As(err, &e) && errors.Is(err, ErrRefreshFailed) && e.UserIdentifier == "alice" &&
					e.Reason == "invalid_scope" && e.RetryAt.Equal(time.Unix(1700000000, 0))
			}},
		{`{"error":"org.varlink.service.InvalidParameter","parameters":{"parameter":"scope"}}`,
			func(err error) bool {
				var e *VarlinkError
				return errors.As(err, &e) && errors.Is(err, ErrInvalidParameter) && e.Parameters["parameter"] == "scope" &&
					strings.Contains(err.Error(), "scope")
			}},
		{`{"error":"org.varlink.service.InvalidParameter","parameters":{"parameter":"resource"}}`,
			func(err error) bool {
				var e *VarlinkError
				return errors.As(err, &e) && errors.Is(err, ErrInvalidParameter) && e.Parameters["parameter"] == "resource"
			}},
	} {
		c := NewClient(WithSocket(startReplyingServer(t, tc.reply).path), WithTimeout(2*time.Second))
		_, err := c.NarrowedToken(ctx, "alice", 0, "tok-SECRET-rejected", WithScope("read admin"), WithResource("not a uri"))
		c.Close()
		if err == nil || !tc.check(err) {
			t.Errorf("reply %s: %v (%T)", tc.reply, err, err)
			continue
		}
		if text := err.Error() + fmt.Sprintf(" %v %+v %#v", err, err, err); strings.Contains(text, "SECRET") {
			t.Errorf("reply %s: the error shows the rejected token: %q", tc.reply, text)
		}
	}
}
