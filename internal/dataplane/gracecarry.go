package dataplane

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"

	"github.com/basin-nas/basin/internal/jsonline"
)

// Carrying an NFSv4 identity's grace to a new host (docs/design-nfs4-failover.md
// §3.3). Ganesha's rados_cluster recovery keeps, for each identity (its
// NodeId), a grace database object holding two epochs — C, under which new
// client records are written, and R, from which clients may reclaim (0: no
// grace) — and the client records themselves in rec-<epoch>:<identity>
// objects (one omap key per client). A Ganesha that starts joins its database
// (R = C, C = C+1 when no grace is on), reads rec-<R> and lets exactly those
// clients reclaim.
//
// When an identity moves to another node, the new host's Ganesha does not join
// the old host's database: the old one may still be serving (a drain), or its
// dead Ganesha's watch may stall notifies. carryGrace instead makes a database
// of the new generation's own, whose epochs start at K = gen<<32, with the old
// instance's live clients copied into rec-K: the new Ganesha joins it (R = K,
// C = K+1) and lets those clients reclaim. The old instance's objects are only
// read, never written.

// errNoObject is a RADOS object that does not exist (ENOENT).
var errNoObject = errors.New("no such object")

// errObjectExists is an exclusive create of an object that exists (EEXIST).
var errObjectExists = errors.New("object exists")

// radosOps is what carryGrace needs of RADOS, in one pool and namespace.
type radosOps interface {
	// Read returns an object's data (at most 4 KiB); errNoObject if it
	// does not exist.
	Read(ctx context.Context, oid string) ([]byte, error)
	// Omap returns an object's omap; errNoObject if it does not exist.
	Omap(ctx context.Context, oid string) (map[string][]byte, error)
	// ReplaceOmap makes oid if need be and sets its omap to exactly kv, in one
	// operation.
	ReplaceOmap(ctx context.Context, oid string, kv map[string][]byte) error
	// Create makes oid with data and omap kv in one operation;
	// errObjectExists if it exists (nothing is changed then).
	Create(ctx context.Context, oid string, data []byte, kv map[string][]byte) error
}

// Grace database flags (an omap value of one byte per member).
const (
	graceNeed      = 0x1 // the member needs a grace period
	graceEnforcing = 0x2 // the member enforces it locally
)

// maxGraceGen keeps K = gen<<32 well inside Ganesha's 64-bit epochs.
const maxGraceGen = 1<<31 - 1

// recOID is the client records object of an identity for an epoch, as
// Ganesha names it ("rec-%16.16lx:%s").
func recOID(epoch uint64, node string) string { return fmt.Sprintf("rec-%016x:%s", epoch, node) }

// clientName is the client a record names: its value up to the first '#'
// ("<address>-(<length>:<client string>)"; Ganesha appends "#<handle>" for
// each handle revoked from the client).
func clientName(v []byte) string {
	name, _, _ := strings.Cut(string(v), "#")
	return name
}

// graceEpochs reads a grace database's data: C and R, little-endian.
func graceEpochs(data []byte) (cur, rec uint64, err error) {
	if len(data) != 16 {
		return 0, 0, fmt.Errorf("grace database of %d bytes, want 16", len(data))
	}
	return binary.LittleEndian.Uint64(data), binary.LittleEndian.Uint64(data[8:]), nil
}

// graceData is a grace database's data for C and R.
func graceData(cur, rec uint64) []byte {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint64(b, cur)
	binary.LittleEndian.PutUint64(b[8:], rec)
	return b
}

// carryGrace makes to, the grace database of identity node's generation gen,
// with node its only member, and copies into rec-<gen<<32>:node the client
// records from the database from (the previous generation's): the clients of
// its current epoch and those of its recovery epoch that had not reclaimed yet.
// It must run before a Ganesha starts on to. A from that does not exist carries
// nothing (the new Ganesha starts with no client to wait for).
//
// It is idempotent: once to exists, it changes nothing and reports done (to is
// made last, so a carry cut short is done again in full, and a Ganesha that
// already started on to keeps its epochs). carried is the number of clients
// copied by this call.
func carryGrace(ctx context.Context, ops radosOps, node, from, to string, gen int64) (carried int, done bool, err error) {
	if gen < 1 || gen > maxGraceGen {
		return 0, false, fmt.Errorf("carry grace of %s: generation %d out of range", node, gen)
	}
	if from == to {
		return 0, false, fmt.Errorf("carry grace of %s: from and to are both %s", node, to)
	}
	k := uint64(gen) << 32
	if data, err := ops.Read(ctx, to); err == nil {
		// Made by an earlier carry (and maybe joined since: C = K+1, …). A
		// database at other epochs was not made by a carry.
		if cur, _, err := graceEpochs(data); err != nil || cur < k || cur >= k+1<<32 {
			return 0, false, fmt.Errorf("carry grace of %s: %s exists, not at generation %d's epochs (%v)", node, to, gen, err)
		}
		return 0, true, nil
	} else if !errors.Is(err, errNoObject) {
		return 0, false, fmt.Errorf("carry grace of %s: read %s: %w", node, to, err)
	}
	records := map[string][]byte{}
	data, err := ops.Read(ctx, from)
	switch {
	case errors.Is(err, errNoObject):
	case err != nil:
		return 0, false, fmt.Errorf("carry grace of %s: read %s: %w", node, from, err)
	default:
		cur, rec, err := graceEpochs(data)
		if err != nil {
			return 0, false, fmt.Errorf("carry grace of %s: %s: %w", node, from, err)
		}
		if cur >= k || rec >= k {
			// The old database's epochs reached the new range: copying into
			// rec-K could overwrite records of its own.
			return 0, false, fmt.Errorf("carry grace of %s: %s is at epochs %d/%d, past generation %d's start %d", node, from, cur, rec, gen, k)
		}
		// A record's key is its client id, which a reclaim renews: a client
		// that reclaimed is in rec-R under its old id and in rec-C under its
		// new one. Its value names it (clientName), and it is carried once,
		// with its current epoch's record: Ganesha counts each record as a
		// client to wait for, and one listed twice would hold the grace
		// period to its end.
		epochs := []uint64{cur}
		if rec != 0 {
			epochs = append(epochs, rec)
		}
		carried := map[string]bool{}
		for _, e := range epochs {
			kv, err := ops.Omap(ctx, recOID(e, node))
			if errors.Is(err, errNoObject) {
				continue
			}
			if err != nil {
				return 0, false, fmt.Errorf("carry grace of %s: read %s: %w", node, recOID(e, node), err)
			}
			for _, id := range slices.Sorted(maps.Keys(kv)) {
				name := clientName(kv[id])
				if _, taken := records[id]; taken || carried[name] {
					continue
				}
				records[id], carried[name] = kv[id], true
			}
		}
	}
	if err := ops.ReplaceOmap(ctx, recOID(k, node), records); err != nil {
		return 0, false, fmt.Errorf("carry grace of %s: write %s: %w", node, recOID(k, node), err)
	}
	// As ganesha-rados-grace add makes a member (enforcing, no grace needed),
	// with epochs chosen: C = K, R = 0.
	err = ops.Create(ctx, to, graceData(k, 0), map[string][]byte{node: {graceEnforcing}})
	if errors.Is(err, errObjectExists) {
		return 0, true, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("carry grace of %s: create %s: %w", node, to, err)
	}
	return len(records), true, nil
}

// radosPy is the helper behind radosChannel.
//
//go:embed rados_ops.py
var radosPy string

// python is Debian's interpreter, the one python3-rados is installed for.
const python = "/usr/bin/python3"

// radosChannel is radosOps through rados_ops.py (Ceph's Python bindings),
// one RADOS client kept open for a carry.
type radosChannel struct{ h *jsonline.Helper }

// newRADOSChannel talks to pool and namespace ns as cephx user id, with the
// keyring the ceph.conf at conf names for it; prefix runs the helper
// elsewhere (nsenter into the sandbox's network namespace, where its Ceph
// link is).
func newRADOSChannel(prefix []string, conf, id, pool, ns string) *radosChannel {
	argv := append(slices.Clone(prefix), python, "-c", radosPy, conf, id, "", pool, ns)
	return &radosChannel{h: &jsonline.Helper{Name: "rados channel (client." + id + ")", Argv: argv}}
}

func (c *radosChannel) Close() { c.h.Close() }

type radosAnswer struct {
	RC   int               `json:"rc"`
	Err  string            `json:"err"`
	Data []byte            `json:"data"`
	Omap map[string][]byte `json:"omap"`
}

// call sends one request; ENOENT and EEXIST become errNoObject and
// errObjectExists. Every request is safe to send again (a create sent again
// after it succeeded answers EEXIST, which carryGrace takes as done).
func (c *radosChannel) call(ctx context.Context, req map[string]any) (radosAnswer, error) {
	var a radosAnswer
	if err := c.h.Call(ctx, req, &a); err != nil {
		return a, err
	}
	switch a.RC {
	case 0:
		return a, nil
	case -int(syscall.ENOENT):
		return a, fmt.Errorf("%s %v: %w", req["op"], req["oid"], errNoObject)
	case -int(syscall.EEXIST):
		return a, fmt.Errorf("%s %v: %w", req["op"], req["oid"], errObjectExists)
	}
	return a, fmt.Errorf("%s %v: %v: %s", req["op"], req["oid"], syscall.Errno(-a.RC), a.Err)
}

func (c *radosChannel) Read(ctx context.Context, oid string) ([]byte, error) {
	a, err := c.call(ctx, map[string]any{"op": "read", "oid": oid})
	return a.Data, err
}

func (c *radosChannel) Omap(ctx context.Context, oid string) (map[string][]byte, error) {
	a, err := c.call(ctx, map[string]any{"op": "omap", "oid": oid})
	return a.Omap, err
}

func (c *radosChannel) ReplaceOmap(ctx context.Context, oid string, kv map[string][]byte) error {
	_, err := c.call(ctx, map[string]any{"op": "replace_omap", "oid": oid, "omap": kv})
	return err
}

func (c *radosChannel) Create(ctx context.Context, oid string, data []byte, kv map[string][]byte) error {
	_, err := c.call(ctx, map[string]any{"op": "create", "oid": oid, "data": data, "omap": kv})
	return err
}
