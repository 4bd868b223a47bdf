package store

import (
	"errors"
	"time"

	"github.com/basin-nas/basin/internal/model"
)

// KindLease documents are leases on cluster-scope work that one node at a time
// may do (the snapshot scheduler's passes), named after the work.
const KindLease = "lease"

// Lease is who holds a piece of work until when. Epoch counts the times it
// changed hands (or was taken again after it lapsed): a fencing token, checked
// by the holder's writes (HoldsLease).
type Lease struct {
	Name   string    `json:"name"`
	Holder string    `json:"holder"`
	Epoch  int64     `json:"epoch"`
	Expire time.Time `json:"expire"`
}

// ErrLeaseLost: the lease a write was made under is held by another holder now
// (or lapsed).
var ErrLeaseLost = errors.New("lease lost")

// TakeLease takes lease name for holder until now+ttl, in tx, if it is free,
// lapsed, or holder's already (a renewal, at the same epoch). It returns the
// lease as stored and whether holder holds it.
func TakeLease(tx Tx, name, holder string, now time.Time, ttl time.Duration) (Lease, bool, error) {
	var l Lease
	err := tx.Get(KindLease, name, &l)
	if err != nil && !errors.Is(err, model.ErrNotFound) {
		return Lease{}, false, err
	}
	if l.Holder != "" && l.Holder != holder && now.Before(l.Expire) {
		return l, false, nil
	}
	if l.Holder != holder || !now.Before(l.Expire) {
		l.Epoch++
	}
	l.Name, l.Holder, l.Expire = name, holder, now.Add(ttl)
	if err := tx.Put(KindLease, name, "", l); err != nil {
		return Lease{}, false, err
	}
	return l, true, nil
}

// HoldsLease returns ErrLeaseLost unless holder still holds lease name at epoch.
// The epoch, not the expiry, decides: a holder whose lease lapsed while nobody
// took it (a long pass) may still write, since nobody else did; once another
// took it (a new epoch), it may not.
func HoldsLease(tx Tx, name, holder string, epoch int64) error {
	var l Lease
	if err := tx.Get(KindLease, name, &l); err != nil {
		if errors.Is(err, model.ErrNotFound) {
			return ErrLeaseLost
		}
		return err
	}
	if l.Holder != holder || l.Epoch != epoch {
		return ErrLeaseLost
	}
	return nil
}
