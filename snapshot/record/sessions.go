package record

import (
	"fmt"
	"time"
)

// Mark is the tree's state (a manifest of the whole tree) when another
// session's checkpoint began or ended during an open checkpoint, the
// other sessions' checkpoints open from then on, and what each open
// session (this checkpoint's too) said it was about to write from then
// until the next mark (snapshot/sessions.go).
type Mark struct {
	At     time.Time `json:"at"`
	Tree   string    `json:"tree"`
	Open   []string  `json:"open,omitempty"`
	Claims []Claim   `json:"claims,omitempty"`
}

// Claim is what the session of checkpoint ID said it was about to write:
// the paths its edit tools named, or any path.
type Claim struct {
	ID      string   `json:"id"`
	Session string   `json:"session"`
	AnyPath bool     `json:"any_path,omitempty"`
	Paths   []string `json:"paths,omitempty"`
	// Agent is the session's agent's process (its checkpoint's Agent).
	Agent *Agent `json:"agent,omitempty"`
}

// Agent is the process a session's agent runs as, named for as long as
// the system runs: its id, its start time (clock ticks after boot, as
// /proc/PID/stat says: an id taken again is taken by a later process)
// and its pid namespace (the inode of /proc/PID/ns/pid). The processes
// it starts (a shell command's) are its descendants.
type Agent struct {
	Pid   int    `json:"pid"`
	Start uint64 `json:"start"`
	PidNS uint64 `json:"pid_ns"`
}

func (a *Agent) valid() bool { return a == nil || a.Pid > 1 && a.Start > 0 }

// MaxClaims bounds the paths a checkpoint claims: past it, its session is
// taken to have written any path (a step's record is read by every list).
const MaxClaims = 4096

// validateSessions checks what a record says of its session's writes
// beside other sessions: only a checkpoint says it; marks only while it
// is open, what it overlapped and shares only once closed.
func (m *Meta) validateSessions() error {
	if m.Kind != KindCheckpoint {
		if len(m.Claimed)+len(m.Marks)+len(m.Overlaps)+len(m.Shared)+len(m.SharedTargets) > 0 || m.AnyPath || m.Agent != nil {
			return fmt.Errorf("kind %s with a session's writes", m.Kind)
		}
		return nil
	}
	if len(m.Claimed) > MaxClaims {
		return fmt.Errorf("over %d claimed paths", MaxClaims)
	}
	if !m.Agent.valid() {
		return fmt.Errorf("bad agent process %+v", *m.Agent)
	}
	for _, p := range append(append([]string(nil), m.Claimed...), m.Shared...) {
		if !ValidPath(p) {
			return fmt.Errorf("bad claimed or shared path %q", p)
		}
	}
	for _, id := range m.Overlaps {
		if !ValidID(id) || id == m.ID {
			return fmt.Errorf("bad overlaps reference %q", id)
		}
	}
	if m.State == StateOpen && len(m.Overlaps)+len(m.Shared)+len(m.SharedTargets) > 0 {
		return fmt.Errorf("open checkpoint with overlaps")
	}
	if m.State != StateOpen && len(m.Marks) > 0 {
		return fmt.Errorf("closed checkpoint with marks")
	}
	for i, k := range m.Marks {
		if _, ok := ParseObjectID(k.Tree); !ok || k.At.IsZero() {
			return fmt.Errorf("bad mark %d", i)
		}
		for _, id := range k.Open {
			if !ValidID(id) || id == m.ID {
				return fmt.Errorf("bad mark %d: open %q", i, id)
			}
		}
		for _, c := range k.Claims {
			if !ValidID(c.ID) || ValidSession(c.Session) != nil || len(c.Paths) > MaxClaims || !c.Agent.valid() {
				return fmt.Errorf("bad mark %d: claim of %q", i, c.ID)
			}
			for _, p := range c.Paths {
				if !ValidPath(p) {
					return fmt.Errorf("bad mark %d: claimed path %q", i, p)
				}
			}
		}
	}
	return nil
}
