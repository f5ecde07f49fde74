package watch

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxMaps bounds what is read of one process's memory map.
const maxMaps = 16 << 20

// Writers returns the files below root (paths relative to it) that a
// process has open for writing, or mapped shared and writable, now. A
// write through a shared mapping is no inotify event; the event comes
// when the file's last descriptor and mapping are gone (IN_CLOSE_WRITE:
// a mapping holds the open file too). So a reader of the watcher's
// changes reads these files as well (snapshot/watch.go), and misses no
// mapped write. It reads /proc: a process whose entries it may not read
// (another user's, for an ordinary user) is not seen.
func Writers(root string) []string {
	roots := []string{filepath.Clean(root)}
	if real, err := filepath.EvalSymlinks(root); err == nil && real != roots[0] {
		roots = append(roots, real)
	}
	below := func(p string) (string, bool) {
		for _, r := range roots {
			if rel, ok := strings.CutPrefix(p, r+"/"); ok && rel != "" {
				return rel, true
			}
		}
		return "", false
	}
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if rel, ok := below(p); ok && !seen[rel] {
			seen[rel] = true
			out = append(out, rel)
		}
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	for _, e := range procs {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		pid := "/proc/" + e.Name()
		mappedWritable(pid, add)
		openForWrite(pid, below, add)
	}
	return out
}

// mappedWritable calls add for each file pid maps shared and writable.
func mappedWritable(pid string, add func(string)) {
	f, err := os.Open(pid + "/maps")
	if err != nil {
		return
	}
	defer f.Close() // read-only
	sc := bufio.NewScanner(io.LimitReader(f, maxMaps))
	sc.Buffer(make([]byte, 0, 4096), unix.PathMax+256)
	for sc.Scan() {
		// address perms offset dev inode pathname
		fields := strings.SplitN(sc.Text(), " ", 6)
		if len(fields) < 6 || len(fields[1]) < 4 || fields[1][1] != 'w' || fields[1][3] != 's' {
			continue
		}
		p := strings.ReplaceAll(strings.TrimLeft(fields[5], " "), `\012`, "\n") // the kernel escapes a newline so
		if strings.HasPrefix(p, "/") && !strings.HasSuffix(p, " (deleted)") {
			add(p)
		}
	}
}

// openForWrite calls add for each file below the root that pid has open
// for writing.
func openForWrite(pid string, below func(string) (string, bool), add func(string)) {
	fds, err := os.ReadDir(pid + "/fd")
	if err != nil {
		return
	}
	for _, fd := range fds {
		p, err := os.Readlink(pid + "/fd/" + fd.Name())
		if err != nil {
			continue
		}
		if _, ok := below(p); !ok {
			continue
		}
		info, err := os.ReadFile(pid + "/fdinfo/" + fd.Name())
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(l, "flags:"); ok {
				flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
				if err == nil && flags&unix.O_ACCMODE != unix.O_RDONLY {
					add(p)
				}
				break
			}
		}
	}
}
