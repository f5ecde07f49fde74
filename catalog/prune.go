package catalog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/snapback/snapback/fsutil"
	"golang.org/x/sys/unix"
)

// TokenTTL is how long a prune preview's token may be applied.
const TokenTTL = 10 * time.Minute

var tokenRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{32}$`) })

// PrunePlan is a previewed retention: what would go and the token that
// makes it happen.
type PrunePlan struct {
	Keep   int
	Delete []Listed
	Kept   []Listed
	// Later are archives past MaxDelete that a next prune will delete.
	Later []Listed
	// Others are other projects' archives, left alone.
	Others   int
	Rejected []Rejected // left alone, never deleted
	Token    string
	Expires  time.Time
}

// tokenRecord is a token as stored: bound to the catalog directory (its
// path and identity), to every name in it (the fingerprint of their full
// stamps), to every candidate's stamp and verification result, and to
// the plan.
type tokenRecord struct {
	Catalog     string      `json:"catalog"`
	Dir         string      `json:"dir"` // the directory's identity
	Fingerprint string      `json:"fingerprint"`
	After       string      `json:"after"` // the fingerprint once the deleted ones are gone
	Candidates  []candidate `json:"candidates"`
	Delete      []string    `json:"delete"` // file names
	SHA256      []string    `json:"sha256"` // their archive_sha256, in order
	Kept        []string    `json:"kept"`   // file names, verified again before anything is deleted
	KeptSHA256  []string    `json:"kept_sha256"`
	Expires     time.Time   `json:"expires"`
}

// candidate is one archive-named file as the preview saw it: its stamp,
// and what verifying it said ("ok <archive_sha256>", or the error code).
type candidate struct {
	Name   string `json:"name"`
	Stamp  string `json:"stamp"`
	Result string `json:"result"`
}

// PruneOptions say what a prune keeps.
type PruneOptions struct {
	Keep      int    // the newest valid archives kept, 1 to MaxKeep
	MaxDelete int    // at most this many deleted, 1 to MaxDeletions (0: MaxDeletions)
	Project   string // the id of the project whose archives are pruned ("": every project's)
}

// Bounds of a prune, as in the catalog snapback's was modelled on.
const (
	MaxKeep      = 1000
	MaxDeletions = 100
)

// PrunePreview plans keeping the Keep newest valid archives and deleting
// the other valid ones, and stores a one-time token for it in tokenDir
// (a private directory of the user's: the preview and its application are
// separate processes).
//
// Cancelling ctx stops it (CodeInterrupted) before a token is stored.
func (c *Catalog) PrunePreview(ctx context.Context, o PruneOptions, tokenDir string, progress Progress) (*PrunePlan, error) {
	keep := o.Keep
	if keep < 1 || keep > MaxKeep {
		return nil, errf(CodeUsage, "prune: --keep must be 1 to %d, not %d", MaxKeep, keep)
	}
	if o.MaxDelete == 0 {
		o.MaxDelete = MaxDeletions
	}
	if o.MaxDelete < 1 || o.MaxDelete > MaxDeletions {
		return nil, errf(CodeUsage, "prune: --max-delete must be 1 to %d, not %d", MaxDeletions, o.MaxDelete)
	}
	l, err := c.List(ctx, progress)
	if err != nil {
		return nil, err
	}
	p := &PrunePlan{Keep: keep, Rejected: l.Rejected}
	mine := l.Archives
	if o.Project != "" {
		mine = l.Of(o.Project)
		p.Others = len(l.Archives) - len(mine)
	}
	n := len(mine)
	for i, a := range mine { // oldest snapshot first
		switch {
		case i >= n-keep:
			p.Kept = append(p.Kept, a)
		case len(p.Delete) < o.MaxDelete:
			p.Delete = append(p.Delete, a)
		default:
			p.Later = append(p.Later, a)
		}
	}
	var b [16]byte
	rand.Read(b[:])
	p.Token = hex.EncodeToString(b[:])
	p.Expires = time.Now().Add(TokenTTL).UTC()
	rec := tokenRecord{Catalog: c.Dir, Dir: l.dir, Fingerprint: l.Fingerprint, Expires: p.Expires, Candidates: candidates(l),
		Delete: []string{}, SHA256: []string{}, Kept: []string{}, KeptSHA256: []string{}}
	gone := map[string]bool{}
	for _, a := range p.Delete {
		rec.Delete = append(rec.Delete, a.File)
		rec.SHA256 = append(rec.SHA256, a.ArchiveSHA256)
		gone[a.File] = true
	}
	for _, a := range p.Kept {
		rec.Kept = append(rec.Kept, a.File)
		rec.KeptSHA256 = append(rec.KeptSHA256, a.ArchiveSHA256)
	}
	rec.After = fingerprint(l.dir, l.ents, gone)
	js, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(tokenDir, 0o700); err != nil {
		return nil, wrap(CodeIO, err, "prune: token directory")
	}
	sweepTokens(tokenDir)
	if err := fsutil.WriteFileAtomic(filepath.Join(tokenDir, p.Token+".json"), js, 0o600); err != nil {
		return nil, wrap(CodeIO, err, "prune: store the token")
	}
	return p, nil
}

// PruneResult says what an applied prune deleted.
type PruneResult struct {
	Deleted []string
}

// candidates lists every archive-named file of a listing with its stamp
// and verification result.
func candidates(l *Listing) []candidate {
	result := map[string]string{}
	for _, a := range l.Archives {
		result[a.File] = "ok " + a.ArchiveSHA256
	}
	for _, r := range l.Rejected {
		result[r.File] = r.Error
	}
	out := []candidate{}
	for _, e := range l.ents {
		if _, ok := IDOf(e.name); ok {
			out = append(out, candidate{Name: e.name, Stamp: e.stamp.String(), Result: result[e.name]})
		}
	}
	return out
}

// stale is the refusal of a plan the catalog no longer matches.
func stale(format string, a ...any) error {
	return errf(CodeStale, "prune: "+format+"; nothing deleted (preview again)", a...)
}

// pruneStaged, when set (by a test), runs once the plan has been checked
// and before the first archive is staged: where a test causes a real
// fault the checks must not see.
var pruneStaged func()

// PruneApply carries out the plan a token stands for: the token must be
// known, unused and unexpired, and the catalog exactly as previewed: the
// same directory, every name with the same full stamp (ctime included,
// which cannot be set back), so every candidate's verification result
// still holds; a plan the catalog no longer matches is refused with
// CodeStale. The archives to delete move into a private staging
// directory and are verified there; the kept ones are verified again in
// full where they are, and the catalog must still be as planned; only
// then are the staged ones deleted. If anything fails on the way, they
// are moved back; what cannot be is left staged, and the error says
// where. Cancelling ctx before the first deletion puts everything back
// (CodeInterrupted; the token is spent).
func (c *Catalog) PruneApply(ctx context.Context, token, tokenDir string, progress Progress) (*PruneResult, error) {
	rec, err := claimToken(token, tokenDir)
	if err != nil {
		return nil, err
	}
	if rec.Catalog != c.Dir {
		return nil, errf(CodeToken, "prune: token %s is for the catalog %s, not %s", token, rec.Catalog, c.Dir)
	}
	if err := c.matches(rec); err != nil {
		return nil, err
	}
	res := &PruneResult{}
	if len(rec.Delete) == 0 {
		return res, nil
	}
	if pruneStaged != nil {
		pruneStaged()
	}
	stage := filepath.Join(c.Dir, pruneStagePrefix+token)
	fsutil.Mutating()
	if err := os.Mkdir(stage, 0o700); err != nil {
		return nil, wrap(CodeIO, err, "prune: staging directory")
	}
	// Held while the apply lives: the next verb's recoverPrunes, taking
	// it, knows the apply died and finishes it or rolls it back.
	lock, err := lockStage(stage)
	if err != nil {
		return nil, wrap(CodeIO, err, "prune: staging directory")
	}
	defer lock.Close()
	var moved []string
	putBack := func(cause error) error {
		fsutil.Mutating()
		os.Remove(filepath.Join(stage, pruneDecided)) // absent unless writing it failed half-way
		var left []string
		for _, f := range moved {
			fsutil.Mutating()
			if err := os.Rename(filepath.Join(stage, f), filepath.Join(c.Dir, f)); err != nil {
				left = append(left, f)
			}
		}
		if len(left) == 0 {
			fsutil.Mutating()
			os.Remove(stage) // empty, ours: should it stay, it is only a name
			return cause
		}
		return &Error{Code: CodeOf(cause), Msg: fmt.Sprintf("%v; %d archive(s) remain staged in %s: move them back into %s", cause, len(left), stage, c.Dir), Err: cause}
	}
	for _, f := range rec.Delete {
		fsutil.Mutating()
		if err := os.Rename(filepath.Join(c.Dir, f), filepath.Join(stage, f)); err != nil {
			return nil, putBack(wrap(CodeIO, err, "prune: stage %s", f))
		}
		moved = append(moved, f)
	}
	fsutil.Mutating()
	if err := fsutil.SyncDir(c.Dir); err != nil {
		return nil, putBack(wrap(CodeIO, err, "prune"))
	}
	staged := &Catalog{Dir: stage, Limits: c.Limits}
	for i, f := range rec.Delete {
		s, err := staged.verifyFile(ctx, f, progress)
		if err == nil && s.ArchiveSHA256 != rec.SHA256[i] {
			err = stale("%s is not the archive previewed", f)
		}
		if err != nil {
			return nil, putBack(err)
		}
	}
	// What stays must hold: each kept archive verifies, as previewed.
	for i, f := range rec.Kept {
		s, err := c.verifyFile(ctx, f, progress)
		if isInterrupted(err) {
			return nil, putBack(err)
		}
		if err != nil {
			return nil, putBack(stale("the kept archive %s no longer verifies (%s)", f, CodeOf(err)))
		}
		if s.ArchiveSHA256 != rec.KeptSHA256[i] {
			return nil, putBack(stale("the kept archive %s is not the one previewed", f))
		}
	}
	ents, _, err := c.readDir()
	if err != nil {
		return nil, putBack(err)
	}
	dst, err := os.Lstat(c.Dir)
	if err != nil {
		return nil, putBack(wrap(CodeIO, err, "prune"))
	}
	if fingerprint(dirIdentity(dst), ents, map[string]bool{filepath.Base(stage): true}) != rec.After {
		return nil, putBack(stale("the catalog %s changed during the prune", c.Dir))
	}
	if ctx.Err() != nil { // the last moment a stop leaves everything as it was
		return nil, putBack(interrupted(ctx, "prune"))
	}
	// The decision, durable before the first deletion: from here on, an
	// apply that dies is finished by the next verb, not rolled back.
	if err := markDecided(stage); err != nil {
		return nil, putBack(wrap(CodeIO, err, "prune"))
	}
	for _, f := range rec.Delete {
		fsutil.Mutating()
		if err := os.Remove(filepath.Join(stage, f)); err != nil {
			return res, &Error{Code: CodeIO, Msg: fmt.Sprintf("prune: delete %s: %v; what remains is staged in %s", f, err, stage), Err: err}
		}
		res.Deleted = append(res.Deleted, f)
	}
	fsutil.Mutating()
	if err := os.Remove(filepath.Join(stage, pruneDecided)); err != nil {
		return res, wrap(CodeIO, err, "prune: remove the staging directory")
	}
	fsutil.Mutating()
	if err := os.Remove(stage); err != nil {
		return res, wrap(CodeIO, err, "prune: remove the staging directory")
	}
	return res, fsutil.SyncDir(c.Dir)
}

// An apply stages the archives it deletes in <catalog>/.snapback-prune-
// <token>/, holding a lock on it (lockStage) while it runs. Once every
// check has passed it writes pruneDecided there, then deletes. An apply
// killed on the way leaves the directory behind, unlocked:
// recoverPrunes, run when the catalog is opened, rolls it back (every
// archive moved back, never over a name that came since) before the
// decision, and finishes the deletion after it.
const (
	pruneStagePrefix = ".snapback-prune-"
	pruneDecided     = "decided"
)

// lockStage opens the staging directory dir and takes its lock, which
// lasts until the file is closed (or its process dies).
func lockStage(dir string) (*os.File, error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// markDecided writes the decision marker into stage, durably.
func markDecided(stage string) error {
	fsutil.Mutating()
	f, err := os.OpenFile(filepath.Join(stage, pruneDecided), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return fsutil.SyncDir(stage)
}

// recoverPrunes finishes or rolls back each apply that died (see
// pruneStagePrefix). A staging directory whose lock is held belongs to a
// live apply and is left alone; in one that is not, only archives and the
// marker are touched: anything else in it stays, and with it the
// directory.
func (c *Catalog) recoverPrunes() error {
	names, err := os.ReadDir(c.Dir)
	if err != nil {
		return wrap(CodeIO, err, "catalog %s", c.Dir)
	}
	for _, e := range names {
		token, ok := strings.CutPrefix(e.Name(), pruneStagePrefix)
		if !ok || !tokenRE().MatchString(token) || e.Type() != fs.ModeDir {
			continue // not an apply's
		}
		if err := c.recoverPrune(e.Name()); err != nil {
			return wrap(CodeIO, err, "catalog %s: finishing the prune interrupted in %s", c.Dir, e.Name())
		}
	}
	return nil
}

func (c *Catalog) recoverPrune(name string) error {
	stage := filepath.Join(c.Dir, name)
	lock, err := lockStage(stage)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return nil // a live apply's
	}
	if err != nil {
		return err
	}
	defer lock.Close()
	root, err := fsutil.OpenRoot(c.Dir)
	if err != nil {
		return err
	}
	defer root.Close()
	sd, err := root.OpenDir(name)
	if err != nil {
		return err
	}
	defer sd.Close()
	files, err := sd.ReadDirNames()
	if err != nil {
		return err
	}
	_, err = sd.Lstat(pruneDecided)
	decided := err == nil
	for _, f := range files {
		if !nameRE().MatchString(f) {
			continue
		}
		if st, err := sd.Lstat(f); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue // not an archive staged
		}
		if decided {
			err = sd.Unlink(f)
		} else if err = sd.RenameNoReplace(f, root, f); errors.Is(err, unix.EEXIST) {
			err = nil // the name came back since: this one stays staged
		}
		if err != nil {
			return err
		}
	}
	if err := root.Sync(); err != nil {
		return err
	}
	if decided {
		if err := sd.Unlink(pruneDecided); err != nil {
			return err
		}
	}
	if err := root.Rmdir(name); err != nil && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
		return err
	}
	return root.Sync()
}

// claimToken marks the token used and returns its record, refusing a
// malformed, unknown, used, damaged or expired one.
func claimToken(token, tokenDir string) (*tokenRecord, error) {
	if !tokenRE().MatchString(token) {
		return nil, errf(CodeToken, "prune: %q is not a prune token", token)
	}
	fresh := filepath.Join(tokenDir, token+".json")
	used := filepath.Join(tokenDir, token+".used")
	// Claim the token first: a second apply, even a concurrent one, finds
	// it used.
	fsutil.Mutating()
	if err := os.Rename(fresh, used); err != nil {
		if _, uerr := os.Lstat(used); uerr == nil {
			return nil, errf(CodeToken, "prune: token %s was already used", token)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errf(CodeToken, "prune: unknown token %s (preview again with --keep N)", token)
		}
		return nil, wrap(CodeIO, err, "prune: token %s", token)
	}
	js, err := os.ReadFile(used)
	if err != nil {
		return nil, wrap(CodeIO, err, "prune: token %s", token)
	}
	var rec tokenRecord
	if err := json.Unmarshal(js, &rec); err != nil || len(rec.Delete) != len(rec.SHA256) || len(rec.Kept) != len(rec.KeptSHA256) || rec.Dir == "" || rec.After == "" {
		return nil, errf(CodeToken, "prune: token %s is damaged (or from an older snapback: preview again)", token)
	}
	if time.Now().After(rec.Expires) {
		return nil, errf(CodeToken, "prune: token %s expired at %s (preview again)", token, rec.Expires.Local().Format(time.TimeOnly))
	}
	return &rec, nil
}

// matches checks the catalog is as the plan saw it: the same directory,
// and every name with the same stamp. It names the first difference.
func (c *Catalog) matches(rec *tokenRecord) error {
	ents, fp, err := c.readDir()
	if err != nil {
		return err
	}
	dir, err := c.identity()
	if err != nil {
		return err
	}
	if dir != rec.Dir {
		return stale("%s is not the catalog directory previewed (replaced or remounted)", c.Dir)
	}
	if fp == rec.Fingerprint {
		return nil
	}
	now := map[string]string{}
	for _, e := range ents {
		now[e.name] = e.stamp.String()
	}
	for _, cd := range rec.Candidates {
		switch st, ok := now[cd.Name]; {
		case !ok:
			return stale("%s went away since the preview", cd.Name)
		case st != cd.Stamp:
			was := "valid"
			if !strings.HasPrefix(cd.Result, "ok ") {
				was = "rejected: " + cd.Result
			}
			return stale("%s changed since the preview (its content, owner, mode or times; it was %s)", cd.Name, was)
		}
	}
	return stale("the catalog %s changed since the preview (a file came, went or changed)", c.Dir)
}

// sweepTokens removes tokens (used or not) a day past their validity.
func sweepTokens(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > TokenTTL+24*time.Hour {
			os.Remove(filepath.Join(dir, e.Name())) // best effort: a stale token is harmless
		}
	}
}
