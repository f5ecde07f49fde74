package agent

import (
	"bytes"
	"strings"
)

// Gemini CLI reads its settings as JSONC: JSON with // and /* */
// comments (strip-json-comments, then JSON.parse). A // comment runs to
// the next \n there, and here: a lone \r does not end it, or hooks
// written after one would be a comment to Gemini CLI. Trailing commas are
// taken too (Gemini CLI refuses them, so such a file is not in use yet).
// Install and uninstall parse such a file through a copy of the same
// length with those blanked out (each value is then at its place in the
// file), and change only the file's own bytes: every comment stays where
// it was.

// blankJSONC returns data with each comment's bytes, and each trailing
// comma (one that only blanks and comments part from a closing } or ]),
// made spaces; the \n and \r in a comment stay, so that lines keep
// their numbers and their ends. Strings are left as they are.
func blankJSONC(data []byte) []byte {
	out := bytes.Clone(data)
	comma := -1   // a comma after a value, not yet followed by anything but blanks and comments
	var prev byte // the last byte that is neither blank nor in a comment
	for i := 0; i < len(out); i++ {
		c := out[i]
		switch {
		case c == '"':
			comma = -1
			for i++; i < len(out) && out[i] != '"'; i++ {
				if out[i] == '\\' {
					i++
				}
			}
		case c == '/' && i+1 < len(out) && out[i+1] == '/':
			for ; i < len(out) && out[i] != '\n'; i++ {
				if out[i] != '\r' {
					out[i] = ' '
				}
			}
			continue // the line end, a blank, is passed over
		case c == '/' && i+1 < len(out) && out[i+1] == '*':
			out[i], out[i+1] = ' ', ' '
			for i += 2; i < len(out) && !(out[i] == '*' && i+1 < len(out) && out[i+1] == '/'); i++ {
				if out[i] != '\n' && out[i] != '\r' {
					out[i] = ' '
				}
			}
			if i < len(out) {
				out[i], out[i+1] = ' ', ' '
				i++
			}
			continue
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			continue
		case c == '}' || c == ']':
			if comma >= 0 {
				out[comma] = ' '
			}
			comma = -1
		case c == ',' && prev != 0 && !strings.ContainsRune("{[,:", rune(prev)):
			comma = i
		default:
			comma = -1
		}
		prev = c
	}
	return out
}

// hasComments says whether the file's bytes [from, to) hold a comment (or
// a trailing comma): what the blanked copy changed there.
func (e *editor) hasComments(from, to int) bool {
	return !bytes.Equal(e.data[from:to], e.clean[from:to])
}

// between is the file's bytes [from, to), to be copied as the separator
// before new text, without the comments there: on one line, its
// non-blanks and one space if it had any blank; over several, each
// line's end blanks trimmed, a line that held only a comment gone, and
// the last line's indentation.
func (e *editor) between(from, to int) string {
	if !e.hasComments(from, to) {
		return string(e.data[from:to])
	}
	orig := strings.Split(string(e.data[from:to]), "\n")
	clean := strings.Split(string(e.clean[from:to]), "\n")
	if len(clean) == 1 {
		s := strings.Join(strings.Fields(clean[0]), "")
		if strings.ContainsAny(orig[0], " \t") {
			s += " "
		}
		return s
	}
	var keep []string
	for i, l := range clean {
		switch {
		case l == orig[i]:
		case i == len(clean)-1:
			l = orig[i][:len(orig[i])-len(strings.TrimLeft(orig[i], " \t"))]
		default:
			cr := strings.HasSuffix(l, "\r")
			l = strings.TrimRight(strings.TrimSuffix(l, "\r"), " \t")
			if l == "" && i > 0 {
				continue // a line of its own that held only a comment
			}
			if cr {
				l += "\r"
			}
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n")
}

// solidEnd is the offset just past the last byte in [from, to) that is
// not a blank (a comment's last byte, in a container with no values):
// from when there is none.
func (e *editor) solidEnd(from, to int) int {
	for i := to; i > from; i-- {
		if !strings.ContainsRune(" \t\r\n", rune(e.data[i-1])) {
			return i
		}
	}
	return from
}

// addToCommented adds members or elements to the container c, which has
// none but holds comments: after the comments, each on a line of its own
// when the container spans lines, so that the comments stay as they
// are, and removing them (emptyCommented) gives the file back.
func (e *editor) addToCommented(c *node, keys []string, vals []*node) {
	multi := bytes.ContainsRune(e.data[c.start:c.end], '\n')
	indent := e.lineIndent(c.start) + e.unit
	nl := "\n"
	if e.crlf {
		nl = "\r\n"
	}
	var b strings.Builder
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(',')
		}
		if multi {
			b.WriteString(nl + indent)
		} else {
			b.WriteByte(' ')
		}
		if c.kind == '{' {
			b.Write(marshal(keys[i]))
			b.WriteString(": ")
		}
		b.WriteString(e.render(v, indent, e.compact || !multi))
	}
	at := e.solidEnd(c.start+1, c.end-1)
	e.splices = append(e.splices, splice{at, at, b.String()})
}

// emptyCommented removes every member or element of the container c,
// which holds comments, and keeps the comments: the cut runs from the
// last comment before the first child to the last child (and a trailing
// comma after it).
func (e *editor) emptyCommented(c *node) {
	n := children(c)
	from := e.solidEnd(c.start+1, childStart(c, 0))
	to := childEnd(c, n-1)
	for i := to; i < c.end-1; i++ {
		if e.clean[i] == ' ' && e.data[i] == ',' {
			to = i + 1 // the trailing comma
			break
		}
		if e.clean[i] != ' ' && e.clean[i] != '\t' && e.clean[i] != '\r' && e.clean[i] != '\n' {
			break
		}
	}
	e.splices = append(e.splices, splice{from, to, ""})
}
