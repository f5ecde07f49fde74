package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/snapback/snapback/internal/gitdiff"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/term"
)

// commit -p and discard -p: a pending run's changes reviewed hunk by
// hunk, as `git add -p`. Text files are asked by hunk (the hunks `diff
// -p` prints); everything else (binary files, new and deleted files,
// symlinks, mode changes, a directory's deletion with all below it) is
// one question. A new directory comes with the files picked in it. Answers
// are lines read from stdin, a terminal or not.

// pickUnit is one file's questions: its changes whole, or its hunks.
type pickUnit struct {
	changes []record.Change
	diff    *textDiff // set when asked by hunk
	hunks   []hunk
}

// pickUnits turns a run's changes into the questions to ask.
func pickUnits(d *differ, changes []record.Change) ([]*pickUnit, error) {
	linked := map[string]bool{}
	for _, c := range changes {
		if c.New != nil && c.New.Link != "" {
			linked[c.New.Link], linked[c.Path] = true, true
		}
	}
	var out []*pickUnit
	for i := 0; i < len(changes); i++ {
		c := changes[i]
		below := i + 1
		for below < len(changes) && record.Under(changes[below].Path, c.Path) {
			below++
		}
		switch {
		case c.Old != nil && c.Old.Type == record.Dir && (c.New == nil || c.New.Type != record.Dir):
			// A directory deleted or replaced: one question for all of it.
			out = append(out, &pickUnit{changes: changes[i:below]})
			i = below - 1
			continue
		case c.New != nil && c.New.Type == record.Dir && (c.Old == nil || c.Old.Type != record.Dir) && below > i+1:
			continue // a new directory: it comes with what is picked in it
		}
		u := &pickUnit{changes: changes[i : i+1]}
		out = append(out, u)
		if c.Op != "M" || c.Old.Type != record.File || linked[c.Path] || metaChanged(c.Old, c.New) {
			continue
		}
		a, b, ok := d.sides(c)
		if !ok {
			continue // binary, or too large to diff
		}
		if record.ObjectID(sha256.Sum256([]byte(a))) != c.Old.Object || record.ObjectID(sha256.Sum256([]byte(b))) != c.New.Object {
			return nil, fmt.Errorf("%s changed while it was read; try again", quote(c.Path))
		}
		u.diff = newTextDiff(gitdiff.Lines(a), gitdiff.Lines(b))
		u.hunks = u.diff.hunks()
	}
	return out, nil
}

// metaChanged: what a hunk cannot carry (mode, owner, xattrs) differs.
func metaChanged(a, b *record.Entry) bool {
	x := *b
	x.Object, x.Size = a.Object, a.Size
	return a.UID != b.UID || a.GID != b.GID || a.Changed(&x)
}

// errAnswersEnded: stdin ended before every question had an answer.
var errAnswersEnded = errors.New("stdin ended before every question was answered")

// asker reads the answers: lines of in, read ahead by a goroutine so that
// Ctrl-C (ctx) ends a verb waiting for one at once, nothing changed.
type asker struct {
	ctx  context.Context
	in   <-chan string // closed at the end of stdin
	out  io.Writer
	verb string // "commit" or "discard"
	echo bool   // stdin is no terminal: the answers are written after the prompts
}

// ask asks prompt until one of opts (letters) is answered.
func (a *asker) ask(prompt, opts string) (byte, error) {
	for {
		fmt.Fprintf(a.out, "%s [%s,?]? ", prompt, strings.Join(strings.Split(opts, ""), ","))
		var line string
		var ok bool
		select {
		case line, ok = <-a.in:
		case <-a.ctx.Done():
			fmt.Fprintln(a.out)
			return 0, a.ctx.Err()
		}
		if !ok {
			fmt.Fprintln(a.out)
			return 0, errAnswersEnded
		}
		line = strings.ToLower(strings.TrimSpace(line))
		if a.echo {
			fmt.Fprintln(a.out, line)
		}
		if len(line) == 1 && strings.Contains(opts, line) {
			return line[0], nil
		}
		a.help(opts)
	}
}

// readLines sends the lines of r, then closes the channel.
func readLines(r io.Reader) <-chan string {
	ch := make(chan string)
	go func() {
		defer close(ch)
		in := bufio.NewReader(r)
		for {
			line, err := in.ReadString('\n')
			if line != "" {
				ch <- line
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

func (a *asker) help(opts string) {
	v := a.verb
	lines := map[byte]string{
		'y': v + " this hunk",
		'n': "do not " + v + " this hunk",
		'q': "quit; do not " + v + " this hunk or any of the remaining ones",
		'a': v + " this hunk and all later hunks in the file",
		'd': "do not " + v + " this hunk or any of the later hunks in the file",
		's': "split the current hunk into smaller hunks",
	}
	for i := range len(opts) {
		fmt.Fprintf(a.out, "%c - %s\n", opts[i], lines[opts[i]])
	}
	fmt.Fprintln(a.out, "? - print help")
}

// pickAnswers asks every question and returns what was picked: whole
// paths, and parts (for a commit, the base with the hunks picked; for a
// discard, the base with the hunks not picked), and of how many files.
func pickAnswers(d *differ, units []*pickUnit, a *asker) (snapshot.Pick, int, error) {
	var pick snapshot.Pick
	picked := 0
	for _, u := range units {
		var take map[int]bool
		var quit bool
		var err error
		if u.diff == nil {
			var yes bool
			if yes, quit, err = a.askWhole(d, u); yes {
				for _, ch := range u.changes {
					pick.Paths = append(pick.Paths, ch.Path)
				}
				picked++
			}
		} else {
			take, quit, err = a.askHunks(u)
		}
		if err != nil {
			return pick, 0, err
		}
		all := 0
		for _, h := range u.hunks {
			all += len(h.changes)
		}
		c := u.changes[0]
		switch {
		case len(take) == 0:
		case len(take) == all:
			pick.Paths = append(pick.Paths, c.Path)
			picked++
		default:
			if a.verb == "discard" { // the layer keeps the hunks not discarded
				keep := map[int]bool{}
				for _, h := range u.hunks {
					for _, k := range h.changes {
						keep[k] = !take[k]
					}
				}
				take = keep
			}
			pick.Parts = append(pick.Parts, snapshot.Part{Path: c.Path, Base: c.Old.Object, New: c.New.Object, Content: []byte(u.diff.apply(take))})
			picked++
		}
		if quit {
			break
		}
	}
	return pick, picked, nil
}

// title is the verb as a question begins with it.
func (a *asker) title() string { return strings.ToUpper(a.verb[:1]) + a.verb[1:] }

// askWhole asks the one question of a unit not asked by hunk.
func (a *asker) askWhole(d *differ, u *pickUnit) (yes, quit bool, err error) {
	var what string
	c := u.changes[0]
	switch {
	case len(u.changes) > 1 || c.Old != nil && c.Old.Type == record.Dir && (c.New == nil || c.New.Type != record.Dir):
		what = "directory"
	case c.Op == "A":
		what = "addition"
	case c.Op == "D":
		what = "deletion"
	case c.Op == "M" && c.Old.SameContent(c.New):
		what = "mode change"
	default:
		what = "change"
	}
	for _, ch := range u.changes {
		if p := d.gitPatch(ch); p != "" {
			fmt.Fprint(a.out, p)
		} else {
			fmt.Fprintf(a.out, "%s\t%s\n", ch.Op, displayPath(ch))
		}
	}
	ans, err := a.ask(fmt.Sprintf("%s this %s", a.title(), what), "ynqad")
	return ans == 'y' || ans == 'a', ans == 'q', err
}

// askHunks asks about each hunk of a text file: the changes taken.
func (a *asker) askHunks(u *pickUnit) (take map[int]bool, quit bool, err error) {
	c := u.changes[0]
	from, to := gitdiff.Quote("a/"+c.Path), gitdiff.Quote("b/"+c.Path)
	fmt.Fprintf(a.out, "diff --git %s %s\n--- %s\n+++ %s\n", from, to, from, to)
	take = map[int]bool{}
	queue := append([]hunk(nil), u.hunks...)
	for i := 0; i < len(queue); i++ {
		var sb strings.Builder
		u.diff.write(&sb, queue[i])
		fmt.Fprint(a.out, sb.String())
		opts := "ynqad"
		if len(queue[i].changes) > 1 {
			opts += "s"
		}
		ans, err := a.ask(fmt.Sprintf("(%d/%d) %s this hunk", i+1, len(queue), a.title()), opts)
		if err != nil {
			return nil, false, err
		}
		switch ans {
		case 'y', 'a':
			rest := queue[i : i+1]
			if ans == 'a' {
				rest = queue[i:]
			}
			for _, h := range rest {
				for _, k := range h.changes {
					take[k] = true
				}
			}
			if ans == 'a' {
				return take, false, nil
			}
		case 'd', 'q':
			return take, ans == 'q', nil
		case 's':
			parts := queue[i].split()
			fmt.Fprintf(a.out, "Split into %d hunks.\n", len(parts))
			queue = slices.Replace(queue, i, i+1, parts...)
			i--
		}
	}
	return take, false, nil
}

// runPick is `commit -p` and `discard -p`: asks, then commits or
// discards what was picked.
func runPick(g *globals, verb string, args []string, force bool) error {
	if g.json {
		return usageErr("%s -p asks questions: it takes no --json", verb)
	}
	repo, err := g.open(snapshot.Options{Verb: verb, Access: snapshot.ForChange})
	if err != nil {
		return err
	}
	defer repo.Close()
	p, paths, err := pendingAndPaths(repo.Reader, args)
	if err != nil {
		return err
	}
	rel, err := relPaths(repo.Root, paths)
	if err != nil {
		return err
	}
	target, cur, err := repo.PendingChanges(p)
	if err != nil {
		return err
	}
	var changes []record.Change
	for _, c := range record.DiffManifests(cur, target) {
		if underAny(c.Path, rel) {
			changes = append(changes, c)
		}
	}
	if len(changes) == 0 {
		fmt.Fprintf(g.stdout, "no changes of run %s to %s\n", p.ID, verb)
		return nil
	}
	d := &differ{repo: repo.Reader, upper: repo.UpperDir(p.ID)}
	units, err := pickUnits(d, changes)
	if err != nil {
		return fmt.Errorf("%s -p: %w", verb, err)
	}
	ctx := g.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	a := &asker{ctx: ctx, in: readLines(os.Stdin), out: g.stdout, verb: verb, echo: !term.IsTerminal(int(os.Stdin.Fd()))}
	pick, n, err := pickAnswers(d, units, a)
	if errors.Is(err, errAnswersEnded) {
		return &exitError{code: 2, kind: "usage", err: fmt.Errorf("%s -p: %w; nothing was %s", verb, err, pastTense(verb))}
	}
	if err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintf(g.stdout, "nothing picked; nothing was %s\n", pastTense(verb))
		return nil
	}
	rest := "; the rest stays pending"
	if verb == "discard" {
		if err := repo.DiscardPick(p, pick); err != nil {
			return err
		}
		if _, err := repo.FindViewRun(p.ID); err != nil {
			rest = "; nothing is left of it"
		}
		g.say("discarded %s of run %s%s\n", nPicked(n), p.ID, rest)
		return nil
	}
	rec, err := repo.CommitPick(p, pick, force)
	if err != nil {
		return err
	}
	if _, err := repo.FindViewRun(p.ID); err != nil {
		rest = ""
	}
	g.say("committed %s of run %s as %s (undo reverts it%s)\n", nPicked(n), p.ID, rec.ID, rest)
	return nil
}

func pastTense(verb string) string {
	return map[string]string{"commit": "committed", "discard": "discarded"}[verb]
}

// nPicked says how many files' changes were picked, whole or in part.
func nPicked(n int) string {
	if n == 1 {
		return "1 file"
	}
	return fmt.Sprintf("%d files", n)
}
