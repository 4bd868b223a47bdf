package dataplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/runner"
	"github.com/basin-nas/basin/internal/smb"
	"github.com/basin-nas/basin/test/addc"
)

// Names of the SMB root test (prefix bss, subnet 10.99.73.0/24): the bridge, the
// DC's and the client's namespaces.
const (
	bssBridge = "bss0"
	bssCli    = "bss-cli"
	bssCliIP  = "10.99.73.200"
)

// bssNetwork makes the test's bridge and the client namespace, removed at cleanup.
func bssNetwork(t *testing.T) {
	t.Helper()
	run := rootBridge(t, bssBridge, "10.99.73.1/24")
	exec.Command("ip", "netns", "del", bssCli).Run()    //nolint:errcheck // a leftover of a killed run
	exec.Command("ip", "link", "del", "vbss-cli").Run() //nolint:errcheck
	run("ip", "netns", "add", bssCli)
	t.Cleanup(func() {
		runner.KillAll(runner.InNetns("/run/netns/"+bssCli), 10*time.Second) //nolint:errcheck // the delete below says what is left
		if out, err := exec.Command("ip", "netns", "del", bssCli).CombinedOutput(); err != nil {
			t.Errorf("delete netns: %v %s", err, out)
		}
		exec.Command("ip", "link", "del", "vbss-cli").Run() //nolint:errcheck // gone with the namespace
	})
	run("ip", "link", "add", "vbss-cli", "type", "veth", "peer", "name", "eth0", "netns", bssCli)
	run("ip", "link", "set", "vbss-cli", "master", bssBridge, "up")
	run("ip", "-n", bssCli, "addr", "add", bssCliIP+"/24", "dev", "eth0")
	run("ip", "-n", bssCli, "link", "set", "eth0", "up")
	run("ip", "-n", bssCli, "link", "set", "lo", "up")
}

// rootBridge makes bridge with the host's address hostCIDR, removed at cleanup,
// and returns a runner that fails the test on a command's error.
func rootBridge(t *testing.T, bridge, hostCIDR string) func(argv ...string) {
	t.Helper()
	run := func(argv ...string) {
		t.Helper()
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", argv, err, out)
		}
	}
	exec.Command("ip", "link", "del", bridge).Run() //nolint:errcheck // a leftover of a killed run
	run("ip", "link", "add", bridge, "type", "bridge")
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "link", "del", bridge).CombinedOutput(); err != nil {
			t.Errorf("delete bridge: %v %s", err, out)
		}
	})
	run("ip", "addr", "add", hostCIDR, "dev", bridge)
	run("ip", "link", "set", bridge, "up")
	return run
}

// smbClient runs smbclient in the client namespace as user (password on
// PASSWD_FD) with a client config whose every directory is under dir.
type smbClient struct {
	conf, krb5 string
}

func newSMBClient(t *testing.T, krb5 string) smbClient {
	dir := t.TempDir()
	conf := filepath.Join(dir, "smb.conf")
	content := "[global]\n\tlock directory = " + dir + "\n\tstate directory = " + dir + "\n\tcache directory = " + dir +
		"\n\tprivate dir = " + dir + "\n\tlog file = " + dir + "/log.%m\n\tclient min protocol = SMB2_02\n"
	if err := os.WriteFile(conf, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return smbClient{conf: conf, krb5: krb5}
}

func (c smbClient) run(ctx context.Context, user, password string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Line-buffered: what smbclient printed survives a kill at ctx's deadline.
	argv := append([]string{"netns", "exec", bssCli, "stdbuf", "-oL", "smbclient", "-s", c.conf, "-U", user}, args...)
	cmd := exec.CommandContext(ctx, "ip", argv...)
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	defer r.Close()
	go func() { w.WriteString(password + "\n"); w.Close() }() //nolint:errcheck // a short read fails the logon
	cmd.ExtraFiles = []*os.File{r}
	cmd.Env = append(os.Environ(), "PASSWD_FD=3", "KRB5_CONFIG="+c.krb5)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

// instanceProcs lists the processes whose command line names dir (the instance's
// daemons all take -s <dir>/smb.conf).
func instanceProcs(dir string) []int {
	return runner.Matching(func(pid int) bool {
		cmd, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		return err == nil && bytes.Contains(cmd, []byte(dir))
	})
}

func capBnd(t *testing.T, pid int) uint64 {
	t.Helper()
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:\t"); ok {
			b, _ := strconv.ParseUint(v, 16, 64)
			return b
		}
	}
	t.Fatalf("no CapBnd for %d", pid)
	return 0
}

// A real Samba instance in a real sandbox, joined to a real AD DC: join (a wrong
// password leaves nothing), serve a share to a domain user over NTLM and Kerberos,
// survive its daemons' deaths and a Basin restart without a re-join, keep another
// AD connection's instance from serving its share, and leave without a trace.
func TestSMBInstanceRoot(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (namespaces, mounts, Samba)")
	}
	if err := testGanesha().Check(); err != nil {
		t.Skipf("needs Basin's Ganesha: %v", err)
	}
	for _, b := range []string{"smbd", "winbindd", "smbclient", "net", dcerpcdBinary} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("needs Samba: %v", err)
		}
	}
	ctx := context.Background()
	// A stuck step shows where: every goroutine's stack after 120 s.
	watchdog := time.AfterFunc(120*time.Second, func() {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		os.Stderr.Write(buf[:n])
	})
	t.Cleanup(func() { watchdog.Stop() })
	bssNetwork(t)
	dc := addc.StartT(t, addc.Options{Name: "bss", Dir: t.TempDir(), Bridge: bssBridge, Addr: "10.99.73.5/24", Gateway: "10.99.73.1"})
	t.Logf("dc up in %v", dc.Startup)
	alice := dc.Users[0]
	if alice.Name != "alice" {
		t.Fatalf("fixture users: %v", dc.Users[0].Name)
	}

	n := Network{Name: "bss", Bridge: bssBridge, Prefix: netip.MustParsePrefix("10.99.73.0/24"),
		FirstEndpoint: netip.MustParseAddr("10.99.73.10"), LastEndpoint: netip.MustParseAddr("10.99.73.127")}
	dataDir, mounts := sharedMounts(t, ctx)
	// Two volumes on tmpfs (security.* and user.* xattrs: NT ACLs, DOS attributes).
	vols := map[string]string{}
	for _, v := range []string{"v1", "v2"} {
		vols[v] = tmpfsVolume(t, mounts, v, "size=8m,mode=0777")
	}

	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	newManager := func() *Manager {
		m := New(Options{Ganesha: testGanesha(), DataDir: dataDir, Networks: []Network{n}, Logger: logger})
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := newManager()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			if err := m.Stop(context.Background()); err != nil {
				t.Error(err)
			}
		}
	})

	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// The instances' Samba logs, for the failure.
		logs, _ := filepath.Glob(filepath.Join(dataDir, "sandboxes", "bss", "smb", "*", "log", "*"))
		for _, f := range logs {
			data, _ := os.ReadFile(f)
			if len(data) > 6000 {
				data = data[len(data)-6000:]
			}
			t.Logf("%s:\n%s", f, data)
		}
	})
	ou, err := smb.OUPath(dc.OU, dc.Realm)
	if err != nil {
		t.Fatal(err)
	}
	dns := []netip.Addr{netip.MustParseAddr(dc.Addr)}
	mb := SMBMembership{AD: "projects/p1/locations/l/activeDirectories/ad1", Realm: dc.Realm, MachineName: "BSS-1A2B",
		DNS: dns, OUPath: ou}
	cred := SMBCredentials{Username: dc.Delegated.Name, Password: []byte(dc.Delegated.Password)}
	instDir := m.instanceDir("bss", smbInstanceID(mb.AD))

	// A wrong password: a plain JoinError, nothing left.
	err = m.JoinDomain(ctx, "bss", mb, SMBCredentials{Username: dc.Delegated.Name, Password: []byte("Wrong-passw0rd")})
	var jerr *smb.JoinError
	if !errors.As(err, &jerr) || !errors.Is(err, smb.ErrBadCredentials) {
		t.Fatalf("join with a wrong password: %v", err)
	}
	if strings.Contains(err.Error(), "Wrong-passw0rd") {
		t.Fatal("the error repeats the password")
	}
	if _, err := os.Stat(instDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("instance dir after a failed join: %v", err)
	}
	if _, ok := m.SMBJoined("bss", mb.AD); ok {
		t.Fatal("SMBJoined after a failed join")
	}

	t0 := time.Now()
	if err := m.JoinDomain(ctx, "bss", mb, cred); err != nil {
		t.Fatal(err)
	}
	t.Logf("JoinDomain (workgroup discovery, join, daemons ready): %v", time.Since(t0))
	rec, ok := m.SMBJoined("bss", mb.AD)
	if !ok || rec.Workgroup != dc.Domain || rec.MachineName != mb.MachineName {
		t.Fatalf("SMBJoined = %+v, %v", rec, ok)
	}
	if parent, ok, err := dc.ComputerExists(ctx, mb.MachineName); err != nil || !ok || !strings.EqualFold(parent, dc.OU) {
		t.Fatalf("computer object: %q %v %v", parent, ok, err)
	}
	guid := func() string {
		t.Helper()
		out, err := dc.Exec(ctx, "ldbsearch", "-H", filepath.Join(dc.Dir, "state", "private", "sam.ldb"), "-b", dc.BaseDN,
			"(sAMAccountName="+mb.MachineName+"$)", "objectGUID")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(l, "objectGUID: "); ok {
				return v
			}
		}
		return ""
	}
	account := guid()
	if account == "" {
		t.Fatal("no objectGUID")
	}
	// Capabilities: no daemon has sys_admin; each keeps no new privileges.
	for _, d := range smbDaemons {
		pid := m.SMBPID("bss", mb.AD, d)
		if pid == 0 {
			t.Fatalf("%s not running", d)
		}
		const capSysAdmin, capNetAdmin, capSysPtrace = 21, 12, 19
		if b := capBnd(t, pid); b&(1<<capSysAdmin|1<<capNetAdmin|1<<capSysPtrace) != 0 {
			t.Errorf("%s CapBnd %x", d, b)
		}
	}

	ep1 := netip.MustParseAddr("10.99.73.20")
	if err := m.SMBShare(ctx, "bss", mb.AD, ep1, smb.ShareSpec{Name: "vol1", Path: vols["v1"]}); err != nil {
		t.Fatal(err)
	}
	// Idempotent.
	if err := m.SMBShare(ctx, "bss", mb.AD, ep1, smb.ShareSpec{Name: "vol1", Path: vols["v1"]}); err != nil {
		t.Fatal(err)
	}
	shares, err := m.SMBShares(ctx, "bss", mb.AD)
	if err != nil || shares["vol1"]["path"] != vols["v1"] {
		t.Fatalf("SMBShares = %v, %v", shares, err)
	}

	cli := newSMBClient(t, dc.Krb5Conf)
	payload := make([]byte, 300_000)
	for i := range payload {
		payload[i] = byte(i*7 + i/1000)
	}
	src := filepath.Join(t.TempDir(), "src.bin")
	os.WriteFile(src, payload, 0o644)
	ntlm := `BASIN\alice`
	serves := func(what, unc, remote string, extra ...string) {
		t.Helper()
		back := filepath.Join(t.TempDir(), "back.bin")
		args := append([]string{unc}, extra...)
		args = append(args, "-c", "put "+src+" "+remote+"; get "+remote+" "+back)
		user := ntlm
		if len(extra) > 0 {
			user = "alice@" + dc.Realm
		}
		out, err := cli.run(ctx, user, alice.Password, args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, out)
		}
		got, err := os.ReadFile(back)
		if err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("%s: read back %d bytes (%v), want %d identical", what, len(got), err, len(payload))
		}
	}
	waitServes := func(what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			out, err := cli.run(ctx, ntlm, alice.Password, "//"+ep1.String()+"/vol1", "-t", "5", "-c", "ls")
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				diagnose(t, m, mb.AD)
				t.Fatalf("%s: not served again: %v\n%s", what, err, out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// notifies checks change notify: a client waiting on the share's root hears
	// of a file another connection creates. smbd's notifyd registers its name
	// only once the previous smbd's notifyd is reaped: while that one lingered
	// as a zombie, a client connecting got the dead daemon's id and every
	// notify failed with OBJECT_NAME_NOT_FOUND (smbtorture's smb2.session
	// encryption and signing tests, right after a share's first endpoint
	// restarted smbd).
	notifies := func(what string) {
		t.Helper()
		name := "n-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ".txt"
		wctx, cancel := context.WithTimeout(ctx, 6*time.Second)
		defer cancel()
		type result struct {
			out string
			err error
		}
		done := make(chan result, 1)
		go func() {
			// Killed at wctx's deadline, after the put.
			out, err := cli.run(wctx, ntlm, alice.Password, "//"+ep1.String()+"/vol1", "-c", `notify \`)
			done <- result{out, err}
		}()
		time.Sleep(1500 * time.Millisecond)
		if out, err := cli.run(ctx, ntlm, alice.Password, "//"+ep1.String()+"/vol1", "-c", "put "+src+" "+name); err != nil {
			t.Fatalf("%s: put: %v\n%s", what, err, out)
		}
		var r result
		select {
		case r = <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: smbclient notify did not end", what)
		}
		if !strings.Contains(r.out, name) {
			t.Fatalf("%s: change notify did not report %s: %v\n%s", what, name, r.err, r.out)
		}
	}
	serves("NTLM", "//"+ep1.String()+"/vol1", "a.bin")
	notifies("after the share's first endpoint restarted smbd")
	if st, err := os.Stat(filepath.Join(vols["v1"], "a.bin")); err != nil {
		t.Fatal(err)
	} else if uid := st.Sys().(*syscall.Stat_t).Uid; uid < smb.DomainIDMin {
		t.Errorf("a.bin owned by %d, want alice's rid-mapped uid", uid)
	}
	host := strings.ToLower(mb.MachineName) + "." + dc.DNSDomain
	serves("Kerberos", "//"+host+"/vol1", "k.bin", "-I", ep1.String(), "--use-kerberos=required")
	// A client asking for the share's free space (smbclient's du) leaves no
	// error in smbd's log: smbd finds the share's filesystem in the instance's
	// mtab before it asks for quotas ("sys_path_to_bdev() failed" at level 0
	// for every such request before).
	for range 3 {
		if out, err := cli.run(ctx, ntlm, alice.Password, "//"+ep1.String()+"/vol1", "-c", "du"); err != nil {
			t.Fatalf("du: %v\n%s", err, out)
		}
	}
	if logs := grepInstanceLogs(t, dataDir, "sys_path_to_bdev"); len(logs) > 0 {
		t.Errorf("smbd logged quota probe failures:\n%s", strings.Join(logs, "\n"))
	}
	if out, err := cli.run(ctx, ntlm, "Wrong-passw0rd", "//"+ep1.String()+"/vol1", "-c", "ls"); err == nil ||
		!strings.Contains(out, "LOGON_FAILURE") {
		t.Fatalf("a wrong password was not refused: %v\n%s", err, out)
	}
	// The machine's name resolves through the DC's DNS to the endpoint.
	if err := waitFor(ctx, 10*time.Second, func() bool {
		a, _ := dc.LookupA(ctx, host)
		return len(a) == 1 && a[0] == ep1.String()
	}); err != nil {
		a, err := dc.LookupA(ctx, host)
		t.Fatalf("%s A = %v (%v), want %s", host, a, err, ep1)
	}

	// Daemons die: back without a re-join (same machine account, no join run).
	joins := m.smbJoins.Load()
	oldSmbd, oldWb, oldRPC := m.SMBPID("bss", mb.AD, "smbd"), m.SMBPID("bss", mb.AD, "winbindd"), m.SMBPID("bss", mb.AD, "samba-dcerpcd")
	t1 := time.Now()
	syscall.Kill(oldSmbd, syscall.SIGKILL)
	syscall.Kill(oldWb, syscall.SIGKILL)
	syscall.Kill(oldRPC, syscall.SIGKILL)
	if err := waitFor(ctx, 30*time.Second, func() bool {
		s, w, r := m.SMBPID("bss", mb.AD, "smbd"), m.SMBPID("bss", mb.AD, "winbindd"), m.SMBPID("bss", mb.AD, "samba-dcerpcd")
		return s != 0 && w != 0 && r != 0 && s != oldSmbd && w != oldWb && r != oldRPC
	}); err != nil {
		t.Fatal("smbd, winbindd and samba-dcerpcd not restarted")
	}
	waitServes("after SIGKILL of smbd, winbindd and samba-dcerpcd")
	notifies("after SIGKILL of smbd, winbindd and samba-dcerpcd")
	t.Logf("served again %v after smbd, winbindd and samba-dcerpcd were killed", time.Since(t1))
	if m.smbJoins.Load() != joins || guid() != account {
		t.Fatal("the restart joined again")
	}
	// Samba's daemons listen on TCP on the instance's loopback address only:
	// samba-dcerpcd (lsarpc, samr, srvsvc, winreg were on the tenants'
	// endpoint), epmapper's 135 included (without it samba-dcerpcd could stop
	// accepting on every pipe), and smbd, which the endpoints reach through
	// the sandbox's NAT (smbnat.go).
	lo := smbLoopback(smbInstanceID(mb.AD))
	ls := sambaListeners(t, m.SMBPID("bss", mb.AD, "samba-dcerpcd"))
	for _, l := range ls {
		if l.Addr() != lo {
			t.Errorf("a Samba daemon listens on %s: tenants reach it (all: %v)", l, ls)
		}
	}
	if !slices.Contains(ls, netip.AddrPortFrom(lo, 135)) || !slices.Contains(ls, netip.AddrPortFrom(lo, 445)) {
		t.Errorf("Samba's listeners %v, want epmapper on %s:135 and smbd on %s:445", ls, lo, lo)
	}
	loopbackUnreachable(t, m, ep1, lo)

	// Another AD connection's instance on the same network does not serve vol1.
	mb2 := SMBMembership{AD: "projects/p2/locations/l/activeDirectories/ad2", Realm: dc.Realm, MachineName: "BSS-2B3C",
		DNS: dns, OUPath: ou}
	if err := m.JoinDomain(ctx, "bss", mb2, cred); err != nil {
		t.Fatal(err)
	}
	ep2 := netip.MustParseAddr("10.99.73.21")
	if err := m.SMBShare(ctx, "bss", mb2.AD, ep2, smb.ShareSpec{Name: "vol2", Path: vols["v2"]}); err != nil {
		t.Fatal(err)
	}
	if out, err := cli.run(ctx, ntlm, alice.Password, "//"+ep2.String()+"/vol2", "-c", "ls"); err != nil {
		t.Fatalf("vol2 on its own endpoint: %v\n%s", err, out)
	}
	for _, c := range []struct{ ep, share string }{{ep2.String(), "vol1"}, {ep1.String(), "vol2"}} {
		out, err := cli.run(ctx, ntlm, alice.Password, "//"+c.ep+"/"+c.share, "-c", "ls")
		if err == nil || !strings.Contains(out, "BAD_NETWORK_NAME") {
			t.Fatalf("%s served through %s: %v\n%s", c.share, c.ep, err, out)
		}
	}
	waitServes("vol1 after the second instance started")
	checkInstanceDirs(t, m, "bss", mb.AD, mb2.AD)

	// Another endpoint of the instance comes and goes: smbd goes on (its
	// clients keep their sessions and open files), the new endpoint serves
	// while it is there and reaches no smbd once its share is gone.
	smbdPID := m.SMBPID("bss", mb.AD, "smbd")
	ep3 := netip.MustParseAddr("10.99.73.22")
	vols["v3"] = tmpfsVolume(t, mounts, "v3", "size=8m,mode=0777")
	if err := m.SMBShare(ctx, "bss", mb.AD, ep3, smb.ShareSpec{Name: "vol3", Path: vols["v3"]}); err != nil {
		t.Fatal(err)
	}
	serves("a share at a second endpoint", "//"+ep3.String()+"/vol3", "c.bin")
	if err := m.SMBUnshare(ctx, "bss", mb.AD, ep3, "vol3"); err != nil {
		t.Fatal(err)
	}
	if out, err := cli.run(ctx, ntlm, alice.Password, "//"+ep3.String()+"/vol1", "-t", "5", "-c", "ls"); err == nil {
		t.Fatalf("the instance still answers at %s once its share there is gone:\n%s", ep3, out)
	}
	waitServes("vol1 after another endpoint came and went")
	if p := m.SMBPID("bss", mb.AD, "smbd"); p != smbdPID {
		t.Fatalf("smbd restarted (pid %d, was %d) as another endpoint came and went", p, smbdPID)
	}
	// The instance's host name is its machine's, resolved from its own hosts
	// file: smbd looks it up on every negotiate and logon, and the host's name
	// went to the domain's DNS (four lookups per connection) before.
	in1 := instanceOf(t, m, "bss", mb.AD)
	if out, err := in1.run(ctx, nil, "hostname"); err != nil || strings.TrimSpace(out) != "bss-1a2b" {
		t.Errorf("the instance's host name: %q (%v), want bss-1a2b", out, err)
	}
	if out, err := in1.run(ctx, nil, "getent", "ahostsv4", "bss-1a2b"); err != nil || !strings.Contains(out, "bss-1a2b."+dc.DNSDomain) {
		t.Errorf("the instance's host name resolves to %q (%v), want its FQDN from its hosts file", out, err)
	}

	// Basin restarts: a new Manager, JoinDomain without credentials.
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if p := instanceProcs(instDir); len(p) != 0 {
		t.Fatalf("processes of the instance after Stop: %v", p)
	}
	m = newManager()
	t2 := time.Now()
	if err := m.JoinDomain(ctx, "bss", mb, SMBCredentials{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("JoinDomain without credentials after a restart: %v", time.Since(t2))
	if m.smbJoins.Load() != 0 || guid() != account {
		t.Fatal("the restart joined again")
	}
	waitServes("after a Basin restart")

	// Unshare: vol1 is gone from its endpoint.
	if err := m.SMBUnshare(ctx, "bss", mb.AD, ep1, "vol1"); err != nil {
		t.Fatal(err)
	}
	if err := m.SMBUnshare(ctx, "bss", mb.AD, ep1, "vol1"); err != nil {
		t.Fatal(err)
	}
	if shares, err := m.SMBShares(ctx, "bss", mb.AD); err != nil || len(shares) != 0 {
		t.Fatalf("SMBShares after unshare = %v, %v", shares, err)
	}

	// Leave: no computer object, no DNS name, no process, no directory.
	for _, x := range []SMBMembership{mb, mb2} {
		dir := m.instanceDir("bss", smbInstanceID(x.AD))
		if err := m.LeaveDomain(ctx, "bss", x.AD, cred); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := dc.ComputerExists(ctx, x.MachineName); err != nil || ok {
			t.Fatalf("computer %s after leave: %v %v", x.MachineName, ok, err)
		}
		h := strings.ToLower(x.MachineName) + "." + dc.DNSDomain
		if a, _ := dc.LookupA(ctx, h); len(a) != 0 {
			t.Fatalf("%s still resolves to %v", h, a)
		}
		if p := instanceProcs(dir); len(p) != 0 {
			t.Fatalf("processes left: %v", p)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("instance dir after leave: %v", err)
		}
		if err := m.LeaveDomain(ctx, "bss", x.AD, cred); err != nil {
			t.Fatalf("second leave: %v", err)
		}
	}
	stopped = true
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// diagnose logs what the instance's daemons say about themselves.
func diagnose(t *testing.T, m *Manager, ad string) {
	m.mu.Lock()
	sb := m.sandboxes["bss"]
	m.mu.Unlock()
	if sb == nil {
		return
	}
	sb.smbMu.Lock()
	in := sb.smb[smbInstanceID(ad)]
	sb.smbMu.Unlock()
	if in == nil {
		return
	}
	for _, argv := range [][]string{{"wbinfo", "-p"}, {"wbinfo", "-t"}, {"wbinfo", "--ping-dc"}, {"ss", "-ltnp"}, {"ps", "-eo", "pid,sid,args"}} {
		out, err := in.run(context.Background(), nil, argv...)
		t.Logf("%v: %v\n%s", argv, err, out)
	}
}

// instanceOf returns network's running instance of ad.
func instanceOf(t *testing.T, m *Manager, network, ad string) *smbInstance {
	t.Helper()
	m.mu.Lock()
	sb := m.sandboxes[network]
	m.mu.Unlock()
	if sb == nil {
		t.Fatalf("no sandbox %s", network)
	}
	sb.smbMu.Lock()
	defer sb.smbMu.Unlock()
	in := sb.smb[smbInstanceID(ad)]
	if in == nil {
		t.Fatalf("no instance of %s on %s", ad, network)
	}
	return in
}

// checkInstanceDirs checks Samba's directories as an instance's smbd children
// meet them: as a domain user (what a child serving that user runs as). An smbd
// tells whether another smbd is alive by reading its lock file
// (lock/msg.lock/<pid>): if the path to it cannot be crossed, every other
// connection looks dead, and share modes, oplock breaks and byte-range locks
// between connections are ignored. So lock, state, cache and ncalrpc have
// Samba's default modes (0755), private/ keeps 0700, and the instance sees
// nothing of its sandbox's files or of the other instance's (other).
func checkInstanceDirs(t *testing.T, m *Manager, network, ad, other string) {
	t.Helper()
	ctx := context.Background()
	in := instanceOf(t, m, network, ad)
	d := smb.GlobalOptions{StateDir: in.dir}.Dirs()
	// alice's rid-mapped ids; nothing of root's capabilities survives the
	// switch to a non-zero uid.
	asUser := func(argv ...string) (string, error) {
		return in.run(ctx, nil, append([]string{"setpriv", "--reuid=101104", "--regid=100513", "--clear-groups", "--"}, argv...)...)
	}
	smbd := m.SMBPID(network, ad, "smbd")
	lockFile := filepath.Join(d.Lock, "msg.lock", strconv.Itoa(smbd))
	if out, err := asUser("cat", lockFile); err != nil {
		t.Errorf("a domain user's smbd cannot read smbd's lock file %s: %v\n%s", lockFile, err, out)
	}
	for _, dir := range []string{d.Lock, d.State, d.Cache, d.NCALRPC} {
		if out, err := asUser("ls", dir); err != nil {
			t.Errorf("a domain user's smbd cannot use %s: %v\n%s", dir, err, out)
		}
	}
	if out, err := asUser("ls", d.Private); err == nil {
		t.Errorf("a domain user lists the private directory %s:\n%s", d.Private, out)
	}
	// The instance's view of the sandbox directory: its own directory only.
	for dir, want := range map[string]string{in.sb.dir: "smb", filepath.Join(in.sb.dir, "smb"): smbInstanceID(ad)} {
		out, err := in.run(ctx, nil, "ls", "-A", dir)
		if err != nil || strings.Fields(out) == nil || strings.Join(strings.Fields(out), " ") != want {
			t.Errorf("the instance sees %q in %s (%v), want only %q", strings.Fields(out), dir, err, want)
		}
	}
	if out, err := in.run(ctx, nil, "ls", filepath.Join(in.sb.dir, "smb", smbInstanceID(other))); err == nil {
		t.Errorf("the instance of %s sees the instance of %s:\n%s", ad, other, out)
	}
}

// grepInstanceLogs returns the lines of every Samba log of the test's instances
// (log/ and var/log/samba/ of each) that contain pattern.
func grepInstanceLogs(t *testing.T, dataDir, pattern string) []string {
	t.Helper()
	var out []string
	for _, glob := range []string{"log/*", "var/log/samba/*"} {
		files, _ := filepath.Glob(filepath.Join(dataDir, "sandboxes", "*", "smb", "*", glob))
		for _, f := range files {
			data, _ := os.ReadFile(f)
			for _, line := range strings.Split(string(data), "\n") {
				if strings.Contains(line, pattern) {
					out = append(out, filepath.Base(f)+": "+strings.TrimSpace(line))
				}
			}
		}
	}
	return out
}

// loopbackUnreachable checks that a client on the network that routes an
// instance's loopback address lo to the sandbox (through the endpoint ep)
// reaches neither smbd nor samba-dcerpcd there, while ep's port 445 reaches
// smbd; and that it is the sandbox's filter that keeps them apart: without
// it, the same client reaches samba-dcerpcd's epmapper.
func loopbackUnreachable(t *testing.T, m *Manager, ep, lo netip.Addr) {
	t.Helper()
	ns := fmt.Sprintf("bssx-%d", os.Getpid())
	exec.Command("ip", "netns", "del", ns).Run() //nolint:errcheck // a leftover of a killed run
	runIP(t, "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	runIP(t, "link", "add", "vbssx", "type", "veth", "peer", "name", "eth0", "netns", ns)
	t.Cleanup(func() { exec.Command("ip", "link", "del", "vbssx").Run() })
	runIP(t, "link", "set", "vbssx", "master", bssBridge, "up")
	runIP(t, "-n", ns, "addr", "add", "10.99.73.202/24", "dev", "eth0")
	runIP(t, "-n", ns, "link", "set", "eth0", "up")
	// Its 127/8 leaves through eth0 to the sandbox (its lo is down: no local
	// route for 127/8).
	if out, err := exec.Command("ip", "netns", "exec", ns, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/conf/eth0/route_localnet").CombinedOutput(); err != nil {
		t.Fatalf("route_localnet: %v %s", err, out)
	}
	runIP(t, "-n", ns, "route", "add", lo.String()+"/32", "via", ep.String(), "dev", "eth0")
	ctx := context.Background()
	dial := func(a netip.Addr, port uint16) error {
		c, err := dialInNetns(ctx, ns, "tcp", netip.AddrPortFrom(a, port).String())
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(ep, 445); err != nil {
		t.Fatalf("%s:445 from the client: %v", ep, err)
	}
	for _, port := range []uint16{445, 135} {
		if err := dial(lo, port); err == nil {
			t.Errorf("a client routing %s to the sandbox reached %s:%d", lo, lo, port)
		}
	}
	// The control: the filters flushed, the same client gets through.
	m.mu.Lock()
	sb := m.sandboxes["bss"]
	m.mu.Unlock()
	for _, chain := range []string{"filter_in", "filter_out"} {
		if out, err := exec.Command("nsenter", "--net=/run/netns/"+sb.ns, "nft", "flush", "chain", "ip", smbNATTable, chain).CombinedOutput(); err != nil {
			t.Fatalf("nft flush: %v %s", err, out)
		}
	}
	err := dial(lo, 135)
	sb.smbNATMu.Lock()
	sb.smbNAT = "" // what this sandbox applied was changed behind its back
	sb.smbNATMu.Unlock()
	if aerr := sb.applySMBNAT(ctx); aerr != nil {
		t.Fatal(aerr)
	}
	if err != nil {
		t.Fatalf("the control: without the sandbox's filter, %s:135 still out of reach (%v): the check above proves nothing", lo, err)
	}
	if err := dial(lo, 135); err == nil {
		t.Fatalf("%s:135 reached after the NAT was applied again", lo)
	}
}

// sambaListeners lists the TCP sockets Samba's daemons (smbd, samba-dcerpcd
// and its rpcd_* workers, winbindd) listen on in pid's network namespace.
func sambaListeners(t *testing.T, pid int) []netip.AddrPort {
	t.Helper()
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-n", "ss", "-Hltnp").CombinedOutput()
	if err != nil {
		t.Fatalf("ss: %v\n%s", err, out)
	}
	var ls []netip.AddrPort
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !(strings.Contains(f[5], `"smbd"`) || strings.Contains(f[5], `"samba-dcerpcd"`) ||
			strings.Contains(f[5], `"rpcd_`) || strings.Contains(f[5], `"winbindd"`)) {
			continue
		}
		ap, err := netip.ParseAddrPort(strings.ReplaceAll(f[3], "*", "0.0.0.0"))
		if err != nil {
			t.Fatalf("ss line %q: %v", line, err)
		}
		ls = append(ls, ap)
	}
	return ls
}
