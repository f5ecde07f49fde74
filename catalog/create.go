package catalog

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot/record"
)

// Source is what an archive is made from: a project's store.
type Source interface {
	ReadObject(id record.ObjectID) ([]byte, error)
	OpenObject(id record.ObjectID) (io.ReadCloser, error)
	// PayloadDir is the absolute directory of a target payload.
	PayloadDir(rel string) string
}

// Plan is what an archive of a snapshot will hold, known before writing.
type Plan struct {
	meta     *record.Meta
	metaJSON []byte
	manifest []byte
	objects  []record.ObjectID
	sizes    map[record.ObjectID]int64
	payloads []payloadFile
	files    int
	// Bytes is how much the archive will hold: for a progress bar.
	Bytes int64
}

type payloadFile struct {
	name string // entry name, targets/<n>/...
	path string // on disk
	size int64
}

// PlanArchive reads what an archive of m needs from src.
func PlanArchive(src Source, m *record.Meta) (*Plan, error) {
	mid, ok := record.ParseObjectID(m.Manifest)
	if !ok {
		return nil, errf(CodeBadSummary, "snapshot %s: bad manifest id", m.ID)
	}
	raw, err := src.ReadObject(mid)
	if err != nil {
		return nil, wrap(CodeIO, err, "snapshot %s: manifest", m.ID)
	}
	mf, err := record.DecodeManifest(raw)
	if err != nil {
		return nil, wrap(CodeIO, err, "snapshot %s: manifest", m.ID)
	}
	metaJSON, err := record.EncodeMeta(m)
	if err != nil {
		return nil, err
	}
	p := &Plan{meta: m, metaJSON: metaJSON, manifest: raw, sizes: map[record.ObjectID]int64{}}
	p.Bytes = int64(len(raw) + len(metaJSON))
	for i := range mf {
		e := &mf[i]
		if e.Type != record.File {
			continue
		}
		p.files++
		if e.Link != "" {
			continue
		}
		if _, ok := p.sizes[e.Object]; !ok {
			p.sizes[e.Object] = e.Size
			p.objects = append(p.objects, e.Object)
			p.Bytes += e.Size
		}
	}
	sort.Slice(p.objects, func(i, j int) bool { return p.objects[i].String() < p.objects[j].String() })
	for i, t := range m.Targets {
		dir := src.PayloadDir(t.Payload)
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return nil
			}
			if !d.Type().IsRegular() {
				return fmt.Errorf("%s: not a regular file", path)
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, path)
			p.payloads = append(p.payloads, payloadFile{name: fmt.Sprintf("%s%d/%s", targetsDir, i, filepath.ToSlash(rel)), path: path, size: info.Size()})
			p.Bytes += info.Size()
			return nil
		})
		if err != nil {
			return nil, wrap(CodeIO, err, "snapshot %s: target %s", m.ID, t.Name)
		}
	}
	return p, nil
}

// Project names the project an archive comes from: its root, and the
// stable id kept in its store (see ProjectID) that scopes listing and
// retention.
type Project struct {
	Root string
	ID   string
}

// Create writes an archive of the planned snapshot into the catalog:
// into a temp file, synced, then renamed to its name (mode 0600). When
// the catalog already holds a valid archive of the same snapshot from the
// same project, that one is kept (existed true) and nothing is written.
//
// Cancelling ctx (Ctrl-C) stops the write and removes the temp file;
// temp files older than TempAge, left by a create that was killed, are
// removed by the next create.
func (c *Catalog) Create(ctx context.Context, src Source, p *Plan, proj Project, progress Progress) (s *Summary, existed bool, err error) {
	sweepTemps(c.Dir, TempAge)
	if s := c.existing(ctx, p.meta.ID, proj.ID); s != nil {
		return s, true, nil
	}
	var rb [8]byte
	rand.Read(rb[:])
	tmp := filepath.Join(c.Dir, ".tmp-"+hex.EncodeToString(rb[:])+".zip")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, false, wrap(CodeIO, err, "create archive in %s", c.Dir)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	w := &archiveWriter{ctx: ctx, z: zip.NewWriter(f), progress: progress, buf: make([]byte, 1<<20)}
	now := time.Now().UTC()
	if err := w.add(metaName, now, bytes.NewReader(p.metaJSON)); err != nil {
		return nil, false, err
	}
	if err := w.add(manifestNm, now, bytes.NewReader(p.manifest)); err != nil {
		return nil, false, err
	}
	for _, o := range p.objects {
		of, err := src.OpenObject(o)
		if err != nil {
			return nil, false, wrap(CodeIO, err, "snapshot %s", p.meta.ID)
		}
		err = w.add(objectsDir+o.String(), now, of)
		of.Close()
		if err != nil {
			return nil, false, err
		}
		if last := w.index[len(w.index)-1]; hex.EncodeToString(last.sum[:]) != o.String() {
			return nil, false, errf(CodeChecksum, "the store's object %s does not match its hash: the store is damaged", o)
		}
	}
	for _, pf := range p.payloads {
		pfile, err := os.Open(pf.path)
		if err != nil {
			return nil, false, wrap(CodeIO, err, "snapshot %s", p.meta.ID)
		}
		err = w.add(pf.name, now, pfile)
		pfile.Close()
		if err != nil {
			return nil, false, err
		}
	}
	var idx []byte
	for _, l := range w.index {
		idx = fmt.Appendf(idx, "%x %d %s\n", l.sum, l.size, l.name)
	}
	sum := sha256.Sum256(idx)
	s = &Summary{
		Format: Format, Snapshot: p.meta.ID, Kind: string(p.meta.Kind), Message: p.meta.Message, Project: proj.Root, ProjectID: proj.ID,
		SnapshotCreatedAt: p.meta.CreatedAt, CreatedAt: now, Files: p.files, Objects: len(p.objects), Targets: len(p.meta.Targets),
		Entries: len(w.index), Bytes: w.bytes, ArchiveSHA256: hex.EncodeToString(sum[:]),
	}
	s.ID = identity(s)
	for _, e := range []struct {
		name string
		b    []byte
	}{{indexName, idx}, {summaryName, encodeSummary(s)}} {
		hw, err := w.z.CreateHeader(&zip.FileHeader{Name: e.name, Method: zip.Store, Modified: now})
		if err == nil {
			_, err = hw.Write(e.b)
		}
		if err != nil {
			return nil, false, wrap(CodeIO, err, "write archive")
		}
	}
	if err := w.z.Close(); err != nil {
		return nil, false, wrap(CodeIO, err, "write archive")
	}
	if err := f.Sync(); err != nil {
		return nil, false, wrap(CodeIO, err, "write archive")
	}
	if err := f.Close(); err != nil {
		return nil, false, wrap(CodeIO, err, "write archive")
	}
	final := c.Path(s.ID)
	if _, err := os.Lstat(final); err == nil {
		os.Remove(tmp)
		return s, true, nil
	}
	if err := os.Rename(tmp, final); err != nil {
		return nil, false, wrap(CodeIO, err, "write archive")
	}
	if err := fsutil.SyncDir(c.Dir); err != nil {
		return nil, false, wrap(CodeIO, err, "write archive")
	}
	return s, false, nil
}

// existing finds a valid archive of the snapshot from the project.
func (c *Catalog) existing(ctx context.Context, snap, projectID string) *Summary {
	ents, _, err := c.readDir()
	if err != nil {
		return nil // the create that follows reports it
	}
	for _, e := range ents {
		if _, ok := IDOf(e.name); !ok || !e.mode.IsRegular() {
			continue
		}
		if s, err := c.readSummary(e.name); err != nil || s.Snapshot != snap || s.ProjectID != projectID {
			continue
		}
		if s, err := c.verifyFile(ctx, e.name, nil); err == nil {
			return s
		}
	}
	return nil
}

// archiveWriter writes stored entries and indexes them.
type archiveWriter struct {
	ctx      context.Context
	z        *zip.Writer
	index    []indexLine
	bytes    int64
	progress Progress
	buf      []byte
}

func (w *archiveWriter) add(name string, mod time.Time, r io.Reader) error {
	hw, err := w.z.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store, Modified: mod})
	if err != nil {
		return wrap(CodeIO, err, "write archive")
	}
	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(hw, h, progressWriter(w.progress)), ctxReader{w.ctx, r}, w.buf)
	if w.ctx.Err() != nil {
		return interrupted(w.ctx, "write archive")
	}
	if err != nil {
		return wrap(CodeIO, err, "write archive entry %s", name)
	}
	l := indexLine{size: n, name: name}
	copy(l.sum[:], h.Sum(nil))
	w.index = append(w.index, l)
	w.bytes += n
	return nil
}

// ctxReader stops reading once its context is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// TempAge is how old an archive temp file must be to be another create's
// leftover rather than a live create's.
const TempAge = time.Hour

// sweepTemps removes the catalog's temp files older than age: a create
// killed while writing left them, and they never held a name.
func sweepTemps(dir string, age time.Duration) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		n := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(n, ".tmp-") || !strings.HasSuffix(n, ".zip") {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > age {
			os.Remove(filepath.Join(dir, n)) // best effort: the next create tries again
		}
	}
}

type progressWriter Progress

func (p progressWriter) Write(b []byte) (int, error) {
	if p != nil {
		p(int64(len(b)))
	}
	return len(b), nil
}
