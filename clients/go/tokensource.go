package tokend

import (
	"context"
	"time"

	"golang.org/x/oauth2"
)

// TokenSource returns an oauth2.TokenSource whose Token asks tokend for user's access token,
// valid for at least WithMinValid (default 0), narrowed to WithScope and/or WithResource when
// given (see Client.NarrowedToken). Options: WithSocket, WithTimeout, WithClient, WithMinValid,
// WithScope, WithResource, WithContext.
//
// It is safe for concurrent use and asks tokend on every call; tokend keeps the token fresh
// and answers from memory, so a call costs one local round trip. Wrapping it in
// oauth2.ReuseTokenSource is optional: it saves those round trips, but then a token is used
// until oauth2 deems it expired (10 s before Expiry), without tokend's say.
//
//	client := oauth2.NewClient(ctx, tokend.TokenSource("alice", tokend.WithMinValid(time.Minute)))
//
// Token's errors are this package's typed errors (*ReauthenticationRequiredError, …); an
// http.Client returns them wrapped in a *url.Error, which errors.As sees through.
func TokenSource(user string, opts ...Option) oauth2.TokenSource {
	s := newSettings(opts)
	client := s.clientOrNew()
	ctx := s.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	return &tokenSource{client: client, user: user, minValid: s.minValid, scope: s.scope, resource: s.resource, ctx: ctx}
}

// TokenSource is TokenSource with this client.
func (c *Client) TokenSource(user string, opts ...Option) oauth2.TokenSource {
	return TokenSource(user, append(opts, WithClient(c))...)
}

type tokenSource struct {
	client   *Client
	user     string
	minValid time.Duration
	scope    string
	resource string
	ctx      context.Context
}

// Token returns the current access token.
func (s *tokenSource) Token() (*oauth2.Token, error) {
	credentials, err := s.client.token(s.ctx, s.user, s.minValid, "", s.scope, s.resource)
	if err != nil {
		return nil, err
	}
	return oauth2Token(credentials), nil
}

func oauth2Token(c *Credentials) *oauth2.Token {
	token := &oauth2.Token{AccessToken: c.AccessToken, TokenType: c.TokenType, Expiry: c.ExpiresAt}
	if c.Scope != "" {
		token = token.WithExtra(map[string]any{"scope": c.Scope})
	}
	return token
}
