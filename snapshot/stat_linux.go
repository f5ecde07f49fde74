package snapshot

import "golang.org/x/sys/unix"

func statOf(st *unix.Stat_t) statInfo {
	return statInfo{
		Mode: st.Mode, UID: st.Uid, GID: st.Gid, Size: st.Size,
		Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(),
		Ino: st.Ino, Dev: st.Dev, Nlink: uint64(st.Nlink),
	}
}

// bornSince reports whether the file at path (not followed) was created
// at or after ns, where the filesystem records a birth time; false where
// it does not.
func bornSince(path string, ns int64) bool {
	var stx unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BTIME, &stx) != nil || stx.Mask&unix.STATX_BTIME == 0 {
		return false
	}
	return stx.Btime.Sec*1e9+int64(stx.Btime.Nsec) >= ns
}
