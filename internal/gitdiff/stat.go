package gitdiff

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// StatLine is one file of `git diff --stat`, as git counts it.
type StatLine struct {
	Name             string // quoted as git quotes it (Quote)
	Added, Deleted   int
	Binary           bool
	OldSize, NewSize int64 // a binary file's sizes, shown instead of lines
}

// WriteStat writes lines as `git diff --stat` does in a terminal of
// width columns: names padded to one width (the longest cut from the
// left, "..."), the count, a +/- graph scaled to fit, and the summary
// line. It follows git's diff.c (show_stats, print_stat_summary).
func WriteStat(w io.Writer, lines []StatLine, width int) {
	if len(lines) == 0 {
		return // git says nothing either
	}
	maxLen, maxChange, numberWidth, binWidth := 0, 0, 0, 0
	for _, l := range lines {
		maxLen = max(maxLen, utf8.RuneCountInString(l.Name))
		if l.Binary {
			binWidth = max(binWidth, 14+decimalWidth(l.OldSize)+decimalWidth(l.NewSize))
			numberWidth = max(numberWidth, 3) // "Bin"
			continue
		}
		maxChange = max(maxChange, l.Added+l.Deleted)
	}
	numberWidth = max(numberWidth, decimalWidth(int64(maxChange)))
	width = max(width, 16+6+numberWidth)
	graphWidth := maxChange
	if maxChange+4 <= binWidth {
		graphWidth = binWidth - 4
	}
	nameWidth := maxLen
	if nameWidth+numberWidth+6+graphWidth > width {
		if graphWidth > width*3/8-numberWidth-6 {
			graphWidth = max(width*3/8-numberWidth-6, 6)
		}
		if nameWidth > width-numberWidth-6-graphWidth {
			nameWidth = width - numberWidth - 6 - graphWidth
		} else {
			graphWidth = width - numberWidth - 6 - nameWidth
		}
	}
	var adds, dels int
	for _, l := range lines {
		name := l.Name
		if n := utf8.RuneCountInString(name); n > nameWidth {
			// Cut from the left, at a directory when one is near.
			r := []rune(name)
			name = string(r[n-(nameWidth-3):])
			if i := strings.IndexByte(name, '/'); i >= 0 {
				name = name[i:]
			}
			name = "..." + name
		}
		pad := strings.Repeat(" ", max(nameWidth-utf8.RuneCountInString(name), 0))
		if l.Binary {
			fmt.Fprintf(w, " %s%s | %*s", name, pad, numberWidth, "Bin")
			if l.OldSize == 0 && l.NewSize == 0 {
				fmt.Fprintln(w)
			} else {
				fmt.Fprintf(w, " %d -> %d bytes\n", l.OldSize, l.NewSize)
			}
			continue
		}
		adds += l.Added
		dels += l.Deleted
		add, del := l.Added, l.Deleted
		if graphWidth <= maxChange {
			total := scaleLinear(add+del, graphWidth, maxChange)
			if total < 2 && add > 0 && del > 0 {
				total = 2
			}
			if add < del {
				add = scaleLinear(add, graphWidth, maxChange)
				del = total - add
			} else {
				del = scaleLinear(del, graphWidth, maxChange)
				add = total - del
			}
		}
		sep := ""
		if l.Added+l.Deleted > 0 {
			sep = " "
		}
		fmt.Fprintf(w, " %s%s | %*d%s%s%s\n", name, pad, numberWidth, l.Added+l.Deleted, sep,
			strings.Repeat("+", add), strings.Repeat("-", del))
	}
	fmt.Fprintln(w, statSummary(len(lines), adds, dels))
}

// statSummary is git's last line of --stat (of at least one file).
func statSummary(files, adds, dels int) string {
	plural := func(n int, one, many string) string {
		if n == 1 {
			return fmt.Sprintf("%d %s", n, one)
		}
		return fmt.Sprintf("%d %s", n, many)
	}
	s := " " + plural(files, "file changed", "files changed")
	if adds > 0 || dels == 0 {
		s += ", " + plural(adds, "insertion(+)", "insertions(+)")
	}
	if dels > 0 || adds == 0 {
		s += ", " + plural(dels, "deletion(-)", "deletions(-)")
	}
	return s
}

func scaleLinear(it, width, maxChange int) int {
	if it == 0 {
		return 0
	}
	return 1 + it*(width-1)/maxChange
}

func decimalWidth(n int64) int {
	w := 1
	for ; n >= 10; n /= 10 {
		w++
	}
	return w
}
