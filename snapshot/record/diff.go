package record

// Change is one path that differs between a snapshot and the tree.
// Op is A (added since), D (deleted since), T (type changed) or M
// (content, mode or xattrs changed).
type Change struct {
	Path string
	Op   string
	Old  *Entry // nil when added
	New  *Entry // nil when deleted
}

// zip walks two sorted manifests together, calling fn once per path with
// its entry in each (nil where a manifest lacks the path).
func Zip(x, y Manifest, fn func(a, b *Entry)) {
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case j >= len(y) || i < len(x) && x[i].Path < y[j].Path:
			fn(&x[i], nil)
			i++
		case i >= len(x) || y[j].Path < x[i].Path:
			fn(nil, &y[j])
			j++
		default:
			fn(&x[i], &y[j])
			i++
			j++
		}
	}
}

// DiffManifests compares two states of the same scope.
func DiffManifests(old, cur Manifest) []Change {
	var out []Change
	Zip(old, cur, func(o, c *Entry) {
		if o != nil && o.Type == Absent {
			o = nil
		}
		if c != nil && c.Type == Absent {
			c = nil
		}
		switch {
		case o == nil && c == nil:
		case o == nil:
			out = append(out, Change{Path: c.Path, Op: "A", New: c})
		case c == nil:
			out = append(out, Change{Path: o.Path, Op: "D", Old: o})
		case o.Type != c.Type:
			out = append(out, Change{Path: o.Path, Op: "T", Old: o, New: c})
		case o.Changed(c):
			out = append(out, Change{Path: o.Path, Op: "M", Old: o, New: c})
		}
	})
	return out
}
