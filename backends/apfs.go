package backends

// APFS snapshots a directory on APFS (setting path: absolute, or relative
// to the project root) by clonefile(2), macOS only: one call clones the
// whole tree into the payload dir, sharing every block with the original,
// so a snapshot costs metadata only. The payload dir must be on the same
// APFS volume.
//
// Restore clones the payload's copy beside the target
// (<parent>/.snapback-restore-<hash of the target path>), exchanges the two
// with one renamex_np(RENAME_SWAP), so the path never goes missing and
// never shows a half-restored tree, then deletes the old tree. A leftover
// under the restore name, from a restore killed before or after its swap,
// is deleted first: rerunning the restore finishes the job.
//
// Limit: a directory clone is made file by file, not at one instant: a
// writer changing several files while it runs can be caught between them
// (an APFS volume snapshot by tmutil would be atomic, but covers the whole
// volume and is not built). Each file is cloned whole.
type APFS struct{}

var _ Backend = (*APFS)(nil)

// Name implements Backend.
func (*APFS) Name() string { return "apfs" }
