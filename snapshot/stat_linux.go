package snapshot

import "golang.org/x/sys/unix"

func statOf(st *unix.Stat_t) statInfo {
	return statInfo{
		Mode: st.Mode, UID: st.Uid, GID: st.Gid, Size: st.Size,
		Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(),
		Ino: st.Ino, Dev: st.Dev, Nlink: uint64(st.Nlink),
	}
}
