package e2e

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSMBVolumeMetrics: known loads from `basin bench --engine smb` (a domain
// user, NTLM) against an SMB volume of a real AD-joined Samba instance, and what
// the metrics API says of them: requests, bytes, block sizes and latency from
// smbd's profile, wire bytes from traffic control. Each run is one connection,
// which ends with the run: the metrics count its last seconds too (smbd hands an
// exited child's counters to its parent, smb.Accountant). A connection is placed
// once Basin has seen it, within seconds (dataplane.WatchSMB): these last longer.
func TestSMBVolumeMetrics(t *testing.T) {
	l := newSMBLab(t, nil)
	sh := l.volume("sm1", nil)
	alice := l.user("alice")
	bench := func(args ...string) map[string]any {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := l.h.Command(ctx, basinBin, append([]string{"bench", "--engine", "smb", "--url", "smb://" + sh.Endpoint.String() + "/" + sh.Share,
			"--user", l.dc.Domain + `\` + alice.Name, "--output-format", "json"}, args...)...)
		cmd.Env = append(os.Environ(), "BASIN_SMB_PASSWORD="+alice.Password)
		res, stderr, err := runBenchJSON(t, cmd)
		if err != nil {
			t.Fatalf("basin bench %v: %v\n%s", args, err, stderr)
		}
		return res
	}
	// Before a phase, a sampling pass after what came before, smbd's late
	// profile records (about a second after their requests) included.
	settle := func() { sampledPast(t, l.c, sh.ID, time.Now().Add(2*time.Second), "writeIops", false) }

	// 1. 64 KiB random reads at iodepth 8 for 20 s (the file laid out first).
	settle()
	t0 := time.Now()
	res := bench("--name", "r", "--rw", "randread", "--bs", "64k", "--iodepth", "8", "--size", "64m", "--runtime", "20s", "--time_based")
	t1 := time.Now()
	ios, bytes, iops, latMs, runtime := benchJob(res, "read")
	rd := measurePhase(t, l.c, sh.ID, t0, t1, "readIops", "readMibps", "readBlockKib", "readLatencyMs", "wireReadMibps")
	t.Logf("smb randread: bench %.0f reads, %.0f bytes, %.0f IOPS, %.3f ms; metrics %.0f reads, %.0f bytes, %.2f KiB, %.3f ms, %.0f bytes on the wire",
		ios, bytes, iops, latMs, rd.total["readIops"], rd.total["readMibps"]*(1<<20), rd.inside["readBlockKib"], rd.inside["readLatencyMs"],
		rd.total["wireReadMibps"]*(1<<20))
	checkCounted(t, rd, "read", ios, bytes)
	if got := rd.total["readIops"] / runtime; !near(got, iops, 0.05) {
		t.Errorf("read IOPS over the run %.0f; bench: %.0f", got, iops)
	}
	if !near(rd.inside["readBlockKib"], 64, 0.05) {
		t.Errorf("read block size %.2f KiB, want 64", rd.inside["readBlockKib"])
	}
	// smbd times a read from its arrival to its reply: part of what the client
	// waits, never more.
	if l := rd.inside["readLatencyMs"]; !(l > 0 && l <= latMs*1.05) {
		t.Errorf("read latency %.3f ms, the client saw %.3f ms", l, latMs)
	}
	// What the endpoint sent: the payload, SMB2 headers and each segment's
	// Ethernet, IP and TCP headers (~5 %).
	if w := rd.total["wireReadMibps"] * (1 << 20); w < bytes || w > 1.1*bytes {
		t.Errorf("wire bytes sent %.0f for %.0f bytes read: want 1–1.1 × the payload", w, bytes)
	}

	// 2. 1 MiB sequential writes over a 256 MiB file for 12 s.
	settle()
	t0 = time.Now()
	res = bench("--name", "w", "--rw", "write", "--bs", "1m", "--iodepth", "4", "--size", "256m", "--runtime", "12s", "--time_based")
	t1 = time.Now()
	wios, wbytes, _, _, _ := benchJob(res, "write")
	wr := measurePhase(t, l.c, sh.ID, t0, t1, "writeIops", "writeMibps", "writeBlockKib", "wireWriteMibps")
	t.Logf("smb write: bench %.0f writes, %.0f bytes; metrics %.0f writes, %.0f bytes, %.0f bytes on the wire", wios, wbytes,
		wr.total["writeIops"], wr.total["writeMibps"]*(1<<20), wr.total["wireWriteMibps"]*(1<<20))
	checkCounted(t, wr, "write", wios, wbytes)
	if w := wr.total["wireWriteMibps"] * (1 << 20); w < wbytes || w > 1.1*wbytes {
		t.Errorf("wire bytes received %.0f for %.0f bytes written: want 1–1.1 × the payload", w, wbytes)
	}

	// 3. A connection shorter than a sampling pass (go-smb2: 16 writes of 1 MiB,
	// then 4 s idle): Basin learns its share while it lives, and its writes
	// count for the volume although it ends between two passes.
	settle()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 = time.Now()
	sess, err := l.dialNTLM(ctx, sh, alice)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := sess.Mount(sh.Share)
	if err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create("short.bin")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for range 16 {
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	time.Sleep(4 * time.Second)
	fs.Umount()
	sess.Logoff()
	t1 = time.Now()
	short := measurePhase(t, l.c, sh.ID, t0, t1, "writeIops", "writeMibps")
	t.Logf("short connection (%.1f s): metrics %.0f writes, %.0f bytes", t1.Sub(t0).Seconds(), short.total["writeIops"], short.total["writeMibps"]*(1<<20))
	checkCounted(t, short, "write", 16, 16<<20)
}

// TestSMBMetricsRestart (issue 26: metrics continue across the
// restart): an SMB client writes before, while and after Basin is killed with
// SIGKILL and started again, its data plane serving on, over one connection
// that lives through it all. The volume's metrics count every write, those
// made while Basin was down included, and have no unknown interval and no gap:
// the data plane took up its per-share sums (the instance's io.json) and the
// sampler its last reading of them, and the first pass after the start spread
// the downtime over its intervals.
func TestSMBMetricsRestart(t *testing.T) {
	s := newServer(t)
	s.keep = true
	l := startSMBLab(t, s, nil)
	sh := l.volume("smr", map[string]any{"unixPermissions": "0777"})
	alice := l.user("alice")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sess, err := l.dialNTLM(ctx, sh, alice)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Logoff()
	fs, err := sess.Mount(sh.Share)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Umount()
	f, err := fs.Create("restart.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	written := 0
	write := func(n int) {
		t.Helper()
		for range n {
			if _, err := f.Write(buf); err != nil {
				t.Fatal(err)
			}
			written++
		}
	}
	// At least one sampling pass after what came before, smbd's late profile
	// records (about a second after their requests) included.
	pass := func() { sampledPast(t, l.c, sh.ID, time.Now().Add(2*time.Second), "writeIops", false) }
	pass() // the connection placed, and read once

	t0 := time.Now()
	write(16)
	pass()
	s.stop(syscall.SIGKILL)
	write(32) // while Basin is down
	time.Sleep(5 * time.Second)
	down := time.Now()
	s.start()
	t.Logf("basin down for %v", time.Since(down).Round(time.Millisecond))
	write(8)
	pass()
	write(4)
	// smbd writes a connection's profile record about a second after its
	// requests: a pass before the phase ends, so the last writes are in it.
	pass()
	t1 := time.Now()

	ph := measurePhase(t, l.c, sh.ID, t0, t1, "writeIops", "writeMibps")
	t.Logf("across the restart: %d writes of 1 MiB; metrics %.0f writes, %.0f bytes", written, ph.total["writeIops"], ph.total["writeMibps"]*(1<<20))
	checkCounted(t, ph, "write", float64(written), float64(written<<20))
	pts := volumeMetrics(t, l.c, sh.ID, t0.Truncate(10*time.Second).Add(10*time.Second), t1.Truncate(10*time.Second), "writeIops")["writeIops"].Points
	if want := int(t1.Truncate(10*time.Second).Sub(t0.Truncate(10*time.Second))/(10*time.Second)) - 1; len(pts) != want {
		t.Errorf("%d points at 10 s from %v to %v, want %d (a gap)", len(pts), t0, t1, want)
	}
	for _, p := range pts {
		if p.Value == nil {
			t.Errorf("write IOPS unknown at %v", p.Time)
		}
	}
	if !strings.Contains(s.log.String(), "smb i/o state taken up") {
		t.Errorf("the log does not say the SMB sums were taken up:\n%s", s.log)
	}
}
