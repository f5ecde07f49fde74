package watch

import "strings"

// journal is what a watcher has seen: for each path, the sequence number
// of its last change and of its last deep change (0: none).
type journal struct {
	seq   uint64
	paths map[string]*noted
}

type noted struct{ seq, deep uint64 }

// maxNoted bounds the journal: past it the watcher starts a new
// generation (a checkpoint open over it reads the whole tree).
const maxNoted = 1 << 20

func newJournal() *journal { return &journal{paths: map[string]*noted{}} }

// next numbers a new event.
func (j *journal) next() uint64 {
	j.seq++
	return j.seq
}

// note records that path changed at the current number (deep: and
// everything below it).
func (j *journal) note(path string, deep bool) {
	n := j.paths[path]
	if n == nil {
		n = &noted{}
		j.paths[path] = n
	}
	n.seq = j.seq
	if deep {
		n.deep = j.seq
	}
}

// since lists the paths noted after seq.
func (j *journal) since(seq uint64) []Change {
	var out []Change
	for p, n := range j.paths {
		if n.seq > seq {
			out = append(out, Change{Path: p, Deep: n.deep > seq})
		}
	}
	return out
}

// join makes a tree path of a directory's path and a name in it.
func join(dir, name string) string {
	if dir == "" {
		return name
	}
	if name == "" {
		return dir
	}
	return dir + "/" + name
}

// under reports whether p is dir or below it.
func under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// parent is a tree path's directory ("" at the top).
func parent(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}
