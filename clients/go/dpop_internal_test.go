package tokend

// ProvideDPoPProof on the wire, without the daemon: a Unix socket server in the test records
// each call and answers it with a fixed reply. And the WWW-Authenticate challenges that make a
// DPoPTransport retry with the server's nonce.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// replyingServer answers every call with reply and records the calls.
type replyingServer struct {
	path  string
	mu    sync.Mutex
	calls []map[string]any
}

func startReplyingServer(t *testing.T, reply string) *replyingServer {
	t.Helper()
	s := &replyingServer{}
	s.path = ServeUnixForTest(t, "tokend-go-dpop-", func(nc net.Conn) {
		defer nc.Close()
		r := bufio.NewReader(nc)
		for {
			message, err := r.ReadBytes(0)
			if err != nil {
				return
			}
			var call map[string]any
			_ = json.Unmarshal(message[:len(message)-1], &call)
			s.mu.Lock()
			s.calls = append(s.calls, call)
			s.mu.Unlock()
			if _, err := nc.Write([]byte(reply + "\x00")); err != nil {
				return
			}
		}
	})
	return s
}

func (s *replyingServer) last() map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.calls) == 0 {
		return nil
	}
	return s.calls[len(s.calls)-1]
}

func TestDPoPProofOnTheWire(t *testing.T) {
	const credentials = `{"userIdentifier":"alice","accessToken":"tok-SECRET","tokenType":"DPoP","expiresAt":2000000000}`
	const url = "https://api.example.com/v1/items"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	good := startReplyingServer(t, `{"parameters":{"credentials":`+credentials+`,"proof":"h.c.SECRET-signature"}}`)
	c := NewClient(WithSocket(good.path), WithTimeout(2*time.Second))
	defer c.Close()
	proof, err := c.DPoPProof(ctx, "alice", "GET", url)
	if err != nil {
		t.Fatalf("DPoPProof: %v", err)
	}
	if proof.Proof != "h.c.SECRET-signature" || proof.Credentials.AccessToken != "tok-SECRET" || !proof.Credentials.ExpiresAt.Equal(time.Unix(2000000000, 0)) {
		t.Errorf("DPoPProof read %v", proof)
	}
	want := `{"method":"io.tokend.TokenProvider.ProvideDPoPProof","parameters":{"httpMethod":"GET","httpUri":"` + url + `","userIdentifier":"alice"}}`
	if got, _ := json.Marshal(good.last()); string(got) != want {
		t.Errorf("sent %s, want %s", got, want)
	}
	if _, err := c.DPoPProof(ctx, "alice", "POST", url, WithNonce("n-1"), WithMinValid(1500*time.Millisecond)); err != nil {
		t.Fatalf("DPoPProof(WithNonce, WithMinValid): %v", err)
	}
	want = `{"method":"io.tokend.TokenProvider.ProvideDPoPProof","parameters":{"httpMethod":"POST","httpUri":"` + url + `","minValidSeconds":2,"nonce":"n-1","userIdentifier":"alice"}}`
	if got, _ := json.Marshal(good.last()); string(got) != want {
		t.Errorf("sent %s, want %s", got, want)
	}

	for _, tc := range []struct{ reply, detail string }{
		{`{"parameters":{"credentials":` + credentials + `}}`, `field "proof" is missing`},
		{`{"parameters":{"credentials":` + credentials + `,"proof":""}}`, `field "proof" is missing`},
		{`{"parameters":{"credentials":` + credentials + `,"proof":7}}`, `field "proof" is mistyped`},
		{`{"parameters":{"proof":"h.c.SECRET-signature"}}`, `field "credentials" is missing`},
		{`{"parameters":{"credentials":` + strings.Replace(credentials, "alice", "bob", 1) + `,"proof":"p"}}`, "another user's credentials"},
	} {
		bad := NewClient(WithSocket(startReplyingServer(t, tc.reply).path), WithTimeout(2*time.Second))
		_, err := bad.DPoPProof(ctx, "alice", "GET", url)
		bad.Close()
		var protocol *ProtocolError
		if !errors.As(err, &protocol) || !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tc.detail) || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("reply %s: %v (%T), want a ProtocolError: %s", tc.reply, err, err, tc.detail)
		}
	}
}

func TestDemandsDPoPNonce(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  bool
	}{
		{`DPoP error="use_dpop_nonce"`, true},
		{`DPoP error="use_dpop_nonce", error_description="Resource server requires nonce in DPoP proof"`, true},
		{`dpop algs="ES256", error=use_dpop_nonce`, true},
		{`Bearer realm="api", DPoP algs="ES256" ,error = "use_dpop_nonce"`, true},
		{`DPoP error="invalid_dpop_proof"`, false},
		{`DPoP error="use_dpop_nonce_soon"`, false},
		{`Bearer error="invalid_token"`, false},
		{`DPoPish error="use_dpop_nonce"`, false},
		{`DPoP algs="ES256"`, false},
		{``, false},
	} {
		header := http.Header{}
		if tc.value != "" {
			header.Set("WWW-Authenticate", tc.value)
		}
		if got := demandsDPoPNonce(header); got != tc.want {
			t.Errorf("demandsDPoPNonce(%q) = %t, want %t", tc.value, got, tc.want)
		}
	}
	// One challenge per header line.
	header := http.Header{}
	header.Add("WWW-Authenticate", `Bearer realm="api"`)
	header.Add("WWW-Authenticate", `DPoP error="use_dpop_nonce"`)
	if !demandsDPoPNonce(header) {
		t.Errorf("demandsDPoPNonce misses a DPoP challenge on a second header line")
	}
}
