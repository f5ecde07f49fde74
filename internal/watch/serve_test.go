//go:build linux

package watch

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestMain lets the test binary be the watcher that Start starts (it
// runs this program with ServeVerb).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ServeVerb {
		os.Exit(Serve(os.Args[2:]))
	}
	if os.Getenv("WATCH_TEST_AGENT") != "" { // TestAgent's hook
		p, ok := Agent()
		fmt.Println(p, ok)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// watchers returns the pids of the watchers of root running now (from
// /proc: a watcher started by Start runs as `snapback __watch-tree ROOT
// STORE`).
func watchers(t *testing.T, root string) []string {
	t.Helper()
	want := []byte("snapback\x00" + ServeVerb + "\x00" + root + "\x00")
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, p := range procs {
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err == nil && bytes.HasPrefix(b, want) {
			pids = append(pids, p.Name())
		}
	}
	return pids
}

// A project and its store removed (rm -rf) while their watcher starts,
// or soon after, are removed whole: the watcher makes nothing in the
// store once the removal has begun (a file made in a directory already
// listed by the removal fails it: directory not empty), and it exits.
// The store is in the tree (where snapback puts it) in even rounds and
// beside it in odd ones; the removal begins at a random moment of the
// watcher's start (its exec, its lock and socket, its watches).
func TestRemovalRacesWatcher(t *testing.T) {
	t.Setenv("SNAPBACK_WATCH_IDLE", "1m") // a watcher the test leaves behind does not stay
	rnd := rand.New(rand.NewSource(time.Now().UnixNano()))
	for i := 0; i < 50; i++ {
		base := t.TempDir()
		root := filepath.Join(base, "project")
		store := filepath.Join(root, ".snapback")
		if i%2 == 1 {
			store = filepath.Join(base, "store")
		}
		for _, d := range []string{root, store, filepath.Join(root, "a", "b"), filepath.Join(store, "objects", "0a")} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		for j := 0; j < 100; j++ {
			if err := os.WriteFile(filepath.Join(root, "a", fmt.Sprintf("f%d", j)), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(store, "objects", "0a", fmt.Sprintf("o%d", j)), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := Start(root, store); err != nil {
			t.Fatalf("round %d: start: %v", i, err)
		}
		time.Sleep(time.Duration(rnd.Intn(6_000)) * time.Microsecond)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for k, d := range []string{root, store} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[k] = os.RemoveAll(d)
			}()
		}
		wg.Wait()
		for k, d := range []string{root, store} {
			if errs[k] != nil {
				t.Errorf("round %d: remove %s: %v", i, d, errs[k])
			} else if _, err := os.Lstat(d); !os.IsNotExist(err) {
				t.Errorf("round %d: %s still there after its removal (%v)", i, d, err)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for len(watchers(t, root)) > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if pids := watchers(t, root); len(pids) > 0 {
			t.Errorf("round %d: the watcher (pid %v) still runs 10 s after its tree and store were removed", i, pids)
		}
		if t.Failed() {
			return
		}
	}
}
