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
	ReaderNoKind             ReaderProblem = "no-kind"             // no ':' at all
	ReaderUnknownKind        ReaderProblem = "unknown-kind"        // not uid, gid, user, group, unit or exe
	ReaderInvalidID          ReaderProblem = "invalid-id"          // uid: or gid: without a valid decimal id
	ReaderInvalidName        ReaderProblem = "invalid-name"        // user: or group: without a valid name
	ReaderInvalidUnit        ReaderProblem = "invalid-unit"        // unit: without a valid .service or .scope unit name
	ReaderInvalidPath        ReaderProblem = "invalid-path"        // exe: without an absolute, normalised path
	ReaderInvalidCombination ReaderProblem = "invalid-combination" // a '+' not joining uid:/user: to unit:/exe:
)

const (
	maxReaderID        = 4294967294 // 4294967295 is (uid_t)-1, "no id"
	maxReaderNameBytes = 255        // a user or group name, in UTF-8 bytes
	maxReaderUnitBytes = 255        // a systemd unit name
	maxReaderPathBytes = 4095       // an executable's path (PATH_MAX less its NUL)
	readerHashMark     = "@sha256:"
	readerUsage        = "expected uid:N, gid:N, user:NAME, group:NAME, unit:NAME.service, exe:/PATH[@sha256:HEX] or uid:N+unit:NAME.service"
)

// ReaderError is a text that is not a reader. It matches ErrInvalidParameter.
type ReaderError struct {
	Text    string
	Problem ReaderProblem
}

func (e *ReaderError) Error() string {
	shown := shortReader(e.Text)
	switch e.Problem {
	case ReaderNoKind:
		return fmt.Sprintf("reader '%s' has no kind; %s", shown, readerUsage)
	case ReaderUnknownKind:
		kind, _, _ := strings.Cut(e.Text, ":")
		return fmt.Sprintf("reader '%s' has an unknown kind '%s'; %s", shown, shortReader(kind), readerUsage)
	case ReaderInvalidID:
		return fmt.Sprintf("reader '%s' has no valid numeric id (0 to 4294967294); %s", shown, readerUsage)
	case ReaderInvalidUnit:
		return fmt.Sprintf("reader '%s' has no valid unit name (a .service or .scope unit of at most 255 bytes: ASCII letters, digits, ':', '-', '_', '.', '\\' and '@')", shown)
	case ReaderInvalidPath:
		return fmt.Sprintf("reader '%s' has no valid executable path (absolute, at most 4095 bytes, no control character, no empty, '.' or '..' component, no trailing '/'; optionally @sha256: and 64 hex digits)", shown)
	case ReaderInvalidCombination:
		return fmt.Sprintf("reader '%s' joins readers with '+' other than uid:N or user:NAME + unit:NAME or exe:PATH", shown)
	default:
		return fmt.Sprintf("reader '%s' has no valid name (1 to 255 bytes; no whitespace, control character, ':' or '/'; not starting with '-' or '+')", shown)
	}
}

// Is reports whether target is ErrInvalidParameter.
func (e *ReaderError) Is(target error) bool { return target == ErrInvalidParameter }

// ParseReader returns the canonical form of a reader (docs/protocol.md, "Readers"), the daemon's
// grammar:
//
//   - "uid:N", "gid:N": decimal, 0 to 4294967294, canonical without leading zeros;
//   - "user:NAME", "group:NAME": a name of 1 to 255 bytes without whitespace, control
//     characters, ':' or '/', not starting with '-' or '+';
//   - "unit:NAME": a systemd unit name ending in .service or .scope (at most 255 bytes of ASCII
//     letters, digits, ':', '-', '_', '.', '\' and '@');
//   - "exe:PATH", "exe:PATH@sha256:HEX": an absolute path without empty, '.' or '..' components
//     or a trailing '/', at most 4095 bytes, and optionally the sha256 of the executable's
//     contents (64 hex digits, canonical in lower case);
//   - "uid:N+unit:NAME", "uid:N+exe:PATH", "user:NAME+unit:NAME", "user:NAME+exe:PATH": both must match.
//
// Anything else is a *ReaderError.
func ParseReader(text string) (string, error) {
	kind, _, found := strings.Cut(text, ":")
	if !found {
		return "", wrap(&ReaderError{Text: text, Problem: ReaderNoKind})
	}
	switch kind {
	case "uid", "gid", "user", "group", "unit", "exe":
	default:
		return "", wrap(&ReaderError{Text: text, Problem: ReaderUnknownKind})
	}
	// A '+' joins a uid: or user: reader to a unit: or exe: reader. No reader but an exe: path
	// holds a '+' of its own, so the first '+' is the join: the left side is parsed first (a
	// refusal names its problem), then the two kinds are checked, then the right side.
	if left, right, joined := strings.Cut(text, "+"); joined && kind != "exe" {
		first, problem := parseSingleReader(left)
		if problem != "" {
			return "", wrap(&ReaderError{Text: text, Problem: problem})
		}
		rightKind, _, rightFound := strings.Cut(right, ":")
		if (kind != "uid" && kind != "user") || !rightFound || (rightKind != "unit" && rightKind != "exe") ||
			(rightKind == "unit" && strings.Contains(right, "+")) {
			return "", wrap(&ReaderError{Text: text, Problem: ReaderInvalidCombination})
		}
		second, problem := parseSingleReader(right)
		if problem != "" {
			return "", wrap(&ReaderError{Text: text, Problem: problem})
		}
		return first + "+" + second, nil
	}
	reader, problem := parseSingleReader(text)
	if problem != "" {
		return "", wrap(&ReaderError{Text: text, Problem: problem})
	}
	return reader, nil
}

// parseSingleReader parses one reader of a known kind without a '+' join.
func parseSingleReader(text string) (string, ReaderProblem) {
	kind, value, _ := strings.Cut(text, ":")
	switch kind {
	case "uid", "gid":
		if value == "" || strings.TrimLeft(value, "0123456789") != "" {
			return "", ReaderInvalidID
		}
		id, err := strconv.ParseUint(value, 10, 64)
		if err != nil || id > maxReaderID {
			return "", ReaderInvalidID
		}
		return kind + ":" + strconv.FormatUint(id, 10), ""
	case "unit":
		if !validReaderUnit(value) {
			return "", ReaderInvalidUnit
		}
		return text, ""
	case "exe":
		path, digest := splitReaderDigest(value)
		if !validReaderPath(path) {
			return "", ReaderInvalidPath
		}
		if digest != "" {
			return "exe:" + path + readerHashMark + strings.ToLower(digest), ""
		}
		return "exe:" + path, ""
	default: // user, group
		if !validReaderName(value) {
			return "", ReaderInvalidName
		}
		return kind + ":" + value, ""
	}
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

// validReaderUnit: at most 255 bytes of the characters systemd allows in unit names, ending in
// .service or .scope after a non-empty prefix.
func validReaderUnit(name string) bool {
	if len(name) > maxReaderUnitBytes {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(":-_.\\@", c) >= 0) {
			return false
		}
	}
	for _, suffix := range []string{".service", ".scope"} {
		if strings.HasSuffix(name, suffix) && len(name) > len(suffix) {
			return true
		}
	}
	return false
}

// splitReaderDigest splits off the last "@sha256:" when exactly 64 hex digits follow it to the
// end; otherwise the whole value is the path and the digest is "".
func splitReaderDigest(value string) (path, digest string) {
	mark := strings.LastIndex(value, readerHashMark)
	if mark < 0 {
		return value, ""
	}
	digest = value[mark+len(readerHashMark):]
	if len(digest) != 64 || strings.Trim(digest, "0123456789abcdefABCDEF") != "" {
		return value, ""
	}
	return value[:mark], digest
}

// validReaderPath: absolute, at most 4095 bytes, no control character (NUL included), no
// empty, '.' or '..' component and no trailing '/' ("/" alone included).
func validReaderPath(path string) bool {
	if !strings.HasPrefix(path, "/") || len(path) > maxReaderPathBytes || strings.IndexFunc(path, unicode.IsControl) >= 0 {
		return false
	}
	for _, component := range strings.Split(path[1:], "/") {
		if component == "" || component == "." || component == ".." {
			return false
		}
	}
	return true
}

// shortReader is a reader's text for a message: at most 80 characters, control characters dropped.
func shortReader(text string) string {
	if utf8.RuneCountInString(text) > 80 {
		text = string([]rune(text)[:80]) + "..."
	}
	return display(text, nil)
}
