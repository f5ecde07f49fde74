// Package layout holds the names snapback gives its own files in a
// project tree: the store's directory and the prefix of the temp files a
// restore makes beside their destination. It is a leaf (it imports
// nothing of snapback's), so that the view helper (overlay), which must
// hide and skip these names, does not depend on the store and, through
// it, on every target backend.
package layout

// StoreDir is the store's directory name inside the root.
const StoreDir = ".snapback"

// TempPrefix starts the names of the temp files a restore creates next to
// their destination; scans skip them and recover removes them.
const TempPrefix = ".snapback-tmp."
