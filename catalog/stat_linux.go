package catalog

import "syscall"

// statTimes is a stat's mtime and ctime, in ns.
func statTimes(st *syscall.Stat_t) (mtime, ctime int64) { return st.Mtim.Nano(), st.Ctim.Nano() }
