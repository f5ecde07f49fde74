package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot/record"
)

// Live records. Most verbs need the whole history, but what every
// checkpoint begin and end and every verb's recovery asks is which
// records are live (an open checkpoint, a running run) and when the
// newest was made; an agent's hooks ask it at every tool call, and
// reading every record for it made a turn cost what the history holds
// (with 517 records in a 100,000-file project, a verb took 35-50 ms;
// with the markers, 13-22 ms).
//
// So a record written live has a marker live/ID, made (and synced)
// before the record says it is live and removed after it says
// otherwise or is deleted: every live record has one. A marker whose
// record is gone or no longer live is only read and passed over. A
// store made before markers existed has none: the first verb that may
// change the store reads the whole history once, marks what is live and
// then writes live/complete, after which the markers are trusted; until
// then every reader reads the whole history, as before.
//
// The newest record is found by name: a record's id begins with the
// second of its creation time ([record.NewID], from [Store.newMeta]'s
// time), so the newest is among the ids of the latest second.

const (
	liveDir      = "live"
	liveComplete = "complete" // no id: ids begin with a date
)

// isLive reports whether m is a record live/ marks.
func isLive(m *record.Meta) bool {
	return m.State == record.StateOpen || m.State == record.StateRunning
}

// markLive makes (durably) the marker of the record id.
func (s *Store) markLive(id string) error {
	dir := s.path(liveDir)
	fsutil.Mutating()
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("mark %s live: %w", id, err)
	}
	d, err := s.openDir(liveDir)
	if err != nil {
		return fmt.Errorf("mark %s live: %w", id, err)
	}
	defer d.Close() // (synced below)
	fsutil.Mutating()
	f, err := d.Open(id, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("mark %s live: %w", id, err)
	}
	f.Close() // empty: its name is all
	if err := fsutil.SyncDir(dir); err != nil {
		return fmt.Errorf("mark %s live: %w", id, err)
	}
	return nil
}

// unmarkLive removes the marker of the record id, if any. A marker left
// (a crash) is harmless: its record is read and passed over.
func (s *Store) unmarkLive(id string) {
	fsutil.Mutating()
	os.Remove(s.path(liveDir, id))
}

// liveRecords returns the live records, oldest first, and those of the
// marked ones that cannot be read; from the whole history until the
// markers are complete.
func (s *Store) liveRecords() ([]*record.Meta, []DamagedRecord, error) {
	names, complete := s.liveNames()
	if !complete {
		all, damaged, err := s.records()
		if err != nil {
			return nil, nil, err
		}
		var out []*record.Meta
		for _, m := range all {
			if isLive(m) {
				out = append(out, m)
			}
		}
		return out, damaged, nil
	}
	var out []*record.Meta
	var damaged []DamagedRecord
	for _, id := range names {
		m, err := s.readRecord(id)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			damaged = append(damaged, DamagedRecord{ID: id, Path: s.recordPath(id), Err: err})
		case isLive(m):
			out = append(out, m)
		}
	}
	sortRecords(out)
	return out, damaged, nil
}

// liveNames lists the marked ids, and whether live/complete says the
// markers are all there.
func (s *Store) liveNames() (ids []string, complete bool) {
	d, err := s.openDir(liveDir)
	if err != nil {
		return nil, false
	}
	defer d.Close() // read-only
	names, err := d.ReadDirNames()
	if err != nil {
		return nil, false
	}
	for _, n := range names {
		switch {
		case n == liveComplete:
			complete = true
		case record.ValidID(n):
			ids = append(ids, n)
		}
	}
	return ids, complete
}

// completeLive marks the live records of a store made before markers
// existed, once, then says the markers are complete. It reads the whole
// history; with live/complete there it does nothing.
func (s *Store) completeLive() error {
	if _, complete := s.liveNames(); complete {
		return nil
	}
	all, _, err := s.records()
	if err != nil {
		return err
	}
	for _, m := range all {
		if isLive(m) {
			if err := s.markLive(m.ID); err != nil {
				return err
			}
		}
	}
	// A damaged record, if live, was so before markers existed: check
	// reports it, as before. Now the markers are complete.
	return s.markLive(liveComplete)
}

// newest returns the newest record (nil when there is none), reading
// only the records of the latest second.
func (s *Store) newest() (newest *record.Meta, err error) {
	d, err := s.openDir("snapshots")
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	names, err := d.ReadDirNames()
	d.Close() // read-only
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	const second = len("20060102-150405")
	var last []string
	for _, n := range names {
		id, ok := strings.CutSuffix(n, ".json")
		if !ok || !record.ValidID(id) {
			continue
		}
		switch {
		case len(last) == 0 || id[:second] > last[0][:second]:
			last = []string{id}
		case id[:second] == last[0][:second]:
			last = append(last, id)
		}
	}
	for _, id := range last {
		m, err := s.readRecord(id)
		if err != nil {
			continue // removed meanwhile, or damaged: the verbs that read the history say so
		}
		if newest == nil || m.CreatedAt.After(newest.CreatedAt) {
			newest = m
		}
	}
	return newest, nil
}

// sortRecords sorts records oldest first: by creation time, then id.
func sortRecords(out []*record.Meta) {
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
}
