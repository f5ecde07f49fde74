package gitdirs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzReadHead: whatever HEAD, a loose ref and packed-refs hold, ReadHead
// returns an error or a valid ref name and object id, and never reads
// outside the git dir.
func FuzzReadHead(f *testing.F) {
	oid := strings.Repeat("1a", 20)
	f.Add("ref: refs/heads/main\n", oid+"\n", "# pack-refs with: peeled\n"+oid+" refs/heads/x\n^"+oid+"\n")
	f.Add(oid+"\n", "", "")
	f.Add("ref: refs/heads/x\n", "ref: refs/heads/main\n", oid+" refs/heads/main\n")
	f.Add("ref: ../../etc/passwd", "", "")
	f.Fuzz(func(t *testing.T, head, loose, packed string) {
		gd := t.TempDir()
		for p, s := range map[string]string{"HEAD": head, "refs/heads/main": loose, "packed-refs": packed} {
			if s == "" {
				continue
			}
			os.MkdirAll(filepath.Dir(filepath.Join(gd, p)), 0o755)
			if err := os.WriteFile(filepath.Join(gd, p), []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		h, err := (&Repo{GitDir: gd, CommonDir: gd}).ReadHead()
		if err != nil {
			return
		}
		if h.Ref != "" && !ValidRefName(h.Ref) || h.OID != "" && !ValidOID(h.OID) || h.Ref == "" && h.OID == "" {
			t.Fatalf("ReadHead = %+v from HEAD %q", h, head)
		}
	})
}

// FuzzGitFile: whatever a .git file and a commondir say, Find returns an
// error or absolute, clean paths.
func FuzzGitFile(f *testing.F) {
	f.Add("gitdir: ../g\n", "..\n")
	f.Add("gitdir: /nonexistent\n", "")
	f.Add("gitdir:\n", "\x00")
	f.Fuzz(func(t *testing.T, gitFile, commondir string) {
		base := t.TempDir()
		wt, gd := filepath.Join(base, "wt"), filepath.Join(base, "g")
		for _, d := range []string{wt, gd} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		os.WriteFile(filepath.Join(gd, "HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
		os.WriteFile(filepath.Join(wt, ".git"), []byte(gitFile), 0o644)
		if commondir != "" {
			os.WriteFile(filepath.Join(gd, "commondir"), []byte(commondir), 0o644)
		}
		r, err := Find(wt, func(k string) string {
			if k == "GIT_CEILING_DIRECTORIES" {
				return base
			}
			return ""
		})
		if err != nil || r == nil {
			return
		}
		for _, p := range []string{r.GitDir, r.CommonDir, r.WorkTree} {
			if p != "" && (!filepath.IsAbs(p) || filepath.Clean(p) != p) {
				t.Fatalf("Find = %+v from .git %q", r, gitFile)
			}
		}
	})
}
