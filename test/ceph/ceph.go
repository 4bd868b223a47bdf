// Package ceph stands up a private Ceph cluster with a CephFS filesystem for root
// tests: one monitor, one manager, one OSD (BlueStore on a sparse file) and one
// MDS in a network namespace of their own, attached by a veth to a bridge the
// caller owns, every file of them under one directory, and tears it all down.
// Nothing under /etc/ceph, /var/lib/ceph, /var/log/ceph or /run/ceph is read or
// written: every daemon and tool is given the cluster's own ceph.conf, whose
// paths all lie under Dir. It follows docs/architecture.md, "A real Ceph cluster
// in tests".
//
// The cluster's pools hold one copy (size 1): it is a fixture for the control
// plane and the data path, not a test of Ceph's replication.
//
// Tests import it; no package that is not a test may.
package ceph

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/runner"
)

// Options says where and how to run the cluster. Name, Dir, Bridge and Addr are
// required.
type Options struct {
	// Name prefixes the cluster's network namespace ("<Name>-ceph") and host veth
	// ("v<Name>-cp"); 1-8 lower-case letters and digits.
	Name string
	// Dir holds everything of the cluster (t.TempDir() in tests).
	Dir string
	// Bridge is an existing Linux bridge in the host namespace the cluster's veth
	// joins; the host reaches the cluster through the bridge's own address.
	Bridge string
	// Addr is the cluster's address with prefix, e.g. "10.99.71.2/24".
	Addr string
	// OSDSize is the OSD's block file's size; default 8 GiB (sparse: it grows
	// with what is written and never shrinks).
	OSDSize int64
	// Timeout bounds each readiness wait; default 90 s.
	Timeout time.Duration
}

// FSName is the CephFS filesystem the cluster serves.
const FSName = "cephfs"

// Cluster is a running cluster.
type Cluster struct {
	// Conf is the cluster's ceph.conf: give it to every client (-c or CEPH_CONF).
	// Its [client] section puts each client's keyring at
	// Dir/keys/ceph.client.<id>.keyring.
	Conf string
	// AdminKeyring holds client.admin's key.
	AdminKeyring string
	// Addr is the monitor's address (without prefix); Netns the namespace.
	Addr, Netns string
	FSID        string
	Dir         string
	// Startup is how long Start took.
	Startup time.Duration

	veth      string
	daemons   []*daemon
	closed    bool
	madeNetns bool
	madeVeth  bool
}

type daemon struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,7}$`)

// Check reports whether what the cluster needs is installed.
func Check() error {
	for _, bin := range []string{"ceph", "ceph-mon", "ceph-mgr", "ceph-osd", "ceph-mds", "ceph-authtool", "monmaptool", "ip", "nsenter"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not installed: run scripts/setup.sh --test", bin)
		}
	}
	return nil
}

// StartT starts a cluster for a test and closes it at the test's end. It skips
// the test unless it runs as root with Ceph's packages installed
// (scripts/setup.sh --test).
func StartT(t testing.TB, o Options) *Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("ceph: needs root (network namespaces)")
	}
	if err := Check(); err != nil {
		t.Skip("ceph: " + err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := Start(ctx, o)
	if err != nil {
		t.Fatalf("ceph: %v", err)
	}
	t.Logf("ceph: cluster up in %s", c.Startup.Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("ceph: %s", c.logTails())
		}
		if err := c.Close(); err != nil {
			t.Errorf("ceph: close: %v", err)
		}
	})
	return c
}

// Start bootstraps the cluster and waits until its filesystem has an active MDS
// and every placement group is active. On error nothing of it is left behind
// (but Dir).
func Start(ctx context.Context, o Options) (_ *Cluster, err error) {
	begin := time.Now()
	if !nameRE.MatchString(o.Name) {
		return nil, fmt.Errorf("ceph: name %q: want 1-8 lower-case letters and digits", o.Name)
	}
	if o.Dir == "" || o.Bridge == "" {
		return nil, errors.New("ceph: Dir and Bridge are required")
	}
	prefix, err := netip.ParsePrefix(o.Addr)
	if err != nil || !prefix.Addr().Is4() {
		return nil, fmt.Errorf("ceph: address %q: want an IPv4 address with prefix", o.Addr)
	}
	if o.OSDSize == 0 {
		o.OSDSize = 8 << 30
	}
	if o.Timeout == 0 {
		o.Timeout = 90 * time.Second
	}
	c := &Cluster{Dir: o.Dir, Addr: prefix.Addr().String(), Netns: o.Name + "-ceph", veth: "v" + o.Name + "-cp"}
	c.Conf = c.path("ceph.conf")
	c.AdminKeyring = c.path("keys", "ceph.client.admin.keyring")
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	if err := c.writeConf(prefix, o.OSDSize); err != nil {
		return nil, err
	}
	if err := c.startNetwork(ctx, o.Bridge, prefix); err != nil {
		return nil, err
	}
	if err := c.bootstrap(ctx, o.Timeout); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, c.logTails())
	}
	c.Startup = time.Since(begin)
	return c, nil
}

func (c *Cluster) path(p ...string) string { return filepath.Join(append([]string{c.Dir}, p...)...) }

func (c *Cluster) writeConf(prefix netip.Prefix, osdSize int64) error {
	for _, d := range []string{"keys", "run", "log", "crash", "data"} {
		if err := os.MkdirAll(c.path(d), 0o700); err != nil {
			return err
		}
	}
	fsid, err := os.ReadFile("/proc/sys/kernel/random/uuid")
	if err != nil {
		return err
	}
	c.FSID = strings.TrimSpace(string(fsid))
	mon := fmt.Sprintf("[v2:%s:3300,v1:%s:6789]", c.Addr, c.Addr)
	// Small pools of one copy, no health warnings about them or about the host's
	// disk (a CI machine's is often below the default 30 % free), deletable pools.
	conf := fmt.Sprintf(`[global]
fsid = %[1]s
mon_host = %[2]s
public_network = %[3]s
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
auth_allow_insecure_global_id_reclaim = false
run_dir = %[4]s/run
log_file = %[4]s/log/$cluster-$name.log
mon_cluster_log_file = %[4]s/log/$cluster.log
crash_dir = %[4]s/crash
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 16
osd_pool_default_pgp_num = 16
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
mon_data_avail_warn = 2
mon_data_avail_crit = 1
mon_allow_pool_delete = true
ms_bind_ipv6 = false

[client]
keyring = %[4]s/keys/$cluster.$name.keyring
admin_socket = %[4]s/run/$cluster-$name.$pid.asok
log_file = %[4]s/log/$cluster-$name.$pid.log

[mon]
mon_data = %[4]s/data/mon-$id
mon_memory_target = 268435456

[mgr]
mgr_data = %[4]s/data/mgr-$id

[osd]
osd_data = %[4]s/data/osd-$id
osd_objectstore = bluestore
bluestore_block_create = true
bluestore_block_size = %[5]d
osd_memory_target = 939524096
bluestore_cache_autotune = true

[mds]
mds_data = %[4]s/data/mds-$id
mds_cache_memory_limit = 134217728
`, c.FSID, mon, prefix.Masked().String(), c.Dir, osdSize)
	return os.WriteFile(c.Conf, []byte(conf), 0o644)
}

func (c *Cluster) startNetwork(ctx context.Context, bridge string, prefix netip.Prefix) error {
	steps := [][]string{
		{"ip", "netns", "add", c.Netns},
		{"ip", "link", "add", c.veth, "type", "veth", "peer", "name", "eth0", "netns", c.Netns},
		{"ip", "link", "set", c.veth, "master", bridge, "up"},
		{"ip", "-n", c.Netns, "addr", "add", prefix.String(), "dev", "eth0"},
		{"ip", "-n", c.Netns, "link", "set", "lo", "up"},
		{"ip", "-n", c.Netns, "link", "set", "eth0", "up"},
	}
	for i, argv := range steps {
		if _, err := (runner.Exec{}).Run(ctx, argv[0], argv[1:]...); err != nil {
			return fmt.Errorf("ceph network: %w", err)
		}
		c.madeNetns = true
		c.madeVeth = i >= 1
	}
	return nil
}

// inNetns is argv run in the cluster's network namespace with its ceph.conf.
// Through nsenter, not "ip netns exec": that makes a mount namespace, a copy of
// the host's mounts at that moment, which would hold other tests' filesystems
// for as long as the daemons run.
func (c *Cluster) inNetns(ctx context.Context, argv ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + c.Netns, "--"}, argv...)...)
	cmd.Env = append(os.Environ(), "CEPH_CONF="+c.Conf)
	return cmd
}

// run runs argv in the namespace; stdin may be nil.
func (c *Cluster) run(ctx context.Context, stdin []byte, argv ...string) ([]byte, error) {
	cmd := c.inNetns(ctx, argv...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	return runner.Output(cmd, argv)
}

// Ceph runs the ceph CLI as client.admin (from inside the cluster's namespace,
// so it works whatever the caller's routes) and returns its standard output.
func (c *Cluster) Ceph(ctx context.Context, args ...string) ([]byte, error) {
	return c.run(ctx, nil, append([]string{"ceph", "--connect-timeout", "15"}, args...)...)
}

// start starts a daemon in the foreground, in the namespace; it dies with the
// test process.
func (c *Cluster) start(name string, argv ...string) error {
	f, err := os.OpenFile(c.path("log", name+".out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := c.inNetns(context.Background(), argv...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(d.done) }() //nolint:errcheck // the exit is in its log
	c.daemons = append(c.daemons, d)
	return nil
}

func (c *Cluster) bootstrap(ctx context.Context, timeout time.Duration) error {
	monKeyring := c.path("keys", "mon.keyring")
	steps := [][]string{
		{"ceph-authtool", "--create-keyring", monKeyring, "--gen-key", "-n", "mon.", "--cap", "mon", "allow *"},
		{"ceph-authtool", "--create-keyring", c.AdminKeyring, "--gen-key", "-n", "client.admin",
			"--cap", "mon", "allow *", "--cap", "osd", "allow *", "--cap", "mds", "allow *", "--cap", "mgr", "allow *"},
		{"ceph-authtool", monKeyring, "--import-keyring", c.AdminKeyring},
		{"monmaptool", "--create", "--fsid", c.FSID, "--addv", "a", fmt.Sprintf("[v2:%s:3300,v1:%s:6789]", c.Addr, c.Addr), c.path("monmap")},
		{"ceph-mon", "--mkfs", "-i", "a", "--monmap", c.path("monmap"), "--keyring", monKeyring},
	}
	for _, argv := range steps {
		if _, err := c.run(ctx, nil, argv...); err != nil {
			return fmt.Errorf("bootstrap: %w", err)
		}
	}
	if err := c.start("mon.a", "ceph-mon", "-f", "-i", "a"); err != nil {
		return err
	}
	if err := c.wait(ctx, timeout, "monitor", func(ctx context.Context) error {
		_, err := c.Ceph(ctx, "mon", "stat")
		return err
	}); err != nil {
		return err
	}
	if _, err := c.Ceph(ctx, "mon", "enable-msgr2"); err != nil {
		return err
	}
	// The manager.
	if err := os.MkdirAll(c.path("data", "mgr-x"), 0o700); err != nil {
		return err
	}
	if _, err := c.Ceph(ctx, "auth", "get-or-create", "mgr.x", "mon", "allow profile mgr", "osd", "allow *", "mds", "allow *",
		"-o", c.path("data", "mgr-x", "keyring")); err != nil {
		return err
	}
	if err := c.start("mgr.x", "ceph-mgr", "-f", "-i", "x"); err != nil {
		return err
	}
	// One OSD.
	uuid, err := os.ReadFile("/proc/sys/kernel/random/uuid")
	if err != nil {
		return err
	}
	secret, err := c.run(ctx, nil, "ceph-authtool", "--gen-print-key")
	if err != nil {
		return err
	}
	idOut, err := c.run(ctx, []byte(`{"cephx_secret": "`+strings.TrimSpace(string(secret))+`"}`),
		"ceph", "osd", "new", strings.TrimSpace(string(uuid)), "-i", "-")
	if err != nil {
		return err
	}
	id := strings.TrimSpace(string(idOut))
	if _, err := strconv.Atoi(id); err != nil {
		return fmt.Errorf("ceph osd new: id %q", id)
	}
	osdDir := c.path("data", "osd-"+id)
	if err := os.MkdirAll(osdDir, 0o700); err != nil {
		return err
	}
	for _, argv := range [][]string{
		{"ceph-authtool", "--create-keyring", filepath.Join(osdDir, "keyring"), "--name", "osd." + id, "--add-key", strings.TrimSpace(string(secret))},
		{"ceph-osd", "-i", id, "--mkfs", "--osd-uuid", strings.TrimSpace(string(uuid))},
	} {
		if _, err := c.run(ctx, nil, argv...); err != nil {
			return fmt.Errorf("osd: %w", err)
		}
	}
	if err := c.start("osd."+id, "ceph-osd", "-f", "-i", id); err != nil {
		return err
	}
	// One MDS.
	if err := os.MkdirAll(c.path("data", "mds-a"), 0o700); err != nil {
		return err
	}
	if _, err := c.Ceph(ctx, "auth", "get-or-create", "mds.a", "mon", "allow profile mds", "osd", "allow rwx", "mds", "allow",
		"mgr", "allow profile mds", "-o", c.path("data", "mds-a", "keyring")); err != nil {
		return err
	}
	if err := c.start("mds.a", "ceph-mds", "-f", "-i", "a"); err != nil {
		return err
	}
	if err := c.wait(ctx, timeout, "osd up and manager available", func(ctx context.Context) error {
		var st struct {
			NumUpOSDs int `json:"num_up_osds"`
		}
		if err := c.cephJSON(ctx, &st, "osd", "stat"); err != nil {
			return err
		}
		if st.NumUpOSDs < 1 {
			return errors.New("no OSD up")
		}
		var mgr struct {
			Available bool `json:"available"`
		}
		if err := c.cephJSON(ctx, &mgr, "mgr", "stat"); err != nil {
			return err
		}
		if !mgr.Available {
			return errors.New("no manager available")
		}
		return nil
	}); err != nil {
		return err
	}
	if _, err := c.Ceph(ctx, "fs", "volume", "create", FSName); err != nil {
		return err
	}
	return c.wait(ctx, timeout, "mds active and placement groups clean", func(ctx context.Context) error {
		out, err := c.Ceph(ctx, "mds", "stat")
		if err != nil {
			return err
		}
		if !strings.Contains(string(out), "up:active") {
			return fmt.Errorf("mds: %s", strings.TrimSpace(string(out)))
		}
		var st struct {
			Summary struct {
				NumPGs   int `json:"num_pgs"`
				ByStates []struct {
					Name string `json:"name"`
					Num  int    `json:"num"`
				} `json:"num_pg_by_state"`
			} `json:"pg_summary"`
		}
		if err := c.cephJSON(ctx, &st, "pg", "stat"); err != nil {
			return err
		}
		pg := st.Summary
		active := 0
		for _, s := range pg.ByStates {
			if strings.HasPrefix(s.Name, "active") {
				active += s.Num
			}
		}
		if pg.NumPGs == 0 || active != pg.NumPGs {
			return fmt.Errorf("placement groups: %d of %d active", active, pg.NumPGs)
		}
		return nil
	})
}

// cephJSON runs the CLI with "-f json" and decodes its output into v.
func (c *Cluster) cephJSON(ctx context.Context, v any, args ...string) error {
	out, err := c.Ceph(ctx, append(args, "-f", "json")...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("ceph %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// wait calls check until it succeeds, a daemon exits, or timeout passes.
func (c *Cluster) wait(ctx context.Context, timeout time.Duration, what string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
		err := check(cctx)
		ccancel()
		if err == nil {
			return nil
		}
		for _, d := range c.daemons {
			select {
			case <-d.done:
				return fmt.Errorf("waiting for %s: %s exited (last check: %w)", what, d.name, err)
			default:
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last check: %w)", what, ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// logTails is the end of each daemon's log: what a failed start left there.
func (c *Cluster) logTails() string {
	var b strings.Builder
	for _, d := range c.daemons {
		for _, f := range []string{c.path("log", d.name+".out"), c.path("log", "ceph-"+d.name+".log")} {
			data, err := os.ReadFile(f)
			if err != nil || len(data) == 0 {
				continue
			}
			if len(data) > 2000 {
				data = data[len(data)-2000:]
			}
			fmt.Fprintf(&b, "%s (tail):\n%s\n", filepath.Base(f), data)
		}
	}
	return b.String()
}

// Close stops the daemons and removes what the cluster made: its processes (and
// any other process left in its network namespace, such as a client a test ran
// there), the veth and the network namespace. Idempotent; safe after a partial
// start. Dir stays (t.TempDir removes it).
func (c *Cluster) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	// In reverse order of start, each given 10 s to stop by itself.
	for i := len(c.daemons) - 1; i >= 0; i-- {
		d := c.daemons[i]
		select {
		case <-d.done:
			continue
		default:
		}
		d.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may be gone
		select {
		case <-d.done:
		case <-time.After(10 * time.Second):
			d.cmd.Process.Kill() //nolint:errcheck // it may be gone
			<-d.done
		}
	}
	if c.madeNetns {
		nsFile := filepath.Join("/run/netns", c.Netns)
		if _, err := os.Stat(nsFile); err == nil {
			if err := runner.KillAll(runner.InNetns(nsFile), 20*time.Second); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if c.madeVeth {
		if _, err := (runner.Exec{}).Run(context.Background(), "ip", "link", "del", c.veth); err != nil &&
			!runner.StderrContains(err, "Cannot find device") {
			errs = append(errs, err)
		}
	}
	if c.madeNetns {
		if _, err := (runner.Exec{}).Run(context.Background(), "ip", "netns", "del", c.Netns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// NewBridge makes a bridge with the host address addr (e.g. "10.99.75.1/24"),
// first deleting one of that name a killed run left; remove deletes it.
func NewBridge(name, addr string) (remove func() error, err error) {
	exec.Command("ip", "link", "del", name).Run() //nolint:errcheck // a leftover of a killed run
	for _, argv := range [][]string{
		{"ip", "link", "add", name, "type", "bridge"},
		{"ip", "addr", "add", addr, "dev", name},
		{"ip", "link", "set", name, "up"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			exec.Command("ip", "link", "del", name).Run() //nolint:errcheck // best effort after a failure
			return nil, fmt.Errorf("%v: %v %s", argv, err, out)
		}
	}
	return func() error {
		if out, err := exec.Command("ip", "link", "del", name).CombinedOutput(); err != nil {
			return fmt.Errorf("delete bridge %s: %v %s", name, err, out)
		}
		return nil
	}, nil
}

// MakeBridge is NewBridge for a test: deleted at the test's end.
func MakeBridge(t testing.TB, name, addr string) {
	t.Helper()
	remove, err := NewBridge(name, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := remove(); err != nil {
			t.Errorf("%v", err)
		}
	})
}
