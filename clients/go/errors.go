package tokend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Sentinels for errors.Is. Every error this package returns for a failed call is an *Error
// whose Code names the failure and whose Err is one of the typed errors below (or a
// *VarlinkError) with the details; it matches its code's sentinel:
//
//	var reauth *tokend.ReauthenticationRequiredError
//	switch {
//	case errors.As(err, &reauth):          // needs a new login: reauth.Reason
//	case errors.Is(err, tokend.ErrUnknownUser):
//	case errors.Is(err, tokend.ErrDaemonUnavailable): // tokend is not running
//	}
var (
	// ErrDaemonUnavailable: nothing listens on the socket (missing, refused), or the
	// connection was lost before the reply arrived. See *DaemonUnavailableError.
	ErrDaemonUnavailable = errors.New("tokend is not available")
	// ErrTimeout: no reply within the call's deadline (the context's or the client's
	// WithTimeout). Timeout errors also match context.DeadlineExceeded.
	ErrTimeout = errors.New("tokend did not answer in time")
	// ErrProtocol: the daemon sent something that is not a valid reply, or could not read
	// the call (io.tokend.TokenProvider.InvalidMessage).
	ErrProtocol = errors.New("tokend protocol error")

	ErrUnknownUser              = errors.New("tokend has no credential for the user")
	ErrPermissionDenied         = errors.New("tokend denied the call")
	ErrReauthenticationRequired = errors.New("the login has ended and needs a new login")
	ErrRefreshFailed            = errors.New("tokend could not get a fresh enough token")
	ErrCredentialExists         = errors.New("tokend already has a credential for the user")
	ErrUnknownProvider          = errors.New("tokend has no such provider")
	ErrInvalidCredential        = errors.New("tokend refused the credential")
	ErrStorageFailed            = errors.New("tokend's credential store failed")
	ErrKeyRotationUnavailable   = errors.New("tokend cannot rotate its key")
	ErrLoginFailed              = errors.New("the login failed")
	ErrUnknownLogin             = errors.New("tokend has no such login")
	ErrQuotaExceeded            = errors.New("tokend's quota is exceeded")
	// ErrInvalidParameter: org.varlink.service.InvalidParameter, or a parameter this client
	// refused to send (an invalid user identifier).
	ErrInvalidParameter = errors.New("invalid parameter")
	// ErrMethodNotFound: org.varlink.service.MethodNotFound, MethodNotImplemented or
	// InterfaceNotFound.
	ErrMethodNotFound = errors.New("tokend does not implement the method")
	// ErrExpectedMore: org.varlink.service.ExpectedMore.
	ErrExpectedMore = errors.New("tokend expects the call with more")
)

// Varlink error names.
const (
	interfaceName = "io.tokend.TokenProvider"

	errUnknownUser              = interfaceName + ".UnknownUser"
	errPermissionDenied         = interfaceName + ".PermissionDenied"
	errReauthenticationRequired = interfaceName + ".ReauthenticationRequired"
	errRefreshFailed            = interfaceName + ".RefreshFailed"
	errCredentialExists         = interfaceName + ".CredentialExists"
	errUnknownProvider          = interfaceName + ".UnknownProvider"
	errInvalidCredential        = interfaceName + ".InvalidCredential"
	errStorageFailed            = interfaceName + ".StorageFailed"
	errKeyRotationUnavailable   = interfaceName + ".KeyRotationUnavailable"
	errLoginFailed              = interfaceName + ".LoginFailed"
	errUnknownLogin             = interfaceName + ".UnknownLogin"
	errQuotaExceeded            = interfaceName + ".QuotaExceeded"
	errInvalidMessage           = interfaceName + ".InvalidMessage"
)

// UnknownUserError: tokend has no credential for UserIdentifier (or it was removed).
type UnknownUserError struct {
	UserIdentifier string
}

func (e *UnknownUserError) Error() string {
	return fmt.Sprintf("tokend has no credential for %s", userPhrase(e.UserIdentifier))
}
func (e *UnknownUserError) Is(target error) bool { return target == ErrUnknownUser }

// PermissionDeniedError: the caller may not make the call or read the credential, or may not
// open the socket (then SocketPath is set).
type PermissionDeniedError struct {
	UserIdentifier string // empty when the denial is not about one credential
	Method         string // the method called, without the interface
	SocketPath     string // set when connecting to the socket was refused (EACCES)
}

func (e *PermissionDeniedError) Error() string {
	switch {
	case e.SocketPath != "":
		return fmt.Sprintf("permission denied connecting to tokend's socket at %s", e.SocketPath)
	case e.UserIdentifier != "":
		return fmt.Sprintf("permission denied: tokend does not let this caller use the credential of user %q", e.UserIdentifier)
	default:
		return fmt.Sprintf("permission denied: tokend does not let this caller call %s", e.Method)
	}
}
func (e *PermissionDeniedError) Is(target error) bool { return target == ErrPermissionDenied }

// ReauthenticationRequiredError: the login has ended (the provider said invalid_grant, or the
// login reached its maximum age); only a new login (AddCredential, tokenctl login) helps.
type ReauthenticationRequiredError struct {
	UserIdentifier string
	Reason         string
}

func (e *ReauthenticationRequiredError) Error() string {
	return fmt.Sprintf("the login of %s has ended and needs a new login%s", userPhrase(e.UserIdentifier), reasonSuffix(e.Reason))
}
func (e *ReauthenticationRequiredError) Is(target error) bool {
	return target == ErrReauthenticationRequired
}

// RefreshFailedError: tokend has no fresh enough token now; it retries at RetryAt (zero when
// the daemon did not say).
type RefreshFailedError struct {
	UserIdentifier string
	Reason         string
	RetryAt        time.Time
}

func (e *RefreshFailedError) Error() string {
	text := fmt.Sprintf("tokend could not get a fresh enough token for %s%s", userPhrase(e.UserIdentifier), reasonSuffix(e.Reason))
	if !e.RetryAt.IsZero() {
		if wait := time.Until(e.RetryAt).Round(time.Second); wait > 0 {
			text += fmt.Sprintf(" (next attempt in %s)", wait)
		} else {
			text += " (next attempt now)"
		}
	}
	return text
}
func (e *RefreshFailedError) Is(target error) bool { return target == ErrRefreshFailed }

// CredentialExistsError: AddCredential without Replace for a user that has a credential.
type CredentialExistsError struct {
	UserIdentifier string
}

func (e *CredentialExistsError) Error() string {
	return fmt.Sprintf("tokend already has a credential for %s", userPhrase(e.UserIdentifier))
}
func (e *CredentialExistsError) Is(target error) bool { return target == ErrCredentialExists }

// UnknownProviderError: no provider of that name is configured.
type UnknownProviderError struct {
	Provider string
}

func (e *UnknownProviderError) Error() string {
	return fmt.Sprintf("tokend has no provider named %q", e.Provider)
}
func (e *UnknownProviderError) Is(target error) bool { return target == ErrUnknownProvider }

// InvalidCredentialError: tokend refused the token response given to AddCredential, a DPoPProof
// for tokens that are not DPoP-bound, or a NarrowedToken the credential cannot have (a scope
// wider than its own, a provider without narrowed tokens).
type InvalidCredentialError struct {
	Reason string
}

func (e *InvalidCredentialError) Error() string {
	return "tokend refused the credential" + reasonSuffix(e.Reason)
}
func (e *InvalidCredentialError) Is(target error) bool { return target == ErrInvalidCredential }

// StorageFailedError: tokend's credential store could not be written.
type StorageFailedError struct {
	Reason string
}

func (e *StorageFailedError) Error() string {
	return "tokend's credential store failed" + reasonSuffix(e.Reason)
}
func (e *StorageFailedError) Is(target error) bool { return target == ErrStorageFailed }

// KeyRotationUnavailableError: RotateKey cannot run (the key is read-only).
type KeyRotationUnavailableError struct {
	Reason string
}

func (e *KeyRotationUnavailableError) Error() string {
	return "tokend cannot rotate its key" + reasonSuffix(e.Reason)
}
func (e *KeyRotationUnavailableError) Is(target error) bool {
	return target == ErrKeyRotationUnavailable
}

// LoginFailedError: a login produced no credential; OAuthError is the provider's error code.
type LoginFailedError struct {
	UserIdentifier string
	Reason         string
	OAuthError     string
}

func (e *LoginFailedError) Error() string {
	return fmt.Sprintf("the login of %s failed%s", userPhrase(e.UserIdentifier), reasonSuffix(e.Reason))
}
func (e *LoginFailedError) Is(target error) bool { return target == ErrLoginFailed }

// UnknownLoginError: no login with that id is open for this caller.
type UnknownLoginError struct {
	LoginID string
}

func (e *UnknownLoginError) Error() string {
	return "tokend has no login in progress with that id for this caller (it expired, was completed or was cancelled)"
}
func (e *UnknownLoginError) Is(target error) bool { return target == ErrUnknownLogin }

// QuotaExceededError: a per-uid limit of the daemon refused the call, or the connection itself
// (io.tokend.TokenProvider.QuotaExceeded). Quota names the limit: "connections" (the daemon is
// full for non-administrators), "connections_per_uid", "credentials_per_uid" or
// "calls_in_flight_per_uid"; Limit is its value.
type QuotaExceededError struct {
	Quota          string
	Limit          int64
	UserIdentifier string // empty when the daemon did not name a user
	Method         string // the method called, without the interface
}

func (e *QuotaExceededError) Error() string {
	method, quota := e.Method, e.Quota
	if method == "" {
		method = "the call"
	}
	if quota == "" {
		quota = "?"
	}
	return fmt.Sprintf("tokend refused %s: the quota %s (%d) is reached", method, quota, e.Limit)
}
func (e *QuotaExceededError) Is(target error) bool { return target == ErrQuotaExceeded }

// VarlinkError is any other error reply: the org.varlink.service errors (InvalidParameter,
// MethodNotFound, ExpectedMore, …) and errors this client does not know yet. Parameters holds
// the reply's parameters with every secret of the call redacted.
type VarlinkError struct {
	Name       string
	Method     string
	Parameters map[string]any
}

func (e *VarlinkError) Error() string {
	method := shortMethod(e.Method)
	str := func(key string) string { s, _ := e.Parameters[key].(string); return s }
	switch e.Name {
	case "org.varlink.service.InvalidParameter":
		return fmt.Sprintf("tokend refused parameter %q of %s", str("parameter"), method)
	case "org.varlink.service.MethodNotFound", "org.varlink.service.MethodNotImplemented":
		return fmt.Sprintf("tokend does not implement %s", method)
	case "org.varlink.service.InterfaceNotFound":
		return fmt.Sprintf("tokend does not provide interface %s", str("interface"))
	case "org.varlink.service.ExpectedMore":
		return fmt.Sprintf("tokend expects %s to be called with more", method)
	}
	return fmt.Sprintf("tokend answered %s with error %s", method, e.Name)
}

func (e *VarlinkError) Is(target error) bool {
	switch e.Name {
	case "org.varlink.service.InvalidParameter":
		return target == ErrInvalidParameter
	case "org.varlink.service.MethodNotFound", "org.varlink.service.MethodNotImplemented",
		"org.varlink.service.InterfaceNotFound":
		return target == ErrMethodNotFound
	case "org.varlink.service.ExpectedMore":
		return target == ErrExpectedMore
	case "org.varlink.service.PermissionDenied":
		return target == ErrPermissionDenied
	}
	return false
}

// DaemonUnavailableError: tokend could not be reached at SocketPath (no socket, nothing
// listening, path unusable), or the connection closed before the reply. Err is the cause.
type DaemonUnavailableError struct {
	SocketPath string
	Method     string // set when an open connection was lost during this call
	Err        error
	reason     string
}

func (e *DaemonUnavailableError) Error() string {
	if e.reason != "" {
		return e.reason
	}
	return fmt.Sprintf("cannot connect to tokend at %s: %v", e.SocketPath, e.Err)
}
func (e *DaemonUnavailableError) Is(target error) bool { return target == ErrDaemonUnavailable }
func (e *DaemonUnavailableError) Unwrap() error        { return e.Err }

// TimeoutError: no reply to Method within the deadline. It matches ErrTimeout and
// context.DeadlineExceeded, and has Timeout() like net.Error.
type TimeoutError struct {
	Method     string
	SocketPath string
	// Connecting: the deadline passed before the connection was open.
	Connecting bool
}

func (e *TimeoutError) Error() string {
	if e.Connecting {
		return fmt.Sprintf("connecting to tokend at %s timed out", e.SocketPath)
	}
	return fmt.Sprintf("tokend did not answer %s in time (socket %s)", shortMethod(e.Method), e.SocketPath)
}
func (e *TimeoutError) Is(target error) bool {
	return target == ErrTimeout || target == context.DeadlineExceeded
}
func (e *TimeoutError) Timeout() bool { return true }

// ProtocolError: the reply is not valid, or tokend could not read the call.
type ProtocolError struct {
	Method string
	Detail string
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("tokend's reply to %s is not valid: %s", shortMethod(e.Method), e.Detail)
}
func (e *ProtocolError) Is(target error) bool { return target == ErrProtocol }

// canceledError: the caller's context was cancelled.
type canceledError struct {
	method string
	cause  error
}

func (e *canceledError) Error() string {
	return fmt.Sprintf("call to tokend's %s abandoned: %v", shortMethod(e.method), e.cause)
}
func (e *canceledError) Unwrap() error { return e.cause }

// remoteError turns an error reply to a call of method into its typed error. Every string it
// keeps is stripped of the call's secrets and of control characters, and shortened.
func remoteError(name string, parameters map[string]any, method string, callParameters map[string]any) error {
	return wrap(remoteDetail(name, parameters, method, callParameters))
}

// remoteDetail is remoteError's typed detail.
func remoteDetail(name string, parameters map[string]any, method string, callParameters map[string]any) error {
	secrets := secretsOf(callParameters)
	text := func(key string) string {
		s, _ := parameters[key].(string)
		return display(s, secrets)
	}
	user := text("userIdentifier")
	if user == "" {
		if s, ok := callParameters["userIdentifier"].(string); ok {
			user = display(s, secrets)
		}
	}
	switch name {
	case errUnknownUser:
		return &UnknownUserError{UserIdentifier: user}
	case errPermissionDenied, "org.varlink.service.PermissionDenied":
		return &PermissionDeniedError{UserIdentifier: user, Method: shortMethod(method)}
	case errReauthenticationRequired:
		return &ReauthenticationRequiredError{UserIdentifier: user, Reason: text("reason")}
	case errRefreshFailed:
		e := &RefreshFailedError{UserIdentifier: user, Reason: text("reason")}
		if at, ok := integer(parameters["retryAt"]); ok {
			e.RetryAt = time.Unix(at, 0)
		}
		return e
	case errCredentialExists:
		return &CredentialExistsError{UserIdentifier: user}
	case errUnknownProvider:
		provider := text("provider")
		if provider == "" {
			if s, ok := callParameters["provider"].(string); ok {
				provider = display(s, secrets)
			}
		}
		return &UnknownProviderError{Provider: provider}
	case errInvalidCredential:
		return &InvalidCredentialError{Reason: text("reason")}
	case errStorageFailed:
		return &StorageFailedError{Reason: text("reason")}
	case errKeyRotationUnavailable:
		return &KeyRotationUnavailableError{Reason: text("reason")}
	case errLoginFailed:
		return &LoginFailedError{UserIdentifier: user, Reason: text("reason"), OAuthError: text("oauthError")}
	case errUnknownLogin:
		return &UnknownLoginError{LoginID: text("loginId")}
	case errQuotaExceeded:
		e := &QuotaExceededError{Quota: text("quota"), UserIdentifier: text("userIdentifier"), Method: shortMethod(method)}
		if limit, ok := integer(parameters["limit"]); ok {
			e.Limit = limit
		}
		return e
	case errInvalidMessage:
		return &ProtocolError{Method: method, Detail: "tokend could not read the call" + reasonSuffix(text("reason"))}
	}
	redacted, _ := redact(parameters, secrets).(map[string]any)
	return &VarlinkError{Name: display(name, secrets), Method: method, Parameters: redacted}
}

// integer reads a JSON number decoded with UseNumber (or a float64).
func integer(value any) (int64, bool) {
	switch v := value.(type) {
	case jsonNumber:
		i, err := v.Int64()
		return i, err == nil
	case float64:
		return int64(v), true
	}
	return 0, false
}

const redacted = "<redacted>"

// secretsOf lists the values of a call that are secrets.
func secretsOf(parameters map[string]any) []string {
	var secrets []string
	for _, key := range []string{"accessToken", "refreshToken", "rejectedToken"} {
		if s, ok := parameters[key].(string); ok && s != "" {
			secrets = append(secrets, s)
		}
	}
	return secrets
}

// display returns text without the secrets and control characters, at most 300 characters.
func display(text string, secrets []string) string {
	for _, secret := range secrets {
		text = strings.ReplaceAll(text, secret, redacted)
	}
	text = strings.Map(func(r rune) rune {
		if r < 0x20 || (r >= 0x7f && r < 0xa0) || r == utf8.RuneError {
			return -1
		}
		return r
	}, text)
	if utf8.RuneCountInString(text) > 300 {
		text = string([]rune(text)[:300]) + "..."
	}
	return text
}

func redact(value any, secrets []string) any {
	switch v := value.(type) {
	case string:
		return display(v, secrets)
	case map[string]any:
		out := make(map[string]any, len(v))
		for key, element := range v {
			out[display(key, secrets)] = redact(element, secrets)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, element := range v {
			out[i] = redact(element, secrets)
		}
		return out
	}
	return value
}

func userPhrase(user string) string {
	if user == "" {
		return "the user"
	}
	return fmt.Sprintf("user %q", user)
}

func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}

func shortMethod(method string) string {
	return strings.TrimPrefix(method, interfaceName+".")
}
