package main

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/snapback/snapback/snapshot"
	"github.com/spf13/cobra"
)

// idKinds says which ids a completion offers.
type idKinds struct{ snapshots, runs bool }

var (
	snapshotIDs = idKinds{snapshots: true}
	runIDs      = idKinds{runs: true}
	anyIDs      = idKinds{snapshots: true, runs: true}
)

// completeIDs completes the first argument with the ids of the store's
// snapshots (newest first) and pending runs, each with what it is. It
// only reads: it takes the lock without waiting (no ids while another
// snapback works), finishes nothing and prints nothing, as a shell's
// completion must not.
func completeIDs(g *globals, k idKinds) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveDefault // commit's and diff's PATHs
		}
		return idCompletions(g, k), cobra.ShellCompDirectiveNoFileComp
	}
}

func idCompletions(g *globals, k idKinds) []string {
	if g.chdir() != nil {
		return nil
	}
	root, err := g.rootDir()
	if err != nil {
		return nil
	}
	// No waiting for the lock, and nothing to say: no Warn.
	repo, err := snapshot.OpenReader(root, snapshot.Options{Verb: "complete", Access: snapshot.ForRead, SkipDamaged: true, Untouched: true})
	if err != nil {
		return nil
	}
	defer repo.Close()
	var out []string
	if k.runs {
		runs, _ := repo.PendingRuns()
		for i := len(runs) - 1; i >= 0; i-- {
			out = append(out, runs[i].ID+"\tpending run: "+describeCommand(runs[i].Command))
		}
	}
	if k.snapshots {
		all, _ := repo.List()
		for i := len(all) - 1; i >= 0; i-- {
			m := all[i]
			if !m.Kind.Undoable() {
				continue // pre-undo and pre-redo: bookkeeping, as list shows them only with -a
			}
			what := m.Message
			if what == "" {
				what = describeCommand(m.Command)
			}
			out = append(out, strings.TrimSuffix(m.ID+"\t"+string(m.Kind)+" "+what, " "))
		}
	}
	return out
}

// describeCommand is a command line as a shell would need it typed,
// on one line.
func describeCommand(argv []string) string {
	return shellLine(argv)
}

// shellLine quotes each word of argv as sh needs it ('it'\”s'), and a
// word holding a control character or invalid UTF-8 as bash's $'…', so
// the line stays one line and pastes back as the same words.
func shellLine(argv []string) string {
	words := make([]string, len(argv))
	for i, w := range argv {
		words[i] = shellWord(w)
	}
	return strings.Join(words, " ")
}

var plainWord = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`) })

func shellWord(w string) string {
	switch {
	case w == "":
		return "''"
	case plainWord().MatchString(w):
		return w
	case utf8.ValidString(w) && !strings.ContainsFunc(w, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(w); i++ {
		switch c := w[i]; {
		case c == '\'' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// completeWords completes a flag's value from a fixed list.
func completeWords(words ...string) cobra.CompletionFunc {
	return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return words, cobra.ShellCompDirectiveNoFileComp
	}
}

// idArgs are the verbs whose first argument is an id, and of what.
var idArgs = map[string]idKinds{
	"undo": snapshotIDs, "restore": snapshotIDs, "archive create": snapshotIDs,
	"diff": anyIDs, "show": snapshotIDs, "commit": runIDs, "discard": runIDs, "shell": runIDs,
}

// completeIDArgs sets the id completion of the verbs in idArgs.
func completeIDArgs(g *globals, root *cobra.Command) {
	for path, k := range idArgs {
		if c, _, err := root.Find(strings.Fields(path)); err == nil && c != root {
			c.ValidArgsFunction = completeIDs(g, k)
		}
	}
}
