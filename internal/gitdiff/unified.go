package gitdiff

import (
	"strconv"
	"strings"
)

// Context is the number of unchanged lines git shows around a change.
const Context = 3

// funcLineMax is the most of a function line a hunk header repeats.
const funcLineMax = 80

// Unified writes the hunks turning a into b as `git diff` writes them:
// Context lines around each change, changes closer than twice that in
// one hunk, each hunk's header followed by the nearest line above it
// that starts a function by git's default rule (a letter, '_' or '$' in
// its first column), and `\ No newline at end of file` after a last
// line that has none.
func Unified(sb *strings.Builder, a, b []string) {
	cs := Diff(a, b)
	funcLine, prevStart := "", -1
	for i := 0; i < len(cs); {
		j := i + 1
		for j < len(cs) && cs[j].I1-(cs[j-1].I1+cs[j-1].Del) <= 2*Context {
			j++
		}
		first, last := cs[i], cs[j-1]
		s1, s2 := max(first.I1-Context, 0), max(first.I2-Context, 0)
		e1 := min(last.I1+last.Del+Context, len(a))
		e2 := min(last.I2+last.Add+Context, len(b))
		// The function line is looked for above the hunk, down to where
		// the previous hunk's search began; found nowhere, the previous
		// one stands.
		for l := s1 - 1; l > prevStart && l >= 0; l-- {
			if f, ok := funcName(a[l]); ok {
				funcLine = f
				break
			}
		}
		prevStart = s1 - 1
		sb.WriteString("@@ -")
		writeRange(sb, s1, e1-s1)
		sb.WriteString(" +")
		writeRange(sb, s2, e2-s2)
		sb.WriteString(" @@")
		if funcLine != "" {
			sb.WriteByte(' ')
			sb.WriteString(funcLine)
		}
		sb.WriteByte('\n')
		at := s1
		for _, c := range cs[i:j] {
			for ; at < c.I1; at++ {
				writeLine(sb, ' ', a[at])
			}
			for _, l := range a[c.I1 : c.I1+c.Del] {
				writeLine(sb, '-', l)
			}
			for _, l := range b[c.I2 : c.I2+c.Add] {
				writeLine(sb, '+', l)
			}
			at = c.I1 + c.Del
		}
		for ; at < e1; at++ {
			writeLine(sb, ' ', a[at])
		}
		i = j
	}
}

// writeRange writes a hunk's range: its first line (1-based; for an
// empty range, the line before it) and its length when that is not 1.
func writeRange(sb *strings.Builder, start, n int) {
	if n == 0 {
		sb.WriteString(strconv.Itoa(start))
	} else {
		sb.WriteString(strconv.Itoa(start + 1))
	}
	if n != 1 {
		sb.WriteByte(',')
		sb.WriteString(strconv.Itoa(n))
	}
}

func writeLine(sb *strings.Builder, prefix byte, l string) {
	sb.WriteByte(prefix)
	sb.WriteString(l)
	if !strings.HasSuffix(l, "\n") {
		sb.WriteString("\n\\ No newline at end of file\n")
	}
}

// FuncLine is what the header of a hunk starting at line start of a
// repeats: the nearest line above it that starts a function, or "" (the
// search git makes, which stops where the previous hunk's began, finds
// the same: had nothing stood between, the previous header's line
// stands).
func FuncLine(a []string, start int) string {
	for l := start - 1; l >= 0; l-- {
		if f, ok := funcName(a[l]); ok {
			return f
		}
	}
	return ""
}

// funcName is what a hunk header repeats of a line that starts a
// function by git's default rule: its first funcLineMax bytes, less
// trailing white space.
func funcName(l string) (string, bool) {
	if l == "" {
		return "", false
	}
	c := l[0]
	if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c == '$') {
		return "", false
	}
	if len(l) > funcLineMax {
		l = l[:funcLineMax]
	}
	return strings.TrimRight(l, " \t\n\v\f\r"), true
}
