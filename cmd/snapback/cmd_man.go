package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

//go:generate go run . __man ../../man

// manVerb writes the man pages; hidden: it is for go generate (above),
// and TestManPages checks that man/ matches the commands.
const manVerb = "__man"

func newManCmd() *cobra.Command {
	return &cobra.Command{
		Use:    manVerb + " DIR",
		Short:  "Write the man pages to DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE:   func(c *cobra.Command, args []string) error { return genMan(c.Root(), args[0]) },
	}
}

// genMan writes one page per verb into dir. The header carries no date
// and the pages no "generated on" line, so that a page changes only when
// its command does.
func genMan(root *cobra.Command, dir string) error {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	root.DisableAutoGenTag = true
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &doc.GenManHeader{Title: "SNAPBACK", Section: "1", Source: "snapback", Manual: "snapback manual", Date: &epoch}
	if err := doc.GenManTree(root, h, dir); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	return nil
}
