package tokend_test

// The real tokend and the real test IdP (django-oauth-toolkit, Tests/idp/idp.py), started on
// 127.0.0.1 and in scratch directories under /tmp. The IdP is started once for the package
// (TestMain stops it); each test starts its own tokend and stops it in t.Cleanup. Every
// child runs in its own process group, which is killed at the end, and dies with the test
// binary (Pdeathsig) if the binary is killed first.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tokend.io/tokend"
)

const (
	idpClientID     = "tokend-test"
	idpClientSecret = "tokend-test-secret"
	idpLifetime     = 3600
	// dpopProvider has dpop = true: tokend makes a DPoP key for each credential added for it.
	// Its token endpoint (the discard port) is never contacted: its credentials have no refresh
	// token.
	dpopProvider = "dpop"
	// narrowedProvider is the IdP once more, with narrowed_tokens = true: tokend may ask it for
	// tokens narrowed to a scope or a resource. Only daemons started with narrowedProviderSection
	// have it.
	narrowedProvider = "narrowed"
)

var (
	repoRoot = func() string {
		wd, err := os.Getwd()
		if err != nil {
			panic(err)
		}
		return filepath.Clean(filepath.Join(wd, "..", ".."))
	}()
	idpOnce   sync.Once
	sharedIdP *identityProvider
	idpErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedIdP != nil {
		sharedIdP.stop()
		if os.Getenv("TOKEND_KEEP_SCRATCH") == "" {
			_ = os.RemoveAll(sharedIdP.dir)
		}
	}
	os.Exit(code)
}

func binary(name string) string {
	dir := os.Getenv("TOKEND_BIN_DIR")
	if dir == "" {
		dir = filepath.Join(repoRoot, ".build", "debug")
	}
	return filepath.Join(dir, name)
}

func python() string {
	venv := os.Getenv("TOKEND_VENV")
	if venv == "" {
		venv = filepath.Join(repoRoot, ".venv")
	}
	return filepath.Join(venv, "bin", "python")
}

func idpScript() string { return filepath.Join(repoRoot, "Tests", "idp", "idp.py") }

// scratch makes a short directory under /tmp (Unix socket paths are limited to 107 bytes).
func scratch(prefix string) (string, error) {
	dir, err := os.MkdirTemp("/tmp", prefix)
	if err != nil {
		return "", err
	}
	return dir, os.Chmod(dir, 0o755)
}

// processGroup is a child started as the leader of its own process group.
type processGroup struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func startGroup(cmd *exec.Cmd) (*processGroup, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &processGroup{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *processGroup) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM to the group, waits up to grace, then SIGKILLs whatever is left of it.
// It reports whether the leader exited within grace.
func (p *processGroup) stop(grace time.Duration) bool {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	clean := true
	select {
	case <-p.exited:
	case <-time.After(grace):
		clean = false
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
	}
	return clean
}

// identityProvider is `idp.py serve`.
type identityProvider struct {
	dir      string
	stateDir string
	port     int
	group    *processGroup
}

func (p *identityProvider) base() string { return fmt.Sprintf("http://127.0.0.1:%d", p.port) }

func (p *identityProvider) stop() { p.group.stop(15 * time.Second) }

// idp returns the package's IdP, starting it on first use.
func idp(t *testing.T) *identityProvider {
	t.Helper()
	idpOnce.Do(func() { sharedIdP, idpErr = startIdP() })
	if idpErr != nil {
		t.Fatalf("test IdP: %v", idpErr)
	}
	return sharedIdP
}

func startIdP() (*identityProvider, error) {
	if _, err := os.Stat(python()); err != nil {
		return nil, fmt.Errorf("the test venv is missing (%s): run scripts/test-venv.sh", python())
	}
	dir, err := scratch("tokend-go-idp-")
	if err != nil {
		return nil, err
	}
	state := filepath.Join(dir, "idp")
	logFile, err := os.Create(filepath.Join(dir, "idp.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(python(), idpScript(), "serve", "--port", "0", "--state-dir", state,
		"--access-token-lifetime", strconv.Itoa(idpLifetime))
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	group, err := startGroup(cmd)
	if err != nil {
		return nil, err
	}
	ready := make(chan int, 1)
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			if fields := strings.Fields(scanner.Text()); len(fields) == 2 && fields[0] == "READY" {
				if port, err := strconv.Atoi(fields[1]); err == nil {
					ready <- port
				}
			}
		}
		close(ready)
	}()
	select {
	case port, ok := <-ready:
		if ok {
			return &identityProvider{dir: dir, stateDir: state, port: port, group: group}, nil
		}
		group.stop(5 * time.Second)
		return nil, fmt.Errorf("idp.py exited before READY: %s", tail(filepath.Join(dir, "idp.log")))
	case <-time.After(90 * time.Second):
		group.stop(5 * time.Second)
		return nil, fmt.Errorf("idp.py not READY within 90 s: %s", tail(filepath.Join(dir, "idp.log")))
	}
}

// tool runs an idp.py helper (mint, revoke, count-posts) against the IdP's state.
func (p *identityProvider) tool(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args = append([]string{idpScript(), args[0], "--state-dir", p.stateDir}, args[1:]...)
	cmd := exec.CommandContext(ctx, python(), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("idp.py %s: %v: %s", args[1], err, stderr.String())
	}
	return string(out)
}

type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	ExpiresIn    int    `json:"expires_in"`
	TokenType    string `json:"token_type"`
	Scope        string `json:"scope"`
}

// mint returns fresh token pairs of alice at the IdP, whose access tokens live lifetime
// seconds (0: the IdP's default, idpLifetime), with the IdP's default scope (read).
func (p *identityProvider) mint(t *testing.T, count, lifetime int) []tokenResponse {
	t.Helper()
	return p.mintScoped(t, count, lifetime, "")
}

// mintScoped is mint with the given scope ("": the IdP's default, read).
func (p *identityProvider) mintScoped(t *testing.T, count, lifetime int, scope string) []tokenResponse {
	t.Helper()
	if lifetime == 0 {
		lifetime = idpLifetime
	}
	var responses []tokenResponse
	args := []string{"mint", "--count", strconv.Itoa(count), "--prefix", "go", "--lifetime", strconv.Itoa(lifetime)}
	if scope != "" {
		args = append(args, "--scope", scope)
	}
	out := p.tool(t, args...)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var response tokenResponse
		if err := json.Unmarshal([]byte(line), &response); err != nil {
			t.Fatalf("idp.py mint printed %d bytes that are not a token response", len(line))
		}
		responses = append(responses, response)
	}
	if len(responses) != count {
		t.Fatalf("idp.py mint made %d token pairs, not %d", len(responses), count)
	}
	return responses
}

// revokeRefreshToken makes the IdP refuse the refresh token (invalid_grant).
func (p *identityProvider) revokeRefreshToken(t *testing.T, refreshToken string) {
	t.Helper()
	p.tool(t, "revoke", "--refresh-token", refreshToken)
}

// grants counts the token endpoint's POSTs so far.
func (p *identityProvider) grants(t *testing.T) int {
	t.Helper()
	out := strings.TrimSpace(p.tool(t, "count-posts", "--path", "/o/token/"))
	n, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("idp.py count-posts printed %q", out)
	}
	return n
}

var introspection = &http.Client{Timeout: 10 * time.Second}

// active asks the IdP (RFC 7662 introspection, as the confidential client) whether an access
// token is live.
func (p *identityProvider) active(token string) (bool, error) {
	answer, err := p.introspect(token)
	return answer.Active, err
}

// introspected is what the IdP says of an access token (RFC 7662): whether it is live, its
// scope, and its audiences (the RFC 8707 resources it was issued for).
type introspected struct {
	Active bool     `json:"active"`
	Scope  string   `json:"scope"`
	Aud    []string `json:"aud"`
}

// introspect asks the IdP about an access token (RFC 7662, as the confidential client).
func (p *identityProvider) introspect(token string) (introspected, error) {
	var answer introspected
	_, err := p.clientPost("/o/introspect/", url.Values{"token": {token}}, func(resp *http.Response) (bool, error) {
		return true, json.NewDecoder(resp.Body).Decode(&answer)
	})
	return answer, err
}

func (p *identityProvider) clientPost(path string, form url.Values, read func(*http.Response) (bool, error)) (bool, error) {
	req, err := http.NewRequest(http.MethodPost, p.base()+path, strings.NewReader(form.Encode()))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(idpClientID, idpClientSecret)
	resp, err := introspection.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%s answered %d", path, resp.StatusCode)
	}
	return read(resp)
}

// daemon is a tokend started on a configuration in a scratch directory.
type daemon struct {
	dir    string
	config string
	socket string
	log    string
	group  *processGroup
}

// startDaemon starts tokend against the IdP; t.Cleanup stops it. extra lines (key = value)
// go to [daemon], replacing the defaults of the same keys.
func startDaemon(t *testing.T, p *identityProvider, extra ...string) *daemon {
	t.Helper()
	return startDaemonWithProviders(t, p, "", extra...)
}

// narrowedProviderSection is the configuration of narrowedProvider: the IdP, as the provider
// example, with narrowed_tokens = true.
func narrowedProviderSection(p *identityProvider) string {
	return fmt.Sprintf(`[providers.%[1]s]
kind = "oauth2"
token_endpoint = "%[2]s/o/token/"
revocation_endpoint = "%[2]s/o/revoke_token/"
client_id = "%[3]s"
client_secret_file = "idp-secret"
client_auth = "client_secret_basic"
narrowed_tokens = true
`, narrowedProvider, p.base(), idpClientID)
}

// startDaemonWithProviders is startDaemon with more provider sections (TOML) after the
// providers example and dpop.
func startDaemonWithProviders(t *testing.T, p *identityProvider, providers string, extra ...string) *daemon {
	t.Helper()
	dir, err := scratch("tokend-go-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if os.Getenv("TOKEND_KEEP_SCRATCH") == "" {
			_ = os.RemoveAll(dir)
		}
	})
	lines := []string{
		`socket = "tokend.sock"`, `state_directory = "state"`, `key_file = "state/tokend.key"`,
		`max_connections = 64`, `max_message_bytes = 4096`, `call_timeout = "5s"`, `log_level = "debug"`,
		`forced_refresh_interval = "1s"`, `http_timeout = "2s"`,
	}
	// An extra line replaces the default of the same key.
	key := func(line string) string { return strings.TrimSpace(strings.SplitN(line, "=", 2)[0]) }
	for _, line := range extra {
		for i := range lines {
			if key(lines[i]) == key(line) {
				lines = append(lines[:i], lines[i+1:]...)
				break
			}
		}
		lines = append(lines, line)
	}
	config := "[daemon]\n" + strings.Join(lines, "\n") + "\n\n" + fmt.Sprintf(`[providers.example]
kind = "oauth2"
token_endpoint = "%[1]s/o/token/"
revocation_endpoint = "%[1]s/o/revoke_token/"
client_id = "%[2]s"
client_secret_file = "idp-secret"
client_auth = "client_secret_basic"

[providers.%[3]s]
kind = "oauth2"
token_endpoint = "http://127.0.0.1:9/token"
client_id = "tokend-dpop-test"
client_auth = "none"
dpop = true
dpop_bind_on_refresh = true
`, p.base(), idpClientID, dpopProvider)
	if providers != "" {
		config += "\n" + providers
	}
	d := &daemon{dir: dir, config: filepath.Join(dir, "tokend.toml"), socket: filepath.Join(dir, "tokend.sock"),
		log: filepath.Join(dir, "tokend.log")}
	if err := os.WriteFile(d.config, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "idp-secret"), []byte(idpClientSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.start(t)
	return d
}

// start runs tokend and waits (at most 20 s) until its socket accepts connections.
func (d *daemon) start(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(binary("tokend")); err != nil {
		t.Fatalf("no tokend binary at %s: set TOKEND_BIN_DIR", binary("tokend"))
	}
	logFile, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(binary("tokend"), "--config", d.config)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	group, err := startGroup(cmd)
	if err != nil {
		t.Fatal(err)
	}
	d.group = group
	t.Cleanup(func() {
		if !group.stop(10*time.Second) && !t.Failed() {
			t.Errorf("tokend did not stop within 10 s of SIGTERM")
		}
		if t.Failed() {
			t.Logf("tokend log (end):\n%s", tail(d.log))
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if !group.running() {
			t.Fatalf("tokend exited: %s", tail(d.log))
		}
		if conn, err := net.DialTimeout("unix", d.socket, time.Second); err == nil {
			conn.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("tokend did not listen on %s within 20 s: %s", d.socket, tail(d.log))
}

// restart stops tokend (SIGTERM) and starts it again on the same configuration and state.
func (d *daemon) restart(t *testing.T) {
	t.Helper()
	if !d.group.stop(10 * time.Second) {
		t.Fatalf("tokend did not stop within 10 s of SIGTERM")
	}
	d.start(t)
}

func (d *daemon) client(opts ...tokend.ClientOption) *tokend.Client {
	return tokend.NewClient(append([]tokend.ClientOption{tokend.WithSocket(d.socket)}, opts...)...)
}

// setUp starts the IdP (once), a tokend on it (extra as for startDaemon) and a client of that
// tokend; t.Cleanup closes the client, then stops the daemon.
func setUp(t *testing.T, extra ...string) (*identityProvider, *daemon, *tokend.Client) {
	t.Helper()
	p := idp(t)
	d := startDaemon(t, p, extra...)
	c := d.client()
	t.Cleanup(func() { c.Close() })
	return p, d, c
}

// enrol stores a freshly minted credential for user through the client under test.
func enrol(t *testing.T, c *tokend.Client, p *identityProvider, user string) tokenResponse {
	t.Helper()
	return enrolMinted(t, c, user, p.mint(t, 1, 0)[0])
}

// enrolMinted stores a token response for user through the client under test.
func enrolMinted(t *testing.T, c *tokend.Client, user string, minted tokenResponse) tokenResponse {
	t.Helper()
	return enrolMintedFor(t, c, user, "example", minted)
}

// enrolMintedFor is enrolMinted for a credential of provider.
func enrolMintedFor(t *testing.T, c *tokend.Client, user, provider string, minted tokenResponse) tokenResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.AddCredential(ctx, tokend.AddCredentialRequest{
		UserIdentifier: user, Provider: provider, AccessToken: minted.AccessToken,
		RefreshToken: minted.RefreshToken, TokenType: minted.TokenType,
		ExpiresIn: time.Duration(minted.ExpiresIn) * time.Second, Scope: minted.Scope,
	})
	if err != nil {
		t.Fatalf("AddCredential(%s): %v", user, err)
	}
	return minted
}

// enrolDPoP stores a DPoP-bound credential of dpopProvider for user (token type DPoP, valid for
// an hour, no refresh token): tokend makes its key. It returns the access token.
func enrolDPoP(t *testing.T, c *tokend.Client, user string) string {
	t.Helper()
	random := make([]byte, 18)
	if _, err := rand.Read(random); err != nil {
		t.Fatal(err)
	}
	accessToken := "go-dpop-at-" + base64.RawURLEncoding.EncodeToString(random)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.AddCredential(ctx, tokend.AddCredentialRequest{
		UserIdentifier: user, Provider: dpopProvider, AccessToken: accessToken, TokenType: "DPoP", ExpiresIn: time.Hour,
	})
	if err != nil {
		t.Fatalf("AddCredential(%s, provider %s): %v", user, dpopProvider, err)
	}
	return accessToken
}

func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

// within fails the test when f takes longer than limit; it returns f's duration.
func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

// concurrently calls f times times in each of n goroutines, and returns the errors it returned
// (a goroutine stops at its first one).
func concurrently(n, times int, f func() error) []error {
	var wg sync.WaitGroup
	failures := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < times; j++ {
				if err := f(); err != nil {
					failures <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(failures)
	var errs []error
	for err := range failures {
		errs = append(errs, err)
	}
	return errs
}

func contextWithTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// mustNotContain fails when text holds any of the secrets.
func mustNotContain(t *testing.T, what, text string, secrets ...string) {
	t.Helper()
	for _, secret := range secrets {
		if secret != "" && strings.Contains(text, secret) {
			t.Errorf("%s contains a token: %q", what, strings.ReplaceAll(text, secret, "<TOKEN>"))
		}
	}
}
