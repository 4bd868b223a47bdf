package nfs

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

type dbusTime struct{ Sec, Nsec uint64 }

type dbusIO struct{ Requested, Transferred, Ops, Errors, Latency, Wait uint64 }

type dbusTotals struct {
	V3  string
	N3  uint64
	V40 string
	N40 uint64
	V41 string
	N41 uint64
	V42 string
	N42 uint64
}

// fakeStats answers Ganesha's exportstats calls as Ganesha 4.3 does: export 7
// has NFSv3 and v4.0 activity, none in v4.1 and v4.2 (a two-field reply); other
// exports are unknown.
type fakeStats struct{}

var statsEpoch = dbusTime{1_790_000_000, 5}

func (fakeStats) GetNFSv3IO(id uint16) (bool, string, dbusTime, dbusIO, dbusIO, *dbus.Error) {
	if id != 7 {
		return false, "No export available", dbusTime{}, dbusIO{}, dbusIO{}, nil
	}
	return true, "OK", statsEpoch, dbusIO{100, 100, 1, 0, 1000, 0}, dbusIO{200, 200, 2, 0, 4000, 0}, nil
}

func (fakeStats) GetNFSv40IO(id uint16) (bool, string, dbusTime, dbusIO, dbusIO, *dbus.Error) {
	if id != 7 {
		return false, "No export available", dbusTime{}, dbusIO{}, dbusIO{}, nil
	}
	return true, "OK", statsEpoch, dbusIO{4096, 4096, 10, 1, 20000, 0}, dbusIO{5, 5, 1, 0, 35874, 0}, nil
}

func (fakeStats) GetNFSv41IO(id uint16) (bool, string, *dbus.Error) {
	return false, "Export does not have any NFSv4.1 activity", nil
}

func (fakeStats) GetNFSv42IO(id uint16) (bool, string, *dbus.Error) {
	return false, "Export does not have any NFSv4.2 activity", nil
}

func (fakeStats) GetTotalOPS(id uint16) (bool, string, dbusTime, dbusTotals, *dbus.Error) {
	if id != 7 {
		return false, "Export does not have any activity", dbusTime{}, dbusTotals{}, nil
	}
	return true, "OK", statsEpoch, dbusTotals{"NFSv3", 16, "NFSv40", 30, "NFSv41", 0, "NFSv42", 0}, nil
}

type dbusAllIO struct {
	ID          uint16
	Version     string
	Read, Write dbusIO
}

// GetNFSIO answers with the same counters as the per-version calls, plus I/O of
// export 8, which GetTotalOPS does not know (it went between the two calls).
func (fakeStats) GetNFSIO() (bool, string, dbusTime, []dbusAllIO, *dbus.Error) {
	return true, "OK", statsEpoch, []dbusAllIO{
		{7, "NFSv3", dbusIO{100, 100, 1, 0, 1000, 0}, dbusIO{200, 200, 2, 0, 4000, 0}},
		{8, "NFSv3", dbusIO{1, 1, 1, 0, 1, 0}, dbusIO{}},
		{7, "NFSv40", dbusIO{4096, 4096, 10, 1, 20000, 0}, dbusIO{5, 5, 1, 0, 35874, 0}},
	}, nil
}

// statsOverDBus serves fakeStats on a private bus and returns its fake Ganesha
// and a DBus that talks to it.
func statsOverDBus(t *testing.T) (*fakeGanesha, *DBus) {
	t.Helper()
	bus := startTestBus(t)
	g := &fakeGanesha{exports: map[uint16]string{}}
	g.serve(t, bus.addr)
	if err := g.conn.Export(fakeStats{}, exportMgr, statsIface); err != nil {
		t.Fatal(err)
	}
	d := &DBus{Address: bus.addr}
	t.Cleanup(func() { d.Close() })
	return g, d
}

// oldStats is a Ganesha without GetNFSIO.
type oldStats struct{}

func (oldStats) GetTotalOPS(id uint16) (bool, string, dbusTime, dbusTotals, *dbus.Error) {
	return fakeStats{}.GetTotalOPS(id)
}

// ExportsIO reads the same counters as ExportIO in one GetNFSIO and a
// GetTotalOPS per export, leaves out exports Ganesha does not have and ids it
// cannot have, and fails as a whole on a Ganesha without GetNFSIO (the sampler
// then reads export by export).
func TestExportsIOOverDBus(t *testing.T) {
	ctx := context.Background()
	g, d := statsOverDBus(t)

	one, err := d.ExportIO(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.ExportsIO(ctx, []uint64{7, 8, 9, 0, 70000})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[7] != one {
		t.Fatalf("ExportsIO = %+v\nwant only export 7: %+v", got, one)
	}
	// More exports than calls in flight at once: every one is asked.
	many := make([]uint64, 3*maxPending)
	for i := range many {
		many[i] = uint64(len(many) - i)
	}
	if got, err := d.ExportsIO(ctx, many); err != nil || len(got) != 1 || got[7] != one {
		t.Fatalf("ExportsIO of %d exports = %+v, %v; want only export 7", len(many), got, err)
	}
	all, err := d.AllExportIO(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[7].Read != one.Read || all[7].Write != one.Write || all[7].Ops != 0 || all[8].Read.Ops != 1 {
		t.Fatalf("AllExportIO = %+v", all)
	}

	if err := g.conn.Export(oldStats{}, exportMgr, statsIface); err != nil {
		t.Fatal(err)
	}
	if got, err := d.ExportsIO(ctx, []uint64{7}); err == nil {
		t.Fatalf("ExportsIO without GetNFSIO = %+v, want an error", got)
	}
}

// ExportIO sums every version's counters over a real bus, reading Ganesha's
// reply shapes (including the two-field "no activity" one), and reports an
// export Ganesha does not know as an error.
func TestExportIOOverDBus(t *testing.T) {
	ctx := context.Background()
	_, d := statsOverDBus(t)

	got, err := d.ExportIO(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	want := ExportIO{
		Read:  IOStats{RequestedBytes: 4196, TransferredBytes: 4196, Ops: 11, Errors: 1, LatencyNs: 21000},
		Write: IOStats{RequestedBytes: 205, TransferredBytes: 205, Ops: 3, LatencyNs: 39874},
		Ops:   46, Since: time.Unix(1_790_000_000, 5).UTC(),
	}
	if got != want {
		t.Fatalf("ExportIO(7) = %+v\nwant %+v", got, want)
	}
	r, w, err := d.NFSv3IO(ctx, 7)
	if err != nil || r.Ops != 1 || w.LatencyNs != 4000 {
		t.Fatalf("NFSv3IO(7) = %+v, %+v, %v", r, w, err)
	}
	if _, err := d.ExportIO(ctx, 9); err == nil {
		t.Fatal("ExportIO of an export Ganesha does not have succeeded")
	}
}

func TestParseStatsReplies(t *testing.T) {
	ts := []any{uint64(1790000000), uint64(5)}
	io := func(n ...uint64) []any {
		out := make([]any, len(n))
		for i, v := range n {
			out[i] = v
		}
		return out
	}
	six := io(1, 2, 3, 4, 5, 0)
	for _, tc := range []struct {
		name string
		body []any
		want versionReply
		bad  bool
	}{
		{"ok", []any{true, "OK", ts, six, io(6, 7, 8, 9, 10, 0)},
			versionReply{IOStats{1, 2, 3, 4, 5}, IOStats{6, 7, 8, 9, 10}, time.Unix(1790000000, 5).UTC()}, false},
		{"no activity", []any{false, "Export does not have any NFSv4.0 activity"}, versionReply{}, false},
		{"unknown export", []any{false, "No export available"}, versionReply{}, true},
		{"empty", nil, versionReply{}, true},
		{"ok but short", []any{true, "OK", ts}, versionReply{}, true},
		{"status not a bool", []any{"true", "OK", ts, six, six}, versionReply{}, true},
		{"message not a string", []any{true, 1, ts, six, six}, versionReply{}, true},
		{"timestamp not a pair", []any{true, "OK", io(1), six, six}, versionReply{}, true},
		{"timestamp nanoseconds", []any{true, "OK", io(1, 2e9), six, six}, versionReply{}, true},
		{"counter not uint64", []any{true, "OK", ts, []any{1, 2, 3, 4, 5, 6}, six}, versionReply{}, true},
		{"counters short", []any{true, "OK", ts, io(1, 2, 3), six}, versionReply{}, true},
		{"counters not a struct", []any{true, "OK", ts, six, "x"}, versionReply{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseVersionIO(tc.body)
			if (err != nil) != tc.bad || (!tc.bad && got != tc.want) {
				t.Fatalf("got %+v, %v; want %+v (error %v)", got, err, tc.want, tc.bad)
			}
		})
	}

	for _, tc := range []struct {
		name string
		body []any
		want uint64
		bad  bool
	}{
		{"ok", []any{true, "OK", ts, []any{"NFSv3", uint64(16), "NFSv40", uint64(4), "NFSv41", uint64(1), "NFSv42", uint64(0)}}, 21, false},
		{"other protocols left out", []any{true, "OK", ts, []any{"NFSv3", uint64(16), "NLM4", uint64(100)}}, 16, false},
		{"unknown export", []any{false, "Export does not have any activity"}, 0, true},
		{"odd list", []any{true, "OK", ts, []any{"NFSv3"}}, 0, true},
		{"count not uint64", []any{true, "OK", ts, []any{"NFSv3", int32(1)}}, 0, true},
		{"name not a string", []any{true, "OK", ts, []any{uint64(1), uint64(1)}}, 0, true},
		{"short", []any{true, "OK", ts}, 0, true},
		{"empty", []any{}, 0, true},
	} {
		t.Run("totals "+tc.name, func(t *testing.T) {
			got, _, err := parseTotalOps(tc.body)
			if (err != nil) != tc.bad || got != tc.want {
				t.Fatalf("got %d, %v; want %d (error %v)", got, err, tc.want, tc.bad)
			}
		})
	}
}

func TestParseAllIO(t *testing.T) {
	ts := []any{uint64(1790000000), uint64(5)}
	six := func(n uint64) []any { return []any{n, n, n, n, n, uint64(0)} }
	since := time.Unix(1790000000, 5).UTC()
	for _, tc := range []struct {
		name string
		body []any
		want map[uint64]ExportIO
		bad  bool
	}{
		{"versions summed per export", []any{true, "OK", ts, [][]any{
			{uint16(3), "NFSv3", six(1), six(2)}, {uint16(4), "NFSv41", six(10), six(20)}, {uint16(3), "NFSv40", six(4), six(8)}}},
			map[uint64]ExportIO{
				3: {Read: IOStats{5, 5, 5, 5, 5}, Write: IOStats{10, 10, 10, 10, 10}, Since: since},
				4: {Read: IOStats{10, 10, 10, 10, 10}, Write: IOStats{20, 20, 20, 20, 20}, Since: since},
			}, false},
		{"rows as []any", []any{true, "OK", ts, []any{[]any{uint16(3), "NFSv3", six(1), six(2)}}},
			map[uint64]ExportIO{3: {Read: IOStats{1, 1, 1, 1, 1}, Write: IOStats{2, 2, 2, 2, 2}, Since: since}}, false},
		{"no activity anywhere", []any{true, "OK", ts, [][]any{}}, map[uint64]ExportIO{}, false},
		{"failed", []any{false, "NFS stat counting disabled"}, nil, true},
		{"short", []any{true, "OK", ts}, nil, true},
		{"empty", nil, nil, true},
		{"bad timestamp", []any{true, "OK", []any{uint64(1)}, [][]any{}}, nil, true},
		{"list not a list", []any{true, "OK", ts, "x"}, nil, true},
		{"entry not a struct", []any{true, "OK", ts, []any{"x"}}, nil, true},
		{"entry short", []any{true, "OK", ts, [][]any{{uint16(3), "NFSv3", six(1)}}}, nil, true},
		{"id not uint16", []any{true, "OK", ts, [][]any{{uint32(3), "NFSv3", six(1), six(2)}}}, nil, true},
		{"version not a string", []any{true, "OK", ts, [][]any{{uint16(3), 3, six(1), six(2)}}}, nil, true},
		{"counters short", []any{true, "OK", ts, [][]any{{uint16(3), "NFSv3", []any{uint64(1)}, six(2)}}}, nil, true},
		{"counter not uint64", []any{true, "OK", ts, [][]any{{uint16(3), "NFSv3", six(1), []any{1, 2, 3, 4, 5, 6}}}}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseAllIO(tc.body)
			if (err != nil) != tc.bad {
				t.Fatalf("error %v, want error %v", err, tc.bad)
			}
			if !tc.bad && !maps.Equal(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// FuzzParseAllIO: no GetNFSIO reply, however malformed, makes the parser panic,
// and a parsed one has an entry for each export id it lists.
func FuzzParseAllIO(f *testing.F) {
	f.Add(true, "OK", uint64(1), uint64(2), uint16(3), "NFSv3", uint8(0))
	f.Add(false, "NFS stat counting disabled", uint64(0), uint64(0), uint16(0), "", uint8(3))
	f.Fuzz(func(t *testing.T, ok bool, msg string, a, b uint64, id uint16, version string, shape uint8) {
		ts := []any{a, b}
		six := []any{a, b, a, b, a, b}
		rows := [][]any{{id, version, six, six}, {id, version, six, six[:shape%7]}, {id, version, six}, {version, id, six, six}, {uint64(id), version, six, six}}
		lists := []any{rows[:1], rows[:1+int(shape)%len(rows)], []any{rows[0], "x"}, []any{rows[0]}, "x", nil}
		for _, l := range lists {
			got, err := parseAllIO([]any{ok, msg, ts, l})
			if err == nil && len(got) > 0 && got[uint64(id)].Since.IsZero() {
				t.Fatalf("parsed %+v without export %d", got, id)
			}
		}
		parseAllIO([]any{ok, msg})
		parseAllIO([]any{ok})
		parseAllIO(nil)
	})
}

// FuzzParseStats: no reply, however malformed, makes the parsers panic.
func FuzzParseStats(f *testing.F) {
	f.Add(true, "OK", uint64(1), uint64(2), uint64(3), "NFSv3", uint8(5))
	f.Add(false, "Export does not have any NFSv3 activity", uint64(0), uint64(0), uint64(0), "", uint8(0))
	f.Fuzz(func(t *testing.T, ok bool, msg string, a, b, c uint64, name string, shape uint8) {
		ts := []any{a, b}
		vals := []any{a, b, c, a, b, c}
		bodies := [][]any{
			{ok, msg, ts, vals, vals}, {ok, msg}, {ok}, {ok, msg, ts, vals[:shape%7]},
			{ok, msg, ts, []any{name, c, name}}, {ok, msg, ts, []any{name, c}}, {msg, ok, ts, vals, vals},
		}
		for _, body := range bodies {
			parseVersionIO(body)
			parseTotalOps(body)
		}
	})
}
