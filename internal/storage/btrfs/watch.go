package btrfs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/basin-nas/basin/internal/storage"
)

// Run watches the volumes' space until ctx ends: it grows a thin volume's
// filesystem before it fills (and a thick one that is short of its capacity, as
// after a change from thin provisioning), gives back the headroom a full volume
// borrowed for a snapshot once it has room again, and maps shared images for the
// clones' debt. A volume some call is changing is skipped until the next pass.
func (b *Backend) Run(ctx context.Context) error {
	t := time.NewTicker(b.opts.WatchInterval)
	defer t.Stop()
	for {
		b.watchOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// watchOnce is one pass of Run.
func (b *Backend) watchOnce(ctx context.Context) {
	b.mu.Lock()
	started := b.started
	keys := make([]string, 0, len(b.vols))
	for k := range b.vols {
		keys = append(keys, k)
	}
	b.mu.Unlock()
	if !started {
		return
	}
	total, _, err := b.storeSize()
	if err != nil {
		return
	}
	b.acct.mu.Lock()
	usable := b.usable(total)
	b.acct.mu.Unlock()
	b.acct.mu.Lock()
	stale := time.Since(b.acct.lastDebt) > debtEvery
	b.acct.mu.Unlock()
	if stale {
		b.refreshDebt()
	}
	b.noteStore(ctx)
	for _, key := range keys {
		if ctx.Err() != nil {
			return
		}
		m := b.keyLock(key)
		if !m.TryLock() {
			continue
		}
		b.provision(ctx, key, usable)
		m.Unlock()
	}
}

// provision gives one volume (locked by the caller) the filesystem its capacity
// and the provisioning call for, as far as the store allows, and records why not.
func (b *Backend) provision(ctx context.Context, key string, usable int64) {
	b.mu.Lock()
	v := b.vols[key]
	b.mu.Unlock()
	img := b.imagePath(key)
	n, ok := nominal(img)
	if v == nil || !ok {
		return // not open, or made before capacities were recorded: its filesystem is its capacity
	}
	if statDev(b.fsPath(key)) != v.topDev {
		return // unmounted meanwhile
	}
	size, used, err := b.space(key)
	if err != nil {
		return
	}
	switch {
	case size < n:
		want := n
		if b.opts.Thin {
			slack := thinSlack(n, usable, b.opts.ThinInitial, size)
			if size-used >= slack {
				b.setNote(key, "")
				return
			}
			want = min(n, used+2*slack)
		}
		err := b.resizeFS(ctx, key, img, v, want, false)
		if errors.Is(err, storage.ErrStoreFull) {
			// What the store can still give, in whole MiB, is better than nothing.
			b.acct.mu.Lock()
			part := b.allocatable() &^ (1<<20 - 1)
			b.acct.mu.Unlock()
			if part >= 16<<20 && size+part < want {
				if perr := b.resizeFS(ctx, key, img, v, size+part, false); perr == nil {
					b.log.Info("volume grown as far as the store allows", "volume", key, "from", size, "to", size+part, "capacity", n)
					size += part
				}
			}
		}
		switch {
		case errors.Is(err, storage.ErrStoreFull):
			var note string
			if b.opts.Thin {
				note = fmt.Sprintf("thin provisioning: this volume can hold %s of its %s capacity now; the node's store has no room for more, "+
					"so writes past that are refused until space is freed on the node", gibs(size), gibs(n))
			} else {
				note = fmt.Sprintf("this volume's filesystem is %s of its %s capacity: the node's store has no room for the rest", gibs(size), gibs(n))
			}
			if b.note(key) != note {
				b.log.Warn("volume cannot grow: the store is full", "volume", key, "size", size, "capacity", n)
			}
			b.setNote(key, note)
		case err != nil:
			b.log.Warn("grow volume", "volume", key, "err", err)
		default:
			// resizeFS grows to at least btrfs's smallest filesystem.
			b.log.Info("volume grown", "volume", key, "from", size, "to", max(want, int64(minSize)), "capacity", n)
			b.setNote(key, "")
		}
	case size > n:
		// Headroom borrowed for a snapshot: back to the capacity once the data
		// fits with room to spare, at most once a minute.
		b.acct.mu.Lock()
		last := b.acct.giveBack[key]
		b.acct.mu.Unlock()
		if used+2*headroomBytes > n || time.Since(last) < giveBackEvery {
			return
		}
		b.acct.mu.Lock()
		b.acct.giveBack[key] = time.Now()
		b.acct.mu.Unlock()
		if err := b.resizeFS(ctx, key, img, v, n, false); err != nil {
			b.log.Info("headroom not given back yet", "volume", key, "err", err)
			return
		}
		b.log.Info("headroom given back", "volume", key)
	default:
		b.setNote(key, "")
	}
}

// borrowHeadroom grows a full volume's filesystem (locked by the caller) by
// headroomBytes from the store's reserve, once: a volume already past its
// capacity has borrowed it.
func (b *Backend) borrowHeadroom(ctx context.Context, key string, v *volume) error {
	img := b.imagePath(key)
	size, _, err := b.space(key)
	if err != nil {
		return err
	}
	n, ok := nominal(img)
	if !ok {
		n = size
	}
	if size >= n+headroomBytes {
		return fmt.Errorf("volume %s has borrowed its headroom already", key)
	}
	if err := b.resizeFS(ctx, key, img, v, size+headroomBytes, true); err != nil {
		return err
	}
	b.log.Info("a full volume borrowed headroom for a snapshot", "volume", key, "bytes", headroomBytes)
	return nil
}

// Note returns why volume key's filesystem is not what its capacity and the
// provisioning promise ("" if it is), in words fit for its user.
func (b *Backend) Note(key string) string { return b.note(key) }

// storeNoteEvery is how often the watcher reads the store's report, to log when
// its note changes.
const storeNoteEvery = 10 * time.Second

// noteStore logs, once per change, what StoreReport says is wrong with the
// store's space (thin provisioning promising more than it can give).
func (b *Backend) noteStore(ctx context.Context) {
	b.acct.mu.Lock()
	due := time.Since(b.acct.lastStoreNote) >= storeNoteEvery
	if due {
		b.acct.lastStoreNote = time.Now()
	}
	b.acct.mu.Unlock()
	if !due {
		return
	}
	r, err := b.StoreReport(ctx)
	if err != nil {
		return
	}
	b.acct.mu.Lock()
	changed := r.Note != b.acct.storeNote
	b.acct.storeNote = r.Note
	b.acct.mu.Unlock()
	switch {
	case changed && r.Note != "":
		b.log.Warn("store short of space", "note", r.Note, "allocatable", r.AllocatableBytes, "short", r.ShortBytes)
	case changed:
		b.log.Info("store no longer short of space", "allocatable", r.AllocatableBytes)
	}
}
