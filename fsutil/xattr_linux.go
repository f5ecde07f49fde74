package fsutil

import "strconv"

// xattrPath names an entry through /proc/self/fd so the kernel resolves
// the directory by descriptor, not by a path that could be swapped.
func (d *Dir) xattrPath(name string) string {
	return "/proc/self/fd/" + strconv.Itoa(d.fd) + "/" + name
}
