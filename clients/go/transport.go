package tokend

import (
	"errors"
	"io"
	"net/http"
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
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
}

// NewTransport returns a Transport for user. Options: WithClient, WithSocket, WithTimeout,
// WithMinValid.
func NewTransport(user string, opts ...Option) *Transport {
	s := newSettings(opts)
	client := s.client
	if client == nil {
		client = &Client{path: s.socket, timeout: s.timeout, maxMessage: s.maxMessage}
	}
	return &Transport{Client: client, User: user, MinValid: s.minValid}
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	credentials, err := t.Client.Token(ctx, t.User, t.MinValid, "")
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
	fresh, err := t.Client.Token(ctx, t.User, t.MinValid, credentials.AccessToken)
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
	second := req.Clone(ctx)
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return resp, nil
		}
		second.Body = body
	}
	discard(resp)
	second.Header.Set("Authorization", fresh.AuthorizationHeader())
	return t.base().RoundTrip(second)
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
