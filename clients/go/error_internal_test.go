package tokend

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// Every error reply becomes an *Error whose code's sentinel it matches, with the typed detail
// errors.As still finds.
func TestEveryErrorReplyIsAnErrorWithItsCode(t *testing.T) {
	cases := []struct {
		name string
		code Code
	}{
		{errUnknownUser, CodeUnknownUser},
		{errPermissionDenied, CodePermissionDenied},
		{"org.varlink.service.PermissionDenied", CodePermissionDenied},
		{errReauthenticationRequired, CodeReauthenticationRequired},
		{errRefreshFailed, CodeRefreshFailed},
		{errCredentialExists, CodeCredentialExists},
		{errUnknownProvider, CodeUnknownProvider},
		{errInvalidCredential, CodeInvalidCredential},
		{errStorageFailed, CodeStorageFailed},
		{errKeyRotationUnavailable, CodeKeyRotationUnavailable},
		{errLoginFailed, CodeLoginFailed},
		{errUnknownLogin, CodeUnknownLogin},
		{errQuotaExceeded, CodeQuotaExceeded},
		{errInvalidMessage, CodeProtocol},
		{"org.varlink.service.InvalidParameter", CodeInvalidParameter},
		{"org.varlink.service.MethodNotFound", CodeMethodNotFound},
		{"org.varlink.service.InterfaceNotFound", CodeMethodNotFound},
		{"org.varlink.service.ExpectedMore", CodeExpectedMore},
		{"io.example.Unheard", CodeOther},
	}
	for _, tc := range cases {
		err := remoteError(tc.name, map[string]any{"reason": "r"}, interfaceName+".ProvideTokenReplacement", map[string]any{"userIdentifier": "alice"})
		var failure *Error
		if !errors.As(err, &failure) || failure.Code != tc.code {
			t.Errorf("%s: %#v, want code %s", tc.name, err, tc.code)
			continue
		}
		if sentinel := tc.code.Sentinel(); sentinel != nil && !errors.Is(err, sentinel) {
			t.Errorf("%s: does not match %v", tc.name, sentinel)
		}
		if failure.Err == nil || failure.Error() != failure.Err.Error() {
			t.Errorf("%s: detail %v", tc.name, failure.Err)
		}
	}
	var refresh *RefreshFailedError
	if err := remoteError(errRefreshFailed, map[string]any{"reason": "r"}, "m", nil); !errors.As(err, &refresh) || refresh.Reason != "r" {
		t.Errorf("the detail is not found: %v", err)
	}
}

func TestLocalFailuresAreErrorsWithTheirCodes(t *testing.T) {
	ctx := context.Background()
	client := NewClient(WithSocket(filepath.Join(t.TempDir(), "none")))
	_, err := client.Token(ctx, "alice", 0, "")
	var failure *Error
	var unavailable *DaemonUnavailableError
	if !errors.As(err, &failure) || failure.Code != CodeDaemonUnavailable || !errors.Is(err, ErrDaemonUnavailable) || !errors.As(err, &unavailable) {
		t.Errorf("no daemon: %#v", err)
	}
	_, err = client.Token(ctx, "has space", 0, "")
	if !errors.As(err, &failure) || failure.Code != CodeInvalidParameter || !errors.Is(err, ErrInvalidParameter) {
		t.Errorf("invalid user identifier: %#v", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = client.Token(canceled, "alice", 0, "")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %#v", err)
	}
}
