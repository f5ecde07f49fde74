package catalog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/snapback/snapback/fsutil"
)

// Codes of the restic transport (the catalog's own are in archive.go).
const (
	CodeResticMissing  = "restic_missing"  // no restic binary
	CodeResticPassword = "restic_password" // none of the variables restic reads its password from is set
	CodeRestic         = "restic_error"    // restic failed: no repository, wrong password, unreachable server
)

// Tags a pushed archive's restic snapshot carries. The archive tag is how
// a push knows an archive is there and a pull finds it; the sha256 tag
// (of the whole file) lets both compare without downloading.
const (
	resticTag       = "snapback"
	resticIDTag     = "archive-"
	resticSHA256Tag = "sha256-"
)

// Restic carries archives to and from a restic repository by running the
// restic binary (no shell). Each archive is one restic snapshot, backed
// up from standard input under its exact file name, so the path in the
// repository is /backup-<id>.zip whatever the catalog's directory, and
// tagged "snapback", "archive-<id>" and "sha256-<hex of the file>".
//
// Restic reads the password itself, from RESTIC_PASSWORD,
// RESTIC_PASSWORD_FILE or RESTIC_PASSWORD_COMMAND; without one of them
// every call fails with CodeResticPassword rather than prompting.
//
// Nothing unverified reaches the catalog: a pull writes into a private
// staging directory inside it, verifies the file in full there, and only
// then links it in under its name. Archives are not encrypted, but
// restic encrypts its repository.
type Restic struct {
	Repo string   // a path, or rest:http://host:port/path
	Bin  string   // the restic binary ("": restic on $PATH)
	Env  []string // restic's environment (nil: this process's)
}

// PushResult lists the file names pushed and those already there.
type PushResult struct {
	Pushed  []string
	Skipped []string
	// Invalid are catalog candidates left out because they failed
	// verification (only when no names were given).
	Invalid []Rejected
}

// PullResult lists the file names pulled and those the catalog already
// had (kept as they are); Differs are those of Skipped whose copy in the
// repository is not the same file.
type PullResult struct {
	Pulled  []string
	Skipped []string
	Differs []string
}

// resticSnapshot is what `restic snapshots --json` says of one snapshot.
type resticSnapshot struct {
	ID    string    `json:"id"`
	Time  time.Time `json:"time"`
	Paths []string  `json:"paths"`
	Tags  []string  `json:"tags"`
}

// archiveID is the archive a snapshot holds ("" if none: not ours).
func (s *resticSnapshot) archiveID() string {
	for _, t := range s.Tags {
		if id, ok := strings.CutPrefix(t, resticIDTag); ok && nameRE().MatchString(FileName(id)) &&
			len(s.Paths) == 1 && s.Paths[0] == "/"+FileName(id) {
			return id
		}
	}
	return ""
}

func (s *resticSnapshot) sha256() string {
	for _, t := range s.Tags {
		if h, ok := strings.CutPrefix(t, resticSHA256Tag); ok {
			return h
		}
	}
	return ""
}

// where names the repository in messages, without a password in a URL.
func (r *Restic) where() string {
	if rest, ok := strings.CutPrefix(r.Repo, "rest:"); ok {
		if u, err := url.Parse(rest); err == nil {
			return "rest:" + u.Redacted()
		}
	}
	return r.Repo
}

func (r *Restic) env() []string {
	if r.Env == nil {
		return os.Environ()
	}
	return r.Env
}

// check fails early, with a code, on what would make every call fail.
func (r *Restic) check() (string, error) {
	bin := r.Bin
	if bin == "" {
		bin = "restic"
	}
	p, err := exec.LookPath(bin)
	if err != nil {
		return "", wrap(CodeResticMissing, err, "restic is not installed (Debian: apt-get install restic)")
	}
	if r.Repo == "" {
		return "", errf(CodeRestic, "no restic repository: give --repo REPO or set RESTIC_REPOSITORY")
	}
	for _, kv := range r.env() {
		k, v, _ := strings.Cut(kv, "=")
		if v != "" && (k == "RESTIC_PASSWORD" || k == "RESTIC_PASSWORD_FILE" || k == "RESTIC_PASSWORD_COMMAND") {
			return p, nil
		}
	}
	return "", errf(CodeResticPassword, "restic repository %s: no password: set RESTIC_PASSWORD, RESTIC_PASSWORD_FILE or RESTIC_PASSWORD_COMMAND", r.where())
}

// run runs restic with the repository and args, stdin and stdout as
// given (nil: none, and stdout is then returned).
func (r *Restic) run(ctx context.Context, stdin io.Reader, stdout io.Writer, args ...string) ([]byte, error) {
	bin, err := r.check()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--repo", r.Repo}, args...)...)
	cmd.Env = r.env()
	cmd.Stdin = stdin // nil: /dev/null, so restic never waits on a prompt
	var out bytes.Buffer
	if stdout == nil {
		stdout = &out
	}
	cmd.Stdout = stdout
	var stderr tailBuffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		// restic's own line says what went wrong; the exit status does not.
		return nil, &Error{Code: CodeRestic, Msg: fmt.Sprintf("restic %s (repository %s): %s", args[0], r.where(), stderr.message()), Err: err}
	}
	return out.Bytes(), nil
}

// tailBuffer keeps the last 16 KiB written: restic's error is at the end.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 16<<10 {
		t.b = t.b[len(t.b)-16<<10:]
	}
	return len(p), nil
}

// message is restic's complaint on one line: its "Fatal:" line, else its
// last line.
func (t *tailBuffer) message() string {
	lines := strings.Split(strings.TrimSpace(string(t.b)), "\n")
	msg := lines[len(lines)-1]
	for _, l := range lines {
		if strings.HasPrefix(l, "Fatal:") {
			msg = l
			break
		}
	}
	if msg == "" {
		return "no message"
	}
	return strings.TrimSpace(msg)
}

// snapshots lists the repository's snapshots tagged snapback.
func (r *Restic) snapshots(ctx context.Context) ([]resticSnapshot, error) {
	out, err := r.run(ctx, nil, nil, "snapshots", "--json", "--tag", resticTag)
	if err != nil {
		return nil, err
	}
	var snaps []resticSnapshot
	if err := json.Unmarshal(out, &snaps); err != nil {
		return nil, wrap(CodeRestic, err, "restic snapshots (repository %s): unexpected output", r.where())
	}
	return snaps, nil
}

// archives maps each archive id the repository holds to its snapshots,
// newest first.
func (r *Restic) archives(ctx context.Context) (map[string][]resticSnapshot, error) {
	snaps, err := r.snapshots(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]resticSnapshot{}
	for _, s := range snaps {
		if id := s.archiveID(); id != "" {
			out[id] = append(out[id], s)
		}
	}
	for _, l := range out {
		sort.SliceStable(l, func(i, j int) bool { return l[i].Time.After(l[j].Time) })
	}
	return out, nil
}

// Push backs up the named archives of the catalog (file names; none:
// every candidate, leaving out the invalid ones), each verified in full
// first. An archive the repository already holds with the same SHA-256
// is skipped. An explicitly named archive that does not verify is an
// error, and what was pushed before it stays pushed.
func (r *Restic) Push(ctx context.Context, cat *Catalog, names []string, progress Progress) (*PushResult, error) {
	res := &PushResult{}
	all := names == nil
	if all {
		ents, _, err := cat.readDir()
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if _, ok := IDOf(e.name); ok && e.mode.IsRegular() {
				names = append(names, e.name)
			}
		}
	}
	have, err := r.archives(ctx)
	if err != nil {
		return nil, err
	}
	host, err := os.Hostname()
	if err != nil {
		host = "snapback" // only a label in restic's listing
	}
	for _, name := range names {
		pushed, invalid, err := r.pushOne(ctx, cat, name, host, have, progress)
		if all && invalid {
			id, _ := IDOf(name)
			res.Invalid = append(res.Invalid, Rejected{ID: id, File: name, Error: CodeOf(err), Msg: err.Error()})
			continue
		}
		if err != nil {
			return res, err
		}
		if pushed {
			res.Pushed = append(res.Pushed, name)
		} else {
			res.Skipped = append(res.Skipped, name)
		}
	}
	return res, nil
}

func (r *Restic) pushOne(ctx context.Context, cat *Catalog, name, host string, have map[string][]resticSnapshot, progress Progress) (pushed, invalid bool, err error) {
	id, ok := IDOf(name)
	if !ok {
		return false, false, errf(CodeBadName, "archive %s: not an archive name", name)
	}
	p := filepath.Join(cat.Dir, name)
	// Archives are written whole and renamed in, never changed in place:
	// holding the file verified (the same inode) is holding what we push.
	f, _, err := openRegular(p, true)
	if err != nil {
		return false, true, err
	}
	defer f.Close() // read-only
	if _, err := cat.Verify(ctx, name, progress); err != nil {
		return false, !isInterrupted(err), err
	}
	fst, err := f.Stat()
	if err != nil {
		return false, false, wrap(CodeIO, err, "archive %s", name)
	}
	if pst, err := os.Lstat(p); err != nil || !os.SameFile(fst, pst) {
		return false, false, errf(CodeChanged, "archive %s was replaced while it was verified; try again", name)
	}
	sum, err := hashFile(f)
	if err != nil {
		return false, false, wrap(CodeIO, err, "archive %s", name)
	}
	for _, s := range have[id] {
		if s.sha256() == sum {
			return false, false, nil
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return false, false, wrap(CodeIO, err, "archive %s", name)
	}
	h := sha256.New()
	_, err = r.run(ctx, io.TeeReader(f, h), io.Discard, "backup", "--json", "--quiet", "--stdin", "--stdin-filename", name,
		"--tag", resticTag, "--tag", resticIDTag+id, "--tag", resticSHA256Tag+sum, "--host", host)
	if err != nil {
		return false, false, err
	}
	if hex.EncodeToString(h.Sum(nil)) != sum {
		// A pull verifies, so this copy can do no harm; say so all the same.
		return false, false, errf(CodeChanged, "archive %s changed while it was pushed: the repository's copy is damaged; push again", name)
	}
	return true, false, nil
}

func hashPath(p string) (string, error) {
	f, _, err := openRegular(p, false)
	if err != nil {
		return "", err
	}
	defer f.Close() // read-only
	sum, err := hashFile(f)
	if err != nil {
		return "", wrap(CodeIO, err, "archive %s", filepath.Base(p))
	}
	return sum, nil
}

func hashFile(f *os.File) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Pull restores archives from the repository into the catalog: ref is an
// archive id, a unique prefix of one, its file name, or "all". Each is
// written into a private staging directory inside the catalog, verified
// in full there (trying older copies in the repository if the newest
// fails), and only then linked in under its name; the staging directory
// is removed on return. An archive the catalog already has is kept as it
// is (reported in Differs when the repository's copy is another file).
// With "all", a failure does not stop the others; the first is returned.
func (r *Restic) Pull(ctx context.Context, cat *Catalog, ref string, progress Progress) (*PullResult, error) {
	have, err := r.archives(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	if ref == "all" {
		for id := range have {
			ids = append(ids, id)
		}
		sort.Strings(ids)
	} else {
		if id, ok := IDOf(filepath.Base(ref)); ok {
			ref = id
		}
		for id := range have {
			if ref != "" && strings.HasPrefix(id, ref) {
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		switch {
		case len(ids) == 0:
			return nil, errf(CodeNotFound, "archive %q: none in the restic repository %s", ref, r.where())
		case len(ids) > 1:
			return nil, errf(CodeNotFound, "archive %q is ambiguous in the restic repository %s: %s", ref, r.where(), strings.Join(ids, ", "))
		}
	}
	res := &PullResult{}
	if len(ids) == 0 {
		return res, nil
	}
	sweepStaging(cat.Dir, ".snapback-pull-", time.Hour)    // left by a pull that was killed
	stage, err := os.MkdirTemp(cat.Dir, ".snapback-pull-") // 0700
	if err != nil {
		return nil, wrap(CodeIO, err, "catalog %s: staging directory", cat.Dir)
	}
	defer os.RemoveAll(stage) // ours; whatever is left in it was never linked in
	var first error
	for _, id := range ids {
		name := FileName(id)
		pulled, same, err := r.pullOne(ctx, cat, stage, id, have[id], progress)
		switch {
		case err != nil:
			if first == nil {
				first = err
			}
		case pulled:
			res.Pulled = append(res.Pulled, name)
		default:
			res.Skipped = append(res.Skipped, name)
			if !same {
				res.Differs = append(res.Differs, name)
			}
		}
	}
	return res, first
}

// pullOne brings one archive in, or compares it with the one there.
func (r *Restic) pullOne(ctx context.Context, cat *Catalog, stage, id string, snaps []resticSnapshot, progress Progress) (pulled, same bool, err error) {
	name := FileName(id)
	dst := filepath.Join(cat.Dir, name)
	staged := filepath.Join(stage, name)
	if _, err := os.Lstat(dst); err == nil {
		local, err := hashPath(dst)
		if err != nil {
			return false, false, err
		}
		for _, s := range snaps {
			if s.sha256() == local {
				return false, true, nil
			}
		}
		// No tag says so: fetch the newest copy to compare.
		remote, err := r.dump(ctx, snaps[0], staged, cat.Limits.MaxArchive)
		os.Remove(staged) // only compared
		return false, remote == local, err
	}
	var firstErr error
	for _, s := range snaps {
		sum, err := r.dump(ctx, s, staged, cat.Limits.MaxArchive)
		if err == nil {
			_, err = (&Catalog{Dir: stage, Limits: cat.Limits}).Verify(ctx, name, progress)
		}
		if err != nil {
			os.Remove(staged) // unverified: never linked in
			if firstErr == nil {
				firstErr = err
			}
			if CodeOf(err) == CodeRestic || ctx.Err() != nil {
				break
			}
			continue
		}
		// A link, not a rename: it never replaces an archive that
		// appeared meanwhile.
		if err := os.Link(staged, dst); errors.Is(err, fs.ErrExist) {
			local, herr := hashPath(dst)
			return false, local == sum, herr
		} else if err != nil {
			return false, false, wrap(CodeIO, err, "archive %s: into the catalog", name)
		}
		if err := fsutil.SyncDir(cat.Dir); err != nil {
			return true, false, wrap(CodeIO, err, "catalog %s", cat.Dir)
		}
		return true, false, nil
	}
	return false, false, pullErr(firstErr, name, r.where())
}

// pullErr keeps the verification's code and says where the copy was.
func pullErr(err error, name, where string) error {
	var e *Error
	if errors.As(err, &e) && e.Code != CodeRestic {
		return &Error{Code: e.Code, Msg: fmt.Sprintf("pull %s from %s: refused: %s", name, where, e.Msg), Err: e.Err}
	}
	return err
}

// dump writes the archive a snapshot holds into a new private file at p,
// synced, and returns its SHA-256. It stops as soon as what comes is not
// an archive (it does not start as one) or passes max bytes, and says so
// (or what failed writing, a full disk) rather than restic's complaint
// about the pipe it was writing into.
func (r *Restic) dump(ctx context.Context, s resticSnapshot, p string, max int64) (string, error) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", wrap(CodeIO, err, "staging %s", p)
	}
	h := sha256.New()
	sw := &stagingWriter{f: f, h: h, max: max, name: filepath.Base(p)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sw.stop = cancel
	// --no-lock: a dump stopped at a limit must not leave a stale lock.
	_, err = r.run(ctx, nil, sw, "dump", "--no-lock", s.ID, s.Paths[0])
	if sw.err != nil {
		err = sw.err
	}
	if err == nil {
		if serr := f.Sync(); serr != nil {
			err = wrap(CodeIO, serr, "staging %s", p)
		}
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = wrap(CodeIO, cerr, "staging %s", p)
	}
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// stagingWriter writes a pulled archive, refusing it early.
type stagingWriter struct {
	f    *os.File
	h    hash.Hash
	n    int64
	max  int64
	name string
	err  error
	stop func() // ends restic at once
}

func (w *stagingWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	const magic = "PK\x03\x04"
	if w.n < int64(len(magic)) {
		head := p[:min(len(p), len(magic)-int(w.n))]
		if !bytes.Equal(head, []byte(magic[w.n:int(w.n)+len(head)])) {
			w.fail(errf(CodeBadZip, "archive %s: what the repository holds does not start as an archive; refused after %d bytes", w.name, w.n+int64(len(head))))
			return 0, w.err
		}
	}
	if w.n+int64(len(p)) > w.max {
		w.fail(errf(CodeTooLarge, "archive %s: more than %d bytes; refused while pulling, at the limit", w.name, w.max))
		return 0, w.err
	}
	n, err := w.f.Write(p)
	w.h.Write(p[:n])
	w.n += int64(n)
	if err != nil {
		w.fail(wrap(CodeIO, err, "write the pulled archive %s", w.name))
	}
	return n, w.err
}

func (w *stagingWriter) fail(err error) {
	w.err = err
	w.stop()
}

// sweepStaging removes staging directories named prefix* in dir that are
// older than age: a process killed while it pulled left them, and they
// never held anything under an archive's name.
func sweepStaging(dir, prefix string, age time.Duration) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > age {
			os.RemoveAll(filepath.Join(dir, e.Name())) // best effort
		}
	}
}
