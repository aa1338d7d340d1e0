package tokend

// Status on the wire, without the daemon: a Unix socket server in the test answers with a fixed
// reply, whose login end and caller's quota usage must be read with their types, and whose
// malformed fields must be a ProtocolError naming them.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

const (
	statusCaller     = `{"uid":1000,"administrator":false,"connections":1,"maxConnections":9,"credentials":2,"maxCredentials":7,"callsInFlight":0,"maxCallsInFlight":5,"unit":"app.service","executable":"/usr/bin/app"}`
	statusDaemon     = `{"version":"0.1.0","startedAt":1700000000,"credentials":1,"valid":1,"refreshing":0,"retrying":0,"reauthenticationRequired":0,"expired":0,"caller":` + statusCaller + `}`
	statusCredential = `{"userIdentifier":"alice","provider":"idp","state":"valid","expiresAt":1700003600,"issuedAt":1700000000,"sessionStartedAt":1700000000,"sessionEndsAt":1700007200,"refreshCount":0,"readers":["uid:1000"],"enrolledByUid":1000,"tokenType":"Bearer","reloginBy":1700007200,"reloginReason":"session_end"}`
)

func statusReply(daemon, credential string) string {
	return `{"parameters":{"daemon":` + daemon + `,"credentials":[` + credential + `]}}`
}

func statusFrom(t *testing.T, reply string) (*Status, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := NewClient(WithSocket(startReplyingServer(t, reply).path), WithTimeout(2*time.Second))
	defer c.Close()
	return c.Status(ctx, "alice")
}

func TestStatusReadsTheLoginEndAndTheCallersQuotaUsage(t *testing.T) {
	status, err := statusFrom(t, statusReply(statusDaemon, statusCredential))
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	want := QuotaUsage{UID: 1000, Administrator: false, Connections: 1, MaxConnections: 9, Credentials: 2, MaxCredentials: 7,
		CallsInFlight: 0, MaxCallsInFlight: 5, Unit: "app.service", Executable: "/usr/bin/app"}
	if status.Daemon == nil || status.Daemon.Caller == nil || *status.Daemon.Caller != want {
		t.Errorf("Status().Daemon = %+v, want the caller %+v", status.Daemon, want)
	}
	if len(status.Credentials) != 1 {
		t.Fatalf("Status().Credentials = %+v", status.Credentials)
	}
	s := status.Credentials[0]
	if !s.ReloginBy.Equal(time.Unix(1700007200, 0)) || s.ReloginReason != "session_end" || s.TokenType != "Bearer" {
		t.Errorf("Status().Credentials[0] = %+v", s)
	}

	// Optional ones may be missing or null.
	bare := strings.NewReplacer(`,"reloginBy":1700007200,"reloginReason":"session_end"`, "").Replace(statusCredential)
	status, err = statusFrom(t, statusReply(strings.Replace(statusDaemon, statusCaller, "null", 1), bare))
	if err != nil || status.Daemon == nil || status.Daemon.Caller != nil || len(status.Credentials) != 1 ||
		!status.Credentials[0].ReloginBy.IsZero() || status.Credentials[0].ReloginReason != "" {
		t.Errorf("Status without a caller or a login end = %+v, %v", status, err)
	}
}

func TestStatusWithAMalformedFieldIsAProtocolErrorNamingIt(t *testing.T) {
	caller := func(old, new string) string {
		return statusReply(strings.Replace(statusDaemon, old, new, 1), statusCredential)
	}
	credential := func(old, new string) string {
		return statusReply(statusDaemon, strings.Replace(statusCredential, old, new, 1))
	}
	for _, tc := range []struct{ reply, detail string }{
		{credential(`"reloginBy":1700007200`, `"reloginBy":"soon"`), `field "credentials.reloginBy" is mistyped`},
		{credential(`"reloginReason":"session_end"`, `"reloginReason":3`), `field "credentials.reloginReason" is mistyped`},
		{credential(`"tokenType":"Bearer"`, `"tokenType":["Bearer"]`), `field "credentials.tokenType" is mistyped`},
		{caller(statusCaller, `"uid:1000"`), `field "daemon.caller" is mistyped`},
		{caller(`"maxConnections":9`, `"maxConnections":"9"`), `field "daemon.caller.maxConnections" is mistyped`},
		{caller(`"administrator":false`, `"administrator":"no"`), `field "daemon.caller.administrator" is mistyped`},
		{caller(`"uid":1000`, `"uid":true`), `field "daemon.caller.uid" is mistyped`},
		{caller(`"executable":"/usr/bin/app"`, `"executable":7`), `field "daemon.caller.executable" is mistyped`},
	} {
		_, err := statusFrom(t, tc.reply)
		var protocol *ProtocolError
		if !errors.As(err, &protocol) || !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tc.detail) {
			t.Errorf("reply %s: %v (%T), want a ProtocolError: %s", tc.reply, err, err, tc.detail)
		}
	}
}
