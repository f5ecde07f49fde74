package main

// What every verb shares to show text: paths on one line, text from a
// record or an archive made safe for a terminal, sizes, and paths in
// JSON.

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// printable escapes control characters (and invalid UTF-8) in text from
// an archive or a record before it reaches a terminal: an escape
// sequence or a carriage return in a message could rewrite the screen.
func printable(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && w == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+w])
		}
		i += w
	}
	return b.String()
}

// quote shows a path on one line: as is when it is plain, else Go-quoted
// (so names with newlines or invalid UTF-8 stay unambiguous).
func quote(p string) string {
	if !utf8.ValidString(p) || strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '"' }) ||
		strings.TrimSpace(p) != p {
		return strconv.Quote(p)
	}
	return p
}

// jsonPath is a path for JSON output: the string, plus its bytes in base64
// when they are not valid UTF-8 (JSON strings cannot hold them exactly).
type jsonPath struct {
	Path      string `json:"path"`
	PathBytes []byte `json:"path_bytes,omitempty"`
}

func mkJSONPath(p string) jsonPath {
	jp := jsonPath{Path: p}
	if !utf8.ValidString(p) {
		jp.PathBytes = []byte(p)
	}
	return jp
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func quoteList(ps []string) string {
	q := make([]string, len(ps))
	for i, p := range ps {
		q[i] = quote(p)
	}
	return strings.Join(q, ", ")
}
