package runner

import (
	"context"
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
		got, err := Exec(context.Background(), Command{Args: []string{"sh", "-c", c.script}})
		if err != nil || got != c.want {
			t.Errorf("%q: status %d, %v; want %d", c.script, got, err, c.want)
		}
	}
}

func TestNotFoundAndNotExecutable(t *testing.T) {
	got, err := Exec(context.Background(), Command{Args: []string{"snapback-no-such-command-xyz"}})
	var re *Error
	if got != StatusNotFound || !errors.As(err, &re) || re.Status != StatusNotFound {
		t.Fatalf("missing command: %d %v, want 127", got, err)
	}
	p := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err = Exec(context.Background(), Command{Args: []string{p}})
	if got != StatusNotExec || err == nil {
		t.Fatalf("non-executable: %d %v, want 126", got, err)
	}
	if got, err := Exec(context.Background(), Command{}); got != StatusFailed || err == nil {
		t.Fatalf("empty command: %d %v, want 125", got, err)
	}
	// A directory, as a shell reports it (bash: "Is a directory", 126).
	dir := t.TempDir()
	got, err = Exec(context.Background(), Command{Args: []string{dir}})
	if got != StatusNotExec || err == nil || err.Error() != dir+": is a directory" {
		t.Fatalf("a directory: %d %v, want 126 and %q", got, err, dir+": is a directory")
	}
}

// TestOutside: with Outside, snapback waits in / while the command runs
// (its /proc/PID/cwd leads nowhere), the command still starts in the
// working directory, a relative command is found from there, and the
// working directory is back afterwards.
func TestOutside(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	script := "#!/bin/sh\nreadlink /proc/$PPID/cwd > parent; pwd > own\n"
	if err := os.WriteFile(filepath.Join(dir, "s"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := Exec(context.Background(), Command{Args: []string{"./s"}, Outside: true})
	if err != nil || got != 0 {
		t.Fatal(got, err)
	}
	parent, _ := os.ReadFile(filepath.Join(dir, "parent"))
	own, _ := os.ReadFile(filepath.Join(dir, "own"))
	real, _ := filepath.EvalSymlinks(dir)
	if string(parent) != "/\n" || (string(own) != dir+"\n" && string(own) != real+"\n") {
		t.Fatalf("snapback waited in %q, the command ran in %q; want / and %s", parent, own, dir)
	}
	if wd, _ := os.Getwd(); wd != dir && wd != real {
		t.Fatalf("working directory after the run: %s, want %s", wd, dir)
	}
}

// TestSignalHook: with Signal set, a forwarded signal goes there, not to
// the started process.
func TestSignalHook(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	got := make(chan os.Signal, 1)
	done := make(chan int, 1)
	go func() {
		st, _ := Exec(context.Background(), Command{Args: []string{"sh", "-c", "touch " + ready + "; sleep 0.5"},
			Signal: func(s os.Signal) error { got <- s; return nil }})
		done <- st
	}()
	for i := 0; ; i++ {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if i == 500 {
			t.Fatal("command never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != syscall.SIGUSR1 {
		t.Fatalf("hook got %v, want SIGUSR1", s)
	}
	if st := <-done; st != 0 {
		t.Fatalf("the command exited %d: the signal reached it", st)
	}
}

func TestDirAndEnv(t *testing.T) {
	dir := t.TempDir()
	got, err := Exec(context.Background(), Command{Args: []string{"sh", "-c", `pwd > out; echo "$SNAPBACK_TEST_VAR" >> out`}, Dir: dir,
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
			st, _ := Exec(context.Background(), Command{Args: []string{"sh", "-c", script}})
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

// TestCancel: a context that ends while the command runs sends it SIGTERM;
// one ended before never starts it.
func TestCancel(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		st, _ := Exec(ctx, Command{Args: []string{"sh", "-c", "trap 'exit 42' TERM; touch " + ready + "; while :; do sleep 0.02; done"}})
		done <- st
	}()
	for i := 0; ; i++ {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if i == 1000 {
			t.Fatal("command never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case st := <-done:
		if st != 42 {
			t.Fatalf("command exited %d, want 42 from its TERM trap", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancel did not reach the command")
	}
	marker := filepath.Join(dir, "ran")
	st, err := Exec(ctx, Command{Args: []string{"touch", marker}})
	if st != StatusFailed || !errors.Is(err, context.Canceled) {
		t.Fatalf("after cancel: %d %v, want 125 and context.Canceled", st, err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran after its context ended")
	}
}
