package tokend

import (
	"context"

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
	contextOf := context.Background
	for _, opt := range opts {
		if given, ok := opt.(contextOption); ok {
			contextOf = given
		}
	}
	minValid, scope, resource := s.minValid, s.scope, s.resource
	// A function, not a struct: oauth2.TokenSource.Token takes no context, so the one given
	// with WithContext lives in this closure.
	return tokenSourceFunc(func() (*oauth2.Token, error) {
		credentials, err := client.token(contextOf(), user, minValid, "", scope, resource)
		if err != nil {
			return nil, err
		}
		return oauth2Token(credentials), nil
	})
}

// TokenSource is TokenSource with this client.
func (c *Client) TokenSource(user string, opts ...Option) oauth2.TokenSource {
	return TokenSource(user, append(opts, WithClient(c))...)
}

// tokenSourceFunc is an oauth2.TokenSource made of a function.
type tokenSourceFunc func() (*oauth2.Token, error)

// Token returns the current access token.
func (f tokenSourceFunc) Token() (*oauth2.Token, error) { return f() }

func oauth2Token(c *Credentials) *oauth2.Token {
	token := &oauth2.Token{AccessToken: c.AccessToken, TokenType: c.TokenType, Expiry: c.ExpiresAt}
	if c.Scope != "" {
		token = token.WithExtra(map[string]any{"scope": c.Scope})
	}
	return token
}
