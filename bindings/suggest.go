package bindings

import (
	"fmt"
	"strings"
)

// DidYouMean returns ` (did you mean "k"?)` for the known name closest to
// s (at most two edits away, case aside), or "" when none is: the hint
// every "unknown option" and "unknown key" error carries.
func DidYouMean(s string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := EditDistance(strings.ToLower(s), strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// EditDistance is the Levenshtein distance of a and b.
func EditDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
