package snapshot_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/gitdirs"
	"github.com/snapback/snapback/snapshot"
)

// A record's git heads are input from outside: a git dir that is not
// absolute and clean, a ref outside refs/, an object id that is not one
// make the record corrupt.
func TestDecodeMetaGitHeads(t *testing.T) {
	oid := strings.Repeat("a", 40)
	good := snapshot.GitHead{GitDir: "/r/.git/worktrees/w", Before: gitdirs.Head{Ref: "refs/heads/main", OID: oid},
		After: &gitdirs.Head{OID: strings.Repeat("b", 64)}}
	for name, c := range map[string]struct {
		g  snapshot.GitHead
		ok bool
	}{
		"good":          {good, true},
		"open step":     {snapshot.GitHead{GitDir: good.GitDir, Before: good.Before}, true},
		"relative dir":  {snapshot.GitHead{GitDir: "r/.git", Before: good.Before}, false},
		"unclean dir":   {snapshot.GitHead{GitDir: "/r/../etc", Before: good.Before}, false},
		"ref outside":   {snapshot.GitHead{GitDir: good.GitDir, Before: gitdirs.Head{Ref: "refs/../../x", OID: oid}}, false},
		"not refs/":     {snapshot.GitHead{GitDir: good.GitDir, Before: gitdirs.Head{Ref: "HEAD", OID: oid}}, false},
		"short oid":     {snapshot.GitHead{GitDir: good.GitDir, Before: gitdirs.Head{OID: "abc"}}, false},
		"bad after oid": {snapshot.GitHead{GitDir: good.GitDir, Before: good.Before, After: &gitdirs.Head{OID: strings.Repeat("g", 40)}}, false},
	} {
		m := &snapshot.Meta{ID: "20240506-070810-000001", Kind: snapshot.KindRun, CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
			Scope: snapshot.ScopePaths, Manifest: strings.Repeat("0", 64), Git: []snapshot.GitHead{c.g}}
		b, err := snapshot.EncodeMeta(m)
		if err != nil {
			t.Fatal(err)
		}
		_, err = snapshot.DecodeMeta(b)
		if c.ok && err != nil || !c.ok && !errors.Is(err, snapshot.ErrCorrupt) {
			t.Errorf("%s: DecodeMeta: %v", name, err)
		}
	}
}
