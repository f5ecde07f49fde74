// Package catalog exports snapshots to self-contained, verified archives
// and keeps a catalog of them: a directory that is its own truth.
//
// An archive is a zip file named backup-<id>.zip, id being 32 lowercase
// hex digits derived from its content. It holds, uncompressed:
//
//	snapback/meta.json     the snapshot's record
//	snapback/manifest      its manifest (the store's binary codec)
//	objects/<sha256>       every content the manifest refers to
//	targets/<n>/...        the target payloads the snapshot owns
//	snapback/index         "<sha256> <size> <name>" for each entry above
//	snapback/summary.json  identity, snapshot, project, time, counts, and
//	                       archive_sha256: the SHA-256 of the index
//
// The index commits to every entry's content, the summary to the index,
// and the name to the whole summary (every field, in its one canonical
// encoding); the summary's fields must agree with the record and the
// manifest; and the zip structure around the entries must be exactly
// what create writes (see checkLayout): verifying an archive checks every
// byte of the file. Archives are not encrypted.
package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"
)

// Format names the archive layout in summaries.
const Format = "snapback-archive/2"

// Entry names of the fixed parts.
const (
	metaName    = "snapback/meta.json"
	manifestNm  = "snapback/manifest"
	indexName   = "snapback/index"
	summaryName = "snapback/summary.json"
	objectsDir  = "objects/"
	targetsDir  = "targets/"
)

var (
	nameRE      = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^backup-([0-9a-f]{32})\.zip$`) })
	projectIDRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{32}$`) })
)

// IDOf returns the id in an archive's file name, if it is one.
func IDOf(name string) (string, bool) {
	m := nameRE().FindStringSubmatch(name)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// FileName is the name of the archive with this id.
func FileName(id string) string { return "backup-" + id + ".zip" }

// Summary describes an archive; it is the archive's last entry.
type Summary struct {
	Format            string    `json:"format"`
	ID                string    `json:"id"`
	Snapshot          string    `json:"snapshot"`
	Kind              string    `json:"kind"`
	Message           string    `json:"message,omitempty"`
	Project           string    `json:"project"`    // the project's root when archived
	ProjectID         string    `json:"project_id"` // the project's stable id (its store's project-id)
	SnapshotCreatedAt time.Time `json:"snapshot_created_at"`
	CreatedAt         time.Time `json:"created_at"`
	Files             int       `json:"files"`   // files in the manifest
	Objects           int       `json:"objects"` // distinct contents
	Targets           int       `json:"targets"`
	Entries           int       `json:"entries"` // indexed entries
	Bytes             int64     `json:"bytes"`   // indexed bytes
	ArchiveSHA256     string    `json:"archive_sha256"`
}

// identity derives an archive's id from its whole summary (but the id):
// changing any field, the time or the message included, changes the name
// the archive must have.
func identity(s *Summary) string {
	c := *s
	c.ID = ""
	b, _ := json.Marshal(&c) // a struct of strings, numbers and times: always marshals
	h := sha256.Sum256(append([]byte(Format+"\n"), b...))
	return hex.EncodeToString(h[:16])
}

// encodeSummary is a summary's one canonical encoding, as stored.
func encodeSummary(s *Summary) []byte {
	b, _ := json.MarshalIndent(s, "", "  ") // as in identity
	return append(b, '\n')
}

// Error is a catalog error with a stable code (the "error" of --json).
type Error struct {
	Code string
	Msg  string
	Err  error
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

// Codes.
const (
	CodeInsecure   = "catalog_insecure"  // the catalog directory is not private or has a symlink
	CodeArchiveIns = "archive_insecure"  // an archive in the catalog not owned by you or not mode 0600
	CodeNotRegular = "not_regular"       // a name like an archive's that is a symlink, FIFO, directory or device
	CodeChanged    = "catalog_changed"   // the catalog changed during a scan or since a preview
	CodeNotFound   = "not_found"         // no such archive or snapshot
	CodeBadName    = "bad_name"          // not an archive name, or the name does not match the content
	CodeBadZip     = "bad_zip"           // not a readable zip
	CodeUnsafe     = "unsafe_entry"      // an entry that could write outside, a duplicate, a device
	CodeTooLarge   = "too_large"         // past a size, count or decompression-ratio limit
	CodeBadSummary = "bad_summary"       // summary missing or malformed
	CodeBadIndex   = "bad_index"         // index missing, malformed, or not matching the entries
	CodeChecksum   = "checksum_mismatch" // an entry's content does not match its SHA-256
	CodeIncomplete = "incomplete"        // a content the manifest needs is missing
	CodeStoreEntry = "store_entry"       // an archived path with a .snapback component, or a restore into a store: an archive never writes a project's store
	CodeNotEmpty   = "dir_not_empty"     // restore into a non-empty directory without --merge
	CodeToken      = "bad_token"         // unknown, used or expired prune token
	CodeStale      = "retention_stale"   // the catalog no longer matches a prune's plan: refused, nothing deleted
	CodeIO         = "io_error"
	CodeUsage      = "usage"              // an option out of its range
	CodeNoCatalog  = "no_catalog"         // no --catalog and no [archive] destination
	CodeBadPath    = "bad_path"           // a catalog path with "..", or relative outside a project
	CodeOther      = "other_project"      // an archive of another project, without --all
	CodeInProject  = "catalog_in_project" // a catalog at or beneath the project root
	// CodeInterrupted: stopped by its context (Ctrl-C), nothing half-done
	// left; the error wraps the context's (errors.Is context.Canceled).
	CodeInterrupted = "interrupted"
)

func errf(code string, format string, a ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, a...)}
}

func wrap(code string, err error, format string, a ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, a...) + ": " + err.Error(), Err: err}
}

// interrupted is the error of an operation ctx stopped.
func interrupted(ctx context.Context, what string) error {
	return &Error{Code: CodeInterrupted, Msg: what + ": interrupted; nothing half-done was left", Err: ctx.Err()}
}

// isInterrupted reports whether err is an operation's stop by its
// context (not a finding about an archive).
func isInterrupted(err error) bool {
	return CodeOf(err) == CodeInterrupted || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// CodeOf returns an error's code ("" when it has none).
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Limits bound what reading one archive may cost.
type Limits struct {
	MaxEntries   int     // entries in one archive
	MaxEntrySize int64   // one entry, uncompressed
	MaxTotal     int64   // all entries, uncompressed
	MaxRatio     float64 // uncompressed / compressed size of a compressed entry
	MaxMeta      int64   // summary, index, meta and manifest
	MaxArchive   int64   // one archive file, as pulled
}

// DefaultLimits are generous for a project snapshot and small enough that
// a hostile archive cannot exhaust the machine.
var DefaultLimits = Limits{
	MaxEntries:   4_000_000,
	MaxEntrySize: 256 << 30,
	MaxTotal:     1 << 40,
	MaxRatio:     200,
	MaxMeta:      1 << 30,
	MaxArchive:   MaxScanBytes, // a bigger one could never be listed
}
