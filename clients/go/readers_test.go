package tokend_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tokend.io/tokend"
)

// readerCase is one row of Tests/Fixtures/reader-grammar.json, the table the daemon's (Swift)
// and the Python client's tests read too: a case on which the languages disagree fails here or there.
type readerCase struct {
	Text   string `json:"text"`
	Reader string `json:"reader"`
	Error  string `json:"error"`
}

func readerCases(t *testing.T) []readerCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "Tests", "Fixtures", "reader-grammar.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fixture struct {
		Cases []readerCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &fixture); err != nil {
		t.Fatal(err)
	}
	if len(fixture.Cases) < 100 {
		t.Fatalf("the fixture has %d cases", len(fixture.Cases))
	}
	return fixture.Cases
}

func TestParseReaderAgreesWithTheSharedFixture(t *testing.T) {
	problems, kinds := map[string]bool{}, map[string]bool{}
	for _, c := range readerCases(t) {
		reader, err := tokend.ParseReader(c.Text)
		if c.Error == "" {
			if err != nil || reader != c.Reader {
				t.Errorf("ParseReader(%q) = %q, %v; the fixture says %q", c.Text, reader, err, c.Reader)
			}
			kind, _, _ := strings.Cut(reader, ":")
			kinds[kind] = true
			if again, err := tokend.ParseReader(reader); err != nil || again != reader {
				t.Errorf("ParseReader(%q) = %q, %v: the canonical form does not parse to itself", reader, again, err)
			}
			continue
		}
		problems[c.Error] = true
		var readerErr *tokend.ReaderError
		if !errors.As(err, &readerErr) || string(readerErr.Problem) != c.Error {
			t.Errorf("ParseReader(%q) = %q, %v; the fixture says error %s", c.Text, reader, err, c.Error)
			continue
		}
		if !errors.Is(err, tokend.ErrInvalidParameter) || strings.Contains(err.Error(), "\n") || len(err.Error()) > 400 {
			t.Errorf("ParseReader(%q): %v is not a short one-line invalid parameter", c.Text, err)
		}
	}
	if len(problems) != 7 {
		t.Errorf("the fixture covers problems %v, not all seven", problems)
	}
	if len(kinds) != 6 {
		t.Errorf("the fixture accepts readers of kinds %v, not all six", kinds)
	}
}

func TestAddCredentialRefusesABadReaderBeforeSending(t *testing.T) {
	client := tokend.NewClient(tokend.WithSocket(filepath.Join(t.TempDir(), "none"))) // never dialled
	err := client.AddCredential(context.Background(), tokend.AddCredentialRequest{
		UserIdentifier: "alice", Provider: "idp", AccessToken: "x", Readers: []string{"uid:1000", "gid:-1"},
	})
	var readerErr *tokend.ReaderError
	if !errors.As(err, &readerErr) || readerErr.Problem != tokend.ReaderInvalidID || !errors.Is(err, tokend.ErrInvalidParameter) {
		t.Fatalf("AddCredential with reader gid:-1: %v", err)
	}
}

// TestAProgramReaderAdmitsThisTestProgramAndNoOther: the daemon matches an exe: reader against
// the caller's /proc/PID/exe. This test binary, named with its uid and the sha256 of its contents
// (sent in upper case, stored in lower case), reads; a credential for another program is refused.
func TestAProgramReaderAdmitsThisTestProgramAndNoOther(t *testing.T) {
	p, d, c := setUp(t)
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	contents, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	digest := sha256.Sum256(contents)
	sum := hex.EncodeToString(digest[:])
	mine := fmt.Sprintf("uid:%d+exe:%s@sha256:%s", os.Getuid(), exe, sum)
	ctx := contextWithTimeout(t, 30*time.Second)
	add := func(user, reader string) tokenResponse {
		minted := p.mint(t, 1, 0)[0]
		err := c.AddCredential(ctx, tokend.AddCredentialRequest{
			UserIdentifier: user, Provider: "example", AccessToken: minted.AccessToken,
			RefreshToken: minted.RefreshToken, ExpiresIn: time.Hour, Readers: []string{reader},
		})
		if err != nil {
			t.Fatalf("AddCredential(%s) with reader %s: %v", user, reader, err)
		}
		return minted
	}

	minted := add("go-program-mine", strings.TrimSuffix(mine, sum)+strings.ToUpper(sum))
	status, err := c.Status(ctx, "go-program-mine")
	if err != nil || len(status.Credentials) != 1 || fmt.Sprint(status.Credentials[0].Readers) != fmt.Sprint([]string{mine}) {
		t.Fatalf("Status = %+v, %v; want the one reader %s", status, err, mine)
	}
	// A connection accepted while no credential had a program reader carries no writer's
	// stamps, so program readers refuse its calls: the program connects again.
	if _, err := c.Token(ctx, "go-program-mine", 0, ""); !errors.Is(err, tokend.ErrPermissionDenied) {
		t.Errorf("Token on a connection older than the first program reader: %v; want PermissionDenied", err)
	}
	c = d.client()
	t.Cleanup(func() { c.Close() })
	if credentials, err := c.Token(ctx, "go-program-mine", 0, ""); err != nil || credentials.AccessToken != minted.AccessToken {
		t.Errorf("Token with reader %s: %v", mine, err)
	}

	other := fmt.Sprintf("uid:%d+exe:/usr/bin/false", os.Getuid())
	add("go-program-other", other)
	if _, err := c.Token(ctx, "go-program-other", 0, ""); !errors.Is(err, tokend.ErrPermissionDenied) {
		t.Errorf("Token with reader %s: %v; want PermissionDenied", other, err)
	}
}
