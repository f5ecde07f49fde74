package backends

import (
	"crypto/sha256"
	"encoding/hex"
)

// Btrfs snapshots a btrfs subvolume (setting path: absolute, or relative to
// the project root) as a read-only snapshot taken by one ioctl
// (BTRFS_IOC_SNAP_CREATE_V2): atomic across the whole subvolume, whatever
// a writer is doing, and nearly free whatever its size. Like a power cut
// at that instant, it holds what the writer had made durable: data still
// in the page cache may be caught half-written (btrfs flushes before the
// snapshot, but not writes racing with it). An application that survives
// a crash, fsyncing before it commits, restores to a committed state.
//
// The snapshot lives on the same filesystem, in a hidden directory beside
// the subvolume: <parent>/.snapback-snapshots/<name>-<hash of the payload
// dir>. The payload dir holds only btrfs.json, which names it and records
// its UUID, so that a restore never takes another subvolume for it.
//
// Restore makes a writable snapshot of the read-only one beside the target
// (<parent>/.snapback-restore-<hash of the target path>), swaps the two
// with one renameat2(RENAME_EXCHANGE), so the path never goes missing and
// never shows a half-restored tree, then deletes the old subvolume. A
// leftover under the restore name, from a restore killed before or after
// its swap, is deleted first: rerunning the restore finishes the job.
// Processes holding files open in the target keep the old (deleted)
// subvolume; their next open by path sees the restored one.
//
// Limits: nested subvolumes are not part of a btrfs snapshot, so they are
// not restored (and an old subvolume that holds one cannot be deleted: the
// next restore says so); a target that is itself a mount point cannot be
// swapped, and Check refuses it.
type Btrfs struct{}

var _ Backend = (*Btrfs)(nil)

// Name implements Backend.
func (*Btrfs) Name() string { return "btrfs" }

// snapHash names a payload's or a target's hidden companions: 16 hex
// digits of the SHA-256 of s.
func snapHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}
