package tokend

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

type jsonNumber = json.Number

// Credentials is an access token and what a program needs to use it. Its String and GoString
// (so %v, %+v and %#v) never show the token.
type Credentials struct {
	UserIdentifier string
	AccessToken    string
	TokenType      string
	// ExpiresAt is when tokend stops serving the token: the earliest of its exp, its iat plus
	// the provider's max_token_age, and the end of the login.
	ExpiresAt time.Time
	IssuedAt  time.Time // zero when unknown
	Scope     string
}

// AuthorizationHeader is the value of an HTTP Authorization header: "Bearer <token>".
func (c Credentials) AuthorizationHeader() string {
	tokenType := c.TokenType
	if tokenType == "" || equalFoldASCII(tokenType, "bearer") {
		tokenType = "Bearer"
	}
	return tokenType + " " + c.AccessToken
}

func (c Credentials) String() string {
	return fmt.Sprintf("tokend.Credentials{UserIdentifier: %q, AccessToken: %s, TokenType: %q, ExpiresAt: %s, Scope: %q}",
		c.UserIdentifier, redacted, c.TokenType, c.ExpiresAt.UTC().Format(time.RFC3339), c.Scope)
}

func (c Credentials) GoString() string { return c.String() }

// DPoPProof is a DPoP proof (RFC 9449) for one HTTP request, and the DPoP-bound credentials it
// goes with. A proof names the method and URL it was made for and has an id of its own: use it
// for one request. Its String and GoString (so %v, %+v and %#v) never show the token or the
// proof.
type DPoPProof struct {
	Credentials Credentials
	// Proof is the compact JWS (ES256, typ dpop+jwt) for the DPoP header.
	Proof string
}

// SetHeaders sets the headers of the request the proof was made for:
// "Authorization: DPoP <token>" and "DPoP: <proof>".
func (p DPoPProof) SetHeaders(req *http.Request) {
	if req.Header == nil {
		req.Header = make(http.Header)
	}
	req.Header.Set("Authorization", "DPoP "+p.Credentials.AccessToken)
	req.Header.Set("DPoP", p.Proof)
}

func (p DPoPProof) String() string {
	return fmt.Sprintf("tokend.DPoPProof{Credentials: %s, Proof: %s}", p.Credentials, redacted)
}

func (p DPoPProof) GoString() string { return p.String() }

// DaemonStatus is the daemon as a whole. Times are zero when absent.
type DaemonStatus struct {
	Version                  string    `json:"version"`
	StartedAt                time.Time `json:"-"`
	Credentials              int       `json:"credentials"`
	Valid                    int       `json:"valid"`
	Refreshing               int       `json:"refreshing"`
	Retrying                 int       `json:"retrying"`
	ReauthenticationRequired int       `json:"reauthenticationRequired"`
	Expired                  int       `json:"expired"`
	NextRefreshAt            time.Time `json:"-"`
	Store                    string    `json:"store"`
	StoreProblem             string    `json:"storeProblem"`
	Node                     string    `json:"node"`
	Nodes                    []string  `json:"nodes"`
	// Caller is what the caller's uid holds against its per-uid limits; nil when not sent.
	Caller *QuotaUsage `json:"caller"`
}

// QuotaUsage is a uid's use of its per-uid limits, and the program tokend saw for the caller.
// Administrators (Administrator true) are not limited by them, except by MaxConnections.
type QuotaUsage struct {
	UID              int  `json:"uid"`
	Administrator    bool `json:"administrator"`
	Connections      int  `json:"connections"`
	MaxConnections   int  `json:"maxConnections"`
	Credentials      int  `json:"credentials"`
	MaxCredentials   int  `json:"maxCredentials"`
	CallsInFlight    int  `json:"callsInFlight"`
	MaxCallsInFlight int  `json:"maxCallsInFlight"`
	// Unit is the calling process's systemd unit, as unit: readers are checked against it; ""
	// when not known.
	Unit string `json:"unit"`
	// Executable is the calling process's executable, as exe: readers are checked against it;
	// "" when not known.
	Executable string `json:"executable"`
}

// CredentialStatus is one credential, without its tokens. Times are zero when absent.
type CredentialStatus struct {
	UserIdentifier string `json:"userIdentifier"`
	Provider       string `json:"provider"`
	// State is valid, refreshing, retrying, reauthentication_required or expired.
	State             string    `json:"state"`
	ExpiresAt         time.Time `json:"-"`
	IssuedAt          time.Time `json:"-"`
	SessionStartedAt  time.Time `json:"-"`
	SessionEndsAt     time.Time `json:"-"`
	NextRefreshAt     time.Time `json:"-"`
	LastRefreshAt     time.Time `json:"-"`
	RefreshCount      int       `json:"refreshCount"`
	LastError         string    `json:"lastError"`
	Readers           []string  `json:"readers"`
	EnrolledByUID     int       `json:"enrolledByUid"`
	LeaseHolder       string    `json:"leaseHolder"`
	LeaseExpiresAt    time.Time `json:"-"`
	ShorterThanMargin bool      `json:"shorterThanMargin"`
	// TokenType is the access token's type: Bearer, or DPoP for tokens bound to the
	// credential's key.
	TokenType string `json:"tokenType"`
	// ReloginBy is when no refresh can keep the credential alive any longer: a new login is
	// needed by then. Zero when no such end is known.
	ReloginBy time.Time `json:"-"`
	// ReloginReason says why ReloginBy: max_token_age, session_end, refresh_token_expiry or
	// token_expiry.
	ReloginReason string `json:"reloginReason"`
}

// Status is the reply to Status: the daemon (nil when the daemon did not send it) and the
// credentials the caller may see.
type Status struct {
	Daemon      *DaemonStatus
	Credentials []CredentialStatus
}

// AddCredentialRequest is a token endpoint response and where it belongs. Its String never
// shows the tokens.
type AddCredentialRequest struct {
	UserIdentifier string
	Provider       string
	AccessToken    string
	RefreshToken   string        // optional
	TokenType      string        // optional (Bearer)
	ExpiresIn      time.Duration // optional; whole seconds are sent
	Scope          string        // optional
	Readers        []string      // optional: uid:N, gid:N, user:NAME, group:NAME, unit:NAME, exe:PATH, uid:N+unit:NAME... (see ParseReader); default the caller's uid
	Replace        bool
}

func (r AddCredentialRequest) String() string {
	return fmt.Sprintf("tokend.AddCredentialRequest{UserIdentifier: %q, Provider: %q, AccessToken: %s, RefreshToken: %s, ExpiresIn: %s, Readers: %q, Replace: %t}",
		r.UserIdentifier, r.Provider, redacted, redacted, r.ExpiresIn, r.Readers, r.Replace)
}

func (r AddCredentialRequest) GoString() string { return r.String() }

// Wire forms.

type wireCredentials struct {
	UserIdentifier *string `json:"userIdentifier"`
	AccessToken    *string `json:"accessToken"`
	TokenType      *string `json:"tokenType"`
	ExpiresAt      *int64  `json:"expiresAt"`
	IssuedAt       *int64  `json:"issuedAt"`
	Scope          *string `json:"scope"`
}

func (w *wireCredentials) credentials() (*Credentials, string) {
	switch {
	case w == nil:
		return nil, "credentials"
	case w.UserIdentifier == nil:
		return nil, "credentials.userIdentifier"
	case w.AccessToken == nil || *w.AccessToken == "":
		return nil, "credentials.accessToken"
	case w.TokenType == nil:
		return nil, "credentials.tokenType"
	case w.ExpiresAt == nil:
		return nil, "credentials.expiresAt"
	}
	c := &Credentials{
		UserIdentifier: *w.UserIdentifier,
		AccessToken:    *w.AccessToken,
		TokenType:      *w.TokenType,
		ExpiresAt:      unixOrZero(w.ExpiresAt),
		IssuedAt:       unixOrZero(w.IssuedAt),
	}
	if w.Scope != nil {
		c.Scope = *w.Scope
	}
	return c, ""
}

type wireDaemonStatus struct {
	DaemonStatus
	StartedAt     *int64 `json:"startedAt"`
	NextRefreshAt *int64 `json:"nextRefreshAt"`
}

func (w *wireDaemonStatus) status() *DaemonStatus {
	s := w.DaemonStatus
	s.StartedAt = unixOrZero(w.StartedAt)
	s.NextRefreshAt = unixOrZero(w.NextRefreshAt)
	return &s
}

type wireCredentialStatus struct {
	CredentialStatus
	ExpiresAt        *int64 `json:"expiresAt"`
	IssuedAt         *int64 `json:"issuedAt"`
	SessionStartedAt *int64 `json:"sessionStartedAt"`
	SessionEndsAt    *int64 `json:"sessionEndsAt"`
	NextRefreshAt    *int64 `json:"nextRefreshAt"`
	LastRefreshAt    *int64 `json:"lastRefreshAt"`
	LeaseExpiresAt   *int64 `json:"leaseExpiresAt"`
	ReloginBy        *int64 `json:"reloginBy"`
}

func (w *wireCredentialStatus) status() CredentialStatus {
	s := w.CredentialStatus
	s.ExpiresAt = unixOrZero(w.ExpiresAt)
	s.IssuedAt = unixOrZero(w.IssuedAt)
	s.SessionStartedAt = unixOrZero(w.SessionStartedAt)
	s.SessionEndsAt = unixOrZero(w.SessionEndsAt)
	s.NextRefreshAt = unixOrZero(w.NextRefreshAt)
	s.LastRefreshAt = unixOrZero(w.LastRefreshAt)
	s.LeaseExpiresAt = unixOrZero(w.LeaseExpiresAt)
	s.ReloginBy = unixOrZero(w.ReloginBy)
	return s
}

func unixOrZero(seconds *int64) time.Time {
	if seconds == nil {
		return time.Time{}
	}
	return time.Unix(*seconds, 0)
}

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
