// Package suggest finds the word a user probably meant: the did-you-mean
// of snapback's unknown flags and snapback.toml keys.
package suggest

// Closest returns the word of words nearest to name, if one is within
// two edits of it ("" when none is).
func Closest(name string, words []string) string {
	best, bestD := "", 3
	for _, w := range words {
		if d := distance(name, w); d < bestD {
			best, bestD = w, d
		}
	}
	return best
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
