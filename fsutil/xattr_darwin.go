package fsutil

func (d *Dir) xattrPath(name string) string { return d.join(name) }
