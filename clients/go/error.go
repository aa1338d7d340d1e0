package tokend

import "errors"

// Code says what kind of failure an *Error is. Each code has a sentinel for errors.Is (see
// Code.Sentinel); the codes of Varlink error replies are the error's short name.
type Code string

// The codes of the errors this package returns.
const (
	CodeDaemonUnavailable        Code = "DaemonUnavailable"
	CodeTimeout                  Code = "Timeout"
	CodeCanceled                 Code = "Canceled" // the caller's context was cancelled
	CodeProtocol                 Code = "Protocol"
	CodeUnknownUser              Code = "UnknownUser"
	CodePermissionDenied         Code = "PermissionDenied"
	CodeReauthenticationRequired Code = "ReauthenticationRequired"
	CodeRefreshFailed            Code = "RefreshFailed"
	CodeCredentialExists         Code = "CredentialExists"
	CodeUnknownProvider          Code = "UnknownProvider"
	CodeInvalidCredential        Code = "InvalidCredential"
	CodeStorageFailed            Code = "StorageFailed"
	CodeKeyRotationUnavailable   Code = "KeyRotationUnavailable"
	CodeLoginFailed              Code = "LoginFailed"
	CodeUnknownLogin             Code = "UnknownLogin"
	CodeQuotaExceeded            Code = "QuotaExceeded"
	CodeInvalidParameter         Code = "InvalidParameter"
	CodeMethodNotFound           Code = "MethodNotFound"
	CodeExpectedMore             Code = "ExpectedMore"
	CodeOther                    Code = "Other" // an error reply this client does not know
)

// Sentinel is the error errors.Is matches for code (nil for CodeCanceled, whose *Error wraps
// context.Canceled, and CodeOther).
func (code Code) Sentinel() error {
	switch code {
	case CodeDaemonUnavailable:
		return ErrDaemonUnavailable
	case CodeTimeout:
		return ErrTimeout
	case CodeProtocol:
		return ErrProtocol
	case CodeUnknownUser:
		return ErrUnknownUser
	case CodePermissionDenied:
		return ErrPermissionDenied
	case CodeReauthenticationRequired:
		return ErrReauthenticationRequired
	case CodeRefreshFailed:
		return ErrRefreshFailed
	case CodeCredentialExists:
		return ErrCredentialExists
	case CodeUnknownProvider:
		return ErrUnknownProvider
	case CodeInvalidCredential:
		return ErrInvalidCredential
	case CodeStorageFailed:
		return ErrStorageFailed
	case CodeKeyRotationUnavailable:
		return ErrKeyRotationUnavailable
	case CodeLoginFailed:
		return ErrLoginFailed
	case CodeUnknownLogin:
		return ErrUnknownLogin
	case CodeQuotaExceeded:
		return ErrQuotaExceeded
	case CodeInvalidParameter:
		return ErrInvalidParameter
	case CodeMethodNotFound:
		return ErrMethodNotFound
	case CodeExpectedMore:
		return ErrExpectedMore
	case CodeCanceled, CodeOther:
		return nil
	}
	return nil
}

// Error is every error this package returns for a failed call: Code says what failed, Err
// holds the detail — one of the typed errors (*RefreshFailedError with its Reason and RetryAt,
// *DaemonUnavailableError with the socket, …), which errors.As still finds — and errors.Is
// matches Code's sentinel:
//
//	var failure *tokend.Error
//	if errors.As(err, &failure) && failure.Code == tokend.CodeReauthenticationRequired { … }
type Error struct {
	Code Code
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns the detail.
func (e *Error) Unwrap() error { return e.Err }

// Is matches the sentinel of e's code (the detail matches it too).
func (e *Error) Is(target error) bool {
	sentinel := e.Code.Sentinel()
	return sentinel != nil && target == sentinel
}

// Timeout reports whether the call timed out (as net.Error's Timeout does).
func (e *Error) Timeout() bool { return e.Code == CodeTimeout }

// wrap makes detail, a typed error this package made, an *Error with its code.
func wrap(detail error) error {
	var already *Error
	if errors.As(detail, &already) {
		return detail
	}
	return &Error{Code: codeOf(detail), Err: detail}
}

// codeOf is the code of one of this package's typed errors.
func codeOf(detail error) Code {
	switch e := detail.(type) {
	case *DaemonUnavailableError:
		return CodeDaemonUnavailable
	case *TimeoutError:
		return CodeTimeout
	case *canceledError:
		return CodeCanceled
	case *ProtocolError:
		return CodeProtocol
	case *UnknownUserError:
		return CodeUnknownUser
	case *PermissionDeniedError:
		return CodePermissionDenied
	case *ReauthenticationRequiredError:
		return CodeReauthenticationRequired
	case *RefreshFailedError:
		return CodeRefreshFailed
	case *CredentialExistsError:
		return CodeCredentialExists
	case *UnknownProviderError:
		return CodeUnknownProvider
	case *InvalidCredentialError:
		return CodeInvalidCredential
	case *StorageFailedError:
		return CodeStorageFailed
	case *KeyRotationUnavailableError:
		return CodeKeyRotationUnavailable
	case *LoginFailedError:
		return CodeLoginFailed
	case *UnknownLoginError:
		return CodeUnknownLogin
	case *QuotaExceededError:
		return CodeQuotaExceeded
	case *invalidArgumentError, *ReaderError:
		return CodeInvalidParameter
	case *VarlinkError:
		for _, code := range []Code{CodeInvalidParameter, CodeMethodNotFound, CodeExpectedMore, CodePermissionDenied} {
			if e.Is(code.Sentinel()) {
				return code
			}
		}
	}
	return CodeOther
}
