package main

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/snapback/snapback/catalog"
	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot"
)

// The progress line: on a terminal's stderr, work that has taken over a
// second (progressDelay) shows how far it has got, in one line rewritten
// in place with \r a few times a second, ended with a newline when the
// work ends, before anything else is printed. Scripts (stderr not a
// terminal), -q and --json never see it. The library only reports
// (snapshot.Progress, catalog.Progress); this file alone prints.

// progressEvery throttles the rewrites: a few a second.
const progressEvery = 200 * time.Millisecond

// progressDelay is how long work runs before its progress shows, so that
// quick verbs stay silent. SNAPBACK_PROGRESS_DELAY (a duration) sets it,
// for the tests (a test-seams build only).
func progressDelay() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("SNAPBACK_PROGRESS_DELAY")); err == nil && d >= 0 && fsutil.TestSeams() {
		return d
	}
	return time.Second
}

// progressLine is one line of progress on stderr; its methods are safe
// for concurrent use (a scan reports from several goroutines).
type progressLine struct {
	g     *globals
	delay time.Duration
	mu    sync.Mutex
	step  string    // what is being done; "" between steps
	start time.Time // when step began
	last  time.Time // when the line was last written
	width int       // the length of the line shown, 0 when none is
}

// progressShown says whether progress is shown at all.
func (g *globals) progressShown() bool {
	return !g.quiet && !g.json && g.terminal(g.stderr, "stderr")
}

// progressLine returns the verb's progress line, or nil when progress is
// not shown (a nil line ignores every call).
func (g *globals) progressLine() *progressLine {
	if !g.progressShown() {
		return nil
	}
	if g.bar == nil {
		g.bar = &progressLine{g: g, delay: progressDelay()}
	}
	return g.bar
}

// update shows text as step's progress, if step has run long enough and
// the line was not rewritten too recently.
func (p *progressLine) update(step, text string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if step != p.step {
		p.endLocked("")
		p.step, p.start = step, now
	}
	if now.Sub(p.start) < p.delay || p.width > 0 && now.Sub(p.last) < progressEvery {
		return
	}
	p.writeLocked(text)
	p.last = now
}

// writeLocked rewrites the line with text (padded over a longer old one).
func (p *progressLine) writeLocked(text string) {
	line := "snapback: " + oneLine(text)
	pad := ""
	if n := p.width - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	fmt.Fprintf(p.g.stderr, "\r%s%s", line, pad)
	p.width = len(line)
}

// end ends the current step: a line shown is rewritten with final (when
// not "") and ended with a newline, so that what follows starts clean.
func (p *progressLine) end(final string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLocked(final)
}

func (p *progressLine) endLocked(final string) {
	if p.width > 0 {
		if final != "" {
			p.writeLocked(fmt.Sprintf("%s (%.1f s)", final, time.Since(p.start).Seconds()))
		}
		fmt.Fprintln(p.g.stderr)
	}
	p.step, p.width = "", 0
}

// snapshot renders the repo's progress reports.
func (p *progressLine) snapshot(pr snapshot.Progress) {
	text := ""
	switch pr.Step {
	case snapshot.StepScan:
		text = fmt.Sprintf("scanning the tree: %d paths, %s read", pr.Paths, humanBytes(pr.Bytes))
	case snapshot.StepApply:
		text = fmt.Sprintf("applying: %d of %d paths", pr.Paths, pr.Total)
	default:
		return
	}
	if pr.Done {
		p.end(text)
		return
	}
	p.update(pr.Step, text)
}

// bytes returns a catalog.Progress showing what of total bytes is done
// (an archive written, verified, restored), and the call that ends it.
func (p *progressLine) bytes(what string, total int64) (catalog.Progress, func()) {
	if p == nil {
		return nil, func() {}
	}
	var mu sync.Mutex
	var seen int64
	text := func() string {
		if total <= 0 {
			return fmt.Sprintf("%s: %s", what, humanBytes(seen))
		}
		return fmt.Sprintf("%s: %s of %s (%d%%)", what, humanBytes(seen), humanBytes(total), min(seen*100/total, 100))
	}
	return func(n int64) {
			mu.Lock()
			seen += n
			t := text()
			mu.Unlock()
			p.update(what, t)
		}, func() {
			mu.Lock()
			t := text()
			mu.Unlock()
			p.end(t)
		}
}
