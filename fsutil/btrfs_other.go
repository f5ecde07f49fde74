//go:build !linux

package fsutil

import "errors"

var errNoBtrfs = errors.New("btrfs is Linux only")

// IsSubvolume reports whether p is the root of a btrfs subvolume: never,
// off Linux.
func IsSubvolume(string) (bool, string) { return false, errNoBtrfs.Error() }

// SubvolSnapshot is Linux only.
func SubvolSnapshot(string, string) error { return errNoBtrfs }

// SubvolDelete is Linux only.
func SubvolDelete(string) error { return errNoBtrfs }
