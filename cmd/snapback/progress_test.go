package main

import (
	"bytes"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapback/snapback/snapshot"
)

// TestProgressLine: reports from many goroutines at once (as a scan's
// workers send them) make one line rewritten with \r at most a few times a
// second, ended with a newline and the totals when the step is done; -q
// and a stderr that is no terminal get nothing. Run it with -race.
func TestProgressLine(t *testing.T) {
	t.Setenv("SNAPBACK_TERMINAL", "1")
	t.Setenv("SNAPBACK_PROGRESS_DELAY", "0")
	var stderr, stdout bytes.Buffer
	g := &globals{stdout: &stdout, stderr: &stderr}
	p := g.progressLine()
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= 2000; i++ {
				p.snapshot(snapshot.Progress{Step: snapshot.StepScan, Paths: int64(i), Bytes: int64(i) * 100})
				if i%500 == 0 {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	p.snapshot(snapshot.Progress{Step: snapshot.StepScan, Paths: 8000, Bytes: 800000, Done: true})
	g.summarize("") // nothing more: the line is already ended
	out := stderr.String()
	if stdout.Len() > 0 {
		t.Errorf("stdout got %q", stdout.String())
	}
	if !strings.HasPrefix(out, "\rsnapback: scanning the tree: ") {
		t.Errorf("progress starts %q, want a \\r line", out[:min(len(out), 40)])
	}
	if !regexp.MustCompile(`\rsnapback: scanning the tree: 8000 paths, 781\.2 KiB read \([0-9.]+ s\) *\n\z`).MatchString(out) {
		t.Errorf("progress ends %q, want the totals and a newline", out[max(0, len(out)-80):])
	}
	// Throttled: the first report shows at once, then one per
	// progressEvery at most (plus the final one).
	if n, most := strings.Count(out, "\r"), int(elapsed/progressEvery)+2; n > most {
		t.Errorf("%d rewrites in %v, want at most %d", n, elapsed, most)
	}
	if strings.Count(out, "\n") != 1 {
		t.Errorf("progress spans %d lines, want 1: %q", strings.Count(out, "\n"), out)
	}

	for _, c := range []struct {
		name  string
		g     *globals
		envTo string
	}{
		{"-q", &globals{quiet: true}, "1"},
		{"--json", &globals{json: true}, "1"},
		{"no terminal", &globals{}, ""},
	} {
		t.Setenv("SNAPBACK_TERMINAL", c.envTo)
		var buf bytes.Buffer
		c.g.stdout, c.g.stderr = &buf, &buf
		if p := c.g.progressLine(); p != nil {
			t.Errorf("%s: a progress line", c.name)
		}
		// A nil line takes every call and prints nothing.
		var nilLine *progressLine
		nilLine.update("x", "y")
		nilLine.end("z")
		if buf.Len() > 0 {
			t.Errorf("%s: printed %q", c.name, buf.String())
		}
	}
}
