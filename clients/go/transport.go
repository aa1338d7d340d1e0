package tokend

import (
	"errors"
	"io"
	"net/http"
	"regexp"
	"time"
)

// Transport is an http.RoundTripper that authorizes each request with user's token from
// tokend. When the server answers 401 Unauthorized, it reports the token to tokend as
// rejected (tokend refreshes once, however many requests report the same token) and sends
// the request once more with the new token; never more than once. It is safe for concurrent
// use.
//
//	httpClient := &http.Client{Transport: tokend.NewTransport("alice")}
//
// When tokend cannot replace a rejected token, the server's 401 response is returned as it
// is, unless the credential needs a new login or is gone (*ReauthenticationRequiredError,
// *UnknownUserError, *PermissionDeniedError): then that error is returned. A request whose
// body cannot be replayed (Body set, GetBody nil) is not retried.
type Transport struct {
	Client   *Client
	User     string
	MinValid time.Duration
	// Scope and Resource, when not "", ask for a token narrowed to them (see
	// Client.NarrowedToken) instead of the credential's own; a 401 replaces that token.
	Scope    string
	Resource string
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
}

// NewTransport returns a Transport for user. Options: WithClient, WithSocket, WithTimeout,
// WithMinValid, WithScope, WithResource.
func NewTransport(user string, opts ...Option) *Transport {
	s := newSettings(opts)
	return &Transport{Client: s.clientOrNew(), User: user, MinValid: s.minValid, Scope: s.scope, Resource: s.resource}
}

func (t *Transport) base() http.RoundTripper { return baseOrDefault(t.Base) }

// baseOrDefault is base, or http.DefaultTransport when it is nil.
func baseOrDefault(base http.RoundTripper) http.RoundTripper {
	if base != nil {
		return base
	}
	return http.DefaultTransport
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	credentials, err := t.Client.token(ctx, t.User, t.MinValid, "", t.Scope, t.Resource)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	first := req.Clone(ctx)
	first.Header.Set("Authorization", credentials.AuthorizationHeader())
	resp, err := t.base().RoundTrip(first)
	if err != nil || resp.StatusCode != http.StatusUnauthorized || !replayable {
		return resp, err
	}
	fresh, err := t.Client.token(ctx, t.User, t.MinValid, credentials.AccessToken, t.Scope, t.Resource)
	if err != nil {
		if endsCredential(err) {
			discard(resp)
			return nil, err
		}
		return resp, nil
	}
	if fresh.AccessToken == credentials.AccessToken {
		return resp, nil
	}
	return resend(t.base(), req, resp, func(second *http.Request) {
		second.Header.Set("Authorization", fresh.AuthorizationHeader())
	})
}

// DPoPTransport is an http.RoundTripper that sends each request with user's DPoP-bound token
// and a DPoP proof (RFC 9449) that tokend makes for that request ("Authorization: DPoP <token>",
// "DPoP: <proof>"). When the server answers 401 Unauthorized demanding a nonce (a DPoP-Nonce
// header and WWW-Authenticate: DPoP error="use_dpop_nonce"), it asks tokend for a proof with
// that nonce and sends the request once more; never more than once. It keeps no nonce from one
// request to the next. It is safe for concurrent use.
//
//	httpClient := &http.Client{Transport: tokend.NewDPoPTransport("alice")}
//
// When tokend makes no proof for a request, the request is not sent and the error is returned
// (*InvalidCredentialError for tokens that are not DPoP-bound, …). When it makes none with the
// server's nonce, the server's 401 response is returned as it is, unless the credential needs a
// new login or is gone. A request whose body cannot be replayed (Body set, GetBody nil) is not
// retried.
type DPoPTransport struct {
	Client   *Client
	User     string
	MinValid time.Duration
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
}

// NewDPoPTransport returns a DPoPTransport for user. Options: WithClient, WithSocket,
// WithTimeout, WithMinValid.
func NewDPoPTransport(user string, opts ...Option) *DPoPTransport {
	s := newSettings(opts)
	return &DPoPTransport{Client: s.clientOrNew(), User: user, MinValid: s.minValid}
}

func (t *DPoPTransport) base() http.RoundTripper { return baseOrDefault(t.Base) }

// RoundTrip implements http.RoundTripper.
func (t *DPoPTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	// The proof's htu leaves out the query and fragment (tokend drops them too); the userinfo
	// is no part of it either. None of them is sent to tokend.
	target := *req.URL
	target.User, target.RawQuery, target.ForceQuery, target.Fragment, target.RawFragment = nil, "", false, "", ""
	uri := target.String()
	proof, err := t.Client.DPoPProof(ctx, t.User, method, uri, WithMinValid(t.MinValid))
	if err != nil {
		closeBody(req)
		return nil, err
	}
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	first := req.Clone(ctx)
	proof.SetHeaders(first)
	resp, err := t.base().RoundTrip(first)
	if err != nil || resp.StatusCode != http.StatusUnauthorized || !replayable {
		return resp, err
	}
	nonce := resp.Header.Get("DPoP-Nonce")
	if nonce == "" || !demandsDPoPNonce(resp.Header) {
		return resp, nil
	}
	retry, err := t.Client.DPoPProof(ctx, t.User, method, uri, WithMinValid(t.MinValid), WithNonce(nonce))
	if err != nil {
		if endsCredential(err) {
			discard(resp)
			return nil, err
		}
		return resp, nil
	}
	return resend(t.base(), req, resp, retry.SetHeaders)
}

// resend sends req once more through base, with the headers set by setHeaders, after
// discarding resp, the answer to the first attempt. When the body cannot be read again,
// resp is the answer.
func resend(base http.RoundTripper, req *http.Request, resp *http.Response, setHeaders func(*http.Request)) (*http.Response, error) {
	second := req.Clone(req.Context())
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return resp, nil
		}
		second.Body = body
	}
	discard(resp)
	setHeaders(second)
	return base.RoundTrip(second)
}

// useDPoPNonce matches a DPoP challenge whose error is use_dpop_nonce (RFC 9449 §9).
var useDPoPNonce = regexp.MustCompile(`(?i)(?:^|,)\s*DPoP(?:\s.*)?[\s,]error\s*=\s*(?:"use_dpop_nonce"|use_dpop_nonce)\s*(?:,|$)`)

// demandsDPoPNonce reports whether a 401's WWW-Authenticate demands a DPoP nonce.
func demandsDPoPNonce(header http.Header) bool {
	for _, value := range header.Values("WWW-Authenticate") {
		if useDPoPNonce.MatchString(value) {
			return true
		}
	}
	return false
}

func endsCredential(err error) bool {
	return errors.Is(err, ErrReauthenticationRequired) || errors.Is(err, ErrUnknownUser) ||
		errors.Is(err, ErrPermissionDenied)
}

// discard reads a little of a response body, so its connection can be reused, and closes it.
func discard(resp *http.Response) {
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	_ = resp.Body.Close()
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
