package catalog

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/snapback/snapback/fsutil"
)

// TokenTTL is how long a prune preview's token may be applied.
const TokenTTL = 10 * time.Minute

var tokenRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

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

// tokenRecord is a token as stored: bound to the catalog and its
// fingerprint, and to the plan.
type tokenRecord struct {
	Catalog     string    `json:"catalog"`
	Fingerprint string    `json:"fingerprint"`
	Delete      []string  `json:"delete"` // file names
	SHA256      []string  `json:"sha256"` // their archive_sha256, in order
	Expires     time.Time `json:"expires"`
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
func (c *Catalog) PrunePreview(o PruneOptions, tokenDir string, progress Progress) (*PrunePlan, error) {
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
	l, err := c.List(progress)
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
	for i, a := range mine { // oldest first
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
	rec := tokenRecord{Catalog: c.Dir, Fingerprint: l.Fingerprint, Expires: p.Expires, Delete: []string{}, SHA256: []string{}}
	for _, a := range p.Delete {
		rec.Delete = append(rec.Delete, a.File)
		rec.SHA256 = append(rec.SHA256, a.ArchiveSHA256)
	}
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

// PruneApply carries out the plan a token stands for: the token must be
// known, unused and unexpired, and the catalog exactly as previewed (every
// archive verified again). The archives move into a private staging
// directory, are verified there once more, and only then deleted. If
// anything fails on the way, they are moved back; what cannot be is left
// staged, and the error says where.
func (c *Catalog) PruneApply(token, tokenDir string, progress Progress) (*PruneResult, error) {
	if !tokenRE.MatchString(token) {
		return nil, errf(CodeToken, "prune: %q is not a prune token", token)
	}
	fresh := filepath.Join(tokenDir, token+".json")
	used := filepath.Join(tokenDir, token+".used")
	// Claim the token first: a second apply, even a concurrent one, finds
	// it used.
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
	if err := json.Unmarshal(js, &rec); err != nil || len(rec.Delete) != len(rec.SHA256) {
		return nil, errf(CodeToken, "prune: token %s is damaged", token)
	}
	if time.Now().After(rec.Expires) {
		return nil, errf(CodeToken, "prune: token %s expired at %s (preview again)", token, rec.Expires.Local().Format(time.TimeOnly))
	}
	if rec.Catalog != c.Dir {
		return nil, errf(CodeToken, "prune: token %s is for the catalog %s, not %s", token, rec.Catalog, c.Dir)
	}
	l, err := c.List(progress)
	if err != nil {
		return nil, err
	}
	if l.Fingerprint != rec.Fingerprint {
		return nil, errf(CodeChanged, "prune: the catalog %s changed since the preview; nothing deleted (preview again)", c.Dir)
	}
	valid := map[string]string{}
	for _, a := range l.Archives {
		valid[a.File] = a.ArchiveSHA256
	}
	for i, f := range rec.Delete {
		if valid[f] != rec.SHA256[i] {
			return nil, errf(CodeChanged, "prune: %s is not the archive previewed; nothing deleted", f)
		}
	}
	res := &PruneResult{}
	if len(rec.Delete) == 0 {
		return res, nil
	}
	stage := filepath.Join(c.Dir, ".snapback-prune-"+token)
	if err := os.Mkdir(stage, 0o700); err != nil {
		return nil, wrap(CodeIO, err, "prune: staging directory")
	}
	var moved []string
	putBack := func(cause error) error {
		var left []string
		for _, f := range moved {
			if err := os.Rename(filepath.Join(stage, f), filepath.Join(c.Dir, f)); err != nil {
				left = append(left, f)
			}
		}
		if len(left) == 0 {
			os.Remove(stage)
			return cause
		}
		return &Error{Code: CodeOf(cause), Msg: fmt.Sprintf("%v; %d archive(s) remain staged in %s: move them back into %s", cause, len(left), stage, c.Dir), Err: cause}
	}
	for _, f := range rec.Delete {
		if err := os.Rename(filepath.Join(c.Dir, f), filepath.Join(stage, f)); err != nil {
			return nil, putBack(wrap(CodeIO, err, "prune: stage %s", f))
		}
		moved = append(moved, f)
	}
	if err := fsutil.SyncDir(c.Dir); err != nil {
		return nil, putBack(wrap(CodeIO, err, "prune"))
	}
	staged := &Catalog{Dir: stage, Limits: c.Limits}
	for i, f := range rec.Delete {
		s, err := staged.verifyFile(f, progress)
		if err == nil && s.ArchiveSHA256 != rec.SHA256[i] {
			err = errf(CodeChanged, "prune: %s changed since the preview", f)
		}
		if err != nil {
			return nil, putBack(err)
		}
	}
	for _, f := range rec.Delete {
		if err := os.Remove(filepath.Join(stage, f)); err != nil {
			return res, &Error{Code: CodeIO, Msg: fmt.Sprintf("prune: delete %s: %v; what remains is staged in %s", f, err, stage), Err: err}
		}
		res.Deleted = append(res.Deleted, f)
	}
	if err := os.Remove(stage); err != nil {
		return res, wrap(CodeIO, err, "prune: remove the staging directory")
	}
	return res, fsutil.SyncDir(c.Dir)
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
