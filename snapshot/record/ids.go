package record

import "strings"

// IDNames reports whether ref names id, by the one rule every verb
// uses: ref is a prefix of id (20261201-03), or a suffix of its random
// part (aadd13, d13), the part people copy from the end of a line.
func IDNames(id, ref string) bool {
	if ref == "" {
		return false
	}
	if strings.HasPrefix(id, ref) {
		return true
	}
	i := strings.LastIndexByte(id, '-')
	return i >= 0 && strings.HasSuffix(id[i+1:], ref)
}
