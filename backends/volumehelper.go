//go:build linux

package backends

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Names the helper reserves at the top of a volume: the staging directory
// of a restore and the directory the old entries wait in until it ends.
const (
	stagePrefix = ".snapback-restore-"
	oldPrefix   = ".snapback-old-"
)

func init() { volumeHelper = runVolumeHelper }

// runVolumeHelper is VolumeHelper on Linux.
func runVolumeHelper(args []string) int {
	var err error
	switch {
	case len(args) == 2 && args[0] == "archive":
		w := bufio.NewWriterSize(os.Stdout, 1<<20)
		if err = archiveDir(args[1], w); err == nil {
			err = w.Flush()
		}
	case len(args) == 5 && args[0] == "archive":
		err = archiveToFile(args[1], args[2], args[3], args[4])
	case len(args) == 4 && args[0] == "restore":
		err = restoreDir(args[1], args[2], args[3], bufio.NewReaderSize(os.Stdin, 1<<20))
	case len(args) == 5 && args[0] == "restore":
		var f *os.File
		if f, err = os.Open(args[4]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return helperNoFile
		}
		defer f.Close() // read-only
		err = restoreDir(args[1], args[2], args[3], bufio.NewReaderSize(f, 1<<20))
	case len(args) == 2 && args[0] == "recover":
		err = recoverDir(args[1])
	default:
		err = fmt.Errorf("usage: %s archive DIR [OUT UID GID] | restore DIR ID SHA256 [IN] | recover DIR", VolumeHelperVerb)
	}
	if err != nil {
		var nf noFileError
		fmt.Fprintln(os.Stderr, strings.ReplaceAll(err.Error(), "\n", " "))
		if errors.As(err, &nf) {
			return helperNoFile
		}
		return 1
	}
	return 0
}

type noFileError struct{ error }

// archiveToFile writes the archive of root to out, synced and owned by
// uid:gid, and prints its sha256 and size.
func archiveToFile(root, out, uid, gid string) error {
	u, err1 := strconv.Atoi(uid)
	g, err2 := strconv.Atoi(gid)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return noFileError{err}
	}
	defer f.Close() // closed and checked below; this one is for errors
	h := sha256.New()
	w := bufio.NewWriterSize(io.MultiWriter(f, h), 1<<20)
	err = archiveDir(root, w)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Chown(u, g)
	}
	if err == nil {
		err = f.Sync()
	}
	var size int64
	if err == nil {
		size, err = f.Seek(0, io.SeekCurrent)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(out) // unfinished: worth nothing
		return err
	}
	_, err = fmt.Printf("%x %d\n", h.Sum(nil), size)
	return err
}

func volReserved(name string) bool {
	return strings.HasPrefix(name, stagePrefix) || strings.HasPrefix(name, oldPrefix)
}

// archiveDir writes root as a PAX tar: owners, modes, nanosecond mtimes,
// xattrs, hard links, symlinks as they are, fifos and devices. A regular
// file's header comes from the open file, so that a file replaced by a
// rename while being read is archived whole, old or new.
func archiveDir(root string, out io.Writer) error {
	tw := tar.NewWriter(out)
	links := map[[2]uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p != root {
				return nil // removed while we walk: not part of what we saw
			}
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel != "." && !strings.Contains(rel, "/") && volReserved(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		var f *os.File
		var st unix.Stat_t
		if d.Type().IsRegular() {
			f, err = os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			defer f.Close() // read-only
			err = unix.Fstat(int(f.Fd()), &st)
		} else {
			err = unix.Lstat(p, &st)
		}
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		hdr := &tar.Header{
			Name:    filepath.ToSlash(rel),
			Mode:    int64(st.Mode & 0o7777),
			Uid:     int(st.Uid),
			Gid:     int(st.Gid),
			ModTime: time.Unix(st.Mtim.Unix()),
			Format:  tar.FormatPAX,
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			if f == nil {
				return nil // it became a regular file while we walked
			}
			hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
			if st.Nlink > 1 {
				key := [2]uint64{uint64(st.Dev), st.Ino}
				if first, ok := links[key]; ok {
					hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
					f = nil
				} else {
					links[key] = hdr.Name
				}
			}
		case unix.S_IFDIR:
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
		case unix.S_IFLNK:
			hdr.Typeflag = tar.TypeSymlink
			if hdr.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
		case unix.S_IFIFO:
			hdr.Typeflag = tar.TypeFifo
		case unix.S_IFCHR, unix.S_IFBLK:
			hdr.Typeflag = tar.TypeChar
			if st.Mode&unix.S_IFMT == unix.S_IFBLK {
				hdr.Typeflag = tar.TypeBlock
			}
			hdr.Devmajor, hdr.Devminor = int64(unix.Major(uint64(st.Rdev))), int64(unix.Minor(uint64(st.Rdev)))
		default:
			return nil // sockets live only while their server does
		}
		if hdr.Typeflag != tar.TypeSymlink && hdr.Typeflag != tar.TypeLink {
			if hdr.PAXRecords, err = volXattrs(p); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if f != nil && hdr.Typeflag == tar.TypeReg {
			n, err := io.Copy(tw, io.LimitReader(f, hdr.Size))
			if err != nil {
				return err
			}
			if n < hdr.Size {
				return fmt.Errorf("%s shrank while being read (stop the containers writing it: stop_containers = true)", rel)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("archive %s: %w", root, err)
	}
	return tw.Close()
}

// volXattrs returns p's extended attributes as PAX records.
func volXattrs(p string) (map[string]string, error) {
	sz, err := unix.Llistxattr(p, nil)
	if err != nil || sz == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			err = nil
		}
		return nil, err
	}
	buf := make([]byte, sz)
	if sz, err = unix.Llistxattr(p, buf); err != nil {
		return nil, err
	}
	recs := map[string]string{}
	for _, name := range strings.Split(string(buf[:sz]), "\x00") {
		if name == "" {
			continue
		}
		v := make([]byte, 64<<10)
		n, err := unix.Lgetxattr(p, name, v)
		if err != nil {
			return nil, fmt.Errorf("xattr %s of %s: %w", name, p, err)
		}
		recs["SCHILY.xattr."+name] = string(v[:n])
	}
	return recs, nil
}

// restoreDir makes root hold exactly the tar read from in (see
// VolumeHelper).
func restoreDir(root, id, want string, in io.Reader) error {
	if id == "" || strings.ContainsAny(id, "/.") {
		return fmt.Errorf("bad restore id %q", id)
	}
	if err := recoverDir(root); err != nil {
		return err
	}
	stage := filepath.Join(root, stagePrefix+id)
	tree := filepath.Join(stage, "tree")
	if err := os.MkdirAll(tree, 0o700); err != nil {
		return err
	}
	h := sha256.New()
	err := volExtract(tree, io.TeeReader(in, h))
	if err == nil {
		_, err = io.Copy(h, in) // the zero blocks after the end
	}
	if err == nil && hex.EncodeToString(h.Sum(nil)) != want {
		err = errors.New("the archive's sha256 is not the one recorded in the snapshot")
	}
	if err == nil {
		err = volSyncFS(root)
	}
	if err == nil {
		// The marker keeps the root's mtime, which moving entries out of
		// the tree changes.
		var st unix.Stat_t
		err = unix.Lstat(tree, &st)
		if err == nil {
			err = volMark(stage, "complete", &st.Mtim)
		}
	}
	if err != nil {
		if rerr := os.RemoveAll(stage); rerr != nil {
			return fmt.Errorf("restore %s: %w (and removing the staging directory: %v)", root, err, rerr)
		}
		return fmt.Errorf("restore %s: %w", root, err)
	}
	return volSwap(root, stage)
}

// recoverDir finishes the swap of every complete staging directory below
// root and removes the others, and any old entries left behind.
func recoverDir(root string) error {
	ents, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, stagePrefix) {
			continue
		}
		stage := filepath.Join(root, name)
		if _, serr := os.Lstat(filepath.Join(stage, "complete")); serr == nil {
			err = volSwap(root, stage)
		} else {
			err = os.RemoveAll(stage)
		}
		if err != nil {
			return fmt.Errorf("recover %s: %w", stage, err)
		}
	}
	// Old entries whose swap ended but for their removal (a swap above
	// removed its own).
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), oldPrefix) {
			if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// volSwap moves the staged tree into root (idempotent: see VolumeHelper).
func volSwap(root, stage string) error {
	id := strings.TrimPrefix(filepath.Base(stage), stagePrefix)
	old := filepath.Join(root, oldPrefix+id)
	tree := filepath.Join(stage, "tree")
	if _, err := os.Lstat(filepath.Join(stage, "moved")); err != nil {
		if err := os.MkdirAll(old, 0o700); err != nil {
			return err
		}
		ents, err := os.ReadDir(root)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if !volReserved(e.Name()) {
				if err := os.Rename(filepath.Join(root, e.Name()), filepath.Join(old, e.Name())); err != nil {
					return err
				}
			}
		}
		if err := volSyncDir(root); err != nil {
			return err
		}
		if err := volMark(stage, "moved", nil); err != nil {
			return err
		}
	}
	ents, err := os.ReadDir(tree)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.Rename(filepath.Join(tree, e.Name()), filepath.Join(root, e.Name())); err != nil {
			return err
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(stage, "complete"), &st); err != nil {
		return err
	}
	if err := volCopyMeta(tree, root, st.Mtim); err != nil {
		return err
	}
	if err := os.RemoveAll(old); err != nil {
		return err
	}
	if err := os.RemoveAll(stage); err != nil {
		return err
	}
	// The removals touched the root's mtime: put it back.
	ts := []unix.Timespec{st.Mtim, st.Mtim}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, root, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	return volSyncDir(root)
}

// volCopyMeta gives the directory dst the owner, mode and xattrs of src
// (the volume's root as archived), and mtime.
func volCopyMeta(src, dst string, mtime unix.Timespec) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return err
	}
	want, err := volXattrs(src)
	if err != nil {
		return err
	}
	have, err := volXattrs(dst)
	if err != nil {
		return err
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			if err := unix.Lremovexattr(dst, strings.TrimPrefix(k, "SCHILY.xattr.")); err != nil {
				return err
			}
		}
	}
	hdr := &tar.Header{Uid: int(st.Uid), Gid: int(st.Gid), Mode: int64(st.Mode & 0o7777),
		ModTime: time.Unix(mtime.Unix()), PAXRecords: want}
	return volSetMeta(dst, hdr, false)
}

// volMark creates the marker dir/name atomically, with mtime when not nil.
func volMark(dir, name string, mtime *unix.Timespec) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if mtime != nil {
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, tmp, []unix.Timespec{*mtime, *mtime}, 0); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return volSyncDir(dir)
}

func volSyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close() // read-only
	return f.Sync()
}

func volSyncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close() // read-only
	return unix.Syncfs(int(f.Fd()))
}

// volExtract unpacks the tar into dir, which is empty. Names must be
// relative and stay below dir; every parent must be a directory this
// extraction made, so no symlink is ever followed, and a hard link must
// name a regular file it made. The entry "./" gives dir its own metadata.
func volExtract(dir string, in io.Reader) error {
	tr := tar.NewReader(in)
	kind := map[string]byte{".": tar.TypeDir}
	type dirMeta struct {
		p   string
		hdr *tar.Header
	}
	var dirs []dirMeta
	buf := make([]byte, 1<<20)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name := path.Clean(hdr.Name)
		if path.IsAbs(hdr.Name) || name == ".." || strings.HasPrefix(name, "../") || strings.Contains(hdr.Name, "\x00") {
			return fmt.Errorf("archive entry %q leaves the volume", hdr.Name)
		}
		if kind[path.Dir(name)] != tar.TypeDir && name != "." {
			return fmt.Errorf("archive entry %q: its parent is not a directory of the archive", hdr.Name)
		}
		if _, ok := kind[name]; ok && name != "." {
			return fmt.Errorf("archive entry %q appears twice", hdr.Name)
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if name != "." {
				if err := os.Mkdir(p, 0o700); err != nil {
					return err
				}
			}
			dirs = append(dirs, dirMeta{p, hdr})
		case tar.TypeReg:
			if name == "." {
				return fmt.Errorf("archive entry %q is not a directory", hdr.Name)
			}
			if err := volWriteFile(p, tr, hdr.Size, buf); err != nil {
				return err
			}
		case tar.TypeLink:
			target := path.Clean(hdr.Linkname)
			if kind[target] != tar.TypeReg {
				return fmt.Errorf("archive entry %q links to %q, not a file of the archive", hdr.Name, hdr.Linkname)
			}
			if err := os.Link(filepath.Join(dir, filepath.FromSlash(target)), p); err != nil {
				return err
			}
			kind[name] = tar.TypeLink
			continue // metadata is the target's
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, p); err != nil {
				return err
			}
		case tar.TypeFifo, tar.TypeChar, tar.TypeBlock:
			mode := map[byte]uint32{tar.TypeFifo: unix.S_IFIFO, tar.TypeChar: unix.S_IFCHR, tar.TypeBlock: unix.S_IFBLK}[hdr.Typeflag]
			if err := unix.Mknod(p, mode|0o600, int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))); err != nil {
				return err
			}
		default:
			return fmt.Errorf("archive entry %q has unsupported type %q", hdr.Name, hdr.Typeflag)
		}
		kind[name] = hdr.Typeflag
		if hdr.Typeflag != tar.TypeDir {
			if err := volSetMeta(p, hdr, hdr.Typeflag == tar.TypeSymlink); err != nil {
				return err
			}
		}
	}
	// Directories last, deepest first: their mtimes change as entries
	// appear, and a read-only one would refuse its children.
	sort.Slice(dirs, func(i, j int) bool { return dirs[i].p > dirs[j].p })
	for _, d := range dirs {
		if err := volSetMeta(d.p, d.hdr, false); err != nil {
			return err
		}
	}
	return nil
}

// volWriteFile creates p (never through an existing entry) with size bytes
// from r, leaving holes where the data is zeros.
func volWriteFile(p string, r io.Reader, size int64, buf []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer f.Close() // closed and checked below; this one is for errors
	var off int64
	for off < size {
		n, err := io.ReadFull(r, buf[:min(int64(len(buf)), size-off)])
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if !volAllZero(buf[:n]) {
			if _, err := f.WriteAt(buf[:n], off); err != nil {
				return err
			}
		}
		off += int64(n)
	}
	if err := f.Truncate(size); err != nil {
		return err
	}
	return f.Close()
}

// volZeros is read only: an array, not a MiB on every process's heap.
var volZeros [1 << 20]byte

func volAllZero(b []byte) bool { return bytes.Equal(b, volZeros[:len(b)]) }

// volSetMeta applies an entry's owner, mode, xattrs and times to p, which
// the extraction made (a symlink is not followed).
func volSetMeta(p string, hdr *tar.Header, symlink bool) error {
	if err := os.Lchown(p, hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	if !symlink {
		// After the chown, which clears set-id bits.
		if err := unix.Fchmodat(unix.AT_FDCWD, p, uint32(hdr.Mode&0o7777), 0); err != nil {
			return err
		}
		for k, v := range hdr.PAXRecords {
			if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
				err := unix.Lsetxattr(p, name, []byte(v), 0)
				if err != nil && !strings.HasPrefix(name, "user.") && (errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOTSUP)) {
					err = nil // a namespace this container may not write (trusted., security.)
				}
				if err != nil {
					return fmt.Errorf("xattr %s of %s: %w", name, p, err)
				}
			}
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
}
