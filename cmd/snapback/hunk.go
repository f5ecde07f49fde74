package main

import (
	"fmt"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/snapback/snapback/internal/gitdiff"
)

// hunkContext is the lines of context around a change, as git's default.
const hunkContext = 3

// textDiff is the diff of two texts, each a list of lines that keep their
// newline: the opcodes turning a into b, equal runs between changes. The
// changes are git's (internal/gitdiff), those `diff -p` prints.
type textDiff struct {
	a, b []string
	ops  []difflib.OpCode
}

func newTextDiff(a, b []string) *textDiff {
	var ops []difflib.OpCode
	i, j := 0, 0
	for _, c := range gitdiff.Diff(a, b) {
		if c.I1 > i {
			ops = append(ops, difflib.OpCode{Tag: 'e', I1: i, I2: c.I1, J1: j, J2: c.I2})
		}
		tag := byte('r')
		switch {
		case c.Add == 0:
			tag = 'd'
		case c.Del == 0:
			tag = 'i'
		}
		ops = append(ops, difflib.OpCode{Tag: tag, I1: c.I1, I2: c.I1 + c.Del, J1: c.I2, J2: c.I2 + c.Add})
		i, j = c.I1+c.Del, c.I2+c.Add
	}
	if i < len(a) {
		ops = append(ops, difflib.OpCode{Tag: 'e', I1: i, I2: len(a), J1: j, J2: len(b)})
	}
	return &textDiff{a: a, b: b, ops: ops}
}

// hunk is a run of the diff's changes (indexes of its non-equal opcodes,
// consecutive) shown with their context.
type hunk struct{ changes []int }

// hunks groups the changes as `diff -U3` does: two changes share a hunk
// when at most twice the context lies between them.
func (d *textDiff) hunks() []hunk {
	var out []hunk
	for i, op := range d.ops {
		if op.Tag == 'e' {
			continue
		}
		if n := len(out); n > 0 {
			last := out[n-1].changes
			if gap := d.ops[last[len(last)-1]+1]; gap.I2-gap.I1 <= 2*hunkContext {
				out[n-1].changes = append(last, i)
				continue
			}
		}
		out = append(out, hunk{changes: []int{i}})
	}
	return out
}

// split cuts a hunk into one hunk per change (where context lies between
// them); a hunk of one change stays whole.
func (h hunk) split() []hunk {
	var out []hunk
	for _, c := range h.changes {
		out = append(out, hunk{changes: []int{c}})
	}
	return out
}

// write writes the hunk in unified form; a last line without a newline is
// followed by git's `\ No newline at end of file`.
func (d *textDiff) write(sb *strings.Builder, h hunk) {
	first, last := d.ops[h.changes[0]], d.ops[h.changes[len(h.changes)-1]]
	i1, j1, i2, j2 := first.I1, first.J1, last.I2, last.J2
	if c := h.changes[0]; c > 0 {
		n := min(hunkContext, d.ops[c-1].I2-d.ops[c-1].I1)
		i1, j1 = i1-n, j1-n
	}
	if c := h.changes[len(h.changes)-1]; c+1 < len(d.ops) {
		n := min(hunkContext, d.ops[c+1].I2-d.ops[c+1].I1)
		i2, j2 = i2+n, j2+n
	}
	line := func(prefix byte, s string) {
		sb.WriteByte(prefix)
		sb.WriteString(s)
		if !strings.HasSuffix(s, "\n") {
			sb.WriteString("\n\\ No newline at end of file\n")
		}
	}
	span := func(start, end int) string {
		switch n := end - start; n {
		case 0:
			return fmt.Sprintf("%d,0", start) // an empty range names the line before it
		case 1:
			return fmt.Sprintf("%d", start+1)
		}
		return fmt.Sprintf("%d,%d", start+1, end-start)
	}
	fmt.Fprintf(sb, "@@ -%s +%s @@", span(i1, i2), span(j1, j2))
	if f := gitdiff.FuncLine(d.a, i1); f != "" {
		sb.WriteString(" " + f)
	}
	sb.WriteString("\n")
	for k := h.changes[0]; k <= h.changes[len(h.changes)-1]; k++ {
		op := d.ops[k]
		if op.Tag == 'e' {
			continue
		}
		if k == h.changes[0] {
			for _, s := range d.a[i1:op.I1] {
				line(' ', s)
			}
		} else if prev := d.ops[k-1]; prev.Tag == 'e' {
			for _, s := range d.a[prev.I1:prev.I2] {
				line(' ', s)
			}
		}
		for _, s := range d.a[op.I1:op.I2] {
			line('-', s)
		}
		for _, s := range d.b[op.J1:op.J2] {
			line('+', s)
		}
	}
	for _, s := range d.a[last.I2:i2] {
		line(' ', s)
	}
}

// apply is a with the changes taken (by opcode index) made, the others
// not: the text between the two sides that holds exactly those changes.
func (d *textDiff) apply(take map[int]bool) string {
	var sb strings.Builder
	for i, op := range d.ops {
		lines := d.a[op.I1:op.I2]
		if op.Tag != 'e' && take[i] {
			lines = d.b[op.J1:op.J2]
		}
		for _, s := range lines {
			sb.WriteString(s)
		}
	}
	return sb.String()
}
