package catalog

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// Progress hears how many more bytes were read or written (nil: nothing).
type Progress func(n int64)

// indexLine is one line of an archive's index.
type indexLine struct {
	sum  [32]byte
	size int64
	name string
}

// reader is an open archive whose structure was checked (names, counts,
// sizes, ratios, duplicates); contents are checked as they are read.
type reader struct {
	f       *os.File // nil when reading from memory
	z       *zip.Reader
	size    int64
	byName  map[string]*zip.File
	limits  Limits
	summary *Summary
	// manifest and meta: the archived snapshot, once check has read them.
	manifest record.Manifest
	meta     *record.Meta
	index    []indexLine
	rawIdx   []byte
	layout   *layout
}

// validEntryName reports whether an entry name is one an archive may
// hold: relative, clean, slash-separated, no "..", no NUL, under one of
// the known prefixes.
func validEntryName(n string) bool {
	if n == "" || strings.HasPrefix(n, "/") || strings.Contains(n, "\\") || strings.ContainsRune(n, 0) || path.Clean(n) != n {
		return false
	}
	for _, c := range strings.Split(n, "/") {
		if c == ".." || c == "." || c == "" {
			return false
		}
	}
	switch {
	case n == metaName, n == manifestNm, n == indexName, n == summaryName:
		return true
	case strings.HasPrefix(n, objectsDir):
		_, ok := record.ParseObjectID(strings.TrimPrefix(n, objectsDir))
		return ok
	case strings.HasPrefix(n, targetsDir):
		return strings.Count(n, "/") >= 2
	}
	return false
}

// openArchive opens an archive file and checks its structure. A catalog
// member (private) must also be the user's own, mode 0600.
func openArchive(p string, lim Limits, private bool) (*reader, error) {
	name := filepath.Base(p)
	f, st, err := openRegular(p, private)
	if err != nil {
		return nil, err
	}
	r, err := newReader(f, st.Size(), name, lim)
	if err != nil {
		f.Close()
		return nil, err
	}
	r.f = f
	return r, nil
}

// openRegular opens p for reading only if it is a regular file: it is
// looked at with lstat and opened with O_NOFOLLOW|O_NONBLOCK, so a
// symlink is never followed and a FIFO never blocks the open; what was
// opened must be what was looked at. With private, the file must be the
// user's own with mode 0600, like the catalog directory.
func openRegular(p string, private bool) (*os.File, os.FileInfo, error) {
	name := filepath.Base(p)
	lst, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, errf(CodeNotFound, "archive %s: no such file", name)
	}
	if err != nil {
		return nil, nil, wrap(CodeIO, err, "archive %s", name)
	}
	if err := regularMode(name, lst.Mode()); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, wrap(CodeIO, err, "archive %s", name)
	}
	st, err := f.Stat()
	if err == nil {
		err = regularMode(name, st.Mode())
	}
	if err == nil && !os.SameFile(st, lst) {
		err = errf(CodeChanged, "archive %s was replaced while it was opened; try again", name)
	}
	if err == nil && private {
		err = privateFile(name, st)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// regularMode refuses anything but a regular file, saying what it is.
func regularMode(name string, m fs.FileMode) error {
	if m.IsRegular() {
		return nil
	}
	what := "not a regular file"
	switch {
	case m&fs.ModeSymlink != 0:
		what = "a symlink (never followed)"
	case m&fs.ModeNamedPipe != 0:
		what = "a FIFO"
	case m.IsDir():
		what = "a directory"
	case m&fs.ModeDevice != 0:
		what = "a device"
	case m&fs.ModeSocket != 0:
		what = "a socket"
	}
	return errf(CodeNotRegular, "archive %s: %s, not an archive; left in place", name, what)
}

// privateFile refuses an archive others could have written or swapped.
func privateFile(name string, st os.FileInfo) error {
	uid := st.Sys().(*syscall.Stat_t).Uid
	if int(uid) != os.Geteuid() {
		return errf(CodeArchiveIns, "archive %s: owned by uid %d, not by you (uid %d); left in place", name, uid, os.Geteuid())
	}
	if st.Mode().Perm() != 0o600 || st.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
		return errf(CodeArchiveIns, "archive %s: mode %04o, want 0600 (chmod 600 it if it is yours); left in place", name, st.Mode().Perm())
	}
	return nil
}

// newReader checks the structure of the archive held by ra.
func newReader(ra io.ReaderAt, size int64, name string, lim Limits) (*reader, error) {
	z, err := zip.NewReader(ra, size)
	if err != nil {
		return nil, wrap(CodeBadZip, err, "archive %s", name)
	}
	r := &reader{z: z, size: size, byName: map[string]*zip.File{}, limits: lim}
	fail := func(e *Error) (*reader, error) { return nil, e }
	if len(z.File) > lim.MaxEntries {
		return fail(errf(CodeTooLarge, "archive %s: %d entries, more than %d", name, len(z.File), lim.MaxEntries))
	}
	var total uint64
	for _, zf := range z.File {
		n := zf.Name
		if !validEntryName(n) {
			return fail(errf(CodeUnsafe, "archive %s: entry %q: not a name an archive may hold", name, n))
		}
		if _, dup := r.byName[n]; dup {
			return fail(errf(CodeUnsafe, "archive %s: entry %q appears twice", name, n))
		}
		if m := zf.Mode(); !m.IsRegular() {
			return fail(errf(CodeUnsafe, "archive %s: entry %q is a %v, not a file", name, n, m.Type()))
		}
		switch zf.Method {
		case zip.Store:
			if zf.UncompressedSize64 != zf.CompressedSize64 {
				return fail(errf(CodeBadZip, "archive %s: entry %q: stored sizes disagree", name, n))
			}
		case zip.Deflate:
			// Whatever the size: a bomb of many entries of 1 MiB each is
			// as large as one of 300 MiB.
			if float64(zf.UncompressedSize64) > lim.MaxRatio*float64(zf.CompressedSize64+1) {
				return fail(errf(CodeTooLarge, "archive %s: entry %q expands %d times: a decompression bomb", name, n, zf.UncompressedSize64/(zf.CompressedSize64+1)))
			}
		default:
			return fail(errf(CodeBadZip, "archive %s: entry %q: compression method %d", name, n, zf.Method))
		}
		if zf.UncompressedSize64 > uint64(lim.MaxEntrySize) {
			return fail(errf(CodeTooLarge, "archive %s: entry %q: %d bytes, more than %d", name, n, zf.UncompressedSize64, lim.MaxEntrySize))
		}
		if total += zf.UncompressedSize64; total > uint64(lim.MaxTotal) {
			return fail(errf(CodeTooLarge, "archive %s: more than %d bytes in all", name, lim.MaxTotal))
		}
		r.byName[n] = zf
	}
	if r.layout, err = checkLayout(ra, size, z.File); err != nil {
		return fail(prefix(name, err).(*Error))
	}
	return r, nil
}

func (r *reader) Close() error {
	if r.f == nil {
		return nil
	}
	return r.f.Close()
}

// open reads one entry, refusing more bytes than it declares.
func (r *reader) open(n string) (io.ReadCloser, *zip.File, error) {
	zf := r.byName[n]
	if zf == nil {
		return nil, nil, errf(CodeIncomplete, "entry %q is missing", n)
	}
	rc, err := zf.Open()
	if err != nil {
		return nil, nil, wrap(CodeBadZip, err, "entry %q", n)
	}
	return rc, zf, nil
}

// readSmall reads a whole metadata entry, within MaxMeta.
func (r *reader) readSmall(n string, code string) ([]byte, error) {
	rc, zf, err := r.open(n)
	if err != nil {
		return nil, &Error{Code: code, Msg: err.Error()}
	}
	defer rc.Close()
	if zf.UncompressedSize64 > uint64(r.limits.MaxMeta) {
		return nil, errf(CodeTooLarge, "entry %q: %d bytes", n, zf.UncompressedSize64)
	}
	b, err := io.ReadAll(io.LimitReader(rc, int64(zf.UncompressedSize64)+1))
	if err != nil {
		return nil, wrap(CodeBadZip, err, "entry %q", n)
	}
	if uint64(len(b)) != zf.UncompressedSize64 {
		return nil, errf(CodeBadZip, "entry %q: size differs from its header", n)
	}
	return b, nil
}

// DecodeSummary parses and checks a summary.
func DecodeSummary(b []byte) (*Summary, error) {
	if err := noDuplicateKeys(b); err != nil {
		return nil, err
	}
	var s Summary
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, wrap(CodeBadSummary, err, "summary")
	}
	if dec.More() {
		return nil, errf(CodeBadSummary, "summary: trailing data")
	}
	switch {
	case s.Format != Format:
		return nil, errf(CodeBadSummary, "summary: format %q, want %q", s.Format, Format)
	case !nameRE().MatchString(FileName(s.ID)):
		return nil, errf(CodeBadSummary, "summary: bad id %q", s.ID)
	case !record.ValidID(s.Snapshot):
		return nil, errf(CodeBadSummary, "summary: bad snapshot id %q", s.Snapshot)
	case !projectIDRE().MatchString(s.ProjectID):
		return nil, errf(CodeBadSummary, "summary: bad project_id %q", s.ProjectID)
	case len(s.ArchiveSHA256) != 64 || strings.Trim(s.ArchiveSHA256, "0123456789abcdef") != "":
		return nil, errf(CodeBadSummary, "summary: bad archive_sha256")
	case s.Files < 0 || s.Objects < 0 || s.Targets < 0 || s.Entries < 0 || s.Bytes < 0:
		return nil, errf(CodeBadSummary, "summary: negative counts")
	case s.CreatedAt.IsZero():
		return nil, errf(CodeBadSummary, "summary: no created_at")
	}
	return &s, nil
}

// noDuplicateKeys refuses a JSON text in which an object names a key
// twice: decoders disagree on which one wins, so one reader could see a
// time another does not.
func noDuplicateKeys(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	type frame struct {
		keys   map[string]bool
		object bool
		key    bool // the next token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return wrap(CodeBadSummary, err, "summary")
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				continue
			}
			k, _ := tok.(string)
			if top.keys[k] {
				return errf(CodeBadSummary, "summary: the key %q appears twice", k)
			}
			top.keys[k] = true
			top.key = false
			continue
		}
		if top != nil && top.object {
			top.key = true // this token is the value; a key comes next
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, object: true, key: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	}
}

// parseIndex reads "<sha256 hex> <size> <name>" lines.
func parseIndex(b []byte) ([]indexLine, error) {
	var out []indexLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 3)
		if len(f) != 3 {
			return nil, errf(CodeBadIndex, "index: malformed line %q", sc.Text())
		}
		sum, err := hex.DecodeString(f[0])
		size, serr := strconv.ParseInt(f[1], 10, 64)
		if err != nil || len(sum) != 32 || serr != nil || size < 0 || strconv.FormatInt(size, 10) != f[1] {
			return nil, errf(CodeBadIndex, "index: malformed line %q", sc.Text())
		}
		l := indexLine{size: size, name: f[2]}
		copy(l.sum[:], sum)
		out = append(out, l)
	}
	if sc.Err() != nil {
		return nil, wrap(CodeBadIndex, sc.Err(), "index")
	}
	return out, nil
}

// check verifies everything: the name, the summary, the index against
// the entries, every entry's content against its SHA-256 (objects against
// their names too), the meta and manifest, and that every content the
// manifest needs is there. fileName is the archive's name ("" to skip the
// name check).
//
// Cancelling ctx stops the hashing promptly (CodeInterrupted).
func (r *reader) check(ctx context.Context, fileName string, progress Progress) error {
	sb, err := r.readSmall(summaryName, CodeBadSummary)
	if err != nil {
		return err
	}
	s, err := DecodeSummary(sb)
	if err != nil {
		return err
	}
	r.summary = s
	if r.rawIdx, err = r.readSmall(indexName, CodeBadIndex); err != nil {
		return err
	}
	if sum := sha256.Sum256(r.rawIdx); hex.EncodeToString(sum[:]) != s.ArchiveSHA256 {
		return errf(CodeChecksum, "the index does not match the summary's archive_sha256")
	}
	if !bytes.Equal(sb, encodeSummary(s)) {
		return errf(CodeBadSummary, "the summary is not in its canonical encoding")
	}
	if id := identity(s); id != s.ID {
		return errf(CodeBadName, "the summary's id %s is not the archive's identity %s", s.ID, id)
	}
	if !r.layout.matches(s.CreatedAt) {
		return errf(CodeBadSummary, "the entries' time is not the summary's created_at")
	}
	if fileName != "" {
		if id, _ := IDOf(fileName); id != s.ID {
			return errf(CodeBadName, "the file is named for %s but holds archive %s", id, s.ID)
		}
	}
	if r.index, err = parseIndex(r.rawIdx); err != nil {
		return err
	}
	if len(r.index) != len(r.byName)-2 || len(r.index) != s.Entries {
		return errf(CodeBadIndex, "the index lists %d entries, the archive has %d, the summary says %d", len(r.index), len(r.byName)-2, s.Entries)
	}
	seen := map[string]bool{}
	for _, l := range r.index {
		if seen[l.name] || l.name == indexName || l.name == summaryName {
			return errf(CodeBadIndex, "the index lists %q twice or lists itself", l.name)
		}
		seen[l.name] = true
	}
	// Hashing is the work: the entries are hashed on every CPU at once
	// (each reads its own range of the file), and the first failure in
	// index order is the one reported, as a sequential check would.
	errs := make([]error, len(r.index))
	sizes := make([]int64, len(r.index))
	next := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Bool
	for w := 0; w < min(runtime.GOMAXPROCS(0), len(r.index)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1<<20)
			for i := range next {
				sizes[i], errs[i] = r.checkEntry(ctx, r.index[i], buf)
				if errs[i] != nil {
					failed.Store(true)
				} else if progress != nil {
					progress(sizes[i])
				}
			}
		}()
	}
dispatch:
	for i := range r.index {
		if failed.Load() {
			break
		}
		select {
		case next <- i:
		case <-ctx.Done():
			break dispatch
		}
	}
	close(next)
	wg.Wait()
	if ctx.Err() != nil {
		return interrupted(ctx, "verify")
	}
	var bytesTotal int64
	for i := range r.index {
		if errs[i] != nil {
			return errs[i]
		}
		bytesTotal += sizes[i]
	}
	if bytesTotal != s.Bytes {
		return errf(CodeBadSummary, "the summary counts %d bytes, the entries hold %d", s.Bytes, bytesTotal)
	}
	m, meta, err := r.snapshot()
	if err != nil {
		return err
	}
	r.manifest, r.meta = m, meta
	if err := agrees(s, meta, m, r.index); err != nil {
		return err
	}
	var missing []string
	m.Objects(func(o record.ObjectID) {
		if !seen[objectsDir+o.String()] && len(missing) < 3 {
			missing = append(missing, o.String())
		}
	})
	if len(missing) > 0 {
		return errf(CodeIncomplete, "contents the manifest needs are missing: %s", strings.Join(missing, ", "))
	}
	return nil
}

// checkEntry reads the entry l names and checks it against l's size and
// SHA-256 (and, for a content, its name); it returns the bytes read.
func (r *reader) checkEntry(ctx context.Context, l indexLine, buf []byte) (int64, error) {
	rc, zf, err := r.open(l.name)
	if err != nil {
		return 0, &Error{Code: CodeBadIndex, Msg: "the index lists " + err.Error()}
	}
	defer rc.Close()
	if int64(zf.UncompressedSize64) != l.size {
		return 0, errf(CodeBadIndex, "entry %q: %d bytes, the index says %d", l.name, zf.UncompressedSize64, l.size)
	}
	h := sha256.New()
	n, err := io.CopyBuffer(h, io.LimitReader(ctxReader{ctx, rc}, l.size+1), buf)
	if ctx.Err() != nil {
		return 0, interrupted(ctx, "verify")
	}
	if err != nil {
		return 0, wrap(CodeChecksum, err, "entry %q", l.name)
	}
	if n != l.size || !bytes.Equal(h.Sum(nil), l.sum[:]) {
		return 0, errf(CodeChecksum, "entry %q does not match its SHA-256", l.name)
	}
	if oid, ok := strings.CutPrefix(l.name, objectsDir); ok && oid != hex.EncodeToString(l.sum[:]) {
		return 0, errf(CodeChecksum, "object %q holds content %x", l.name, l.sum)
	}
	return n, nil
}

// agrees checks the summary against what the archive holds: its fields
// are no one's word.
func agrees(s *Summary, meta *record.Meta, m record.Manifest, index []indexLine) error {
	files, objects := 0, 0
	for i := range m {
		if m[i].Type == record.File {
			files++
		}
		if p := m[i].Path; p == snapshot.StoreDir || strings.HasPrefix(p, snapshot.StoreDir+"/") {
			return errf(CodeStoreEntry, "path %q: an archive never writes a project's store", p)
		}
	}
	for _, l := range index {
		if strings.HasPrefix(l.name, objectsDir) {
			objects++
		}
	}
	switch {
	case meta.ID != s.Snapshot:
		return errf(CodeBadSummary, "the summary names snapshot %s, the record is %s", s.Snapshot, meta.ID)
	case string(meta.Kind) != s.Kind || meta.Message != s.Message || !meta.CreatedAt.Equal(s.SnapshotCreatedAt):
		return errf(CodeBadSummary, "the summary's kind, message or snapshot time is not the record's")
	case files != s.Files || objects != s.Objects || len(meta.Targets) != s.Targets:
		return errf(CodeBadSummary, "the summary counts %d files, %d objects, %d targets; the archive holds %d, %d, %d", s.Files, s.Objects, s.Targets, files, objects, len(meta.Targets))
	}
	return nil
}

// snapshot decodes the archived record and manifest and checks they agree.
func (r *reader) snapshot() (record.Manifest, *record.Meta, error) {
	mb, err := r.readSmall(metaName, CodeBadSummary)
	if err != nil {
		return nil, nil, err
	}
	meta, err := record.DecodeMeta(mb)
	if err != nil {
		return nil, nil, wrap(CodeBadSummary, err, "snapshot record")
	}
	raw, err := r.readSmall(manifestNm, CodeBadSummary)
	if err != nil {
		return nil, nil, err
	}
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != meta.Manifest {
		return nil, nil, errf(CodeChecksum, "the manifest is not the one the record names")
	}
	m, err := record.DecodeManifest(raw)
	if errors.Is(err, record.ErrStorePath) {
		return nil, nil, wrap(CodeStoreEntry, err, "manifest: an archive never writes a project's store")
	}
	if err != nil {
		return nil, nil, wrap(CodeBadSummary, err, "manifest")
	}
	return m, meta, nil
}

// Verify fully verifies the archive file name in the catalog.
// Cancelling ctx stops it (CodeInterrupted).
func (c *Catalog) Verify(ctx context.Context, name string, progress Progress) (*Summary, error) {
	return c.verifyFile(ctx, name, progress)
}

// VerifyFile fully verifies the archive file at p, anywhere (a copy on a
// USB stick), in place: as a catalog's, but for its owner and mode, and
// its name is checked only when it is named like an archive.
func VerifyFile(ctx context.Context, p string, lim Limits, progress Progress) (*Summary, error) {
	r, err := openArchive(p, lim, false)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	name := looseName(p)
	if err := r.check(ctx, name, progress); err != nil {
		return nil, prefix(filepath.Base(p), err)
	}
	return r.summary, nil
}

func (c *Catalog) verifyFile(ctx context.Context, name string, progress Progress) (*Summary, error) {
	r, err := openArchive(filepath.Join(c.Dir, name), c.Limits, true)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if err := r.check(ctx, name, progress); err != nil {
		return nil, prefix(name, err)
	}
	return r.summary, nil
}

// readSummary reads an archive's summary without verifying the rest.
func (c *Catalog) readSummary(name string) (*Summary, error) {
	r, err := openArchive(filepath.Join(c.Dir, name), c.Limits, true)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b, err := r.readSmall(summaryName, CodeBadSummary)
	if err != nil {
		return nil, err
	}
	return DecodeSummary(b)
}

// prefix names the archive in an error.
func prefix(name string, err error) error {
	var e *Error
	if errors.As(err, &e) && !strings.HasPrefix(e.Msg, "archive ") {
		return &Error{Code: e.Code, Msg: fmt.Sprintf("archive %s: %s", name, e.Msg), Err: e.Err}
	}
	return err
}
