// Package gitdiff computes line diffs as git's default does: the same
// changed lines, the same hunks, the same `@@ … @@ funcname` headers, so
// that a patch, --stat and --numstat read byte for byte as git's.
//
// The algorithm is the one git's xdiff documents and runs by default
// (`git diff` without --minimal, --patience or --histogram; the indent
// heuristic on, as it is since git 2.14):
//
//   - lines are compared exactly, newline included;
//   - the common head and tail are set aside;
//   - lines of one side that never occur in the other are changed
//     outright, and lines that occur in it very often (at least about
//     √n times) are left out of the search when they sit among lines
//     that have no match, so that they cannot anchor a poor alignment;
//   - the rest is Myers' O(ND) search in linear space (a middle snake
//     found from both ends, divide and conquer), cut short as xdiff
//     does when the cost grows large: a long enough snake far along a
//     diagonal is taken as a split, and past a maximum cost the furthest
//     reaching path is;
//   - each group of changed lines is then slid up and down as far as
//     equal lines allow, merged with the groups it meets, lined up with a
//     change on the other side when it can be, and otherwise put where
//     the indent heuristic scores the split between it and its context
//     best (blank lines and indentation around the split).
//
// This is a reimplementation from the algorithm's description, not a
// copy of git's source.
package gitdiff

import (
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"strings"
)

// Lines splits text into lines that keep their newline; a last line
// without one is kept as it is, and no empty line follows a final
// newline.
func Lines(s string) []string {
	lines := strings.SplitAfter(s, "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	return lines
}

// BlobID is the id git gives content as a blob: the SHA-1 of
// "blob <size>\0" and the content, in hex.
func BlobID(content []byte) string {
	h := sha1.New()
	h.Write([]byte("blob " + strconv.Itoa(len(content)) + "\x00"))
	h.Write(content)
	return hex.EncodeToString(h.Sum(nil))
}

// Change is one run of changed lines: A[I1:I1+Del] of the old side
// become B[I2:I2+Add] of the new one.
type Change struct {
	I1, I2   int
	Del, Add int
}

// Diff returns the changes that turn a into b, in order.
func Diff(a, b []string) []Change {
	x := newEnv(a, b)
	x.diff()
	x.compact(&x.f1, &x.f2)
	x.compact(&x.f2, &x.f1)
	return x.script()
}

// Count is the number of lines added and deleted, as --numstat says.
func Count(a, b []string) (added, deleted int) {
	for _, c := range Diff(a, b) {
		added += c.Add
		deleted += c.Del
	}
	return added, deleted
}

// file is one side: its lines' classes (equal lines, equal class), which
// lines are changed, and the lines the search works on.
type file struct {
	lines []string
	class []int
	// chg[i+1] is true when line i is changed; chg[0] and chg[n+1] are
	// sentinels, always false.
	chg []bool
	// The search runs on the lines not set aside: ha are their classes,
	// index their line numbers.
	ha, index []int
}

func (f *file) n() int { return len(f.class) }

func (f *file) changed(i int) bool { return f.chg[i+1] }

func (f *file) set(i int, v bool) { f.chg[i+1] = v }

type env struct {
	f1, f2 file
	// Cost limits of the search, as xdiff sets them.
	maxCost int
}

const (
	maxEqLimit    = 1024 // lines seen this often are "frequent" whatever the size
	simscanWindow = 100  // how far the frequent-line scan looks each way
	kpdisRun      = 4    // a frequent line goes when few of its neighbours have matches
	maxCostMin    = 256
	snakeCnt      = 20 // a snake this long is a good one
	heurMinCost   = 256
	kHeur         = 4
)

func newEnv(a, b []string) *env {
	x := &env{f1: file{lines: a}, f2: file{lines: b}}
	classes := map[string]int{}
	var count1, count2 []int
	classify := func(f *file, count *[]int) {
		f.class = make([]int, len(f.lines))
		for i, l := range f.lines {
			c, ok := classes[l]
			if !ok {
				c = len(classes)
				classes[l] = c
				count1 = append(count1, 0)
				count2 = append(count2, 0)
			}
			f.class[i] = c
			(*count)[c]++
		}
		f.chg = make([]bool, len(f.lines)+2)
	}
	classify(&x.f1, &count1)
	classify(&x.f2, &count2)

	// The common head and tail take no part in the search.
	n1, n2 := x.f1.n(), x.f2.n()
	start := 0
	for start < min(n1, n2) && x.f1.class[start] == x.f2.class[start] {
		start++
	}
	tail := 0
	for tail < min(n1, n2)-start && x.f1.class[n1-1-tail] == x.f2.class[n2-1-tail] {
		tail++
	}
	end1, end2 := n1-tail-1, n2-tail-1 // last lines in play (inclusive)

	// How each line in play fares in the other side: 0 never there, 1
	// there, 2 there too often.
	mark := func(f *file, end int, other []int) []byte {
		lim := min(bogoSqrt(f.n()), maxEqLimit)
		dis := make([]byte, f.n())
		for i := start; i <= end; i++ {
			switch nm := other[f.class[i]]; {
			case nm == 0:
				dis[i] = 0
			case nm >= lim:
				dis[i] = 2
			default:
				dis[i] = 1
			}
		}
		return dis
	}
	dis1 := mark(&x.f1, end1, count2)
	dis2 := mark(&x.f2, end2, count1)
	keep := func(f *file, end int, dis []byte) {
		for i := start; i <= end; i++ {
			if dis[i] == 1 || dis[i] == 2 && !setAside(dis, i, start, end) {
				f.ha = append(f.ha, f.class[i])
				f.index = append(f.index, i)
			} else {
				f.set(i, true)
			}
		}
	}
	keep(&x.f1, end1, dis1)
	keep(&x.f2, end2, dis2)
	x.maxCost = max(bogoSqrt(len(x.f1.ha)+len(x.f2.ha)+3), maxCostMin)
	return x
}

// setAside reports whether the frequent line i is left out of the
// search (and so changed): it is when it sits in a run of lines that
// have no match or are frequent themselves, with lines of no match on
// both sides, and few of that run are frequent ones.
func setAside(dis []byte, i, s, e int) bool {
	s = max(s, i-simscanWindow)
	e = min(e, i+simscanWindow)
	none, freq := 0, 1
	for r := 1; i-r >= s; r++ {
		if dis[i-r] == 0 {
			none++
		} else if dis[i-r] == 2 {
			freq++
		} else {
			break
		}
	}
	if none == 0 {
		return false
	}
	noneAfter, freqAfter := 0, 1
	for r := 1; i+r <= e; r++ {
		if dis[i+r] == 0 {
			noneAfter++
		} else if dis[i+r] == 2 {
			freqAfter++
		} else {
			break
		}
	}
	if noneAfter == 0 {
		return false
	}
	none += noneAfter
	freq += freqAfter
	return freq*kpdisRun < freq+none
}

// bogoSqrt is xdiff's rough square root: a power of two near √n.
func bogoSqrt(n int) int {
	i := 1
	for ; n > 0; n >>= 2 {
		i <<= 1
	}
	return i
}

// diff marks the changed lines among those in play.
func (x *env) diff() {
	n1, n2 := len(x.f1.ha), len(x.f2.ha)
	ndiags := n1 + n2 + 3
	kv := make([]int, 2*ndiags)
	s := &search{
		ha1: x.f1.ha, ha2: x.f2.ha,
		kvdf: kv[:ndiags], kvdb: kv[ndiags:],
		off:     n2 + 1,
		maxCost: x.maxCost,
	}
	s.compare(x, 0, n1, 0, n2, false)
}

type search struct {
	ha1, ha2   []int
	kvdf, kvdb []int // furthest reaching x on each diagonal, forward and backward
	off        int   // diagonal d is kvdf[d+off]
	maxCost    int
}

func (s *search) fwd(d int) *int  { return &s.kvdf[d+s.off] }
func (s *search) back(d int) *int { return &s.kvdb[d+s.off] }

// compare marks the changes between ha1[off1:lim1] and ha2[off2:lim2].
func (s *search) compare(x *env, off1, lim1, off2, lim2 int, needMin bool) {
	ha1, ha2 := s.ha1, s.ha2
	for off1 < lim1 && off2 < lim2 && ha1[off1] == ha2[off2] {
		off1++
		off2++
	}
	for off1 < lim1 && off2 < lim2 && ha1[lim1-1] == ha2[lim2-1] {
		lim1--
		lim2--
	}
	switch {
	case off1 == lim1:
		for ; off2 < lim2; off2++ {
			x.f2.set(x.f2.index[off2], true)
		}
	case off2 == lim2:
		for ; off1 < lim1; off1++ {
			x.f1.set(x.f1.index[off1], true)
		}
	default:
		sp := s.split(off1, lim1, off2, lim2, needMin)
		s.compare(x, off1, sp.i1, off2, sp.i2, sp.minLo)
		s.compare(x, sp.i1, lim1, sp.i2, lim2, sp.minHi)
	}
}

type splitPoint struct {
	i1, i2       int
	minLo, minHi bool // whether each half must be searched without shortcuts
}

const lineMax = int(^uint(0) >> 1)

// split finds where to cut the box (off1, off2)–(lim1, lim2): the middle
// snake of a shortest edit script, or, past the cost limits, a good
// enough point.
func (s *search) split(off1, lim1, off2, lim2 int, needMin bool) splitPoint {
	ha1, ha2 := s.ha1, s.ha2
	dmin, dmax := off1-lim2, lim1-off2
	fmid, bmid := off1-off2, lim1-lim2
	odd := (fmid-bmid)&1 != 0
	fmin, fmax := fmid, fmid
	bmin, bmax := bmid, bmid
	*s.fwd(fmid) = off1
	*s.back(bmid) = lim1
	for ec := 1; ; ec++ {
		gotSnake := false
		// Widen the forward diagonals by one, or narrow them where the
		// box ends; the next one out is marked unreachable.
		if fmin > dmin {
			fmin--
			*s.fwd(fmin - 1) = -1
		} else {
			fmin++
		}
		if fmax < dmax {
			fmax++
			*s.fwd(fmax + 1) = -1
		} else {
			fmax--
		}
		for d := fmax; d >= fmin; d -= 2 {
			var i1 int
			if *s.fwd(d - 1) >= *s.fwd(d + 1) {
				i1 = *s.fwd(d - 1) + 1
			} else {
				i1 = *s.fwd(d + 1)
			}
			prev := i1
			i2 := i1 - d
			for i1 < lim1 && i2 < lim2 && ha1[i1] == ha2[i2] {
				i1++
				i2++
			}
			if i1-prev > snakeCnt {
				gotSnake = true
			}
			*s.fwd(d) = i1
			if odd && bmin <= d && d <= bmax && *s.back(d) <= i1 {
				return splitPoint{i1, i2, true, true}
			}
		}

		if bmin > dmin {
			bmin--
			*s.back(bmin - 1) = lineMax
		} else {
			bmin++
		}
		if bmax < dmax {
			bmax++
			*s.back(bmax + 1) = lineMax
		} else {
			bmax--
		}
		for d := bmax; d >= bmin; d -= 2 {
			var i1 int
			if *s.back(d - 1) < *s.back(d + 1) {
				i1 = *s.back(d - 1)
			} else {
				i1 = *s.back(d + 1) - 1
			}
			prev := i1
			i2 := i1 - d
			for i1 > off1 && i2 > off2 && ha1[i1-1] == ha2[i2-1] {
				i1--
				i2--
			}
			if prev-i1 > snakeCnt {
				gotSnake = true
			}
			*s.back(d) = i1
			if !odd && fmin <= d && d <= fmax && i1 <= *s.fwd(d) {
				return splitPoint{i1, i2, true, true}
			}
		}

		if needMin {
			continue
		}

		// Costly already, and a long snake seen: take a diagonal that
		// got far, measured from its corner less its distance from the
		// middle diagonal, when it ends in a snake of its own.
		if gotSnake && ec > heurMinCost {
			best, sp := 0, splitPoint{}
			for d := fmax; d >= fmin; d -= 2 {
				dd := abs(d - fmid)
				i1 := *s.fwd(d)
				i2 := i1 - d
				v := (i1 - off1) + (i2 - off2) - dd
				if v > kHeur*ec && v > best &&
					off1+snakeCnt <= i1 && i1 < lim1 &&
					off2+snakeCnt <= i2 && i2 < lim2 {
					for k := 1; ha1[i1-k] == ha2[i2-k]; k++ {
						if k == snakeCnt {
							best = v
							sp.i1, sp.i2 = i1, i2
							break
						}
					}
				}
			}
			if best > 0 {
				sp.minLo, sp.minHi = true, false
				return sp
			}
			for d := bmax; d >= bmin; d -= 2 {
				dd := abs(d - bmid)
				i1 := *s.back(d)
				i2 := i1 - d
				v := (lim1 - i1) + (lim2 - i2) - dd
				if v > kHeur*ec && v > best &&
					off1 < i1 && i1 <= lim1-snakeCnt &&
					off2 < i2 && i2 <= lim2-snakeCnt {
					for k := 0; ha1[i1+k] == ha2[i2+k]; k++ {
						if k == snakeCnt-1 {
							best = v
							sp.i1, sp.i2 = i1, i2
							break
						}
					}
				}
			}
			if best > 0 {
				sp.minLo, sp.minHi = false, true
				return sp
			}
		}

		// Too costly: cut at the furthest reaching point, forward or
		// backward, whichever got further.
		if ec >= s.maxCost {
			fbest, fbest1 := -1, -1
			for d := fmax; d >= fmin; d -= 2 {
				i1 := min(*s.fwd(d), lim1)
				i2 := i1 - d
				if lim2 < i2 {
					i1, i2 = lim2+d, lim2
				}
				if fbest < i1+i2 {
					fbest, fbest1 = i1+i2, i1
				}
			}
			bbest, bbest1 := lineMax, lineMax
			for d := bmax; d >= bmin; d -= 2 {
				i1 := max(off1, *s.back(d))
				i2 := i1 - d
				if i2 < off2 {
					i1, i2 = off2+d, off2
				}
				if i1+i2 < bbest {
					bbest, bbest1 = i1+i2, i1
				}
			}
			if (lim1+lim2)-bbest < fbest-(off1+off2) {
				return splitPoint{fbest1, fbest - fbest1, true, false}
			}
			return splitPoint{bbest1, bbest - bbest1, false, true}
		}
	}
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// script lists the changes the marks say.
func (x *env) script() []Change {
	var cs []Change
	n1, n2 := x.f1.n(), x.f2.n()
	i1, i2 := 0, 0
	for i1 < n1 || i2 < n2 {
		if x.f1.changed(i1) || x.f2.changed(i2) {
			c := Change{I1: i1, I2: i2}
			for ; x.f1.changed(i1); i1++ {
				c.Del++
			}
			for ; x.f2.changed(i2); i2++ {
				c.Add++
			}
			cs = append(cs, c)
			continue
		}
		i1++
		i2++
	}
	return cs
}
