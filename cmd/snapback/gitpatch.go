package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/snapback/snapback/internal/gitdiff"
	"github.com/snapback/snapback/snapshot"
)

// git's patch format, as `git diff` writes it and `git apply` reads it:
// `diff --git` headers, new/deleted file modes, mode changes, hunks with
// `\ No newline at end of file`, names quoted as git quotes them. A
// directory has no patch of its own (the files in it do); a fifo cannot
// be said in a patch, nor can a binary file's content (`Binary files …
// differ`, which git apply refuses).

// gitMode is the mode git records for an entry ("" for what git cannot
// track).
func gitMode(e *snapshot.Entry) string {
	switch {
	case e == nil:
		return ""
	case e.Type == snapshot.Symlink:
		return "120000"
	case e.Type != snapshot.File:
		return ""
	case e.Mode&0o100 != 0:
		return "100755"
	}
	return "100644"
}

// gitQuote quotes a name in a patch header as git does (core.quotePath):
// in double quotes with C escapes when it holds a quote, a backslash, a
// control character or a byte outside ASCII.
func gitQuote(s string) string {
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

// gitPatch is the patch of one change in git's format ("" when git has
// nothing to say about it: a directory, a fifo, a mode bit git does not
// track). A change of type is a deletion followed by a creation, as git
// writes it.
func (d *differ) gitPatch(c snapshot.Change) string {
	om, nm := gitMode(c.Old), gitMode(c.New)
	if om != "" && nm != "" && (c.Old.Type != c.New.Type) {
		return d.gitFilePatch(c.Path, c.Old, nil, om, "") + d.gitFilePatch(c.Path, nil, c.New, "", nm)
	}
	old, new := c.Old, c.New
	if om == "" {
		old = nil
	}
	if nm == "" {
		new = nil
	}
	if old == nil && new == nil {
		return ""
	}
	return d.gitFilePatch(c.Path, old, new, om, nm)
}

// gitFilePatch writes the patch taking path from old to new (either nil).
func (d *differ) gitFilePatch(path string, old, new *snapshot.Entry, om, nm string) string {
	a, b := gitQuote("a/"+path), gitQuote("b/"+path)
	var sb strings.Builder
	fmt.Fprintf(&sb, "diff --git %s %s\n", a, b)
	switch {
	case old == nil:
		fmt.Fprintf(&sb, "new file mode %s\n", nm)
	case new == nil:
		fmt.Fprintf(&sb, "deleted file mode %s\n", om)
	case om != nm:
		fmt.Fprintf(&sb, "old mode %s\nnew mode %s\n", om, nm)
	}
	from, to := a, b
	if old == nil {
		from = "/dev/null"
	}
	if new == nil {
		to = "/dev/null"
	}
	oldText, okOld := d.gitSide(old, true, path)
	newText, okNew := d.gitSide(new, false, path)
	same := old != nil && new != nil && old.SameContent(new)
	if !same {
		// The blobs' ids, so that git apply -3 can find them.
		oid, okA := d.blobID(old, true, path)
		nid, okB := d.blobID(new, false, path)
		if okA && okB {
			fmt.Fprintf(&sb, "index %s..%s", oid[:7], nid[:7])
			if old != nil && new != nil && om == nm {
				fmt.Fprintf(&sb, " %s", om)
			}
			sb.WriteByte('\n')
		}
	}
	if !okOld || !okNew {
		if same {
			return sb.String() // a mode change alone
		}
		fmt.Fprintf(&sb, "Binary files %s and %s differ\n", from, to)
		return sb.String()
	}
	if oldText == newText {
		return sb.String() // a mode change, or an empty file made or removed
	}
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", from, to)
	gitdiff.Unified(&sb, gitdiff.Lines(oldText), gitdiff.Lines(newText))
	return sb.String()
}

// blobLimit: larger files get no index line (their ids would mean
// reading them whole).
const blobLimit = 64 << 20

// blobID is the id git gives a side's content (all zeros for no side);
// ok is false when it cannot be read or is larger than blobLimit.
func (d *differ) blobID(e *snapshot.Entry, old bool, path string) (string, bool) {
	if e == nil {
		return strings.Repeat("0", 40), true
	}
	if e.Type == snapshot.Symlink {
		return gitdiff.BlobID([]byte(e.Target)), true
	}
	if e.Size > blobLimit {
		return "", false
	}
	b, err := d.read(e, old, path, blobLimit+1)
	if err != nil || len(b) > blobLimit {
		return "", false
	}
	return gitdiff.BlobID(b), true
}

// gitSide is one side's content as git sees it: a file's bytes, a
// symlink's target; ok is false for a binary or large file.
func (d *differ) gitSide(e *snapshot.Entry, old bool, path string) (string, bool) {
	if e != nil && e.Type == snapshot.Symlink {
		return e.Target, true
	}
	return d.text(e, old, path)
}

// statLine is one file of `diff --stat`, as git counts it.
type statLine struct {
	name             string // quoted as git quotes it
	added, deleted   int
	binary           bool
	oldSize, newSize int64 // a binary file's sizes, shown instead of lines
}

// gitStat is a change's line of `git diff --stat`; ok is false when git
// would not list it (a directory, a fifo).
func (d *differ) gitStat(c snapshot.Change) (statLine, bool) {
	old, new := c.Old, c.New
	if gitMode(old) == "" {
		old = nil
	}
	if gitMode(new) == "" {
		new = nil
	}
	if old == nil && new == nil {
		return statLine{}, false
	}
	s := statLine{name: gitQuote(c.Path)}
	a, okA := d.gitSide(old, true, c.Path)
	b, okB := d.gitSide(new, false, c.Path)
	if !okA || !okB {
		if old != nil && new != nil && old.SameContent(new) {
			return s, true // a mode change alone: 0 lines
		}
		s.binary = true
		if old != nil {
			s.oldSize = old.Size
		}
		if new != nil {
			s.newSize = new.Size
		}
		return s, true
	}
	s.added, s.deleted = gitdiff.Count(gitdiff.Lines(a), gitdiff.Lines(b))
	return s, true
}

// writeGitStat writes lines as `git diff --stat` does in a terminal of
// width columns: names padded to one width (the longest cut from the
// left, "..."), the count, a +/- graph scaled to fit, and the summary
// line. It follows git's diff.c (show_stats, print_stat_summary).
func writeGitStat(w io.Writer, lines []statLine, width int) {
	if len(lines) == 0 {
		return // git says nothing either
	}
	maxLen, maxChange, numberWidth, binWidth := 0, 0, 0, 0
	for _, l := range lines {
		maxLen = max(maxLen, utf8.RuneCountInString(l.name))
		if l.binary {
			binWidth = max(binWidth, 14+decimalWidth(l.oldSize)+decimalWidth(l.newSize))
			numberWidth = max(numberWidth, 3) // "Bin"
			continue
		}
		maxChange = max(maxChange, l.added+l.deleted)
	}
	numberWidth = max(numberWidth, decimalWidth(int64(maxChange)))
	width = max(width, 16+6+numberWidth)
	graphWidth := maxChange
	if maxChange+4 <= binWidth {
		graphWidth = binWidth - 4
	}
	nameWidth := maxLen
	if nameWidth+numberWidth+6+graphWidth > width {
		if graphWidth > width*3/8-numberWidth-6 {
			graphWidth = max(width*3/8-numberWidth-6, 6)
		}
		if nameWidth > width-numberWidth-6-graphWidth {
			nameWidth = width - numberWidth - 6 - graphWidth
		} else {
			graphWidth = width - numberWidth - 6 - nameWidth
		}
	}
	var adds, dels int
	for _, l := range lines {
		name := l.name
		if n := utf8.RuneCountInString(name); n > nameWidth {
			// Cut from the left, at a directory when one is near.
			r := []rune(name)
			name = string(r[n-(nameWidth-3):])
			if i := strings.IndexByte(name, '/'); i >= 0 {
				name = name[i:]
			}
			name = "..." + name
		}
		pad := strings.Repeat(" ", max(nameWidth-utf8.RuneCountInString(name), 0))
		if l.binary {
			fmt.Fprintf(w, " %s%s | %*s", name, pad, numberWidth, "Bin")
			if l.oldSize == 0 && l.newSize == 0 {
				fmt.Fprintln(w)
			} else {
				fmt.Fprintf(w, " %d -> %d bytes\n", l.oldSize, l.newSize)
			}
			continue
		}
		adds += l.added
		dels += l.deleted
		add, del := l.added, l.deleted
		if graphWidth <= maxChange {
			total := scaleLinear(add+del, graphWidth, maxChange)
			if total < 2 && add > 0 && del > 0 {
				total = 2
			}
			if add < del {
				add = scaleLinear(add, graphWidth, maxChange)
				del = total - add
			} else {
				del = scaleLinear(del, graphWidth, maxChange)
				add = total - del
			}
		}
		sep := ""
		if l.added+l.deleted > 0 {
			sep = " "
		}
		fmt.Fprintf(w, " %s%s | %*d%s%s%s\n", name, pad, numberWidth, l.added+l.deleted, sep,
			strings.Repeat("+", add), strings.Repeat("-", del))
	}
	fmt.Fprintln(w, statSummary(len(lines), adds, dels))
}

// statSummary is git's last line of --stat (of at least one file).
func statSummary(files, adds, dels int) string {
	plural := func(n int, one, many string) string {
		if n == 1 {
			return fmt.Sprintf("%d %s", n, one)
		}
		return fmt.Sprintf("%d %s", n, many)
	}
	s := " " + plural(files, "file changed", "files changed")
	if adds > 0 || dels == 0 {
		s += ", " + plural(adds, "insertion(+)", "insertions(+)")
	}
	if dels > 0 || adds == 0 {
		s += ", " + plural(dels, "deletion(-)", "deletions(-)")
	}
	return s
}

func scaleLinear(it, width, maxChange int) int {
	if it == 0 {
		return 0
	}
	return 1 + it*(width-1)/maxChange
}

func decimalWidth(n int64) int {
	w := 1
	for ; n >= 10; n /= 10 {
		w++
	}
	return w
}
