//go:build linux

package fuse

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
)

// TestConcurrentRequests: callers on threads of their own change the
// view at once (over io_uring, each CPU's queue serves its requests
// while the others' do: scripts/test.sh runs this package under the
// race detector), each in a directory of its own, while all read a
// shared one. Every caller's directory ends as its own model says, the
// shared files read as the lower tree has them, and the lower tree is
// untouched.
func TestConcurrentRequests(t *testing.T) {
	const workers, rounds, shared = 8, 25, 40
	lower, upper, mnt, unmount := view(t, func(l string) {
		for i := 0; i < shared; i++ {
			treetest.Write(t, l, fmt.Sprintf("shared/s%02d", i), fmt.Sprint("shared ", i), 0o644)
		}
		for w := 0; w < workers; w++ {
			for i := 0; i < 5; i++ {
				treetest.Write(t, l, fmt.Sprintf("w%d/low%d", w, i), fmt.Sprint("lower ", w, i), 0o644)
			}
		}
	})
	var wg sync.WaitGroup
	models := make([]map[string]string, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			dir := filepath.Join(mnt, fmt.Sprint("w", w))
			model := map[string]string{}
			for i := 0; i < 5; i++ {
				model[fmt.Sprint("low", i)] = fmt.Sprint("lower ", w, i)
			}
			put := func(name, content string) {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Error(err)
				}
				model[name] = content
			}
			for r := 0; r < rounds; r++ {
				put(fmt.Sprint("new", r), fmt.Sprint("new ", w, r))
				put(fmt.Sprint("low", r%5), fmt.Sprint("copied up ", w, r)) // a copy-up, then rewrites
				if r%3 == 0 {
					from, to := fmt.Sprint("new", r), fmt.Sprint("moved", r)
					if err := os.Rename(filepath.Join(dir, from), filepath.Join(dir, to)); err != nil {
						t.Error(err)
					}
					model[to] = model[from]
					delete(model, from)
				}
				if r%4 == 1 && r%3 != 0 {
					if err := os.Remove(filepath.Join(dir, fmt.Sprint("new", r))); err != nil {
						t.Error(err)
					}
					delete(model, fmt.Sprint("new", r))
				}
				sub := filepath.Join(dir, fmt.Sprint("d", r))
				if err := os.Mkdir(sub, 0o755); err != nil {
					t.Error(err)
				} else if err := os.Remove(sub); err != nil {
					t.Error(err)
				}
				s := (w*rounds + r) % shared
				if b, err := os.ReadFile(filepath.Join(mnt, "shared", fmt.Sprintf("s%02d", s))); err != nil || string(b) != fmt.Sprint("shared ", s) {
					t.Errorf("shared/s%02d reads %q, %v", s, b, err)
				}
				if ents, err := os.ReadDir(filepath.Join(mnt, "shared")); err != nil || len(ents) != shared {
					t.Errorf("shared lists %d entries, %v", len(ents), err)
				}
			}
			models[w] = model
		}()
	}
	wg.Wait()
	for w, model := range models {
		dir := filepath.Join(mnt, fmt.Sprint("w", w))
		ents, err := os.ReadDir(dir)
		treetest.Must(t, err)
		var got, want []string
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			treetest.Must(t, err)
			got = append(got, e.Name()+"="+string(b))
		}
		for name, content := range model {
			want = append(want, name+"="+content)
		}
		sort.Strings(got)
		sort.Strings(want)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("w%d:\n%s\nwant\n%s", w, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	unmount()
	for w := 0; w < workers; w++ {
		for i := 0; i < 5; i++ {
			if got := read(t, filepath.Join(lower, fmt.Sprintf("w%d/low%d", w, i))); got != fmt.Sprint("lower ", w, i) {
				t.Errorf("lower w%d/low%d changed: %q", w, i, got)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(upper, "shared")); err == nil {
		t.Errorf("reading the shared directory made an upper copy of it")
	}
}
