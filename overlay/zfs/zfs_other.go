//go:build !linux

package zfs

import "errors"

// MountDir holds the clones' mount points (Linux only).
const MountDir = "/run/snapback/zfs"

var errNotLinux = errors.New("the zfs mode needs Linux (its view is a bind mount in a private mount namespace)")

// Clones are the names of one run's view; here none can be made.
type Clones struct {
	Dataset string `json:"dataset"`
	Sub     string `json:"sub,omitempty"`
	Snap    string `json:"snap"`
	View    string `json:"view"`
	Base    string `json:"base"`
	Taken   int64  `json:"taken,omitempty"`
}

// Check reports that the zfs mode does not work here.
func Check(string) (bool, string) { return false, errNotLinux.Error() }

// Names fails: there are no zfs views here.
func Names(string, string) (*Clones, error) { return nil, errNotLinux }

// Make fails.
func (*Clones) Make() error { return errNotLinux }

// Complete reports no clones.
func (*Clones) Complete() (bool, error) { return false, nil }

// Destroy has nothing to destroy.
func (*Clones) Destroy() error { return nil }

// ViewRoot and BaseRoot name nothing here.
func (*Clones) ViewRoot() string { return "" }
func (*Clones) BaseRoot() string { return "" }

// WriteLayer fails.
func WriteLayer(string, string, string, int64) error { return errNotLinux }
