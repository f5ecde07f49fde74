//go:build !linux

package watch

// Writers returns nothing here: this system has no watcher.
func Writers(root string) []string { return nil }
