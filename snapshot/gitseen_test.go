package snapshot_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/gitdirs"
	"github.com/snapback/snapback/snapshot/record"
)

// A record's git heads are input from outside: a git dir that is not
// absolute and clean, a ref outside refs/, an object id that is not one
// make the record corrupt.
func TestDecodeMetaGitHeads(t *testing.T) {
	oid := strings.Repeat("a", 40)
	good := record.GitHead{GitDir: "/r/.git/worktrees/w", Before: gitdirs.Head{Ref: "refs/heads/main", OID: oid},
		After: &gitdirs.Head{OID: strings.Repeat("b", 64)}}
	for name, c := range map[string]struct {
		g  record.GitHead
		ok bool
	}{
		"good":          {good, true},
		"open step":     {record.GitHead{GitDir: good.GitDir, Before: good.Before}, true},
		"relative dir":  {record.GitHead{GitDir: "r/.git", Before: good.Before}, false},
		"unclean dir":   {record.GitHead{GitDir: "/r/../etc", Before: good.Before}, false},
		"ref outside":   {record.GitHead{GitDir: good.GitDir, Before: gitdirs.Head{Ref: "refs/../../x", OID: oid}}, false},
		"not refs/":     {record.GitHead{GitDir: good.GitDir, Before: gitdirs.Head{Ref: "HEAD", OID: oid}}, false},
		"short oid":     {record.GitHead{GitDir: good.GitDir, Before: gitdirs.Head{OID: "abc"}}, false},
		"bad after oid": {record.GitHead{GitDir: good.GitDir, Before: good.Before, After: &gitdirs.Head{OID: strings.Repeat("g", 40)}}, false},
	} {
		m := &record.Meta{ID: "20240506-070810-000001", Kind: record.KindRun, CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
			Scope: record.ScopePaths, Manifest: strings.Repeat("0", 64), Git: []record.GitHead{c.g}}
		b, err := record.EncodeMeta(m)
		if err != nil {
			t.Fatal(err)
		}
		_, err = record.DecodeMeta(b)
		if c.ok && err != nil || !c.ok && !errors.Is(err, record.ErrCorrupt) {
			t.Errorf("%s: DecodeMeta: %v", name, err)
		}
	}
}
