package main

import (
	"runtime/debug"
	"testing"
)

// TestVersionOf: the version comes from the build, never a constant.
func TestVersionOf(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	rev := "0123456789abcdef0123456789abcdef01234567"
	for _, c := range []struct {
		name  string
		bi    *debug.BuildInfo
		ok    bool
		want  string
		dirty bool
	}{
		{"no build info", nil, false, "devel", false},
		{"go install @v1.2.3", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, true, "v1.2.3", false},
		{"checkout, pseudo-version", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261202101500-0123456789ab+dirty"}, Settings: vcs(rev, "true")}, true, "v0.0.0-20261202101500-0123456789ab+dirty", true},
		{"checkout, no module version", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, "true")}, true, "devel-0123456789ab+dirty", true},
		{"clean checkout", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, "false")}, true, "devel-0123456789ab", false},
		{"-buildvcs=false", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true, "devel", false},
	} {
		v, _, dirty := versionOf(c.bi, c.ok)
		if v != c.want || dirty != c.dirty {
			t.Errorf("%s: version %q dirty %v, want %q %v", c.name, v, dirty, c.want, c.dirty)
		}
	}
}
