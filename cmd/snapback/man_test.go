package main

import (
	"bytes"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/snapback/snapback/man"
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// writeMan is where TestManPages writes the pages (go generate sets it:
// see main.go), instead of checking man/.
var writeMan = flag.String("write-man", "", "write the man pages into this directory")

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

// TestManPages: the man pages in man/ are those the commands make now.
func TestManPages(t *testing.T) {
	if *writeMan != "" {
		if err := genMan(newRootCmd(&globals{}), *writeMan); err != nil {
			t.Fatal(err)
		}
		return
	}
	dir := t.TempDir()
	if err := genMan(newRootCmd(&globals{}), dir); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	// What this binary installs (package man embeds man/*.1).
	got, err := fs.ReadDir(man.Pages, ".")
	if err != nil {
		t.Fatal(err)
	}
	names := func(es []os.DirEntry) (out []string) {
		for _, e := range es {
			out = append(out, e.Name())
		}
		return out
	}
	if !slices.Equal(names(want), names(got)) {
		t.Fatalf("man/ holds %v, the commands make %v: run go generate ./cmd/snapback", names(got), names(want))
	}
	for _, n := range names(want) {
		w, _ := os.ReadFile(filepath.Join(dir, n))
		g, err := fs.ReadFile(man.Pages, n)
		if err != nil || !bytes.Equal(w, g) {
			t.Errorf("man/%s is out of date: run go generate ./cmd/snapback", n)
		}
	}
}

// TestHelpExamples: every verb's --help shows examples.
func TestHelpExamples(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c.Runnable() && !c.Hidden && c.Example == "" {
			t.Errorf("%s has no examples", c.CommandPath())
		}
	}
	walk(newRootCmd(&globals{}))
}
