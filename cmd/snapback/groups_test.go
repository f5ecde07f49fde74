package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestGroupsRequireAVerb walks the command tree: every group of verbs
// (archive, checkpoint, agent, completion, and any added later), given
// no verb or a mistyped one, is a usage error (exit 2, one line and a
// hint, nothing on stdout; a JSON error under --json), never its help
// with exit 0, which made `snapback archive verfy ID && echo ok` print
// ok. A typo one letter off gets a did-you-mean; --help still helps.
func TestGroupsRequireAVerb(t *testing.T) {
	t.Chdir(t.TempDir())
	var groups []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c.HasParent() && c.HasAvailableSubCommands() {
			groups = append(groups, c)
		}
	}
	walk(newRootCmd(&globals{}))
	if len(groups) < 4 {
		t.Fatalf("found only %d groups of verbs: is the walk right?", len(groups))
	}
	for _, c := range groups {
		path := strings.Fields(strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" "))
		group := strings.Join(path, " ")
		var first string
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				first = sub.Name()
				break
			}
		}
		typo := first[:len(first)-1] + "x" // one letter off
		for _, tc := range []struct {
			args []string
			want string // the message
			hint string
		}{
			{path, group + ": a verb is missing (one of: " + first, "`snapback " + group + " --help` lists its verbs"},
			{append(append([]string{}, path...), typo, "ARG"), `unknown verb "` + group + " " + typo + `"`, "did you mean `snapback " + group + " " + first + "`?"},
		} {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != 2 || stdout.Len() > 0 {
				t.Errorf("snapback %q: exit %d, stdout %q; want exit 2 and no output", tc.args, code, stdout.String())
				continue
			}
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if len(lines) != 2 || !strings.HasPrefix(lines[0], "snapback: "+tc.want) || lines[1] != "hint: "+tc.hint {
				t.Errorf("snapback %q: stderr %q, want %q and hint %q", tc.args, stderr.String(), tc.want, tc.hint)
			}
			stdout.Reset()
			stderr.Reset()
			args := append([]string{"--json"}, tc.args...)
			var e struct{ Error, Message, Hint string }
			if code := run(args, &stdout, &stderr); code != 2 || stdout.Len() > 0 ||
				json.Unmarshal(stderr.Bytes(), &e) != nil || e.Error != "usage" || !strings.HasPrefix(e.Message, tc.want) || e.Hint != tc.hint {
				t.Errorf("snapback %q: exit %d, stdout %q, stderr %q; want exit 2 and a JSON usage error", args, code, stdout.String(), stderr.String())
			}
		}
		var stdout, stderr bytes.Buffer
		if code := run(append(path, "--help"), &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), first) {
			t.Errorf("snapback %s --help: exit %d, stdout %q", group, code, stdout.String())
		}
	}
}
