package snapshot

// SetBeforeHash lets the external tests remove a file between the scan's
// listing and its read (see beforeHash).
func SetBeforeHash(f func(path string)) { beforeHash = f }
