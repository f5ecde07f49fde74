package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/spf13/cobra"
)

// TestManPages: the man pages in man/ are those the commands make now.
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	if err := genMan(newRootCmd(&globals{}), dir); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadDir("../../man")
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
		g, err := os.ReadFile(filepath.Join("../../man", n))
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
