// Package zfs is the zfs view of `snapback run`: the command runs in a
// clone of the project's dataset, and what it changed there becomes the
// run's upper layer, in overlayfs's format (package layer), which commit,
// diff and discard read as they read any view's.
//
// Before the command, [Clones.Make] takes a snapshot of the dataset and
// makes two clones of it, whatever the tree's size: the view (writable),
// which the view helper of package overlay bind-mounts over the project
// root in the command's private mount namespace, and the base (read-only),
// the tree as the command found it. Both are mounted under [MountDir],
// which the helper covers in that namespace. The store's copy in the view
// clone is removed first, so that the store is absent from the view, as in
// the overlay modes.
//
// After the command, [WriteLayer] compares view and base by stat (a clone
// keeps each file's inode number and times, so an untouched file looks the
// same in both): what differs is copied into the upper layer, what is gone
// becomes a whiteout. zfs-fuse has no `zfs diff` and no xattrs, so the
// comparison is a walk of the view, and a directory that replaced another
// gets a whiteout for each name of the old one rather than an opaque mark.
// Then [Clones.Destroy] destroys clones and snapshot; a missing one is no
// error, so it is repeated safely after a crash.
//
// A dataset mounted below the root would show as an empty directory in
// the clone: [Check] refuses such a root, naming it.
package zfs
