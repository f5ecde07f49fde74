package gitdiff

// Sliding groups of changed lines to where a reader expects them. A
// group (a run of changed lines of one side) can move by a line when the
// line just past one end equals the line at the other end: the same
// change, said one line later or earlier. Each group is slid as far up
// and then down as it goes, absorbing the groups it meets; then it is
// put back level with a change on the other side if it passed one, or
// else where the indent heuristic scores best.

// group is the changed lines [start, end) of one side; end == start is an
// empty group, the place between two unchanged lines.
type group struct{ start, end int }

func (f *file) firstGroup() group {
	g := group{}
	for f.changed(g.end) {
		g.end++
	}
	return g
}

// next moves g to the group after it; false at the end of the file.
func (f *file) next(g *group) bool {
	if g.end == f.n() {
		return false
	}
	g.start = g.end + 1
	for g.end = g.start; f.changed(g.end); g.end++ {
	}
	return true
}

// previous moves g to the group before it; false at the start.
func (f *file) previous(g *group) bool {
	if g.start == 0 {
		return false
	}
	g.end = g.start - 1
	for g.start = g.end; f.changed(g.start - 1); g.start-- {
	}
	return true
}

// slideDown moves g a line down, merging what it then touches.
func (f *file) slideDown(g *group) bool {
	if g.end < f.n() && f.class[g.start] == f.class[g.end] {
		f.set(g.start, false)
		f.set(g.end, true)
		g.start++
		g.end++
		for f.changed(g.end) {
			g.end++
		}
		return true
	}
	return false
}

// slideUp moves g a line up, merging what it then touches.
func (f *file) slideUp(g *group) bool {
	if g.start > 0 && f.class[g.start-1] == f.class[g.end-1] {
		g.start--
		g.end--
		f.set(g.start, true)
		f.set(g.end, false)
		for f.changed(g.start - 1) {
			g.start--
		}
		return true
	}
	return false
}

const maxSliding = 100 // the indent heuristic tries at most this many places

// compact slides the groups of f; o is the other side, whose groups are
// walked in step (each of f's unchanged lines pairs with one of o's).
func (x *env) compact(f, o *file) {
	g, og := f.firstGroup(), o.firstGroup()
	for {
		if g.end != g.start {
			var size, earliestEnd int
			endMatchingOther := -1
			for {
				size = g.end - g.start
				endMatchingOther = -1
				for f.slideUp(&g) {
					mustStep(o.previous(&og))
				}
				earliestEnd = g.end
				if og.end > og.start {
					endMatchingOther = g.end
				}
				for f.slideDown(&g) {
					mustStep(o.next(&og))
					if og.end > og.start {
						endMatchingOther = g.end
					}
				}
				if size == g.end-g.start {
					break
				}
			}
			switch {
			case g.end == earliestEnd:
				// It cannot move.
			case endMatchingOther != -1:
				// Back up to the last place level with a change of the
				// other side.
				for og.end == og.start {
					mustStep(f.slideUp(&g))
					mustStep(o.previous(&og))
				}
			default:
				shift := max(earliestEnd, g.end-size-1, g.end-maxSliding)
				bestShift := -1
				var best score
				for ; shift <= g.end; shift++ {
					var sc score
					sc.add(f.measure(shift))
					sc.add(f.measure(shift - size))
					if bestShift == -1 || sc.cmp(best) <= 0 {
						best, bestShift = sc, shift
					}
				}
				for g.end > bestShift {
					mustStep(f.slideUp(&g))
					mustStep(o.previous(&og))
				}
			}
		}
		if !f.next(&g) {
			break
		}
		mustStep(o.next(&og))
	}
}

func mustStep(ok bool) {
	if !ok {
		panic("gitdiff: the two sides' groups fell out of step")
	}
}

// The indent heuristic. A group implies two splits of the file, one
// before it and one after; each split is scored by the blank lines and
// indentation around it, and the group goes where the two splits score
// lowest.

const (
	maxIndent = 200
	maxBlanks = 20

	startOfFilePenalty              = 1
	endOfFilePenalty                = 21
	totalBlankWeight                = -30
	postBlankWeight                 = 6
	relativeIndentPenalty           = -4
	relativeIndentWithBlankPenalty  = 10
	relativeOutdentPenalty          = 24
	relativeOutdentWithBlankPenalty = 17
	relativeDedentPenalty           = 23
	relativeDedentWithBlankPenalty  = 17
	indentWeight                    = 60
)

// indent is a line's indentation in columns (a tab to the next multiple
// of 8, capped at maxIndent), -1 for a line of only white space.
func indent(line string) int {
	n := 0
	for i := 0; i < len(line); i++ {
		switch c := line[i]; c {
		case ' ':
			n++
		case '\t':
			n += 8 - n%8
		case '\n', '\v', '\f', '\r':
		default:
			return n
		}
		if n >= maxIndent {
			return maxIndent
		}
	}
	return -1
}

// split is what surrounds the split just before line i.
type split struct {
	endOfFile  bool
	indent     int // of line i
	preBlank   int // blank lines just before
	preIndent  int // of the first line before them
	postBlank  int // blank lines just after line i
	postIndent int // of the first line after them
}

func (f *file) measure(i int) split {
	var m split
	if i >= f.n() {
		m.endOfFile, m.indent = true, -1
	} else {
		m.indent = indent(f.lines[i])
	}
	m.preIndent = -1
	for j := i - 1; j >= 0; j-- {
		if m.preIndent = indent(f.lines[j]); m.preIndent != -1 {
			break
		}
		if m.preBlank++; m.preBlank == maxBlanks {
			m.preIndent = 0
			break
		}
	}
	m.postIndent = -1
	for j := i + 1; j < f.n(); j++ {
		if m.postIndent = indent(f.lines[j]); m.postIndent != -1 {
			break
		}
		if m.postBlank++; m.postBlank == maxBlanks {
			m.postIndent = 0
			break
		}
	}
	return m
}

type score struct{ effectiveIndent, penalty int }

func (s *score) add(m split) {
	if m.preIndent == -1 && m.preBlank == 0 {
		s.penalty += startOfFilePenalty
	}
	if m.endOfFile {
		s.penalty += endOfFilePenalty
	}
	postBlank := 0
	if m.indent == -1 {
		postBlank = 1 + m.postBlank
	}
	totalBlank := m.preBlank + postBlank
	s.penalty += totalBlankWeight*totalBlank + postBlankWeight*postBlank
	ind := m.indent
	if ind == -1 {
		ind = m.postIndent
	}
	blanks := totalBlank != 0
	s.effectiveIndent += ind
	pick := func(withBlank, without int) int {
		if blanks {
			return withBlank
		}
		return without
	}
	switch {
	case ind == -1 || m.preIndent == -1 || ind == m.preIndent:
	case ind > m.preIndent:
		s.penalty += pick(relativeIndentWithBlankPenalty, relativeIndentPenalty)
	case m.postIndent != -1 && m.postIndent > ind:
		s.penalty += pick(relativeOutdentWithBlankPenalty, relativeOutdentPenalty)
	default:
		s.penalty += pick(relativeDedentWithBlankPenalty, relativeDedentPenalty)
	}
}

// cmp is negative when s is the better (lower) score, 0 when equal.
func (s score) cmp(t score) int {
	c := 0
	switch {
	case s.effectiveIndent > t.effectiveIndent:
		c = 1
	case s.effectiveIndent < t.effectiveIndent:
		c = -1
	}
	return indentWeight*c + s.penalty - t.penalty
}
