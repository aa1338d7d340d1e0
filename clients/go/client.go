package tokend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"time"
)

const (
	// DefaultSocketPath is the production socket.
	DefaultSocketPath = "/run/tokend/io.tokend"
	// SocketEnvironmentVariable overrides DefaultSocketPath when set and not empty.
	SocketEnvironmentVariable = "TOKEND_SOCKET"
	// DefaultTimeout is how long one call may wait for its reply unless WithTimeout says
	// otherwise (tokend itself answers every call within its call_timeout, 30 s by default,
	// so a longer wait means the daemon is stuck).
	DefaultTimeout = 10 * time.Second
	// DefaultMaxMessageBytes is the longest reply accepted.
	DefaultMaxMessageBytes = 1 << 20

	maxIdleConnections = 4
)

// SocketPath returns the socket used when none is given: $TOKEND_SOCKET when set and not
// empty, else DefaultSocketPath.
func SocketPath() string {
	if path := os.Getenv(SocketEnvironmentVariable); path != "" {
		return path
	}
	return DefaultSocketPath
}

// Option is a ClientOption or a CallOption. TokenSource, NewTransport and NewDPoPTransport make
// (or take, WithClient) a client and call it, so they take both; NewClient and Dial take
// ClientOptions, NarrowedToken and DPoPProof CallOptions.
type Option interface{ apply(*settings) }

// ClientOption configures a Client: its socket, timeout and message limit (or, for a
// TokenSource or a Transport, which Client: WithClient).
type ClientOption func(*clientSettings)

// CallOption configures calls: how long the token must stay valid, a narrowed token's scope or
// resource, a DPoP proof's nonce.
type CallOption func(*callSettings)

func (o ClientOption) apply(s *settings) { o(&s.clientSettings) }
func (o CallOption) apply(s *settings)   { o(&s.callSettings) }

type clientSettings struct {
	socket     string
	timeout    time.Duration
	maxMessage int
	client     *Client
}

type callSettings struct {
	minValid time.Duration
	nonce    string
	scope    string
	resource string
}

type settings struct {
	clientSettings
	callSettings
}

func newSettings(opts []Option) settings {
	s := settings{clientSettings: newClientSettings(nil)}
	for _, opt := range opts {
		opt.apply(&s)
	}
	if s.socket == "" {
		s.socket = SocketPath()
	}
	return s
}

func newClientSettings(opts []ClientOption) clientSettings {
	s := clientSettings{timeout: DefaultTimeout, maxMessage: DefaultMaxMessageBytes}
	for _, opt := range opts {
		opt(&s)
	}
	if s.socket == "" {
		s.socket = SocketPath()
	}
	return s
}

func newCallSettings(opts []CallOption) callSettings {
	var s callSettings
	for _, opt := range opts {
		opt(&s)
	}
	return s
}

// WithSocket sets the daemon's socket (default: SocketPath()).
func WithSocket(path string) ClientOption { return func(s *clientSettings) { s.socket = path } }

// WithTimeout sets how long one call may wait for its reply, connecting included (default
// DefaultTimeout). A context deadline that comes sooner wins.
func WithTimeout(d time.Duration) ClientOption {
	return func(s *clientSettings) {
		if d > 0 {
			s.timeout = d
		}
	}
}

// WithMaxMessageBytes sets the longest reply accepted (default DefaultMaxMessageBytes).
func WithMaxMessageBytes(n int) ClientOption {
	return func(s *clientSettings) {
		if n > 0 {
			s.maxMessage = n
		}
	}
}

// WithMinValid sets how long a token from a TokenSource, a Transport, a DPoPTransport or a
// DPoPProof call must stay valid; tokend refreshes first when the current one expires sooner
// (default 0: any unexpired token).
func WithMinValid(d time.Duration) CallOption { return func(s *callSettings) { s.minValid = d } }

// WithNonce sets the nonce of a DPoPProof call: the DPoP-Nonce the resource server sent
// (default "": the proof has no nonce).
func WithNonce(nonce string) CallOption { return func(s *callSettings) { s.nonce = nonce } }

// WithScope asks a NarrowedToken call, a TokenSource or a Transport for a token narrowed to
// scope: space-separated scope values, a subset of the credential's scope (default "": the
// credential's own token). DPoPProof and DPoPTransport ignore it.
func WithScope(scope string) CallOption { return func(s *callSettings) { s.scope = scope } }

// WithResource asks a NarrowedToken call, a TokenSource or a Transport for a token narrowed to
// the API at uri: an absolute URI, the RFC 8707 resource indicator (default "": the
// credential's own token). DPoPProof and DPoPTransport ignore it.
func WithResource(uri string) CallOption { return func(s *callSettings) { s.resource = uri } }

// WithClient makes a TokenSource, a Transport or a DPoPTransport use an existing Client (its
// socket and timeout) instead of making its own.
func WithClient(c *Client) ClientOption { return func(s *clientSettings) { s.client = c } }

// WithContext sets the context of the calls a TokenSource makes (oauth2.TokenSource.Token
// takes none). Default: context.Background(), bounded by the client's timeout.
func WithContext(ctx context.Context) Option {
	return contextOption(func() context.Context { return ctx })
}

// contextOption is WithContext's: TokenSource finds it among its options (no settings keep it).
type contextOption func() context.Context

func (o contextOption) apply(*settings) {}

// Client talks to tokend over its Unix socket. It is safe for concurrent use: each call
// takes an idle connection or opens one, and connections are reused afterwards. A call that
// fails for any reason other than an error reply closes its connection. Close releases the
// idle connections.
type Client struct {
	path       string
	timeout    time.Duration
	maxMessage int

	mu     sync.Mutex
	idle   []*conn
	closed bool
}

// NewClient returns a client; it connects on its first call.
func NewClient(opts ...ClientOption) *Client {
	return newClientSettings(opts).newClient()
}

// newClient is a client with the settings' socket, timeout and message limit.
func (s clientSettings) newClient() *Client {
	return &Client{path: s.socket, timeout: s.timeout, maxMessage: s.maxMessage}
}

// clientOrNew is the client given with WithClient, else a new one (newClient).
func (s clientSettings) clientOrNew() *Client {
	if s.client != nil {
		return s.client
	}
	return s.newClient()
}

// Dial returns a client that has connected once, so that a missing daemon shows at once
// (*DaemonUnavailableError naming the socket).
func Dial(ctx context.Context, opts ...ClientOption) (*Client, error) {
	c := NewClient(opts...)
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	cn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	c.release(cn)
	return c, nil
}

// SocketPath is the socket this client connects to.
func (c *Client) SocketPath() string { return c.path }

// Close closes the idle connections; calls in flight finish on theirs, which are then closed.
// The client stays usable: a later call connects again.
func (c *Client) Close() error {
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, cn := range idle {
		cn.close()
	}
	return nil
}

// Token returns an access token for user that stays valid for at least minValid (rounded up
// to whole seconds; 0 accepts any unexpired token). rejected is the token an API just
// refused, or "": when it is still the current token tokend refreshes before answering (once,
// however many callers report it); when it is already stale the current token is returned.
// Do not loop on 401s: a token refused right after a forced refresh is not fixed by another.
//
// Errors: *UnknownUserError, *PermissionDeniedError, *ReauthenticationRequiredError,
// *RefreshFailedError, *DaemonUnavailableError, *TimeoutError, …
func (c *Client) Token(ctx context.Context, user string, minValid time.Duration, rejected string) (*Credentials, error) {
	return c.token(ctx, user, minValid, rejected, "", "")
}

// NarrowedToken is Token for a token narrowed to WithScope (space-separated scope values, a
// subset of the credential's scope) and/or WithResource (the absolute URI of the API the token
// is for, RFC 8707); without either it is Token. tokend gets a narrowed token from the provider
// (which must have narrowed_tokens = true) with a refresh grant, and caches and refreshes it
// apart from the credential's own token; rejected is compared with the narrowed token. The
// Credentials' Scope is the narrowed scope.
//
// Errors: *InvalidCredentialError for a scope wider than the credential's or a provider
// without narrowed tokens, *RefreshFailedError when the provider refuses or does not narrow, a
// *VarlinkError matching ErrInvalidParameter (Parameters["parameter"] scope or resource) for a
// malformed one, and otherwise those of Token.
func (c *Client) NarrowedToken(ctx context.Context, user string, minValid time.Duration, rejected string, opts ...CallOption) (*Credentials, error) {
	s := newCallSettings(opts)
	return c.token(ctx, user, minValid, rejected, s.scope, s.resource)
}

// token is ProvideTokenReplacement; scope and resource are sent when not "".
func (c *Client) token(ctx context.Context, user string, minValid time.Duration, rejected, scope, resource string) (*Credentials, error) {
	const method = interfaceName + ".ProvideTokenReplacement"
	if err := checkIdentifier(user, "userIdentifier", method); err != nil {
		return nil, err
	}
	parameters := map[string]any{"userIdentifier": user}
	if seconds := wholeSecondsRoundingUp(minValid); seconds > 0 {
		parameters["minValidSeconds"] = seconds
	}
	if rejected != "" {
		parameters["rejectedToken"] = rejected
	}
	if scope != "" {
		parameters["scope"] = scope
	}
	if resource != "" {
		parameters["resource"] = resource
	}
	var credentials *Credentials
	err := c.roundTrip(ctx, call{Method: method, Parameters: parameters}, func(r *reply) error {
		var err error
		credentials, err = credentialsOf(r, method, user)
		return err
	})
	if err != nil {
		return nil, err
	}
	return credentials, nil
}

// DPoPProof returns a DPoP proof (RFC 9449) for one HTTP request with user's DPoP-bound access
// token, signed by tokend with the credential's key (which never leaves the daemon), and the
// credentials it goes with. httpMethod is the request's method ("GET", …); httpURI its absolute
// https URL (http only to a loopback host), whose query and fragment the proof leaves out.
// Options: WithNonce, the resource server's DPoP-Nonce when it demanded one; WithMinValid, as
// minValid for Token. Send the request with SetHeaders, and ask again for the next request: a
// proof is made for one request and is not cached.
//
// Errors: *InvalidCredentialError when the credential's tokens are not DPoP-bound, a
// *VarlinkError matching ErrInvalidParameter (Parameters["parameter"] httpMethod, httpUri or
// nonce) for a method, URL or nonce tokend refuses, and otherwise those of Token.
func (c *Client) DPoPProof(ctx context.Context, user, httpMethod, httpURI string, opts ...CallOption) (*DPoPProof, error) {
	const method = interfaceName + ".ProvideDPoPProof"
	if err := checkIdentifier(user, "userIdentifier", method); err != nil {
		return nil, err
	}
	if httpMethod == "" {
		return nil, wrap(&invalidArgumentError{parameter: "httpMethod", method: method, problem: "is empty"})
	}
	if httpURI == "" {
		return nil, wrap(&invalidArgumentError{parameter: "httpUri", method: method, problem: "is empty"})
	}
	s := newCallSettings(opts)
	parameters := map[string]any{"userIdentifier": user, "httpMethod": httpMethod, "httpUri": httpURI}
	if s.nonce != "" {
		parameters["nonce"] = s.nonce
	}
	if seconds := wholeSecondsRoundingUp(s.minValid); seconds > 0 {
		parameters["minValidSeconds"] = seconds
	}
	var proof *DPoPProof
	err := c.roundTrip(ctx, call{Method: method, Parameters: parameters}, func(r *reply) error {
		credentials, err := credentialsOf(r, method, user)
		if err != nil {
			return err
		}
		var wire struct {
			Proof *string `json:"proof"`
		}
		if err := r.decodeParameters(&wire, method); err != nil {
			return err
		}
		if wire.Proof == nil || *wire.Proof == "" {
			return wrap(&ProtocolError{Method: method, Detail: `field "proof" is missing`})
		}
		proof = &DPoPProof{Credentials: *credentials, Proof: *wire.Proof}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return proof, nil
}

// Status returns the daemon's status and that of the credentials the caller may see: one
// credential for a user, all of them for "" (asked for with more and collected).
func (c *Client) Status(ctx context.Context, user string) (*Status, error) {
	const method = interfaceName + ".Status"
	request := call{Method: method}
	if user != "" {
		if err := checkIdentifier(user, "userIdentifier", method); err != nil {
			return nil, err
		}
		request.Parameters = map[string]any{"userIdentifier": user}
	} else {
		request.More = true
	}
	status := &Status{}
	err := c.roundTrip(ctx, request, func(r *reply) error {
		var parameters struct {
			Daemon      *wireDaemonStatus       `json:"daemon"`
			Credentials *[]wireCredentialStatus `json:"credentials"`
		}
		if err := r.decodeParameters(&parameters, method); err != nil {
			return err
		}
		if status.Daemon == nil && parameters.Daemon != nil {
			status.Daemon = parameters.Daemon.status()
		}
		if parameters.Credentials != nil {
			for i := range *parameters.Credentials {
				status.Credentials = append(status.Credentials, (*parameters.Credentials)[i].status())
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return status, nil
}

// AddCredential stores a credential (administrators, or the credential's only reader
// enrolling itself). Errors: *CredentialExistsError (unless Replace), *UnknownProviderError,
// *InvalidCredentialError, *PermissionDeniedError, *StorageFailedError, …
func (c *Client) AddCredential(ctx context.Context, request AddCredentialRequest) error {
	const method = interfaceName + ".AddCredential"
	if err := checkIdentifier(request.UserIdentifier, "userIdentifier", method); err != nil {
		return err
	}
	if err := checkIdentifier(request.Provider, "provider", method); err != nil {
		return err
	}
	if request.AccessToken == "" {
		return wrap(&invalidArgumentError{parameter: "accessToken", method: method, problem: "is empty"})
	}
	parameters := map[string]any{
		"userIdentifier": request.UserIdentifier,
		"provider":       request.Provider,
		"accessToken":    request.AccessToken,
	}
	if request.RefreshToken != "" {
		parameters["refreshToken"] = request.RefreshToken
	}
	if request.TokenType != "" {
		parameters["tokenType"] = request.TokenType
	}
	if request.ExpiresIn > 0 {
		parameters["expiresIn"] = wholeSecondsRoundingUp(request.ExpiresIn)
	}
	if request.Scope != "" {
		parameters["scope"] = request.Scope
	}
	if request.Readers != nil {
		readers := make([]string, len(request.Readers))
		for i, text := range request.Readers {
			reader, err := ParseReader(text)
			if err != nil {
				return err
			}
			readers[i] = reader
		}
		parameters["readers"] = readers
	}
	if request.Replace {
		parameters["replace"] = true
	}
	return c.roundTrip(ctx, call{Method: method, Parameters: parameters}, nil)
}

// RemoveCredential deletes the credential of user. Errors: *UnknownUserError,
// *PermissionDeniedError, *StorageFailedError, …
func (c *Client) RemoveCredential(ctx context.Context, user string) error {
	const method = interfaceName + ".RemoveCredential"
	if err := checkIdentifier(user, "userIdentifier", method); err != nil {
		return err
	}
	return c.roundTrip(ctx, call{Method: method, Parameters: map[string]any{"userIdentifier": user}}, nil)
}

// roundTrip sends request and hands each successful reply to each (which may be nil); an
// error reply ends the call with its typed error. The call ends by ctx's deadline or the
// client's timeout, whichever comes first.
func (c *Client) roundTrip(ctx context.Context, request call, each func(*reply) error) error {
	message, err := json.Marshal(request)
	if err != nil {
		return wrap(&invalidArgumentError{parameter: "parameters", method: request.Method, problem: "cannot be encoded"})
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	cn, reused, err := c.take(ctx)
	if err != nil {
		return err
	}
	stop, err := cn.send(ctx, message)
	if err != nil {
		refused := cn.refusal(ctx, err, request.Method, request.Parameters)
		cn.close()
		if refused != nil {
			return refused
		}
		if !reused || ctx.Err() != nil {
			return cn.ioError(ctx.Err(), err, request.Method)
		}
		// An idle connection the daemon had closed (it restarted): the call never left,
		// so it is sent once more on a fresh connection.
		if cn, err = c.dial(ctx); err != nil {
			return err
		}
		if stop, err = cn.send(ctx, message); err != nil {
			refused := cn.refusal(ctx, err, request.Method, request.Parameters)
			cn.close()
			if refused != nil {
				return refused
			}
			return cn.ioError(ctx.Err(), err, request.Method)
		}
	}
	healthy := false
	defer func() {
		stop()
		if healthy && ctx.Err() == nil {
			c.release(cn)
		} else {
			cn.close()
		}
	}()
	for {
		raw, err := cn.read()
		if err != nil {
			return cn.ioError(ctx.Err(), err, request.Method)
		}
		r, err := decodeReply(raw, request.Method)
		if err != nil {
			return err
		}
		if err := r.errorOf(request.Method, request.Parameters); err != nil {
			// An error reply is always the last one; the connection stays usable, unless the
			// error may be the refusal of the connection itself, which the daemon then closes.
			healthy = !errors.Is(err, ErrQuotaExceeded)
			return err
		}
		if each != nil {
			if err := each(r); err != nil {
				return err
			}
		}
		if !request.More || !r.Continues {
			healthy = true
			return nil
		}
	}
}

// take returns an idle connection (reused true) or a new one.
func (c *Client) take(ctx context.Context) (*conn, bool, error) {
	c.mu.Lock()
	if n := len(c.idle); n > 0 {
		cn := c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		return cn, true, nil
	}
	c.mu.Unlock()
	cn, err := c.dial(ctx)
	return cn, false, err
}

func (c *Client) dial(ctx context.Context) (*conn, error) {
	deadline, _ := ctx.Deadline()
	return dial(ctx, c.path, deadline, c.maxMessage)
}

// release returns a healthy connection to the idle list.
func (c *Client) release(cn *conn) {
	_ = cn.nc.SetDeadline(time.Time{})
	c.mu.Lock()
	if len(c.idle) < maxIdleConnections {
		c.idle = append(c.idle, cn)
		cn = nil
	}
	c.mu.Unlock()
	if cn != nil {
		cn.close()
	}
}

// credentialsOf reads the credentials of a ProvideTokenReplacement, ProvideDPoPProof or Watch
// reply, which must be user's.
func credentialsOf(r *reply, method, user string) (*Credentials, error) {
	var parameters struct {
		Credentials *wireCredentials `json:"credentials"`
	}
	if err := r.decodeParameters(&parameters, method); err != nil {
		return nil, err
	}
	credentials, missing := parameters.Credentials.credentials()
	if credentials == nil {
		return nil, wrap(&ProtocolError{Method: method, Detail: fmt.Sprintf("field %q is missing", missing)})
	}
	if credentials.UserIdentifier != user {
		return nil, wrap(&ProtocolError{Method: method, Detail: "it carries another user's credentials"})
	}
	return credentials, nil
}

// invalidArgumentError: the client refused to send a parameter.
type invalidArgumentError struct {
	parameter, method, problem string
}

func (e *invalidArgumentError) Error() string {
	return fmt.Sprintf("the %s of %s %s", e.parameter, shortMethod(e.method), e.problem)
}
func (e *invalidArgumentError) Is(target error) bool { return target == ErrInvalidParameter }

// checkIdentifier applies tokend's rule for identifiers: 1 to 255 printable ASCII characters,
// no spaces or '/'. The value is not echoed.
func checkIdentifier(value, name, method string) error {
	valid := len(value) > 0 && len(value) <= 255
	for i := 0; valid && i < len(value); i++ {
		b := value[i]
		valid = b > 0x20 && b < 0x7f && b != '/'
	}
	if !valid {
		return wrap(&invalidArgumentError{parameter: name, method: method,
			problem: "is not valid (1 to 255 printable ASCII characters, no spaces or '/')"})
	}
	return nil
}

func wholeSecondsRoundingUp(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	seconds := int64(d / time.Second)
	if d%time.Second != 0 && seconds < math.MaxInt64 {
		seconds++
	}
	return seconds
}
