package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/snapback/snapback/internal/gitdirs"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"github.com/spf13/cobra"
)

func newListCmd(g *globals) *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:   "list",
		Short: "List snapshots, newest first",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return runList(g, all) },
	}
	c.Flags().BoolVarP(&all, "all", "a", false, "include pre-undo and pre-redo records")
	return c
}

type snapshotJSON struct {
	ID         string    `json:"id"`
	Kind       string    `json:"kind"`
	Message    string    `json:"message"`
	CreatedAt  time.Time `json:"created_at"`
	Scope      string    `json:"scope"`
	Undone     bool      `json:"undone"`
	Command    []string  `json:"command,omitempty"`
	ExitStatus *int      `json:"exit_status,omitempty"`
	State      string    `json:"state,omitempty"`
	Files      int       `json:"files"`
	Bytes      int64     `json:"bytes"`
	Undoes     string    `json:"undoes,omitempty"`
	UndoesMore []string  `json:"undoes_more,omitempty"`
	Redoes     string    `json:"redoes,omitempty"`
	// Session is a checkpoint's session.
	Session string `json:"session,omitempty"`
	// Targets are the states outside the tree the snapshot holds.
	Targets []record.TargetState `json:"targets,omitempty"`
	// Steps are a session's commands (a run of several run --continue).
	Steps []record.Step `json:"steps,omitempty"`
	// Git is HEAD outside the root before and after the step.
	Git []record.GitHead `json:"git,omitempty"`
}

func snapJSON(m *record.Meta, undone bool) snapshotJSON {
	return snapshotJSON{ID: m.ID, Kind: string(m.Kind), Message: m.Message, CreatedAt: m.CreatedAt,
		Scope: string(m.Scope), Undone: undone, Command: m.Command, ExitStatus: m.ExitStatus,
		State: m.State, Files: m.Files, Bytes: m.Bytes, Undoes: m.Undoes, UndoesMore: m.UndoesMore, Redoes: m.Redoes, Session: m.Session,
		Targets: m.Targets, Steps: m.Steps, Git: m.Git}
}

func runList(g *globals, all bool) error {
	repo, err := g.openReader(snapshot.Options{Verb: "list", Access: snapshot.ForRead, SkipDamaged: true})
	if errors.Is(err, snapshot.ErrNoStore) {
		// No store yet is no error for a question: the list is empty.
		if g.json {
			return g.printJSON(struct {
				Snapshots []snapshotJSON `json:"snapshots"`
			}{Snapshots: []snapshotJSON{}})
		}
		fmt.Fprintln(g.stderr, "no snapshots yet (`snapback snap` takes one; `snapback run` records one)")
		return nil
	}
	if err != nil {
		return err
	}
	defer repo.Close()
	h, err := repo.History()
	if err != nil {
		return err
	}
	size, err := repo.Size()
	if err != nil {
		return err
	}
	out := struct {
		Snapshots []snapshotJSON `json:"snapshots"`
		// StoreBytes is the store's size on disk ([snapshot] keep and
		// keep_days bound it).
		StoreBytes int64 `json:"store_bytes"`
		// Uncovered are the directories the project's protection does not hold.
		Uncovered uncoveredJSON `json:"uncovered,omitempty"`
	}{Snapshots: []snapshotJSON{}, StoreBytes: size, Uncovered: uncovered(repo.Root, gitdirs.SavedByMode)}
	for i := len(h.All) - 1; i >= 0; i-- {
		m := h.All[i]
		if !all && !m.Kind.Undoable() { // --json too: the MCP list tool's all is -a
			continue
		}
		out.Snapshots = append(out.Snapshots, snapJSON(m, h.Undone[m.ID]))
	}
	if g.json {
		return g.printJSON(out)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
	withTargets, withSessions := false, false
	for _, s := range out.Snapshots {
		withTargets = withTargets || len(s.Targets) > 0
		withSessions = withSessions || s.Session != ""
	}
	head := "ID\tKIND\tCREATED\tSCOPE\tFILES\t"
	if withTargets {
		head += "TARGETS\t"
	}
	head += "STATE\t"
	if withSessions {
		head += "SESSION\t"
	}
	fmt.Fprintln(tw, head+"MESSAGE")
	for _, s := range out.Snapshots {
		state := ""
		if s.Undone {
			state = "undone"
		} else if s.State == "running" || s.State == record.StateOpen {
			state = s.State
		}
		msg := s.Message
		if msg == "" && len(s.Command) > 0 {
			msg = "$ " + shellLine(s.Command)
			if s.ExitStatus != nil {
				msg += fmt.Sprintf("  (exit %d)", *s.ExitStatus)
			}
		}
		if s.Message == "" && len(s.Steps) > 1 {
			parts := []string{fmt.Sprintf("%d steps:", len(s.Steps))}
			for _, st := range s.Steps {
				parts = append(parts, describeStep(st)+";")
			}
			msg = strings.TrimSuffix(strings.Join(parts, " "), ";")
		}
		targets := ""
		if withTargets {
			targets = fmt.Sprintf("%d\t", len(s.Targets))
		}
		session := ""
		if withSessions {
			session = oneLine(s.Session) + "\t"
			if s.Session == "" {
				session = "-\t"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s%s\t%s%s\n", s.ID, s.Kind, s.CreatedAt.Local().Format("2006-01-02 15:04:05"),
			s.Scope, s.Files, targets, state, session, oneLine(msg))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "store %s: %s on disk\n", storeName(repo.Store), humanBytes(size))
	return nil
}
