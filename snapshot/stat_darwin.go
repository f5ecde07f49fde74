package snapshot

import "golang.org/x/sys/unix"

func statOf(st *unix.Stat_t) statInfo {
	return statInfo{
		Mode: uint32(st.Mode), UID: st.Uid, GID: st.Gid, Size: st.Size,
		Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(),
		Ino: st.Ino, Dev: uint64(st.Dev), Nlink: uint64(st.Nlink),
	}
}

// bornSince reports whether the file at path (not followed) was created
// at or after ns.
func bornSince(path string, ns int64) bool {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil {
		return false
	}
	return st.Btim.Nano() >= ns
}
