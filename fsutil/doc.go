// Package fsutil holds the few filesystem primitives every part of snapback
// relies on for safety:
//
//   - [WriteFileAtomic]: temp file in the target's directory, write, fsync,
//     rename, fsync the directory; nothing half-written is ever visible.
//   - [Dir]: a directory held open by file descriptor. Every path below it is
//     resolved one component at a time with O_NOFOLLOW, so no operation ever
//     follows a symlink or leaves the root, whatever a concurrent process does
//     to the tree.
//   - [CopyHash]: a copy that clones (FICLONE) where the filesystem can, keeps
//     holes of sparse files, and hashes what it copies in the same pass
//     ([CopyFile] when the hash is not needed).
//   - [ReadFileLimit]: a read of a small file snapback keeps that refuses,
//     with one line naming it, a FIFO, a device, a directory or a file over
//     a size bound, so an odd file can neither hang a command nor exhaust
//     its memory.
//   - btrfs subvolumes ([IsSubvolume], [SubvolSnapshot], [SubvolDelete] and
//     the ioctls under them): the btrfs isolation mode's and the btrfs
//     target's one mechanism.
//   - [Mutating]: called before every state-changing system call, so that
//     the kill test (SNAPBACK_KILL_AT=N, read only by a build that called
//     [EnableTestSeams]) can stop the process before each.
package fsutil
