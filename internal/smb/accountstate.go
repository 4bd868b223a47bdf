package smb

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// AccountantStateVersion is the version of AccountantState this package
// writes, and the only one RestoreAccountant takes.
const AccountantStateVersion = 1

// AccountantState is the whole state of an Accountant (Accountant.State), in a
// form encoding/json reads and writes: what RestoreAccountant needs to go on
// counting as the Accountant would have. Its fields are the Accountant's
// bookkeeping, to be saved and taken up, not read.
type AccountantState struct {
	Version int       `json:"version"`
	Since   time.Time `json:"since,omitzero"` // its first Update (ShareIO.Since)
	// Parent is the smbd parent of the last Update, ParentIO its record when
	// its growth was last accounted for.
	Parent   int       `json:"parent,omitempty"`
	ParentIO ProcessIO `json:"parentIO"`
	// Seen are the processes with a record the last Update read, Early those
	// known by their tree connects only, by pid.
	Seen  map[int]ProcessState `json:"seen,omitempty"`
	Early map[int]ProcessState `json:"early,omitempty"`
	// Finished are the pids of exited children whose tree connects are still
	// listed, Former those of earlier smbd parents whose records are, in
	// increasing order.
	Finished []int `json:"finished,omitempty"`
	Former   []int `json:"former,omitempty"`
	// Exited are children gone, not yet found in the parent's record; Waited
	// the Updates they have waited for it.
	Exited []ProcessState `json:"exited,omitempty"`
	Waited int            `json:"waited,omitempty"`
	// Shares are the sums so far by lower-case share name (Since zero), and
	// Unattributed what went to no share.
	Shares       map[string]ShareIO `json:"shares,omitempty"`
	Unattributed ShareIO            `json:"unattributed"`
}

// ProcessState is an smbd child as an Accountant last saw it: its counters,
// its one share ("" for none or several), whether it had several, and the
// smbd it was first seen under.
type ProcessState struct {
	IO        ProcessIO `json:"io"`
	Share     string    `json:"share,omitempty"`
	Ambiguous bool      `json:"ambiguous,omitempty"`
	Parent    int       `json:"parent,omitempty"`
}

func (sp seenProcess) state() ProcessState {
	return ProcessState{IO: sp.io, Share: sp.share, Ambiguous: sp.ambiguous, Parent: sp.parent}
}

func (ps ProcessState) seen() seenProcess {
	return seenProcess{io: ps.IO, share: ps.Share, ambiguous: ps.Ambiguous, parent: ps.Parent}
}

// State returns a copy of a's whole state, which shares nothing with a: save
// it (encoding/json), and RestoreAccountant takes it up. Empty sets are nil.
func (a *Accountant) State() AccountantState {
	st := AccountantState{Version: AccountantStateVersion, Since: a.since, Parent: a.parent, ParentIO: a.parentIO,
		Waited: a.waited, Unattributed: a.Unattributed}
	st.Unattributed.Since = time.Time{}
	if len(a.seen) > 0 {
		st.Seen = make(map[int]ProcessState, len(a.seen))
		for pid, sp := range a.seen {
			st.Seen[pid] = sp.state()
		}
	}
	if len(a.early) > 0 {
		st.Early = make(map[int]ProcessState, len(a.early))
		for pid, sp := range a.early {
			st.Early[pid] = sp.state()
		}
	}
	if len(a.finished) > 0 {
		st.Finished = slices.Sorted(maps.Keys(a.finished))
	}
	if len(a.former) > 0 {
		st.Former = slices.Sorted(maps.Keys(a.former))
	}
	for _, sp := range a.exited {
		st.Exited = append(st.Exited, sp.state())
	}
	if len(a.shares) > 0 {
		st.Shares = make(map[string]ShareIO, len(a.shares))
		for name, io := range a.shares {
			st.Shares[name] = *io
		}
	}
	return st
}

// RestoreAccountant returns an Accountant with the state st (Accountant.State):
// the next Update counts as the saved Accountant's would have, Since included.
// A state of another version, or one no Accountant could have, is an error.
func RestoreAccountant(st AccountantState) (*Accountant, error) {
	if st.Version != AccountantStateVersion {
		return nil, fmt.Errorf("smb accountant state of version %d, this Basin reads %d", st.Version, AccountantStateVersion)
	}
	bad := func(format string, args ...any) (*Accountant, error) {
		return nil, fmt.Errorf("smb accountant state: "+format, args...)
	}
	if st.Parent < 0 {
		return bad("parent pid %d", st.Parent)
	}
	if st.Waited < 0 || st.Waited > maxExitWait {
		return bad("waited %d updates, at most %d", st.Waited, maxExitWait)
	}
	a := &Accountant{since: st.Since, parent: st.Parent, parentIO: st.ParentIO, waited: st.Waited, Unattributed: st.Unattributed,
		seen: make(map[int]seenProcess, len(st.Seen)), early: make(map[int]seenProcess, len(st.Early)),
		finished: make(map[int]bool, len(st.Finished)), former: make(map[int]bool, len(st.Former)),
		shares: make(map[string]*ShareIO, len(st.Shares))}
	a.Unattributed.Since = time.Time{}
	checkProc := func(what string, pid int, ps ProcessState) error {
		if pid <= 0 || ps.Parent < 0 || ps.Share != strings.ToLower(ps.Share) || ps.Ambiguous && ps.Share != "" {
			return fmt.Errorf("smb accountant state: %s process %d %+v", what, pid, ps)
		}
		return nil
	}
	for pid, ps := range st.Seen {
		if err := checkProc("seen", pid, ps); err != nil {
			return nil, err
		}
		a.seen[pid] = ps.seen()
	}
	for pid, ps := range st.Early {
		if err := checkProc("early", pid, ps); err != nil {
			return nil, err
		}
		a.early[pid] = ps.seen()
	}
	for _, ps := range st.Exited {
		if err := checkProc("exited", 1, ps); err != nil {
			return nil, err
		}
		a.exited = append(a.exited, ps.seen())
	}
	for _, pid := range st.Finished {
		if pid <= 0 {
			return bad("finished pid %d", pid)
		}
		a.finished[pid] = true
	}
	for _, pid := range st.Former {
		if pid <= 0 {
			return bad("former parent pid %d", pid)
		}
		a.former[pid] = true
	}
	for name, io := range st.Shares {
		if name == "" || name != strings.ToLower(name) {
			return bad("share %q", name)
		}
		io.Since = time.Time{}
		a.shares[name] = &io
	}
	return a, nil
}
