package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/man"
	"github.com/spf13/cobra"
)

// installOptions are the flags of `snapback completion --install`: the
// one step after `go install` that puts the shell's completion and the
// man pages where the shell and man look for them.
type installOptions struct {
	install, dryRun, force bool
	prefix                 string
}

// installShells are the shells --install knows where to put a script for.
var installShells = []string{"bash", "zsh", "fish"}

// addCompletionInstall gives cobra's completion verbs the --install flag
// and its companions. `completion --install` with no shell installs for
// $SHELL. It runs after requireVerb, whose refusal of a bare
// `completion` it keeps.
func addCompletionInstall(g *globals, root *cobra.Command) {
	comp, _, err := root.Find([]string{"completion"})
	if err != nil || comp == root {
		return
	}
	comp.Long = "Print the completion script for a shell (it also completes snapshot and run ids, modes and --then).\n\n" +
		"With --install, put it where the shell loads it, and the man pages where man finds them: in your own directories " +
		"(${XDG_DATA_HOME:-~/.local/share}/bash-completion/completions, .../zsh/site-functions, ~/.config/fish/completions, " +
		".../man/man1) or, with --prefix DIR, under DIR/share for every user; then say in one line what the shell still " +
		"needs (bash: the bash-completion package; zsh: the directory in fpath). Running it again rewrites only what " +
		"changed. A file there that snapback did not write is left alone: the install refuses, naming it, unless --force."
	var o installOptions
	pf := comp.PersistentFlags()
	pf.BoolVar(&o.install, "install", false, "write the completion script where the shell loads it, and the man pages where man finds them, then say what the shell still needs")
	pf.BoolVar(&o.dryRun, "dry-run", false, "with --install: list the files it would write, write nothing")
	pf.BoolVar(&o.force, "force", false, "with --install: overwrite files snapback did not write")
	pf.StringVar(&o.prefix, "prefix", "", "with --install: install for every user under `DIR`/share (/usr/local, or /usr for the distribution's places) instead of your own directories")
	wrap := func(c *cobra.Command, shell string) {
		prev := c.RunE
		c.RunE = func(c *cobra.Command, args []string) error {
			if !o.install {
				if o.dryRun || o.force || o.prefix != "" {
					return usageErr("%s: --dry-run, --force and --prefix go with --install", strings.TrimPrefix(c.CommandPath(), "snapback "))
				}
				return prev(c, args)
			}
			sh := shell
			if sh == "" && len(args) > 0 {
				return usageErr("completion --install: unknown shell %q (one of: %s)", args[0], strings.Join(installShells, ", "))
			}
			if sh == "" {
				sh = filepath.Base(os.Getenv("SHELL"))
				if !slices.Contains(installShells, sh) {
					return usageErr("completion --install: name the shell (one of: %s); $SHELL is %q", strings.Join(installShells, ", "), os.Getenv("SHELL"))
				}
			}
			if !slices.Contains(installShells, sh) {
				return usageErr("completion %s --install: not supported (%s can); `snapback completion %s --help` says how to load it", sh, strings.Join(installShells, ", "), sh)
			}
			return runCompletionInstall(g, c.Root(), sh, o)
		}
	}
	wrap(comp, "")
	for _, sub := range comp.Commands() {
		wrap(sub, sub.Name())
	}
}

// installFile is one file --install writes: its content, and a mark that
// its first lines hold when snapback wrote it (so that a later version
// may replace it, and a file of someone else's is left alone).
type installFile struct {
	path string
	data []byte
	mark string
}

// installGroup is what one line of the report speaks of: the completion
// script, or the man pages.
type installGroup struct {
	what  string // "bash completion", "man pages"
	dir   string
	files []installFile
}

// installDirs are where each file goes: the user's own directories, or
// under a prefix, the places every user's shell and man read.
type installDirs struct {
	bash, zsh, fish, man string
}

func userInstallDirs() (installDirs, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return installDirs{}, fmt.Errorf("completion --install: %w (--prefix DIR installs for every user)", err)
	}
	xdg := func(env, def string) string {
		if d := os.Getenv(env); filepath.IsAbs(d) {
			return d
		}
		return filepath.Join(home, def)
	}
	data := xdg("XDG_DATA_HOME", ".local/share")
	bash := filepath.Join(data, "bash-completion")
	if d := os.Getenv("BASH_COMPLETION_USER_DIR"); filepath.IsAbs(d) {
		bash = d // bash-completion reads it instead, when set
	}
	return installDirs{
		bash: filepath.Join(bash, "completions"),
		zsh:  filepath.Join(data, "zsh", "site-functions"),
		fish: filepath.Join(xdg("XDG_CONFIG_HOME", ".config"), "fish", "completions"),
		man:  filepath.Join(data, "man", "man1"),
	}, nil
}

func prefixInstallDirs(prefix string) (installDirs, error) {
	p, err := filepath.Abs(prefix)
	if err != nil {
		return installDirs{}, fmt.Errorf("--prefix %s: %w", prefix, err)
	}
	share := filepath.Join(p, "share")
	return installDirs{
		bash: filepath.Join(share, "bash-completion", "completions"),
		zsh:  filepath.Join(share, "zsh", "site-functions"),
		fish: filepath.Join(share, "fish", "vendor_completions.d"),
		man:  filepath.Join(share, "man", "man1"),
	}, nil
}

// completionScript is what `snapback completion SHELL` prints, with the
// name a shell's loader looks for and the line it starts with.
func completionScript(root *cobra.Command, shell string, d installDirs) (installFile, error) {
	var b bytes.Buffer
	var f installFile
	var err error
	switch shell {
	case "bash":
		err = root.GenBashCompletionV2(&b, true)
		f = installFile{path: filepath.Join(d.bash, "snapback"), mark: "# bash completion V2 for snapback"}
	case "zsh":
		err = root.GenZshCompletion(&b)
		f = installFile{path: filepath.Join(d.zsh, "_snapback"), mark: "#compdef snapback"}
	case "fish":
		err = root.GenFishCompletion(&b, true)
		f = installFile{path: filepath.Join(d.fish, "snapback.fish"), mark: "# fish completion for snapback"}
	}
	if err != nil {
		return installFile{}, fmt.Errorf("%s completion: %w", shell, err)
	}
	f.data = b.Bytes()
	return f, nil
}

// manPages are the pages `go generate` puts in man/, as this binary
// holds them (package man).
func manPages(dir string) ([]installFile, error) {
	es, err := fs.ReadDir(man.Pages, ".")
	if err != nil {
		return nil, fmt.Errorf("man pages: %w", err)
	}
	var out []installFile
	for _, e := range es {
		b, err := fs.ReadFile(man.Pages, e.Name())
		if err != nil {
			return nil, fmt.Errorf("man pages: %w", err)
		}
		out = append(out, installFile{path: filepath.Join(dir, e.Name()), data: b, mark: `"snapback" "snapback manual"`})
	}
	return out, nil
}

// installState says what is at a file's place now: nothing or an older
// version of ours (write it), the same content (leave it), or something
// snapback did not write (refuse: foreign says what it is; --force
// overwrites a file or a symbolic link, never a directory).
func installState(f installFile) (write bool, foreign string, err error) {
	st, err := os.Lstat(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return true, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("completion --install: %w", err)
	}
	if !st.Mode().IsRegular() {
		return true, "is " + fsutil.TypeName(st.Mode()), nil
	}
	old, err := os.ReadFile(f.path)
	if err != nil {
		return false, "", fmt.Errorf("completion --install: %w", err)
	}
	if bytes.Equal(old, f.data) {
		return false, "", nil
	}
	// snapback's mark stands in its first two lines (a man page's .TH
	// line follows .nh).
	head := bytes.SplitN(old, []byte("\n"), 3)
	if bytes.Contains(bytes.Join(head[:min(2, len(head))], []byte("\n")), []byte(f.mark)) {
		return true, "", nil
	}
	return true, "exists and snapback did not write it", nil
}

func runCompletionInstall(g *globals, root *cobra.Command, shell string, o installOptions) error {
	d, err := userInstallDirs()
	if o.prefix != "" {
		d, err = prefixInstallDirs(o.prefix)
	}
	if err != nil {
		return err
	}
	script, err := completionScript(root, shell, d)
	if err != nil {
		return err
	}
	pages, err := manPages(d.man)
	if err != nil {
		return err
	}
	groups := []installGroup{
		{what: shell + " completion", dir: filepath.Dir(script.path), files: []installFile{script}},
		{what: "man pages", dir: d.man, files: pages},
	}
	// Everything is checked before anything is written: a refusal
	// leaves no half-install behind.
	todo := map[string]bool{}
	for _, gr := range groups {
		for _, f := range gr.files {
			write, foreign, err := installState(f)
			if err != nil {
				return err
			}
			if st, err := os.Lstat(f.path); err == nil && st.IsDir() {
				return usageErr("completion --install: %s %s (move it away)", f.path, foreign)
			}
			if foreign != "" && !o.force {
				return usageErr("completion --install: %s %s (--force overwrites it)", f.path, foreign)
			}
			todo[f.path] = write
		}
	}
	for _, gr := range groups {
		n := 0
		for _, f := range gr.files {
			if !todo[f.path] {
				continue
			}
			n++
			if o.dryRun {
				fmt.Fprintf(g.stdout, "would write %s\n", f.path)
				continue
			}
			if err := os.MkdirAll(gr.dir, 0o755); err != nil {
				return fmt.Errorf("completion --install: %w", err)
			}
			if err := fsutil.WriteFileAtomic(f.path, f.data, 0o644); err != nil {
				return fmt.Errorf("completion --install: %w", err)
			}
		}
		switch {
		case o.dryRun:
			if n < len(gr.files) {
				fmt.Fprintf(g.stdout, "up to date: %s\n", gr.describe(len(gr.files)-n))
			}
		case n == 0:
			fmt.Fprintf(g.stdout, "up to date: %s\n", gr.describe(len(gr.files)))
		case n == len(gr.files):
			fmt.Fprintf(g.stdout, "wrote %s\n", gr.describe(n))
		default:
			fmt.Fprintf(g.stdout, "wrote %s (the other %d were up to date)\n", gr.describe(n), len(gr.files)-n)
		}
	}
	if o.dryRun {
		return nil
	}
	fmt.Fprintln(g.stdout, shellNeeds(shell, filepath.Dir(script.path)))
	fmt.Fprintln(g.stdout, manNeeds(d.man))
	if o.prefix == "" && os.Geteuid() == 0 {
		fmt.Fprintln(g.stdout, "installed for root alone: --prefix /usr/local installs for every user")
	}
	return nil
}

// describe names n of the group's files: the one file, or how many
// pages in which directory.
func (gr installGroup) describe(n int) string {
	if len(gr.files) == 1 {
		return gr.files[0].path + " (" + gr.what + ")"
	}
	return fmt.Sprintf("%d %s in %s", n, gr.what, gr.dir)
}

// bashCompletionMain are where the bash-completion package puts the
// script that loads completions from their directories on demand.
var bashCompletionMain = []string{
	"/usr/share/bash-completion/bash_completion",       // Debian, Ubuntu, Fedora, Arch
	"/usr/local/share/bash-completion/bash_completion", // built from source
	"/opt/homebrew/etc/profile.d/bash_completion.sh",   // Homebrew, Apple silicon
	"/usr/local/etc/profile.d/bash_completion.sh",      // Homebrew, Intel
}

// bashCompletionInstalled is the bash-completion script found, or "".
func bashCompletionInstalled() string {
	for _, p := range bashCompletionMain {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// shellNeeds is the one line saying what the shell still needs to load
// the script in dir.
func shellNeeds(shell, dir string) string {
	switch shell {
	case "bash":
		if p := bashCompletionInstalled(); p != "" {
			return "bash: loaded by bash-completion (installed: " + p + ") in each new shell whose ~/.bashrc sources it, as Debian's and Ubuntu's do"
		}
		return "bash: needs the bash-completion package, which is not installed (Debian/Ubuntu: apt install bash-completion; macOS: brew install bash-completion@2): bash loads the file only through it"
	case "zsh":
		if inZshFpath(dir) {
			return "zsh: " + dir + " is in zsh's fpath: a new shell completes snapback (after compinit)"
		}
		return "zsh: add to ~/.zshrc, before compinit: fpath=(" + dir + " $fpath)"
	}
	return "fish: loaded by each new fish shell, nothing more needed"
}

// inZshFpath: dir is in the fpath zsh starts with, when zsh is here.
func inZshFpath(dir string) bool {
	out, err := exec.Command("zsh", "-fc", "print -rl -- $fpath").Output()
	return err == nil && slices.Contains(strings.Split(string(out), "\n"), dir)
}

// manNeeds is the one line saying whether man finds pages in dir.
func manNeeds(dir string) string {
	top := filepath.Dir(dir)
	out, err := exec.Command("manpath").Output()
	if err == nil && slices.Contains(strings.Split(strings.TrimSpace(string(out)), ":"), top) {
		return "man: `man snapback` finds them"
	}
	return "man: man does not look in " + top + " yet: add `export MANPATH=\"" + top + ":\"` to your shell's profile (the trailing colon keeps the system's pages)"
}
