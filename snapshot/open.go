package snapshot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/snapback/snapback/config"
)

// Opening a project's store is one protocol, here and nowhere else: load
// the config, find the store ([Locate]), check it as input from outside
// (trust.go), take the lock, then deal with what an interrupted operation
// left as the access level says. Every verb opens its store through
// [Open] or [OpenReader].

// Access is what the opener may do with the project, and so how opening
// deals with an interrupted operation.
type Access int

const (
	// ForRead: the opener only looks ([OpenReader]; a [Reader] has no
	// method that changes the tree). An interrupted operation is left
	// unfinished, with a warning, for a verb that changes things or
	// `snapback recover`; so is one whose targets cannot be restored yet
	// (a server down): looking must stay possible.
	ForRead Access = iota
	// ForChange: the opener may change the tree ([Open]). An interrupted
	// operation is finished (or rolled back) first; a journal that
	// cannot be followed is an error.
	ForChange
	// ForRepair: `check --repair` ([Open]). A store refused as untrusted is
	// set aside first, nothing deleted (a store set aside whole is
	// replaced by an empty one, so that every verb works again), and a
	// journal that cannot be followed is left for the repair to set
	// aside.
	ForRepair
)

// Options say how to open a project's store: what the opener may do
// (Access and the fields after it, which each verb declares) and how it
// hears of what opening did (the rest, which the CLI fills in).
type Options struct {
	Access Access
	// Create makes the store when the project has none; without it, a
	// missing store is [ErrNoStore].
	Create bool
	// Outside: a store made now goes in the state directory, not the
	// tree (see [Locate]): the agent hooks' verbs.
	Outside bool
	// SkipDamaged goes on past snapshot records that cannot be read,
	// with a warning (see [Store.SkipDamaged]): for verbs that only look,
	// and those that report or move aside damage. The others refuse:
	// undo or gc must not act on a history with a hole in it.
	SkipDamaged bool
	// Untouched, with ForRead, takes the store as it is found: no
	// leftovers of dead processes cleared, no journal looked at (a
	// shell's completion, which must be quick and silent).
	Untouched bool

	// HeldAhead: a checkpoint verb's open. The files of the tree held
	// for writing, which a watched begin or end reads (watch.go), are
	// looked for in /proc while the store is opened.
	HeldAhead bool

	// Verb names the opener to another snapback waiting on the lock.
	Verb string
	// LockWait is how long to wait for another snapback's lock (0: not
	// at all).
	LockWait time.Duration
	// Config is the project's config; nil: loaded from the root's
	// snapback.toml.
	Config *config.Config
	// Ctx, Working and Progress become the [Reader]'s: recovering an
	// interrupted operation already uses them.
	Ctx      context.Context
	Working  func(what string) (done func())
	Progress func(Progress)
	// Warn hears what the user should know though opening went on
	// (becomes [Store.Warn]).
	Warn func(msg string)
	// Recovered hears what finishing an interrupted operation did.
	Recovered func(note string)
	// SetAside hears, with ForRepair, each thing set aside and where it went.
	SetAside func(msg string)
}

// Open opens the store of the project at root to change it (o.Access
// ForChange or ForRepair), locked: the caller must Close it. A verb that only
// looks opens with [OpenReader].
func Open(root string, o Options) (*Repo, error) {
	if o.Access != ForChange && o.Access != ForRepair {
		return nil, errors.New("open store: a verb that only looks opens it with OpenReader")
	}
	return open(root, o)
}

// OpenReader opens the store of the project at root to look (o.Access
// ForRead), locked: the caller must Close it.
func OpenReader(root string, o Options) (*Reader, error) {
	if o.Access != ForRead {
		return nil, errors.New("open store: a verb that changes things opens it with Open")
	}
	r, err := open(root, o)
	if err != nil {
		return nil, err
	}
	return r.Reader, nil
}

func open(root string, o Options) (*Repo, error) {
	cfg := o.Config
	if cfg == nil {
		var err error
		if cfg, err = config.Load(root); err != nil {
			return nil, err
		}
	}
	loc, err := Locate(root, cfg.Snapshot.Store, o.Outside)
	if err != nil {
		return nil, err
	}
	create := o.Create
	if o.Access == ForRepair {
		moved, err := setAsideUntrusted(root, loc.Dir)
		for _, m := range moved {
			if o.SetAside != nil {
				o.SetAside(m)
			}
		}
		if err != nil {
			return nil, err
		}
		create = create || len(moved) > 0
	}
	if !create && !loc.Exists {
		return nil, fmt.Errorf("%s: %w", root, ErrNoStore)
	}
	var held chan []string
	if o.HeldAhead {
		held = writersAhead(root)
	}
	r, err := openRepo(root, loc.Dir, cfg, create)
	if err != nil {
		return nil, err
	}
	r.writers = held
	r.Config, r.Targets = cfg, cfg.Targets
	r.Ctx, r.Working, r.Progress = o.Ctx, o.Working, o.Progress
	r.Warn, r.SkipDamaged = o.Warn, o.SkipDamaged
	if err := r.Lock(o.LockWait, o.Verb); err != nil {
		r.Close()
		return nil, err
	}
	if r.waited {
		r.writers = nil // older than the wait: read again when needed
	}
	if err := r.settle(o); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// settle deals with what an interrupted operation left, as o.Access says.
func (r *Repo) settle(o Options) error {
	if o.Untouched && o.Access == ForRead {
		return nil
	}
	reading := o.Access == ForRead
	op, jerr := r.JournalOp()
	switch {
	case jerr != nil && o.Access == ForRepair:
		return nil // check reports the journal, and the repair sets it aside
	case jerr != nil && reading:
		r.warn(jerr.Error() + " (not followed; `snapback check --repair` sets it aside)")
		return nil
	case op != "" && reading:
		// Looking never changes the tree: an interrupted operation is
		// finished by a verb that changes things, or `snapback recover`.
		r.warn("an interrupted " + op + " is not finished yet (`snapback recover` finishes it); showing the tree as it is")
		return nil
	}
	if !reading {
		if err := r.completeLive(); err != nil { // once per store (live.go)
			return err
		}
	}
	did, err := r.Recover()
	switch {
	case errors.Is(err, ErrTargetsPending) && reading:
		// Looking must stay possible while a server is down; changing
		// anything waits until the interrupted operation is finished.
		r.warn(err.Error())
	case err != nil:
		return err
	case did && o.Recovered != nil:
		note := r.RecoverNote
		if note == "" {
			note = "finished an interrupted operation"
		}
		o.Recovered(note)
	}
	return nil
}
