package tokend_test

// DPoPProof and DPoPTransport against the real tokend: DPoP proofs (RFC 9449) signed with the key
// tokend made for a credential of the provider dpopProvider at enrolment.

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tokend.io/tokend"
)

const dpopURL = "https://api.example.com/v1/items"

// jwt is a decoded compact JWS.
type jwt struct {
	header, claims map[string]any
	signingInput   []byte
	signature      []byte
}

func decodeJWT(t *testing.T, compact string) jwt {
	t.Helper()
	j, err := parseJWT(compact)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func parseJWT(compact string) (jwt, error) {
	parts := strings.Split(compact, ".")
	if len(parts) != 3 {
		return jwt{}, fmt.Errorf("the proof has %d parts, want 3", len(parts))
	}
	var decoded [3][]byte
	for i, part := range parts {
		b, err := base64.RawURLEncoding.DecodeString(part)
		if err != nil {
			return jwt{}, fmt.Errorf("part %d of the proof is not base64url without padding: %v", i, err)
		}
		decoded[i] = b
	}
	j := jwt{signingInput: []byte(parts[0] + "." + parts[1]), signature: decoded[2]}
	for i, out := range []*map[string]any{&j.header, &j.claims} {
		decoder := json.NewDecoder(bytes.NewReader(decoded[i]))
		decoder.UseNumber()
		if err := decoder.Decode(out); err != nil {
			return jwt{}, fmt.Errorf("part %d of the proof is not a JSON object: %v", i, err)
		}
	}
	return j, nil
}

func (j jwt) claim(name string) string { s, _ := j.claims[name].(string); return s }

func (j jwt) jwk() map[string]any { jwk, _ := j.header["jwk"].(map[string]any); return jwk }

// verify checks the ES256 signature (r ‖ s, RFC 7518 §3.4) of signingInput with the header's
// jwk: false when the jwk is not a P-256 point (x and y of 32 bytes each) or the signature is
// not 64 bytes.
func (j jwt) verify(signingInput []byte) bool {
	coordinate := func(name string) *big.Int {
		s, _ := j.jwk()[name].(string)
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil || len(b) != 32 {
			return nil
		}
		return new(big.Int).SetBytes(b)
	}
	key := &ecdsa.PublicKey{Curve: elliptic.P256(), X: coordinate("x"), Y: coordinate("y")}
	if key.X == nil || key.Y == nil || !key.Curve.IsOnCurve(key.X, key.Y) || len(j.signature) != 64 {
		return false
	}
	digest := sha256.Sum256(signingInput)
	return ecdsa.Verify(key, digest[:], new(big.Int).SetBytes(j.signature[:32]), new(big.Int).SetBytes(j.signature[32:]))
}

// athOf is RFC 9449 §4.2's ath: base64url(SHA-256(token)), without padding.
func athOf(accessToken string) string {
	digest := sha256.Sum256([]byte(accessToken))
	return base64.RawURLEncoding.EncodeToString(digest[:])
}

func TestDPoPProofIsAnES256JWTForTheRequest(t *testing.T) {
	_, _, c := setUp(t)
	accessToken := enrolDPoP(t, c, "alice")
	ctx := contextWithTimeout(t, 20*time.Second)

	before := time.Now().Unix()
	proof, err := c.DPoPProof(ctx, "alice", http.MethodPost, dpopURL+"?page=2&q=secret#top")
	after := time.Now().Unix()
	if err != nil {
		t.Fatalf("DPoPProof: %v", err)
	}
	if proof.Credentials.UserIdentifier != "alice" || proof.Credentials.AccessToken != accessToken || proof.Credentials.TokenType != "DPoP" {
		t.Errorf("DPoPProof returned %v, want alice's DPoP token", proof.Credentials)
	}
	j := decodeJWT(t, proof.Proof)
	if j.header["typ"] != "dpop+jwt" || j.header["alg"] != "ES256" {
		t.Errorf("header typ %v alg %v, want dpop+jwt ES256", j.header["typ"], j.header["alg"])
	}
	jwk := j.jwk()
	if jwk["kty"] != "EC" || jwk["crv"] != "P-256" || jwk["x"] == nil || jwk["y"] == nil {
		t.Errorf("header jwk %v, want an EC P-256 key", jwk)
	}
	if _, private := jwk["d"]; private {
		t.Errorf("the jwk carries the private key")
	}
	if j.claim("htm") != "POST" || j.claim("htu") != dpopURL {
		t.Errorf("htm %q htu %q, want POST %s (no query, no fragment)", j.claim("htm"), j.claim("htu"), dpopURL)
	}
	if len(j.claim("jti")) < 16 {
		t.Errorf("jti %q is too short", j.claim("jti"))
	}
	if iat, err := j.claims["iat"].(json.Number).Int64(); err != nil || iat < before-5 || iat > after+5 {
		t.Errorf("iat %v, want between %d and %d", j.claims["iat"], before, after)
	}
	if j.claim("ath") != athOf(accessToken) {
		t.Errorf("ath is not base64url(SHA-256(access token))")
	}
	if _, ok := j.claims["nonce"]; ok {
		t.Errorf("a proof asked for without a nonce carries one")
	}
	if !j.verify(j.signingInput) {
		t.Errorf("the ES256 signature does not verify with the header's jwk")
	}
	if j.verify(append(j.signingInput, 'x')) {
		t.Errorf("the signature verifies for another input")
	}

	req, err := http.NewRequest(http.MethodPost, dpopURL, strings.NewReader("payload"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer stale")
	proof.SetHeaders(req)
	if got := req.Header.Values("Authorization"); len(got) != 1 || got[0] != "DPoP "+accessToken {
		t.Errorf("SetHeaders: Authorization is not 'DPoP <token>' alone")
	}
	if got := req.Header.Values("DPoP"); len(got) != 1 || got[0] != proof.Proof {
		t.Errorf("SetHeaders: the DPoP header is not the proof")
	}

	// Neither the token nor the proof (nor its signature) shows when formatted; the user does.
	signature := proof.Proof[strings.LastIndex(proof.Proof, ".")+1:]
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		for _, value := range []any{proof, *proof} {
			text := fmt.Sprintf(format, value)
			mustNotContain(t, "fmt "+format+" of DPoPProof", text, accessToken, proof.Proof, signature)
			if !strings.Contains(text, "alice") {
				t.Errorf("fmt %s of DPoPProof does not name the user: %s", format, text)
			}
		}
	}
}

func TestEachDPoPProofIsNewAndSignedWithTheCredentialsKey(t *testing.T) {
	_, _, c := setUp(t)
	accessToken := enrolDPoP(t, c, "alice")
	otherToken := enrolDPoP(t, c, "bob")
	ctx := contextWithTimeout(t, 20*time.Second)

	first, err := c.DPoPProof(ctx, "alice", http.MethodGet, dpopURL)
	if err != nil {
		t.Fatalf("DPoPProof: %v", err)
	}
	second, err := c.DPoPProof(ctx, "alice", http.MethodGet, dpopURL, tokend.WithMinValid(time.Minute))
	if err != nil {
		t.Fatalf("DPoPProof(WithMinValid(1m)): %v", err)
	}
	a, b := decodeJWT(t, first.Proof), decodeJWT(t, second.Proof)
	if first.Proof == second.Proof || a.claim("jti") == b.claim("jti") {
		t.Errorf("two proofs share their jti")
	}
	if fmt.Sprint(a.jwk()) != fmt.Sprint(b.jwk()) {
		t.Errorf("two proofs of one credential carry different keys: %v, %v", a.jwk(), b.jwk())
	}
	if a.claim("ath") != athOf(accessToken) || b.claim("ath") != athOf(accessToken) {
		t.Errorf("ath is not the access token's")
	}
	if !b.verify(b.signingInput) {
		t.Errorf("the second proof's signature does not verify")
	}
	// Another credential has a key of its own.
	other, err := c.DPoPProof(ctx, "bob", http.MethodGet, dpopURL)
	if err != nil {
		t.Fatalf("DPoPProof(bob): %v", err)
	}
	o := decodeJWT(t, other.Proof)
	if fmt.Sprint(o.jwk()) == fmt.Sprint(a.jwk()) || o.claim("ath") != athOf(otherToken) {
		t.Errorf("bob's proof has alice's key, or not bob's ath")
	}

	// A nonce is carried when given, and only then; http to a loopback host is accepted.
	withNonce, err := c.DPoPProof(ctx, "alice", http.MethodPut, "http://127.0.0.1:8080/x?y=1", tokend.WithNonce("eyJ7S_zG.9-nonce"))
	if err != nil {
		t.Fatalf("DPoPProof(WithNonce): %v", err)
	}
	n := decodeJWT(t, withNonce.Proof)
	if n.claim("nonce") != "eyJ7S_zG.9-nonce" || n.claim("htm") != "PUT" || n.claim("htu") != "http://127.0.0.1:8080/x" {
		t.Errorf("nonce %q htm %q htu %q, want the nonce, PUT, http://127.0.0.1:8080/x", n.claim("nonce"), n.claim("htm"), n.claim("htu"))
	}
	for _, j := range []jwt{a, b, o} {
		if _, ok := j.claims["nonce"]; ok {
			t.Errorf("a proof asked for without a nonce carries one")
		}
	}
}

func TestDPoPProofErrors(t *testing.T) {
	p, _, c := setUp(t)
	accessToken := enrolDPoP(t, c, "alice")
	ctx := contextWithTimeout(t, 20*time.Second)

	// Tokens that are not DPoP-bound: a bearer credential of the IdP, and a bearer one of the
	// DPoP provider.
	enrol(t, c, p, "bearer")
	err := c.AddCredential(ctx, tokend.AddCredentialRequest{UserIdentifier: "unbound", Provider: dpopProvider,
		AccessToken: "bearer-of-dpop-" + accessToken, TokenType: "Bearer", ExpiresIn: time.Hour})
	if err != nil {
		t.Fatalf("AddCredential(unbound): %v", err)
	}
	for _, user := range []string{"bearer", "unbound"} {
		_, err := c.DPoPProof(ctx, user, http.MethodGet, dpopURL)
		var invalid *tokend.InvalidCredentialError
		if !errors.As(err, &invalid) || !errors.Is(err, tokend.ErrInvalidCredential) || !strings.Contains(invalid.Reason, "not DPoP-bound") {
			t.Errorf("DPoPProof(%s): %v (%T), want *InvalidCredentialError: not DPoP-bound", user, err, err)
		}
	}

	// What tokend refuses, by parameter.
	for _, tc := range []struct {
		httpMethod, uri, nonce, parameter string
	}{
		{"GET", "ftp://x", "", "httpUri"},
		{"GET", "http://api.example.com/", "", "httpUri"}, // cleartext to a host not the loopback
		{"GET", "/relative", "", "httpUri"},
		{"G ET", dpopURL, "", "httpMethod"},
		{"GET", dpopURL, `with "quotes"`, "nonce"},
	} {
		_, err := c.DPoPProof(ctx, "alice", tc.httpMethod, tc.uri, tokend.WithNonce(tc.nonce))
		var refused *tokend.VarlinkError
		if !errors.Is(err, tokend.ErrInvalidParameter) || !errors.As(err, &refused) ||
			refused.Name != "org.varlink.service.InvalidParameter" || refused.Parameters["parameter"] != tc.parameter {
			t.Errorf("DPoPProof(%q, %q, nonce %q): %v (%T), want InvalidParameter %s", tc.httpMethod, tc.uri, tc.nonce, err, err, tc.parameter)
		} else if !strings.Contains(err.Error(), tc.parameter) {
			t.Errorf("the error does not name %s: %q", tc.parameter, err)
		}
	}

	// WithMinValid goes to tokend, which cannot refresh a token without a refresh token.
	_, err = c.DPoPProof(ctx, "alice", http.MethodGet, dpopURL, tokend.WithMinValid(2*time.Hour))
	var refreshFailed *tokend.RefreshFailedError
	if !errors.As(err, &refreshFailed) || refreshFailed.UserIdentifier != "alice" || !strings.Contains(refreshFailed.Reason, "no refresh token") {
		t.Errorf("DPoPProof(WithMinValid(2h)): %v (%T), want *RefreshFailedError: no refresh token", err, err)
	}

	_, err = c.DPoPProof(ctx, "nobody", http.MethodGet, dpopURL)
	var unknown *tokend.UnknownUserError
	if !errors.As(err, &unknown) || unknown.UserIdentifier != "nobody" || !errors.Is(err, tokend.ErrUnknownUser) {
		t.Errorf("DPoPProof(nobody): %v (%T), want *UnknownUserError", err, err)
	}

	// Checked before anything is sent.
	for _, tc := range []struct{ user, httpMethod, uri, parameter string }{
		{"no body", "GET", dpopURL, "userIdentifier"},
		{"alice", "", dpopURL, "httpMethod"},
		{"alice", "GET", "", "httpUri"},
	} {
		_, err := c.DPoPProof(ctx, tc.user, tc.httpMethod, tc.uri)
		var remote *tokend.VarlinkError
		if !errors.Is(err, tokend.ErrInvalidParameter) || errors.As(err, &remote) || !strings.Contains(err.Error(), tc.parameter) {
			t.Errorf("DPoPProof(%q, %q, %q): %v, want this client's ErrInvalidParameter naming %s", tc.user, tc.httpMethod, tc.uri, err, tc.parameter)
		}
	}

	// Error replies leave the connection usable.
	if proof, err := c.DPoPProof(ctx, "alice", http.MethodGet, dpopURL); err != nil || proof.Credentials.AccessToken != accessToken {
		t.Errorf("DPoPProof after the errors: %v", err)
	}
}

// dpopAPI is an HTTP API on 127.0.0.1 that checks each request's DPoP proof against the
// request and its token; with demand it answers 401 with a DPoP-Nonce until a proof carries
// that nonce.
type dpopAPI struct {
	*httptest.Server
	t           *testing.T
	accessToken string
	nonce       string
	demand      bool
	always      bool // demand a new nonce every time

	mu       sync.Mutex
	requests []dpopRequest
}

type dpopRequest struct {
	nonce, body string
	status      int
}

func newDPoPAPI(t *testing.T, accessToken string, demand, always bool) *dpopAPI {
	a := &dpopAPI{t: t, accessToken: accessToken, nonce: "server-nonce-1", demand: demand, always: always}
	a.Server = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.Close)
	return a
}

func (a *dpopAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	status := http.StatusOK
	j, err := parseJWT(r.Header.Get("DPoP"))
	nonce := j.claim("nonce")
	switch {
	case err != nil:
		a.t.Errorf("the API got a request without a DPoP proof: %v", err)
		status = http.StatusBadRequest
	case r.Header.Get("Authorization") != "DPoP "+a.accessToken || j.claim("ath") != athOf(a.accessToken) ||
		j.claim("htm") != r.Method || j.claim("htu") != a.URL+r.URL.Path || !j.verify(j.signingInput):
		a.t.Errorf("the API got a request whose DPoP proof does not match it (htm %q htu %q)", j.claim("htm"), j.claim("htu"))
		status = http.StatusBadRequest
	case a.demand && (a.always || nonce != a.nonce):
		w.Header().Set("DPoP-Nonce", a.nonce)
		w.Header().Set("WWW-Authenticate", `DPoP error="use_dpop_nonce", error_description="Resource server requires nonce in DPoP proof", algs="ES256"`)
		status = http.StatusUnauthorized
	}
	a.mu.Lock()
	a.requests = append(a.requests, dpopRequest{nonce: nonce, body: string(body), status: status})
	a.mu.Unlock()
	w.WriteHeader(status)
	fmt.Fprintln(w, http.StatusText(status))
}

func (a *dpopAPI) seen() []dpopRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]dpopRequest(nil), a.requests...)
}

func TestDPoPTransportRetriesWithTheServersNonceOnce(t *testing.T) {
	_, _, c := setUp(t)
	accessToken := enrolDPoP(t, c, "alice")
	api := newDPoPAPI(t, accessToken, true, false)
	httpClient := &http.Client{Transport: tokend.NewDPoPTransport("alice", tokend.WithClient(c)), Timeout: 20 * time.Second}

	// The first POST has no nonce: 401 with one; the transport asks tokend for a proof with it
	// and sends the request (body included) once more.
	resp, err := httpClient.Post(api.URL+"/items?page=2", "text/plain", strings.NewReader("payload"))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("POST: status %d, want 200 after one retry with the nonce", resp.StatusCode)
	}
	seen := api.seen()
	if len(seen) != 2 || seen[0].nonce != "" || seen[0].status != http.StatusUnauthorized || seen[1].nonce != api.nonce {
		t.Errorf("the API saw %+v, want a request without a nonce (401), then one with %s", seen, api.nonce)
	}
	for _, r := range seen {
		if r.body != "payload" {
			t.Errorf("a POST carried body %q, want payload", r.body)
		}
	}

	// A body that cannot be replayed is not retried: the 401 comes back.
	req, err := http.NewRequest(http.MethodPost, api.URL+"/items", io.MultiReader(strings.NewReader("once")))
	if err != nil {
		t.Fatal(err)
	}
	resp, err = httpClient.Do(req)
	if err != nil {
		t.Fatalf("POST with a body that cannot be replayed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || len(api.seen()) != 3 {
		t.Errorf("POST with a body that cannot be replayed: status %d after %d requests, want 401 after 1", resp.StatusCode, len(api.seen())-2)
	}

	// A server that demands a new nonce every time gets exactly one retry, and its 401 is returned.
	stubborn := newDPoPAPI(t, accessToken, true, true)
	resp, err = httpClient.Get(stubborn.URL + "/items")
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || len(stubborn.seen()) != 2 {
		t.Errorf("GET from a server that always demands a nonce: status %d after %d requests, want 401 after 2", resp.StatusCode, len(stubborn.seen()))
	}

	// A server that does not demand a nonce: one request.
	plain := newDPoPAPI(t, accessToken, false, false)
	resp, err = httpClient.Get(plain.URL + "/items")
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(plain.seen()) != 1 {
		t.Errorf("GET without a nonce: status %d after %d requests, want 200 after 1", resp.StatusCode, len(plain.seen()))
	}
}

func TestDPoPTransportDoesNotSendWithoutAProof(t *testing.T) {
	p, _, c := setUp(t)
	enrol(t, c, p, "bearer")
	var requests atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests.Add(1) }))
	defer server.Close()

	for user, sentinel := range map[string]error{"bearer": tokend.ErrInvalidCredential, "nobody": tokend.ErrUnknownUser} {
		httpClient := &http.Client{Transport: tokend.NewDPoPTransport(user, tokend.WithClient(c)), Timeout: 20 * time.Second}
		resp, err := httpClient.Get(server.URL)
		if !errors.Is(err, sentinel) {
			t.Errorf("GET as %s: %v, want %v", user, err, sentinel)
		}
		if resp != nil {
			resp.Body.Close()
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the API saw %d requests, want 0", n)
	}
}
