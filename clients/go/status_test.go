package tokend_test

// What Status says beyond a credential's state, from the real tokend: when a new login is needed
// and why, and the caller's use of its per-uid limits.

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"tokend.io/tokend"
)

// sessionProvider is the IdP once more, with logins that end two hours after their first token.
const sessionProvider = "session"

// Per-uid limits of the daemons these tests start (none is the default).
const (
	limitConnections   = 9
	limitCredentials   = 7
	limitCallsInFlight = 5
)

// startLimitedDaemon starts a tokend with the limits above and the provider sessionProvider.
func startLimitedDaemon(t *testing.T) (*identityProvider, *daemon) {
	t.Helper()
	p := idp(t)
	session := fmt.Sprintf(`[providers.%[1]s]
kind = "oauth2"
token_endpoint = "%[2]s/o/token/"
client_id = "%[3]s"
client_secret_file = "idp-secret"
client_auth = "client_secret_basic"
max_session_age = "2h"
`, sessionProvider, p.base(), idpClientID)
	d := startDaemonWithProviders(t, p, session,
		fmt.Sprintf("max_connections_per_uid = %d", limitConnections),
		fmt.Sprintf("max_credentials_per_uid = %d", limitCredentials),
		fmt.Sprintf("max_calls_in_flight_per_uid = %d", limitCallsInFlight))
	return p, d
}

// expectedUnit is the unit the system manager put this process in: the first component below the
// slices of its cgroup v2 path (else of the legacy name=systemd one), one leading '_' removed, if it
// is a .service or .scope: the unit tokend reports for it; "" outside any unit.
func expectedUnit(t *testing.T) string {
	t.Helper()
	text, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	unified, legacy := "/", ""
	for _, line := range strings.Split(string(text), "\n") {
		fields := strings.SplitN(line, ":", 3)
		switch {
		case len(fields) != 3:
		case fields[0] == "0" && fields[1] == "":
			unified = fields[2]
		case fields[1] == "name=systemd":
			legacy = fields[2]
		}
	}
	path := unified
	if path == "/" {
		path = legacy
	}
	for _, part := range strings.Split(path, "/") {
		name := strings.TrimPrefix(part, "_")
		switch {
		case part == "" || strings.HasSuffix(name, ".slice"):
		case strings.HasSuffix(name, ".service") || strings.HasSuffix(name, ".scope"):
			return name
		default:
			return ""
		}
	}
	return ""
}

func TestStatusSaysWhenANewLoginIsNeededAndWhy(t *testing.T) {
	p, d := startLimitedDaemon(t)
	c := d.client()
	defer c.Close()
	ctx := contextWithTimeout(t, 30*time.Second)
	minted := p.mint(t, 2, 0)
	enrolMintedFor(t, c, "go-session", sessionProvider, minted[0])
	enrolMinted(t, c, "go-refreshable", minted[1])
	enrolDPoP(t, c, "go-dpop")
	status := func(user string) tokend.CredentialStatus {
		t.Helper()
		status, err := c.Status(ctx, user)
		if err != nil || len(status.Credentials) != 1 {
			t.Fatalf("Status(%s): %+v, %v", user, status, err)
		}
		return status.Credentials[0]
	}

	// The login ends max_session_age after its first token, whatever the refresh token could do.
	s := status("go-session")
	if s.ReloginReason != "session_end" || s.ReloginBy.IsZero() || !s.ReloginBy.Equal(s.SessionEndsAt) ||
		!s.ReloginBy.Equal(s.SessionStartedAt.Add(2*time.Hour)) || s.TokenType != "Bearer" {
		t.Errorf("Status(go-session) = %+v; want a re-login by the session's end, 2 h after its start", s)
	}
	// Nothing can renew a token without a refresh token: its expiry is the end.
	s = status("go-dpop")
	if s.ReloginReason != "token_expiry" || s.ReloginBy.IsZero() || !s.ReloginBy.Equal(s.ExpiresAt) || s.TokenType != "DPoP" {
		t.Errorf("Status(go-dpop) = %+v; want a re-login by the token's expiry", s)
	}
	// A refresh token without a known end, on a provider without max_session_age: no end known.
	s = status("go-refreshable")
	if !s.ReloginBy.IsZero() || s.ReloginReason != "" || s.TokenType != "Bearer" {
		t.Errorf("Status(go-refreshable) = %+v; want no re-login end", s)
	}
}

func TestStatusGivesTheCallersQuotaUsage(t *testing.T) {
	_, d := startLimitedDaemon(t)
	c, other := d.client(), d.client()
	defer c.Close()
	defer other.Close()
	ctx := contextWithTimeout(t, 30*time.Second)
	// Two credentials read by this uid alone count; one that a group reads too does not.
	for i, readers := range [][]string{nil, nil, {fmt.Sprintf("uid:%d", os.Getuid()), fmt.Sprintf("gid:%d", os.Getgid())}} {
		err := c.AddCredential(ctx, tokend.AddCredentialRequest{UserIdentifier: fmt.Sprintf("go-held-%d", i), Provider: "example",
			AccessToken: fmt.Sprintf("go-quota-token-%d", i), ExpiresIn: time.Hour, Readers: readers})
		if err != nil {
			t.Fatalf("AddCredential(go-held-%d): %v", i, err)
		}
	}
	if _, err := other.Status(ctx, "go-held-0"); err != nil { // the second client's connection is open too
		t.Fatalf("Status from a second client: %v", err)
	}
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	want := tokend.QuotaUsage{
		UID: os.Getuid(), Administrator: os.Getuid() == 0, // root always is; the test daemon has no admin_groups
		Connections: 2, MaxConnections: limitConnections, Credentials: 2, MaxCredentials: limitCredentials,
		CallsInFlight: 0, MaxCallsInFlight: limitCallsInFlight, Unit: expectedUnit(t), Executable: exe,
	}
	// The daemon counts a connection once it accepted it: wait (bounded) until it has both.
	var got *tokend.QuotaUsage
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		status, err := c.Status(ctx, "")
		if err != nil || status.Daemon == nil || status.Daemon.Caller == nil {
			t.Fatalf("Status(): %+v, %v; want the caller's quota usage", status, err)
		}
		got = status.Daemon.Caller
		if got.Connections == want.Connections || time.Now().After(deadline) {
			break
		}
	}
	if *got != want {
		t.Errorf("Status().Daemon.Caller = %+v, want %+v", *got, want)
	}
}
