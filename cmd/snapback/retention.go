package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/snapback/snapback/snapshot"
)

// retain applies [snapshot] keep and keep_days after a snap or run. The
// verb's own work is done: a failure here is a warning, not its status.
func retain(g *globals, repo *snapshot.Repo) {
	cfg := repo.Config
	ret := snapshot.Retention{Keep: cfg.Snapshot.Keep, MaxAge: time.Duration(cfg.Snapshot.KeepDays) * 24 * time.Hour}
	st, err := repo.Retain(ret)
	if err != nil {
		g.warn(err.Error())
		return
	}
	if st.Snapshots == 0 || g.json {
		return
	}
	var why []string
	if cfg.Snapshot.Keep > 0 {
		why = append(why, fmt.Sprintf("keep = %d", cfg.Snapshot.Keep))
	}
	if cfg.Snapshot.KeepDays > 0 {
		why = append(why, fmt.Sprintf("keep_days = %d", cfg.Snapshot.KeepDays))
	}
	fmt.Fprintf(g.stderr, "snapback: retention (%s): removed %d snapshots and %d objects (%s freed)\n",
		strings.Join(why, ", "), st.Snapshots, st.Objects, humanBytes(st.Bytes))
}
