package nfs

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/basin-nas/basin/internal/oncrpc"
)

type dbusRequest struct {
	Seq, Age                    uint64
	XID, Program, Version, Proc uint32
	V4Op, ExportID              int32
	Client                      string
}

// fakeAdmin answers requests_in_flight as Basin's patch 0008 does: two
// requests older than the bound, one of them above after_seq.
type fakeAdmin struct{}

func (fakeAdmin) requestsInFlight(olderThanMs uint32, after uint64) (uint64, uint64, uint32, uint32, uint32, uint64, uint64, []dbusRequest, bool, string, *dbus.Error) {
	all := []dbusRequest{
		{Seq: 3, Age: 40_000, XID: 7, Program: 100003, Version: 3, Proc: 21, V4Op: -1, ExportID: 2, Client: "10.99.0.201"},
		{Seq: 9, Age: 31_000, XID: 8, Program: 100003, Version: 4, Proc: 1, V4Op: 5, ExportID: 2, Client: "::ffff:10.99.0.201:871"},
	}
	var fresh []dbusRequest
	for _, r := range all {
		if r.Seq > after && r.Age >= uint64(olderThanMs) {
			fresh = append(fresh, r)
		}
	}
	if fresh == nil {
		fresh = []dbusRequest{}
	}
	return 1000, 990, 10, 2, uint32(len(fresh)), 9, 40_000, fresh, true, "OK", nil
}

// RequestsInFlight reads the reply over a real bus: the counts, the requests
// above after only, and their operations by name.
func TestRequestsInFlightOverDBus(t *testing.T) {
	bus := startTestBus(t)
	g := &fakeGanesha{exports: map[uint16]string{}}
	g.serve(t, bus.addr)
	table := map[string]any{"requests_in_flight": fakeAdmin{}.requestsInFlight}
	if err := g.conn.ExportMethodTable(table, adminPath, adminIface); err != nil {
		t.Fatal(err)
	}
	d := &DBus{Address: bus.addr}
	t.Cleanup(func() { d.Close() })
	ctx := context.Background()

	got, err := d.RequestsInFlight(ctx, 30*time.Second, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := InFlight{Received: 1000, Finished: 990, Now: 10, Older: 2, New: 1, MaxSeq: 9, Oldest: 40 * time.Second,
		Requests: []Request{{Seq: 9, Age: 31 * time.Second, XID: 8, Program: 100003, Version: 4, Proc: 1, V4Op: 5, ExportID: 2, Client: "10.99.0.201:871"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("RequestsInFlight = %+v\nwant %+v", got, want)
	}
	if op := got.Requests[0].Op(); op != "NFSv4 COMPOUND (COMMIT)" {
		t.Errorf("Op = %q", op)
	}
	got, err = d.RequestsInFlight(ctx, 30*time.Second, 0)
	if err != nil || got.New != 2 || len(got.Requests) != 2 || got.Requests[0].Op() != "NFSv3 COMMIT" {
		t.Fatalf("RequestsInFlight after 0 = %+v, %v", got, err)
	}
	if _, err := d.RequestsInFlight(ctx, -time.Second, 0); err == nil {
		t.Error("a negative bound was sent")
	}
}

// A Ganesha that refuses the call (bad arguments), or lacks it, is an error.
func TestParseInFlightRefusals(t *testing.T) {
	if _, err := parseInFlight([]any{false, "requests_in_flight takes older_than_ms (u), after_seq (t)"}); err == nil {
		t.Error("a refusal parsed")
	}
	body := []any{uint64(1), uint64(1), uint32(0), uint32(0), uint32(0), uint64(0), uint64(0), [][]any{}, false, "no"}
	if _, err := parseInFlight(body); err == nil {
		t.Error("a failed status parsed")
	}
	body[8] = true
	if r, err := parseInFlight(body); err != nil || r.Received != 1 {
		t.Errorf("an empty reply: %+v %v", r, err)
	}
}

func TestRequestOp(t *testing.T) {
	for _, c := range []struct {
		q    Request
		want string
	}{
		{Request{Program: 100003, Version: 3, Proc: 21}, "NFSv3 COMMIT"},
		{Request{Program: 100003, Version: 3, Proc: 99}, "NFSv3 procedure 99"},
		{Request{Program: 100003, Version: 4, Proc: 1, V4Op: 18}, "NFSv4 COMPOUND (OPEN)"},
		{Request{Program: 100003, Version: 4, Proc: 1, V4Op: -1}, "NFSv4 COMPOUND"},
		{Request{Program: 100003, Version: 4, Proc: 0}, "NFSv4 NULL"},
		{Request{Program: 100005, Version: 3, Proc: 1}, "MOUNTv3 MNT"},
		{Request{}, "a call not read yet"},
		{Request{Program: 7, Version: 1, Proc: 2}, "program 7 version 1 procedure 2"},
	} {
		if got := c.q.Op(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.q, got, c.want)
		}
	}
}

// FuzzParseInFlight: no reply, however malformed, makes the parser panic, and
// a row's client address is the one it carried.
func FuzzParseInFlight(f *testing.F) {
	f.Add(true, "OK", uint64(1), uint32(2), int32(-1), "10.99.0.201", uint8(0))
	f.Add(false, "no", uint64(0), uint32(0), int32(0), "", uint8(9))
	f.Fuzz(func(t *testing.T, ok bool, msg string, a uint64, b uint32, c int32, s string, shape uint8) {
		row := []any{a, a, b, b, b, b, c, c, s}
		rows := [][]any{row, row[:shape%10], {s, a, b}}
		head := []any{a, a, b, b, b, a, a}
		for _, body := range [][]any{
			append(append(append([]any{}, head...), rows[:1]), ok, msg),
			append(append(append([]any{}, head...), rows), ok, msg),
			append(append(append([]any{}, head[:shape%8]...), rows[:1]), ok, msg),
			append(append(append([]any{}, head...), "x"), ok, msg),
			{ok, msg}, {msg, ok}, {ok}, nil,
		} {
			// The client's address comes back as given, IPv4-mapped ones
			// unmapped and an IPv6 address put in brackets ("[::]:0").
			if r, err := parseInFlight(body); err == nil && len(r.Requests) > 0 && r.Requests[0].Client != unmapClient(s) {
				t.Fatalf("parsed %+v", r)
			}
		}
	})
}

// Null is answered by a server that answers NULL, refused by one that denies
// the call, and gives up when ctx ends on one that never answers.
func TestNull(t *testing.T) {
	serve := func(answer func(xid uint32) []byte) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					msg, err := oncrpc.ReadRecord(c)
					if err != nil || answer == nil {
						io.Copy(io.Discard, c)
						return
					}
					c.Write(answer(binary.BigEndian.Uint32(msg)))
				}()
			}
		}()
		return ln.Addr().String()
	}
	reply := func(acceptStat uint32) func(uint32) []byte {
		return func(xid uint32) []byte {
			// xid, REPLY, MSG_ACCEPTED, verifier AUTH_NONE, accept_stat
			body := binary.BigEndian.AppendUint32(nil, xid)
			for _, w := range []uint32{1, 0, 0, 0, acceptStat} {
				body = binary.BigEndian.AppendUint32(body, w)
			}
			return append(binary.BigEndian.AppendUint32(nil, 0x80000000|uint32(len(body))), body...)
		}
	}
	for _, c := range []struct {
		name   string
		answer func(uint32) []byte
		ok     bool
	}{{"answers", reply(0), true}, {"program unavailable", reply(1), false}, {"silent", nil, false}} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", serve(c.answer))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			if err := Null(ctx, conn); (err == nil) != c.ok {
				t.Fatalf("Null = %v", err)
			}
		})
	}
}

func TestUnmapClient(t *testing.T) {
	for in, want := range map[string]string{
		"::ffff:10.99.0.201:871": "10.99.0.201:871",
		"10.99.0.201:871":        "10.99.0.201:871",
		"fd00::1:2049":           "[fd00::1]:2049",
		"<unknown client>":       "<unknown client>",
		"::ffff:10.99.0.201":     "::ffff:10.99.0.201",
	} {
		if got := unmapClient(in); got != want {
			t.Errorf("unmapClient(%q) = %q, want %q", in, got, want)
		}
	}
}
