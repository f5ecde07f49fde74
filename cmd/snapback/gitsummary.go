package main

import (
	"bytes"
	"compress/zlib"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/snapback/snapback/internal/gitdirs"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

// A step that runs git changes files under .git/: loose objects, refs,
// logs, the index. Listed one by one they bury the step's own changes;
// diff and show say instead what git did (commits made, refs moved,
// HEAD switched) in a few lines, and --git-raw lists the paths.

// gitSummaryJSON is one git directory's summary (diff and show --json).
type gitSummaryJSON struct {
	GitDir string `json:"git_dir"` // relative to the root: ".git", "sub/.git"
	// Head is HEAD before and after, when the step changed it.
	Head *struct {
		Before string `json:"before"`
		After  string `json:"after"`
	} `json:"head,omitempty"`
	Refs []refMoveJSON `json:"refs"`
	// Commits: loose commit objects the step added; Objects: all loose
	// objects it added (packs are counted apart).
	Commits int `json:"commits"`
	Objects int `json:"objects"`
	Packs   int `json:"packs"`
	// Paths: how many paths under the git directory changed.
	Paths int `json:"paths"`
}

// refMoveJSON is a ref the step created, moved or deleted ("" for an
// absent side). Commits, when known, is how many of the new commits it
// gained (the commits reachable from After, not from Before, among the
// loose ones the step added).
type refMoveJSON struct {
	Ref     string `json:"ref"`
	Before  string `json:"before"`
	After   string `json:"after"`
	Head    bool   `json:"head,omitempty"` // the branch HEAD is on
	Commits *int   `json:"commits,omitempty"`
}

// gitDirOf is the git directory a path lies in ("" for none): the path
// up to its first ".git" component.
func gitDirOf(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if s == ".git" && i < len(parts)-1 {
			return strings.Join(parts[:i+1], "/")
		}
	}
	return ""
}

// splitGit takes the changes under git directories out of changes,
// grouped by directory (the directory's own entry goes with them).
func splitGit(changes []record.Change) (rest []record.Change, byDir map[string][]record.Change) {
	byDir = map[string][]record.Change{}
	for _, c := range changes {
		if dir := gitDirOf(c.Path); dir != "" {
			byDir[dir] = append(byDir[dir], c)
			continue
		}
		rest = append(rest, c)
	}
	// A git directory's own entry goes with its summary.
	kept := rest[:0]
	for _, c := range rest {
		if _, ok := byDir[c.Path]; ok {
			continue
		}
		kept = append(kept, c)
	}
	return kept, byDir
}

// gitSummaries summarizes each git directory's changes, in path order.
func (d *differ) gitSummaries(byDir map[string][]record.Change) []gitSummaryJSON {
	dirs := make([]string, 0, len(byDir))
	for dir := range byDir {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	out := []gitSummaryJSON{}
	for _, dir := range dirs {
		out = append(out, d.gitSummary(dir, byDir[dir]))
	}
	return out
}

func (d *differ) gitSummary(dir string, changes []record.Change) gitSummaryJSON {
	s := gitSummaryJSON{GitDir: dir, Refs: []refMoveJSON{}, Paths: len(changes)}
	side := func(e *record.Entry, old bool, path string) string {
		if e == nil || e.Type != record.File {
			return ""
		}
		b, err := d.read(e, old, path, 1<<20)
		if err != nil {
			return ""
		}
		return string(b)
	}
	refs := map[string][2]string{}
	var headOld, headNew string
	headChanged := false
	parents := map[string][]string{} // new loose commits
	for _, c := range changes {
		rel := strings.TrimPrefix(c.Path, dir+"/")
		switch {
		case rel == "HEAD":
			headOld, headNew, headChanged = side(c.Old, true, c.Path), side(c.New, false, c.Path), true
		case strings.HasPrefix(rel, "refs/"):
			if (c.Old == nil || c.Old.Type == record.File) && (c.New == nil || c.New.Type == record.File) {
				refs[rel] = [2]string{gitLine(side(c.Old, true, c.Path)), gitLine(side(c.New, false, c.Path))}
			}
		case rel == "packed-refs":
			o, n := packedRefs(side(c.Old, true, c.Path)), packedRefs(side(c.New, false, c.Path))
			for r, oid := range o {
				if _, loose := refs[r]; !loose && n[r] != oid {
					refs[r] = [2]string{oid, n[r]}
				}
			}
			for r, oid := range n {
				if _, loose := refs[r]; !loose && o[r] == "" {
					refs[r] = [2]string{"", oid}
				}
			}
		case strings.HasPrefix(rel, "objects/pack/") && strings.HasSuffix(rel, ".pack") && c.Old == nil:
			s.Packs++
		case looseObject(rel) != "" && c.Old == nil && c.New != nil:
			s.Objects++
			if ps, ok := commitParents(d, c); ok {
				s.Commits++
				parents[looseObject(rel)] = ps
			}
		}
	}
	headRef := func(h string) string {
		if r, ok := strings.CutPrefix(gitLine(h), "ref: "); ok {
			return r
		}
		return ""
	}
	if headChanged && gitLine(headOld) != gitLine(headNew) {
		s.Head = &struct {
			Before string `json:"before"`
			After  string `json:"after"`
		}{describeHead(headOld), describeHead(headNew)}
	}
	onBranch := headRef(headNew)
	if !headChanged {
		// HEAD as it is (unchanged by the step): read from the new side,
		// the tree or the run's layer.
		onBranch = headRef(d.readTreeText(dir + "/HEAD"))
	}
	names := make([]string, 0, len(refs))
	for r := range refs {
		names = append(names, r)
	}
	sort.Strings(names)
	for _, r := range names {
		v := refs[r]
		if v[0] == v[1] {
			continue
		}
		m := refMoveJSON{Ref: r, Before: v[0], After: v[1], Head: r == onBranch}
		if gitdirs.ValidOID(v[1]) {
			if n, ok := newCommits(parents, v[1], v[0]); ok {
				m.Commits = &n
			}
		}
		s.Refs = append(s.Refs, m)
	}
	return s
}

// readTreeText reads a small file of the new side by path ("" when it
// cannot).
func (d *differ) readTreeText(path string) string {
	var b []byte
	var err error
	if d.upper != "" {
		if b, err = snapshot.ReadFileBeneath(d.upper, path, 4096); err == nil {
			return string(b)
		}
	}
	if b, err = d.repo.ReadTreeFile(path, 4096); err != nil {
		return ""
	}
	return string(b)
}

func gitLine(s string) string { return strings.TrimSpace(s) }

func describeHead(h string) string {
	h = gitLine(h)
	if r, ok := strings.CutPrefix(h, "ref: "); ok {
		return r
	}
	return h
}

// looseObject is the object id a path under a git directory names
// ("objects/ab/cdef…"), or "".
func looseObject(rel string) string {
	p, ok := strings.CutPrefix(rel, "objects/")
	if !ok || len(p) != 41 || p[2] != '/' {
		return ""
	}
	if id := p[:2] + p[3:]; gitdirs.ValidOID(id) {
		return id
	}
	return ""
}

// commitParents reads a loose object; ok when it is a commit.
func commitParents(d *differ, c record.Change) (parents []string, ok bool) {
	b, err := d.read(c.New, false, c.Path, 1<<20)
	if err != nil {
		return nil, false
	}
	z, err := zlib.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, false
	}
	defer z.Close()
	head, _ := io.ReadAll(io.LimitReader(z, 64<<10))
	body, ok := strings.CutPrefix(string(head), "commit ")
	if !ok {
		return nil, false
	}
	if i := strings.IndexByte(body, 0); i >= 0 {
		body = body[i+1:]
	}
	for _, l := range strings.Split(body, "\n") {
		if l == "" {
			break // the end of the headers
		}
		if p, ok := strings.CutPrefix(l, "parent "); ok {
			parents = append(parents, p)
		}
	}
	return parents, true
}

// newCommits counts the commits reachable from tip and not from old
// among the loose ones the step added; ok is false when tip is not one
// of them (made before the step, or packed: the count is unknown).
func newCommits(parents map[string][]string, tip, old string) (int, bool) {
	if _, ok := parents[tip]; !ok {
		return 0, false
	}
	seen := map[string]bool{}
	todo := []string{tip}
	for len(todo) > 0 {
		id := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if _, added := parents[id]; id == old || seen[id] || !added {
			continue
		}
		seen[id] = true
		todo = append(todo, parents[id]...)
	}
	return len(seen), true
}

// packedRefs parses packed-refs: ref → id.
func packedRefs(s string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		if l == "" || l[0] == '#' || l[0] == '^' {
			continue
		}
		if oid, ref, ok := strings.Cut(l, " "); ok {
			m[ref] = oid
		}
	}
	return m
}

func short(oid string) string {
	if len(oid) > 7 {
		return oid[:7]
	}
	return oid
}

func refName(r string) string {
	if b, ok := strings.CutPrefix(r, "refs/heads/"); ok {
		return b
	}
	return r
}

// gitSummaryLines says a summary in lines: "git: HEAD main 1a2b3c4 →
// 4d5e6f7 (2 commits)" and the like.
func gitSummaryLines(s gitSummaryJSON) []string {
	prefix := "git:"
	if s.GitDir != ".git" {
		prefix = "git (" + quote(s.GitDir) + "):"
	}
	var out []string
	if s.Head != nil {
		out = append(out, fmt.Sprintf("%s HEAD %s → %s", prefix, refName(s.Head.Before), refName(s.Head.After)))
	}
	for _, r := range s.Refs {
		name := refName(r.Ref)
		if r.Head {
			name = "HEAD " + name
		}
		var l string
		switch {
		case r.Before == "":
			l = fmt.Sprintf("%s %s created at %s", prefix, name, short(r.After))
		case r.After == "":
			l = fmt.Sprintf("%s %s deleted (was %s)", prefix, name, short(r.Before))
		default:
			l = fmt.Sprintf("%s %s %s → %s", prefix, name, short(r.Before), short(r.After))
		}
		if r.Commits != nil {
			l += fmt.Sprintf(" (%s)", plural(*r.Commits, "commit", "commits"))
		}
		out = append(out, l)
	}
	var made []string
	if s.Commits > 0 {
		made = append(made, plural(s.Commits, "commit", "commits")+" made")
	}
	if s.Objects > 0 {
		made = append(made, plural(s.Objects, "object", "objects")+" added")
	}
	if s.Packs > 0 {
		made = append(made, plural(s.Packs, "pack", "packs")+" added")
	}
	l := prefix + " "
	if len(made) > 0 {
		l += strings.Join(made, ", ") + "; "
	}
	l += fmt.Sprintf("%s under %s/ changed (--git-raw lists them)", plural(s.Paths, "path", "paths"), quote(s.GitDir))
	return append(out, l)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}
