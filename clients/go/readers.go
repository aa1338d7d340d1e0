package tokend

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ReaderProblem says why a text is not a reader (ReaderError.Problem).
type ReaderProblem string

// The problems ParseReader reports; the same codes as the daemon's grammar and the table of
// cases every implementation is tested against (Tests/Fixtures/reader-grammar.json).
const (
	ReaderNoKind      ReaderProblem = "no-kind"      // no ':' at all
	ReaderUnknownKind ReaderProblem = "unknown-kind" // not uid, gid, user or group
	ReaderInvalidID   ReaderProblem = "invalid-id"   // uid: or gid: without a valid decimal id
	ReaderInvalidName ReaderProblem = "invalid-name" // user: or group: without a valid name
)

// maxReaderID is the largest id a reader may name: 4294967295 is (uid_t)-1, "no id".
const maxReaderID = 4294967294

// maxReaderNameBytes is the longest user or group name, in UTF-8 bytes.
const maxReaderNameBytes = 255

// ReaderError is a text that is not a reader. It matches ErrInvalidParameter.
type ReaderError struct {
	Text    string
	Problem ReaderProblem
}

func (e *ReaderError) Error() string {
	const usage = "expected uid:N, gid:N, user:NAME or group:NAME"
	shown := display(e.Text, nil) // control characters dropped, shortened
	switch e.Problem {
	case ReaderNoKind:
		return fmt.Sprintf("reader '%s' has no kind; %s", shown, usage)
	case ReaderUnknownKind:
		kind, _, _ := strings.Cut(e.Text, ":")
		return fmt.Sprintf("reader '%s' has an unknown kind '%s'; %s", shown, display(kind, nil), usage)
	case ReaderInvalidID:
		return fmt.Sprintf("reader '%s' has no valid numeric id (0 to 4294967294); %s", shown, usage)
	default:
		return fmt.Sprintf("reader '%s' has no valid name (1 to 255 bytes; no whitespace, control character, ':' or '/'; not starting with '-' or '+')", shown)
	}
}

// Is reports whether target is ErrInvalidParameter.
func (e *ReaderError) Is(target error) bool { return target == ErrInvalidParameter }

// ParseReader returns the canonical form of a reader: "uid:N", "gid:N" (decimal, without
// leading zeros), "user:NAME" or "group:NAME" (a name of 1 to 255 bytes without whitespace,
// control characters, ':' or '/', not starting with '-' or '+'). Anything else is a
// *ReaderError. This is the daemon's grammar (docs/protocol.md, "Readers").
func ParseReader(text string) (string, error) {
	kind, value, found := strings.Cut(text, ":")
	if !found {
		return "", wrap(&ReaderError{Text: text, Problem: ReaderNoKind})
	}
	switch kind {
	case "uid", "gid":
		if value == "" || strings.TrimLeft(value, "0123456789") != "" {
			return "", wrap(&ReaderError{Text: text, Problem: ReaderInvalidID})
		}
		id, err := strconv.ParseUint(value, 10, 64)
		if err != nil || id > maxReaderID {
			return "", wrap(&ReaderError{Text: text, Problem: ReaderInvalidID})
		}
		return kind + ":" + strconv.FormatUint(id, 10), nil
	case "user", "group":
		if !validReaderName(value) {
			return "", wrap(&ReaderError{Text: text, Problem: ReaderInvalidName})
		}
		return kind + ":" + value, nil
	}
	return "", wrap(&ReaderError{Text: text, Problem: ReaderUnknownKind})
}

func validReaderName(name string) bool {
	if name == "" || len(name) > maxReaderNameBytes || name[0] == '-' || name[0] == '+' || !utf8.ValidString(name) {
		return false
	}
	for _, r := range name {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == ':' || r == '/' {
			return false
		}
	}
	return true
}
