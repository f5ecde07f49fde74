package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// examples are each verb's --help examples (cobra's Example), kept in
// one place so that they read as one manual; TestHelpExamples checks
// that no verb lacks them.
var examples = map[string]string{
	"snap":    "snapback snap -m 'before the upgrade'\nsnapback snap --json",
	"list":    "snapback list\nsnapback list --all\nsnapback list --json",
	"diff":    "snapback diff                 # the pending run, else what undo would revert\nsnapback diff -p > run.patch  # a patch in git's format (git apply takes it)\nsnapback diff --stat aadd13   # a snapshot by the end of its id\nsnapback diff src/ README.md  # only these paths (from the current directory)\nsnapback diff aadd13 -- a13   # -- before paths that look like ids",
	"show":    "snapback show                 # the step undo would revert: header and patch\nsnapback show aadd13 --stat   # a step by the end of its id, as git show --stat\nsnapback show --json aadd13",
	"undo":    "snapback undo\nsnapback undo 20261201-0311  # by a prefix of its id\nsnapback undo --force\nsnapback undo --session 5f1c  # every checkpoint of a session",
	"redo":    "snapback redo",
	"restore": "snapback restore aadd13\nsnapback list --all && snapback restore 20261201-031143-aadd13",
	"gc":      "snapback gc --keep 20",
	"recover": "snapback recover",
	"version": "snapback version\nsnapback version --json",
	"run": "snapback run make test\nsnapback run --then review sh -c 'npm install && npm test'\n" +
		"snapback run --continue aadd13 go generate ./...\nsnapback run --mode copy -- ./-odd-name",
	"status":   "snapback status\nsnapback status --json",
	"commit":   "snapback commit\nsnapback commit aadd13 src/ docs/README.md\nsnapback commit --force",
	"discard":  "snapback discard\nsnapback discard aadd13",
	"shell":    "snapback run --then review make\nsnapback shell   # look around the run's view, then exit",
	"doctor":   "snapback doctor\nsnapback doctor --json",
	"backends": "snapback backends",
	"mcp": "claude mcp add snapback -- snapback mcp   # Claude Code, started in the project\n" +
		"claude mcp add snapback-ro -- snapback mcp --read-only   # status, list and diff only\n" +
		"snapback -C ~/src/app mcp   # serve that project, whatever the directory",
	"check":                 "snapback check\nsnapback check --read-data=false   # records only, fast\nsnapback check --repair",
	"archive":               "snapback archive --catalog ~/backups create\nsnapback archive --catalog ~/backups list",
	"archive create":        "snapback archive --catalog ~/backups create\nsnapback archive --catalog ~/backups create aadd13",
	"archive list":          "snapback archive --catalog ~/backups list --limit 5",
	"archive verify":        "snapback archive --catalog ~/backups verify aadd13",
	"archive restore":       "snapback archive --catalog ~/backups restore aadd13 --into /tmp/old",
	"archive prune":         "snapback archive --catalog ~/backups prune --keep 10   # prints a token\nsnapback archive --catalog ~/backups prune --apply TOKEN",
	"archive push":          "snapback archive --catalog ~/backups push --repo /srv/restic",
	"archive pull":          "snapback archive --catalog ~/backups pull all --repo /srv/restic",
	"agent":                 "snapback agent install claude-code   # each turn of Claude Code: one undo step\nsnapback undo                        # reverts the last turn",
	"agent install":         "snapback agent install claude-code --dry-run   # show the change\nsnapback agent install claude-code             # .claude/settings.local.json\nsnapback agent install claude-code --shared    # .claude/settings.json, for every clone\nsnapback agent install gemini-cli\nsnapback agent install codex --user            # ~/.codex/hooks.json, every project\nsnapback agent install --command               # the commands for any other harness",
	"agent uninstall":       "snapback agent uninstall claude-code\nsnapback agent uninstall gemini-cli --dry-run",
	"agent hook":            "echo '{\"hook_event_name\": \"Stop\", \"session_id\": \"5f1c\", \"cwd\": \"'$PWD'\"}' | snapback agent hook claude-code",
	"checkpoint":            "snapback checkpoint begin -m 'turn 3: fix the tests' --session 5f1c\n# ... tools change the tree ...\nsnapback checkpoint end --session 5f1c\nsnapback undo   # reverts exactly the turn",
	"checkpoint begin":      "snapback checkpoint begin -m 'fix the tests' --session 5f1c\nsnapback checkpoint begin --json   # {\"opened\": false, ...} when one is open",
	"checkpoint end":        "snapback checkpoint end\nsnapback checkpoint end --session 5f1c --json",
	"checkpoint status":     "snapback checkpoint status\nsnapback checkpoint status --json",
	"help":                  "snapback help run",
	"completion":            "snapback completion --install   # for $SHELL, with the man pages\nsnapback completion bash > /etc/bash_completion.d/snapback",
	"completion bash":       "snapback completion bash --install --dry-run\nsnapback completion bash > /etc/bash_completion.d/snapback",
	"completion zsh":        "snapback completion zsh > \"${fpath[1]}/_snapback\"",
	"completion fish":       "snapback completion fish > ~/.config/fish/completions/snapback.fish",
	"completion powershell": "snapback completion powershell | Out-String | Invoke-Expression",
}

// setExamples gives each verb its examples, indented as cobra shows them.
// It runs at every start: each verb is looked up by name (root.Find
// parses its arguments as a command line: a tenth of a ms in all).
func setExamples(root *cobra.Command) {
	for path, ex := range examples {
		c := root
		for _, name := range strings.Fields(path) {
			if c = subCommand(c, name); c == nil {
				break
			}
		}
		if c != nil && c != root {
			c.Example = "  " + strings.ReplaceAll(ex, "\n", "\n  ")
		}
	}
}

// subCommand returns c's verb name (or alias), or nil.
func subCommand(c *cobra.Command, name string) *cobra.Command {
	for _, sub := range c.Commands() {
		if sub.Name() == name || sub.HasAlias(name) {
			return sub
		}
	}
	return nil
}
