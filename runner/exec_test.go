package runner

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestExitStatusPassesThrough(t *testing.T) {
	for _, c := range []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 3", 3},
		{"exit 255", 255},
		{"kill -TERM $$", 128 + int(syscall.SIGTERM)},
		{"kill -KILL $$", 128 + int(syscall.SIGKILL)},
	} {
		got, err := Run(Command{Args: []string{"sh", "-c", c.script}})
		if err != nil || got != c.want {
			t.Errorf("%q: status %d, %v; want %d", c.script, got, err, c.want)
		}
	}
}

func TestNotFoundAndNotExecutable(t *testing.T) {
	got, err := Run(Command{Args: []string{"snapback-no-such-command-xyz"}})
	var re *Error
	if got != StatusNotFound || !errors.As(err, &re) || re.Status != StatusNotFound {
		t.Fatalf("missing command: %d %v, want 127", got, err)
	}
	p := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err = Run(Command{Args: []string{p}})
	if got != StatusNotExec || err == nil {
		t.Fatalf("non-executable: %d %v, want 126", got, err)
	}
	if got, err := Run(Command{}); got != StatusFailed || err == nil {
		t.Fatalf("empty command: %d %v, want 125", got, err)
	}
}

func TestDirAndEnv(t *testing.T) {
	dir := t.TempDir()
	got, err := Run(Command{Args: []string{"sh", "-c", `pwd > out; echo "$SNAPBACK_TEST_VAR" >> out`}, Dir: dir,
		Env: append(os.Environ(), "SNAPBACK_TEST_VAR=kept")})
	if err != nil || got != 0 {
		t.Fatal(got, err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "out"))
	real, _ := filepath.EvalSymlinks(dir)
	if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); len(lines) != 2 || (lines[0] != dir && lines[0] != real) || lines[1] != "kept" {
		t.Fatalf("command saw %q, want its dir %s and the env var", b, dir)
	}
}

// TestSignalsAreForwarded sends signals to this process (as a user's kill
// of snapback would) while the command runs: each must reach the command.
func TestSignalsAreForwarded(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1} {
		dir := t.TempDir()
		ready := filepath.Join(dir, "ready")
		script := `trap 'exit 42' ` + sigName(sig) + `; touch ` + ready + `; while :; do sleep 0.02; done`
		done := make(chan int, 1)
		go func() {
			st, _ := Run(Command{Args: []string{"sh", "-c", script}})
			done <- st
		}()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := os.Stat(ready); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("command never started")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := syscall.Kill(os.Getpid(), sig); err != nil {
			t.Fatal(err)
		}
		select {
		case st := <-done:
			if st != 42 {
				t.Fatalf("%v: command exited %d, want 42 from its trap", sig, st)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%v was not forwarded", sig)
		}
	}
}

func sigName(s syscall.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "TERM"
	case syscall.SIGHUP:
		return "HUP"
	case syscall.SIGUSR1:
		return "USR1"
	}
	return ""
}
