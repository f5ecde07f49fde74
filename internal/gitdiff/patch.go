package gitdiff

import (
	"fmt"
	"strings"
)

// git's patch format, as `git diff` writes it and `git apply` reads it:
// `diff --git` headers, new/deleted file modes, mode changes, index lines
// with blob ids (so that `git apply -3` can merge), hunks with `\ No
// newline at end of file`, names quoted as git quotes them.

// Quote quotes a name in a patch header as git does (core.quotePath):
// in double quotes with C escapes when it holds a quote, a backslash, a
// control character or a byte outside ASCII.
func Quote(s string) string {
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			plain = false
			break
		}
	}
	if plain {
		return s
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\a':
			b.WriteString(`\a`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\v':
			b.WriteString(`\v`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		default:
			if c < 0x20 || c >= 0x7f {
				fmt.Fprintf(&b, `\%03o`, c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Side is one side of a file's patch: what git knows of it.
type Side struct {
	Mode    string // git's mode: 100644, 100755 or 120000
	Text    string // the content (a symlink's target), when Textual
	Textual bool   // false: binary as git judges it, or too large to diff
	ID      string // the blob id, "" when not known (then no index line)
}

// FilePatch writes the patch taking path from old to new (either nil:
// created or deleted) in git's format. same says the two sides' contents
// are equal (a mode change alone): no index line and no hunks.
func FilePatch(sb *strings.Builder, path string, old, new *Side, same bool) {
	a, b := Quote("a/"+path), Quote("b/"+path)
	fmt.Fprintf(sb, "diff --git %s %s\n", a, b)
	switch {
	case old == nil:
		fmt.Fprintf(sb, "new file mode %s\n", new.Mode)
	case new == nil:
		fmt.Fprintf(sb, "deleted file mode %s\n", old.Mode)
	case old.Mode != new.Mode:
		fmt.Fprintf(sb, "old mode %s\nnew mode %s\n", old.Mode, new.Mode)
	}
	from, to := a, b
	if old == nil {
		from = "/dev/null"
	}
	if new == nil {
		to = "/dev/null"
	}
	if !same {
		oid, nid := old.id(), new.id()
		if oid != "" && nid != "" {
			fmt.Fprintf(sb, "index %s..%s", oid[:7], nid[:7])
			if old != nil && new != nil && old.Mode == new.Mode {
				fmt.Fprintf(sb, " %s", old.Mode)
			}
			sb.WriteByte('\n')
		}
	}
	if !old.textual() || !new.textual() {
		if !same {
			fmt.Fprintf(sb, "Binary files %s and %s differ\n", from, to)
		}
		return
	}
	if old.text() == new.text() {
		return // a mode change, or an empty file made or removed
	}
	// git ends a name that holds a space with a tab (so that GNU patch
	// reads the whole name); /dev/null gets none.
	if strings.Contains(path, " ") {
		if old != nil {
			from += "\t"
		}
		if new != nil {
			to += "\t"
		}
	}
	fmt.Fprintf(sb, "--- %s\n+++ %s\n", from, to)
	Unified(sb, Lines(old.text()), Lines(new.text()))
}

// A missing side (nil) is an empty text whose id is all zeros.
func (s *Side) id() string {
	if s == nil {
		return strings.Repeat("0", 40)
	}
	return s.ID
}

func (s *Side) textual() bool { return s == nil || s.Textual }

func (s *Side) text() string {
	if s == nil {
		return ""
	}
	return s.Text
}
