package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/nfsops"
)

// scrapeMetric returns the value of the series line (its name and labels, as
// /metrics prints them) on addr's /metrics, and whether it is there.
func scrapeMetric(t *testing.T, addr, series string) (float64, bool) {
	t.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(io.LimitReader(res.Body, 16<<20))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// waitMetric polls series until cond holds, for up to d.
func waitMetric(t *testing.T, addr, series string, d time.Duration, cond func(float64) bool) float64 {
	t.Helper()
	var v float64
	for deadline := time.Now().Add(d); ; time.Sleep(200 * time.Millisecond) {
		v, _ = scrapeMetric(t, addr, series)
		if cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v after %v", series, v, d)
		}
	}
}

// TestGaneshaWatchdog runs Basin with a stuck-request bound of 3 s and a wedged
// bound of 10 s. (1) A slow server that still progresses: volume "slow"'s
// filesystem is frozen (fsfreeze), so four NFSv3 WRITEs to it wait in the
// kernel, while a client reads volume "busy" all along. Each stuck WRITE is
// logged (what, which client, which export) and counted once, the stuck gauge
// shows them, and after more than twice the wedged bound Ganesha is still the
// same process; thawed, the writes finish and the gauge drops to 0. (2) A
// wedged server: Ganesha is stopped (SIGSTOP). Within the wedged bound and a few
// of the watchdog's looks it is killed and started again, the restart counted
// with reason "wedged", and both volumes are served again.
func TestGaneshaWatchdog(t *testing.T) {
	s := newServer(t)
	metricsAddr := freeAddr(t)
	const stuckAfter, wedgedAfter = 3 * time.Second, 10 * time.Second
	s.start("--metrics-listen", metricsAddr, "--nfs-stuck-after", stuckAfter.String(), "--nfs-wedged-after", wedgedAfter.String())
	c := s.client()
	nfsPool(t, c)
	s.openVolume(c, "slow")
	s.openVolume(c, "busy")
	epSlow, epBusy := endpoint(t, c, "slow"), endpoint(t, c, "busy")
	h := s.host(201)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	slow, busy := mount3(t, ctx, h, epSlow, "/slow"), mount3(t, ctx, h, epBusy, "/busy")
	slowFile, err := slow.Create(ctx, slow.Root, "f", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	busyFile, err := busy.Create(ctx, busy.Root, "f", 0o644)
	if err == nil {
		_, err = busy.Write(ctx, busyFile, []byte("busy"), 0, nfs3.FileSync)
	}
	if err != nil {
		t.Fatal(err)
	}
	pids := s.ganeshaPIDs()
	if len(pids) != 1 {
		t.Fatalf("ganesha pids %v", pids)
	}

	t.Run("slow but progressing", func(t *testing.T) {
		dir := s.volumeDir("p1", "slow")
		if out, err := exec.Command("fsfreeze", "--freeze", dir).CombinedOutput(); err != nil {
			t.Skipf("fsfreeze: %v %s", err, out)
		}
		thawed := false
		thaw := func() {
			if !thawed {
				thawed = true
				exec.Command("fsfreeze", "--unfreeze", dir).Run()
			}
		}
		defer thaw()
		r := nfsops.StartReader(ctx, busy, busyFile, "busy")
		defer r.Stop()
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				defer cancel()
				_, err := slow.Write(wctx, slowFile, []byte("slow"), int64(4*i), nfs3.FileSync)
				errs <- err
			}()
		}
		frozen := time.Now()
		found := waitMetric(t, metricsAddr, "basin_nfs_stuck_requests_total", stuckAfter+15*time.Second, func(v float64) bool { return v >= 4 })
		t.Logf("4 stuck WRITEs counted %v s after the freeze", time.Since(frozen).Seconds())
		if found != 4 {
			t.Errorf("basin_nfs_stuck_requests_total %v, want 4", found)
		}
		if v, _ := scrapeMetric(t, metricsAddr, "basin_nfs_stuck_requests"); v != 4 {
			t.Errorf("basin_nfs_stuck_requests %v, want 4", v)
		}
		logs := grepLines(s.log.String(), "NFS request stuck")
		if n := strings.Count(logs, "\n") + 1; n != 4 || !strings.Contains(logs, `op="NFSv3 WRITE"`) ||
			!strings.Contains(logs, "client="+h.Addr.String()) || !strings.Contains(logs, "export=/slow") {
			t.Errorf("the stuck requests are logged %d times:\n%s", n, logs)
		}
		// Past twice the wedged bound, still the same Ganesha: it serves busy.
		time.Sleep(2*wedgedAfter + 5*time.Second - time.Since(frozen))
		if now := s.ganeshaPIDs(); !slices.Equal(now, pids) {
			t.Fatalf("a slow Ganesha that still progressed was restarted: pids %v, then %v", pids, now)
		}
		if v, ok := scrapeMetric(t, metricsAddr, `basin_dataplane_daemon_restarts_total{daemon="ganesha",reason="wedged"}`); ok {
			t.Errorf("restarts for being wedged: %v", v)
		}
		r.Check(t, "while slow's WRITEs were stuck")
		if found, _ := scrapeMetric(t, metricsAddr, "basin_nfs_stuck_requests_total"); found != 4 {
			t.Errorf("basin_nfs_stuck_requests_total %v after %v, want still 4: each request counts once", found, time.Since(frozen))
		}
		thaw()
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("a WRITE after the thaw: %v", err)
			}
		}
		waitMetric(t, metricsAddr, "basin_nfs_stuck_requests", 10*time.Second, func(v float64) bool { return v == 0 })
	})

	t.Run("wedged", func(t *testing.T) {
		pid := pids[0]
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer syscall.Kill(pid, syscall.SIGCONT) // if it is still there
		stopped := time.Now()
		var now []int
		for {
			now = s.ganeshaPIDs()
			if len(now) == 1 && now[0] != pid {
				break
			}
			if time.Since(stopped) > 2*time.Minute {
				t.Fatalf("a stopped Ganesha is still there after %v: pids %v", time.Since(stopped), now)
			}
			time.Sleep(100 * time.Millisecond)
		}
		took := time.Since(stopped)
		t.Logf("stopped Ganesha %d replaced by %d after %v", pid, now[0], took)
		if took < wedgedAfter || took > wedgedAfter+15*time.Second {
			t.Errorf("a stopped Ganesha was replaced after %v; want between the bound %v and %v", took, wedgedAfter, wedgedAfter+15*time.Second)
		}
		waitMetric(t, metricsAddr, `basin_dataplane_daemon_restarts_total{daemon="ganesha",reason="wedged"}`, 10*time.Second, func(v float64) bool { return v == 1 })
		if !strings.Contains(s.log.String(), "daemon wedged") {
			t.Errorf("the restart is not logged")
		}
		// Both volumes are served again, with what they held.
		for _, v := range []struct{ name, want string }{{"slow", "slowslowslowslow"}, {"busy", "busy"}} {
			ep := endpoint(t, c, v.name)
			var got string
			var err error
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
				err = h.Within(func() error {
					m, err := nfs3.Mount(ctx, ep.String(), "/"+v.name, nfs3.Options{})
					if err != nil {
						return err
					}
					defer m.Close()
					got, err = readPath(ctx, m, "f")
					return err
				})
				if err == nil {
					break
				}
			}
			if err != nil || got != v.want {
				t.Errorf("%s after the restart: %q, %v; want %q", v.name, got, err, v.want)
			}
		}
	})
	if t.Failed() {
		fmt.Println(grepLines(s.log.String(), "ganesha"))
	}
}
