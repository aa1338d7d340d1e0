package tokend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The mapping of every Varlink error name to its typed error, without a daemon: tokend never
// echoes a token, so redaction is checked here, where a reply can be made to.
func TestRemoteErrorMapping(t *testing.T) {
	call := map[string]any{"userIdentifier": "alice", "rejectedToken": "SECRET-rejected", "accessToken": "SECRET-access"}
	cases := []struct {
		name       string
		parameters map[string]any
		sentinel   error
		check      func(error) bool
	}{
		{errUnknownUser, map[string]any{"userIdentifier": "alice"}, ErrUnknownUser,
			func(err error) bool {
				var e *UnknownUserError
				return errors.As(err, &e) && e.UserIdentifier == "alice"
			}},
		{errPermissionDenied, map[string]any{}, ErrPermissionDenied,
			func(err error) bool {
				var e *PermissionDeniedError
				return errors.As(err, &e) && e.UserIdentifier == "alice"
			}},
		{errReauthenticationRequired, map[string]any{"userIdentifier": "alice", "reason": "invalid_grant: SECRET-rejected"}, ErrReauthenticationRequired,
			func(err error) bool {
				var e *ReauthenticationRequiredError
				return errors.As(err, &e) && e.Reason == "invalid_grant: <redacted>"
			}},
		{errRefreshFailed, map[string]any{"userIdentifier": "alice", "reason": "HTTP 503", "retryAt": jsonNumber("1700000000")}, ErrRefreshFailed,
			func(err error) bool {
				var e *RefreshFailedError
				return errors.As(err, &e) && e.Reason == "HTTP 503" && e.RetryAt.Equal(time.Unix(1700000000, 0))
			}},
		{errRefreshFailed, map[string]any{"userIdentifier": "alice", "reason": "x"}, ErrRefreshFailed,
			func(err error) bool { var e *RefreshFailedError; return errors.As(err, &e) && e.RetryAt.IsZero() }},
		{errCredentialExists, map[string]any{"userIdentifier": "alice"}, ErrCredentialExists, nil},
		{errUnknownProvider, map[string]any{"provider": "p"}, ErrUnknownProvider,
			func(err error) bool { var e *UnknownProviderError; return errors.As(err, &e) && e.Provider == "p" }},
		{errInvalidCredential, map[string]any{"reason": "contains SECRET-access"}, ErrInvalidCredential,
			func(err error) bool {
				var e *InvalidCredentialError
				return errors.As(err, &e) && e.Reason == "contains <redacted>"
			}},
		{errStorageFailed, map[string]any{"reason": "disk full\x1b[31m"}, ErrStorageFailed,
			func(err error) bool {
				var e *StorageFailedError
				return errors.As(err, &e) && e.Reason == "disk full[31m"
			}},
		{errKeyRotationUnavailable, map[string]any{"reason": "read-only"}, ErrKeyRotationUnavailable, nil},
		{errLoginFailed, map[string]any{"userIdentifier": "alice", "reason": "denied", "oauthError": "access_denied"}, ErrLoginFailed,
			func(err error) bool {
				var e *LoginFailedError
				return errors.As(err, &e) && e.OAuthError == "access_denied"
			}},
		{errUnknownLogin, map[string]any{"loginId": "l1"}, ErrUnknownLogin, nil},
		{errQuotaExceeded, map[string]any{"quota": "credentials_per_uid", "limit": jsonNumber("8"), "userIdentifier": "alice"}, ErrQuotaExceeded,
			func(err error) bool {
				var e *QuotaExceededError
				return errors.As(err, &e) && e.Quota == "credentials_per_uid" && e.Limit == 8 && e.UserIdentifier == "alice" &&
					err.Error() == "tokend refused ProvideTokenReplacement: the quota credentials_per_uid (8) is reached"
			}},
		{errInvalidMessage, map[string]any{"reason": "not JSON"}, ErrProtocol, nil},
		{"org.varlink.service.InvalidParameter", map[string]any{"parameter": "minValidSeconds"}, ErrInvalidParameter, nil},
		{"org.varlink.service.MethodNotFound", map[string]any{"method": "X"}, ErrMethodNotFound, nil},
		{"org.varlink.service.ExpectedMore", nil, ErrExpectedMore, nil},
		{"io.tokend.TokenProvider.SomethingNew", map[string]any{"detail": "SECRET-rejected"}, nil,
			func(err error) bool {
				var e *VarlinkError
				return errors.As(err, &e) && e.Name == "io.tokend.TokenProvider.SomethingNew" && e.Parameters["detail"] == "<redacted>"
			}},
	}
	for _, tc := range cases {
		err := remoteError(tc.name, tc.parameters, interfaceName+".ProvideTokenReplacement", call)
		if tc.sentinel != nil && !errors.Is(err, tc.sentinel) {
			t.Errorf("%s: %T does not match its sentinel", tc.name, err)
		}
		for _, other := range []error{ErrDaemonUnavailable, ErrTimeout, context.DeadlineExceeded} {
			if errors.Is(err, other) {
				t.Errorf("%s: %T matches %v", tc.name, err, other)
			}
		}
		if tc.check != nil && !tc.check(err) {
			t.Errorf("%s: %#v", tc.name, err)
		}
		text := err.Error() + fmt.Sprintf(" %v %+v", err, err)
		if strings.Contains(text, "SECRET") || err.Error() == "" {
			t.Errorf("%s: message %q", tc.name, text)
		}
	}
}

func TestWholeSecondsRoundUp(t *testing.T) {
	for d, want := range map[time.Duration]int64{0: 0, -time.Second: 0, time.Millisecond: 1, time.Second: 1, 1500 * time.Millisecond: 2, time.Hour: 3600} {
		if got := wholeSecondsRoundingUp(d); got != want {
			t.Errorf("wholeSecondsRoundingUp(%s) = %d, want %d", d, got, want)
		}
	}
}
