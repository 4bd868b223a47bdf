package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
)

// daemonPIDs lists the processes named name (argv[0]'s base) whose command line
// mentions dir, and of them the ones whose parent is not also named name (the
// daemons' main processes, not their per-client children).
func daemonPIDs(dir, name string) (all, main []int) {
	comm := func(pid int) string {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		argv0, _, _ := strings.Cut(string(b), "\x00")
		return filepath.Base(argv0)
	}
	for _, pid := range processesMentioning(dir) {
		if comm(pid) != name {
			continue
		}
		all = append(all, pid)
		stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) > 1 {
			if ppid, _ := strconv.Atoi(f[1]); comm(ppid) != name {
				main = append(main, pid)
			}
		}
	}
	return all, main
}

// TestSMBResilience: killing smbd or winbindd (with SIGKILL) brings SMB service
// back within 10 s without a new join; a Basin restart keeps the join (same
// computer object, no join in the log) and serves the share again; a policy with
// a wrong password fails its pool with a clear error on the policy and leaves
// nothing joined; deleting the last SMB pool leaves the domain and takes the
// server's DNS record away.
func TestSMBResilience(t *testing.T) {
	l := newSMBLab(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sh := l.volume("res", nil)
	alice := l.user("alice")
	works := func() error {
		o, err := l.smbclient(ctx, sh, alice, "-m", "SMB3", "-c", "ls")
		if err != nil {
			return &smbFailure{out: o, err: err}
		}
		return nil
	}
	if err := works(); err != nil {
		t.Fatalf("before: %v", err)
	}
	joins := func() int { return strings.Count(l.s.log.String(), "joined the domain") }
	if joins() != 1 {
		t.Fatalf("%d joins in the log, want 1:\n%s", joins(), l.s.log)
	}

	for _, daemon := range []string{"smbd", "winbindd"} {
		_, mains := daemonPIDs(l.s.dataDir, daemon)
		if len(mains) != 1 {
			t.Fatalf("%s main processes %v, want one", daemon, mains)
		}
		if err := syscall.Kill(mains[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		if err := waitForErr(10*time.Second, works); err != nil {
			t.Fatalf("after killing %s, no service within 10 s: %v", daemon, err)
		}
		t.Logf("%s killed: service back after %v", daemon, time.Since(killed).Round(time.Millisecond))
		if _, now := daemonPIDs(l.s.dataDir, daemon); len(now) != 1 || now[0] == mains[0] {
			t.Fatalf("%s after the kill: %v (was %d)", daemon, now, mains[0])
		}
	}
	if joins() != 1 {
		t.Fatalf("a daemon's restart joined the domain again:\n%s", grepLines(l.s.log.String(), "joined the domain"))
	}

	// A restart of Basin keeps the join.
	l.restart()
	if err := waitForErr(60*time.Second, works); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
	if joins() != 0 { // the log restarts with the process
		t.Fatalf("the restart joined the domain again:\n%s", grepLines(l.s.log.String(), "joined the domain"))
	}
	if _, ok, err := l.dc.ComputerExists(ctx, sh.Machine); !ok || err != nil {
		t.Fatalf("computer %s after the restart: %v %v", sh.Machine, ok, err)
	}
	if again := l.share("res"); again.Machine != sh.Machine || again.Endpoint != sh.Endpoint {
		t.Fatalf("after the restart the share is %+v, was %+v", again, sh)
	}

	// The last SMB pool's removal leaves the domain and unregisters the name.
	if addrs, err := l.dc.LookupA(ctx, sh.Server); err != nil || !slices.Contains(addrs, sh.Endpoint.String()) {
		t.Fatalf("%s resolves to %v (%v) before the leave", sh.Server, addrs, err)
	}
	mutate(t, l.c, "DELETE", loc+"/volumes/res", nil)
	mutate(t, l.c, "DELETE", loc+"/storagePools/smb", nil)
	if _, ok, err := l.dc.ComputerExists(ctx, sh.Machine); err != nil || ok {
		t.Fatalf("computer %s still in the domain (err %v)", sh.Machine, err)
	}
	if addrs, err := l.dc.LookupA(ctx, sh.Server); len(addrs) != 0 {
		t.Fatalf("%s still resolves to %v (%v) after the leave", sh.Server, addrs, err)
	}
	if all, _ := daemonPIDs(l.s.dataDir, "smbd"); len(all) != 0 {
		t.Fatalf("smbd processes %v after the leave", all)
	}

	// A wrong password (once the network's SMB pool is gone: a network joins one
	// domain): the pool fails with the domain's reason, the policy says
	// so, and nothing is joined.
	mutate(t, l.c, "POST", loc+"/activeDirectories?activeDirectoryId=bad", map[string]any{"domain": l.realm, "dns": l.dc.Addr,
		"netBiosPrefix": "WRONG", "organizationalUnit": l.dc.OU, "username": l.dc.Delegated.Name, "password": "not-" + l.dc.Delegated.Password})
	var op client.Object
	if err := l.c.Do(ctx, "POST", loc+"/storagePools?storagePoolId=bad", nil, map[string]any{"serviceLevel": "PREMIUM", "capacityGib": 2048,
		"network": "projects/p1/global/networks/default", "activeDirectory": strings.TrimSuffix(l.ad, "ad1") + "bad"}, &op); err != nil {
		t.Fatal(err)
	}
	done, err := l.c.Wait(ctx, op)
	if err == nil {
		t.Fatalf("a pool whose policy has a wrong password was created: %v", done)
	}
	if !strings.Contains(err.Error(), "user name or password") {
		t.Fatalf("pool error %v: want the domain's reason in plain words", err)
	}
	var ad client.Object
	if err := l.c.Do(ctx, "GET", loc+"/activeDirectories/bad", nil, nil, &ad); err != nil {
		t.Fatal(err)
	}
	if ad["state"] != "ERROR" || !strings.Contains(fmt2(ad["stateDetails"]), "user name or password") {
		t.Fatalf("policy after the failed join: %v", ad)
	}
	if out, err := l.dc.Exec(ctx, "samba-tool", "computer", "list"); err != nil || strings.Contains(strings.ToUpper(string(out)), "WRONG-") {
		t.Fatalf("computers after the failed join (%v): %s", err, out)
	}
	if all, _ := daemonPIDs(l.s.dataDir, "winbindd"); len(all) != 0 {
		t.Fatalf("winbindd processes %v after the failed join: a half-joined instance", all)
	}

	// Neither password (the good one, used to join and leave, nor the wrong one)
	// is in the server's log, its store (operation records, audit log) or any
	// other file Basin wrote.
	assertSecretAbsent(t, l.s.dataDir, l.s.log.String(), l.dc.Delegated.Password, "not-"+l.dc.Delegated.Password)
}

// assertSecretAbsent fails if any secret appears in log or in a file under dir
// (files over 256 MiB, the volumes' images, are skipped; SQLite pages are read raw).
func assertSecretAbsent(t *testing.T, dir, log string, secrets ...string) {
	t.Helper()
	for _, sec := range secrets {
		if strings.Contains(log, sec) {
			t.Errorf("a secret is in the server log")
		}
	}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err != nil || info.Size() > 256<<20 {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		for _, sec := range secrets {
			if strings.Contains(string(b), sec) {
				t.Errorf("a secret is in %s", p)
			}
		}
		return nil
	})
}

type smbFailure struct {
	out string
	err error
}

func (f *smbFailure) Error() string { return f.err.Error() + ": " + strings.TrimSpace(f.out) }

func fmt2(v any) string { s, _ := v.(string); return s }
