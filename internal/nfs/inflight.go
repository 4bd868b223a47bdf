package nfs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/oncrpc"
)

// Ganesha's admin object, where Basin's patch 0008 adds requests_in_flight.
const (
	adminPath  = "/org/ganesha/nfsd/admin"
	adminIface = "org.ganesha.nfsd.admin"
)

// InFlight is Ganesha's account of its requests at one moment (Basin's patch
// 0008, DBus admin method requests_in_flight).
type InFlight struct {
	// Received and Finished count requests since Ganesha started: read off a
	// connection, and answered or dropped.
	Received, Finished uint64
	// Now is the number of requests in flight; Older how many of them are older
	// than the bound asked, and New how many of those have a sequence number
	// above the one passed (found since the caller's last look).
	Now, Older, New int
	// MaxSeq is the largest sequence number among the older requests (0 if
	// none): the caller's next after.
	MaxSeq uint64
	// Oldest is the oldest request's age (0 if none).
	Oldest time.Duration
	// Requests are up to 32 of the New ones, oldest first.
	Requests []Request
}

// Request is one request in flight.
type Request struct {
	Seq                         uint64
	Age                         time.Duration
	XID, Program, Version, Proc uint32
	// V4Op is the NFSv4 operation it runs, -1 if none (not NFSv4, or before
	// its first operation).
	V4Op int32
	// ExportID is the export it works on, -1 if not known yet.
	ExportID int32
	// Client is the client's address and port ("10.99.0.201:871").
	Client string
}

// RequestsInFlight asks Ganesha for its requests in flight: counts, and the
// requests older than olderThan with a sequence number above after.
func (d *DBus) RequestsInFlight(ctx context.Context, olderThan time.Duration, after uint64) (InFlight, error) {
	ms := olderThan.Milliseconds()
	if ms < 0 || ms > 1<<32-1 {
		return InFlight{}, fmt.Errorf("requests in flight: bound %v out of range", olderThan)
	}
	call, err := d.callObject(ctx, adminPath, adminIface, "requests_in_flight", uint32(ms), after)
	if err != nil {
		return InFlight{}, fmt.Errorf("requests in flight: %w", err)
	}
	r, err := parseInFlight(call.Body)
	if err != nil {
		return InFlight{}, fmt.Errorf("requests in flight: %w", err)
	}
	return r, nil
}

// parseInFlight reads requests_in_flight's reply: (t received, t finished,
// u in flight, u older, u older and new, t largest older sequence number,
// t oldest age in ms, a(ttuuuuiis) requests, b ok, s message); a refusal is
// only (b false, s message).
func parseInFlight(body []any) (InFlight, error) {
	var r InFlight
	if len(body) == 2 {
		_, msg, err := parseStatus(body)
		if err != nil {
			return r, err
		}
		return r, errors.New(msg)
	}
	if len(body) != 10 {
		return r, fmt.Errorf("reply of %d fields", len(body))
	}
	if ok, msg, err := parseStatus(body[8:]); err != nil {
		return r, err
	} else if !ok {
		return r, errors.New(msg)
	}
	var (
		now, older, fresh uint32
		oldest            uint64
		ok                [7]bool
	)
	r.Received, ok[0] = body[0].(uint64)
	r.Finished, ok[1] = body[1].(uint64)
	now, ok[2] = body[2].(uint32)
	older, ok[3] = body[3].(uint32)
	fresh, ok[4] = body[4].(uint32)
	r.MaxSeq, ok[5] = body[5].(uint64)
	oldest, ok[6] = body[6].(uint64)
	for _, o := range ok {
		if !o {
			return InFlight{}, fmt.Errorf("unexpected reply %v", body[:7])
		}
	}
	r.Now, r.Older, r.New, r.Oldest = int(now), int(older), int(fresh), time.Duration(oldest)*time.Millisecond
	rows, isRows := body[7].([][]any)
	if !isRows {
		return InFlight{}, fmt.Errorf("unexpected requests %v", body[7])
	}
	for _, row := range rows {
		if len(row) != 9 {
			return InFlight{}, fmt.Errorf("unexpected request %v", row)
		}
		var q Request
		var age uint64
		var okr [9]bool
		q.Seq, okr[0] = row[0].(uint64)
		age, okr[1] = row[1].(uint64)
		q.XID, okr[2] = row[2].(uint32)
		q.Program, okr[3] = row[3].(uint32)
		q.Version, okr[4] = row[4].(uint32)
		q.Proc, okr[5] = row[5].(uint32)
		q.V4Op, okr[6] = row[6].(int32)
		q.ExportID, okr[7] = row[7].(int32)
		q.Client, okr[8] = row[8].(string)
		for _, o := range okr {
			if !o {
				return InFlight{}, fmt.Errorf("unexpected request %v", row)
			}
		}
		q.Age = time.Duration(age) * time.Millisecond
		q.Client = unmapClient(q.Client)
		r.Requests = append(r.Requests, q)
	}
	return r, nil
}

// unmapClient rewrites Ganesha's "::ffff:10.99.0.201:871" (it listens on IPv6
// too, so IPv4 clients come mapped, and it prints the port after the address
// without brackets) as "10.99.0.201:871"; anything else is left as it is.
func unmapClient(s string) string {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return s
	}
	a, err := netip.ParseAddr(s[:i])
	if err != nil {
		return s
	}
	port, err := strconv.ParseUint(s[i+1:], 10, 16)
	if err != nil {
		return s
	}
	return netip.AddrPortFrom(a.Unmap(), uint16(port)).String()
}

// RPC programs a Ganesha serves.
const (
	progNFS    = 100003
	progMount  = 100005
	progNFSACL = 100227
)

var (
	v3Procs = []string{"NULL", "GETATTR", "SETATTR", "LOOKUP", "ACCESS", "READLINK", "READ", "WRITE", "CREATE",
		"MKDIR", "SYMLINK", "MKNOD", "REMOVE", "RMDIR", "RENAME", "LINK", "READDIR", "READDIRPLUS", "FSSTAT",
		"FSINFO", "PATHCONF", "COMMIT"}
	mountProcs = []string{"NULL", "MNT", "DUMP", "UMNT", "UMNTALL", "EXPORT"}
	v4Ops      = map[int32]string{3: "ACCESS", 4: "CLOSE", 5: "COMMIT", 6: "CREATE", 7: "DELEGPURGE", 8: "DELEGRETURN",
		9: "GETATTR", 10: "GETFH", 11: "LINK", 12: "LOCK", 13: "LOCKT", 14: "LOCKU", 15: "LOOKUP", 16: "LOOKUPP",
		17: "NVERIFY", 18: "OPEN", 19: "OPENATTR", 20: "OPEN_CONFIRM", 21: "OPEN_DOWNGRADE", 22: "PUTFH",
		23: "PUTPUBFH", 24: "PUTROOTFH", 25: "READ", 26: "READDIR", 27: "READLINK", 28: "REMOVE", 29: "RENAME",
		30: "RENEW", 31: "RESTOREFH", 32: "SAVEFH", 33: "SECINFO", 34: "SETATTR", 35: "SETCLIENTID",
		36: "SETCLIENTID_CONFIRM", 37: "VERIFY", 38: "WRITE", 39: "RELEASE_LOCKOWNER", 40: "BACKCHANNEL_CTL",
		41: "BIND_CONN_TO_SESSION", 42: "EXCHANGE_ID", 43: "CREATE_SESSION", 44: "DESTROY_SESSION",
		45: "FREE_STATEID", 46: "GET_DIR_DELEGATION", 47: "GETDEVICEINFO", 48: "GETDEVICELIST",
		49: "LAYOUTCOMMIT", 50: "LAYOUTGET", 51: "LAYOUTRETURN", 52: "SECINFO_NO_NAME", 53: "SEQUENCE",
		54: "SET_SSV", 55: "TEST_STATEID", 56: "WANT_DELEGATION", 57: "DESTROY_CLIENTID", 58: "RECLAIM_COMPLETE",
		59: "ALLOCATE", 60: "COPY", 61: "COPY_NOTIFY", 62: "DEALLOCATE", 63: "IO_ADVISE", 64: "LAYOUTERROR",
		65: "LAYOUTSTATS", 66: "OFFLOAD_CANCEL", 67: "OFFLOAD_STATUS", 68: "READ_PLUS", 69: "SEEK",
		70: "WRITE_SAME", 71: "CLONE", 72: "GETXATTR", 73: "SETXATTR", 74: "LISTXATTRS", 75: "REMOVEXATTR"}
)

func name(names []string, i uint32) string {
	if int(i) < len(names) {
		return names[i]
	}
	return fmt.Sprintf("procedure %d", i)
}

// Op names what the request is: "NFSv3 COMMIT", "NFSv4 COMPOUND (COMMIT)",
// "MOUNT MNT", or the program, version and procedure as numbers.
func (q Request) Op() string {
	switch {
	case q.Program == 0 && q.Version == 0 && q.Proc == 0:
		return "a call not read yet"
	case q.Program == progNFS && q.Version == 3:
		return "NFSv3 " + name(v3Procs, q.Proc)
	case q.Program == progNFS && q.Version == 4 && q.Proc == 1:
		if op, ok := v4Ops[q.V4Op]; ok {
			return "NFSv4 COMPOUND (" + op + ")"
		}
		return "NFSv4 COMPOUND"
	case q.Program == progNFS && q.Proc == 0:
		return fmt.Sprintf("NFSv%d NULL", q.Version)
	case q.Program == progMount:
		return fmt.Sprintf("MOUNTv%d %s", q.Version, name(mountProcs, q.Proc))
	case q.Program == progNFSACL:
		return fmt.Sprintf("NFSACLv%d procedure %d", q.Version, q.Proc)
	}
	return fmt.Sprintf("program %d version %d procedure %d", q.Program, q.Version, q.Proc)
}

// authNone is an AUTH_NONE credential: flavor 0, an empty body.
var authNone = make([]byte, 8)

// Null sends an NFSv3 NULL call on c (a connection to the NFS port) and waits
// for its answer until ctx ends: a liveness probe that, unlike a DBus call,
// goes through the server's RPC transport and its pool of workers.
func Null(ctx context.Context, c net.Conn) error {
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	xid := uint32(time.Now().UnixNano())
	if _, err := c.Write(oncrpc.CallHeader(xid, progNFS, 3, 0, authNone, 0)); err != nil {
		return fmt.Errorf("NULL: %w", err)
	}
	for {
		msg, err := oncrpc.ReadRecord(c)
		if err != nil {
			return fmt.Errorf("NULL: %w", err)
		}
		if len(msg) < 4 || binary.BigEndian.Uint32(msg) != xid {
			continue
		}
		if _, err := oncrpc.ParseReply(msg); err != nil {
			return fmt.Errorf("NULL: %w", err)
		}
		return nil
	}
}
