package e2e

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/clienthost"
	"github.com/basin-nas/basin/test/readme"
)

// readmeNet is the network the README's examples name: make run's default.
var readmeNet = netip.MustParsePrefix("10.99.0.0/24")

// assignment is a shell line that only sets a variable (B=bin/basin).
var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=\S*$`)

// TestReadme runs every example of README.md as written, in order, against a
// fresh server started as `make run` starts it (its defaults: location local,
// overcommit 1, the 4 MiB/s floor, network default on 10.99.0.0/24; the store
// 16 GiB where make run sizes it from the disk: it is allocated in full),
// from a directory standing for a fresh clone (bin/basin built). Only the
// endpoint and the key file differ from make run's, through BASIN_ENDPOINT and
// BASIN_KEY_FILE for the shell and the two literals in the Python example (the
// package readme lists the conventions for what is not run). After the
// quickstart, a client's writes are checked as the README explains them.
func TestReadme(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := readme.Parse(string(data))
	if err != nil {
		t.Fatal(err)
	}
	if owner := addressOwner(readmeNet); owner != "" {
		t.Fatalf("%s is in use on this machine (%s): the README's addresses would not be the server's", readmeNet, owner)
	}
	s := newServer(t)
	s.subnet = readmeNet
	s.start("--location", "local", "--store-size", "16G", "--overcommit-ratio", "1", "--qos-floor-mibps", "4")
	clone := t.TempDir()
	if err := os.MkdirAll(filepath.Join(clone, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(basinBin, filepath.Join(clone, "bin", "basin")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "BASIN_ENDPOINT=http://"+s.addr, "BASIN_KEY_FILE="+filepath.Join(s.dataDir, "owner-key.json"))
	var vars []string // NAME=value lines so far, for the commands after them
	pending := maps.Clone(readmeVerdicts)
	checked := false
	for _, b := range blocks {
		if b.Skip != "" {
			t.Logf("README line %d not run: %s", b.Line, b.Skip)
			continue
		}
		switch b.Lang {
		case "python":
			runReadmePython(t, s, clone, b)
			continue
		case "sh":
		default:
			t.Fatalf("README line %d: a %q block, neither run nor marked as not run", b.Line, b.Lang)
		}
		for _, c := range b.Commands {
			if c.Template {
				t.Logf("README line %d is a template, not run: %s", c.Line, c.Text)
				continue
			}
			if assignment.MatchString(c.Text) {
				vars = append(vars, c.Text)
				continue
			}
			out := runReadmeCommand(t, clone, env, vars, c)
			for cmd, wants := range readmeVerdicts {
				if strings.Contains(c.Text, cmd) {
					delete(pending, cmd)
					for _, want := range wants {
						if !strings.Contains(out, want) {
							t.Errorf("README line %d: %s\nsays nothing of %q:\n%s", c.Line, c.Text, want, out)
						}
					}
				}
			}
		}
		if !checked && strings.Contains(b.Text, "volumes create vol1 ") {
			checkReadmeWrites(t, s)
			checked = true
		}
	}
	if !checked {
		t.Error("the README creates no vol1: the client writes it explains were not checked")
	}
	for cmd := range pending {
		t.Errorf("the README no longer runs %q: its verdict was not checked", cmd)
	}
	s.stop(syscall.SIGTERM)
}

// readmeVerdicts are what commands of the README (a part of their text) must
// print, beyond succeeding: the walkthrough's `basin fio analyze` of its `basin
// bench` run (4 KiB random writes at iodepth 16 on vol1, 4 MiB/s) says that
// the ceiling set the pace. Run at once after the bench, it waits for Basin to
// sample the run's end and judges from the volume's atLimitShare over the run
// (30 s: in a 10 s run the partly covered first and last intervals weigh so much
// that the volume's payload looked like another time's and was set aside).
var readmeVerdicts = map[string][]string{
	"fio analyze run.json --volume vol1": {"INFO qos-ceiling", "the volume's QoS ceiling was the bottleneck", "(atLimitShare "},
}

// addressOwner names the interface holding an address of prefix, or "".
func addressOwner(prefix netip.Prefix) string {
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && prefix.Contains(p.Addr()) {
				return i.Name
			}
		}
	}
	return ""
}

// runReadmeCommand runs one command with bash in the clone, after the variables
// set so far, and returns its output; a command marked refused must fail,
// printing its status.
func runReadmeCommand(t *testing.T, dir string, env, vars []string, c readme.Command) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", strings.Join(append(vars, c.Text), "\n"))
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdin = strings.NewReader("q") // basin top runs until q
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	switch {
	case c.Refused == 0 && err != nil:
		t.Errorf("README line %d: %s\n%v:\n%s", c.Line, c.Text, err, out.String())
	case c.Refused != 0 && (err == nil || !strings.Contains(out.String(), fmt.Sprint(c.Refused))):
		t.Errorf("README line %d: %s\nwant a refusal with %d, got %v:\n%s", c.Line, c.Text, c.Refused, err, out.String())
	default:
		t.Logf("README line %d: %s\n%s", c.Line, c.Text, firstLines(out.String(), 6))
	}
	return out.String()
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines[n] = "…"
	}
	return strings.Join(lines, "\n")
}

// readmeOffline is loaded into the README's Python (sitecustomize): it keeps
// google-auth from looking up the account's regional access boundary at Google,
// as the README's note says, so that no request leaves the machine (see
// python/conftest.py's offline).
const readmeOffline = `import datetime
from google.oauth2 import service_account

_load = service_account.Credentials.from_service_account_file.__func__


def _offline(cls, *args, **kwargs):
    creds = _load(cls, *args, **kwargs)
    if hasattr(creds, "_set_regional_access_boundary"):
        far = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) + datetime.timedelta(days=1)
        creds._set_regional_access_boundary({"encodedLocations": "0x0", "expiry": far})
    return creds


service_account.Credentials.from_service_account_file = classmethod(_offline)
`

// runReadmePython runs a Python block with the venv's interpreter (make test's
// google-cloud-netapp), its key file and endpoint literals pointed at s.
func runReadmePython(t *testing.T, s *server, dir string, b readme.Block) {
	t.Helper()
	python, err := filepath.Abs("../../.venv/bin/python")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(python); err != nil {
		t.Errorf("README line %d (Python): no %s (scripts/setup.sh --test makes it): %v", b.Line, python, err)
		return
	}
	code := b.Text
	for from, to := range map[string]string{"/var/lib/basin/owner-key.json": filepath.Join(s.dataDir, "owner-key.json"), "http://127.0.0.1:8780": "http://" + s.addr} {
		if !strings.Contains(code, from) {
			t.Fatalf("README line %d: the Python example no longer names %s", b.Line, from)
		}
		code = strings.ReplaceAll(code, from, to)
	}
	site := t.TempDir()
	if err := os.WriteFile(filepath.Join(site, "sitecustomize.py"), []byte(readmeOffline), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", code)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "PYTHONPATH="+site)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("README line %d (Python): %v:\n%s", b.Line, err, out)
		return
	}
	t.Logf("README line %d (Python): %s", b.Line, out)
}

// checkReadmeWrites checks what the README says of the quickstart's vol1: it is
// at 10.99.0.10 with -o rw in its mount command; the host (10.99.0.1) writes as
// root and hands a directory to uid 1000; a client of the network (10.99.0.130)
// is refused as root at the volume's root (squashed) and writes as uid 1000 in
// that directory.
func checkReadmeWrites(t *testing.T, s *server) {
	t.Helper()
	c, err := client.New("http://"+s.addr, filepath.Join(s.dataDir, "owner-key.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v client.Object
	if err := c.Do(context.Background(), "GET", "/v1/projects/default/locations/local/volumes/vol1", nil, nil, &v); err != nil {
		t.Fatal(err)
	}
	mo, _ := v["mountOptions"].([]any)
	if len(mo) == 0 {
		t.Fatalf("vol1 has no mountOptions: %v", v)
	}
	m := mo[0].(map[string]any)
	if m["exportFull"] != "10.99.0.10:/vol1" || !strings.Contains(fmt.Sprint(m["instructions"]), "-o rw,") {
		t.Fatalf("vol1's mount options %v: the README says 10.99.0.10:/vol1, read-write", m)
	}
	if used, _ := v["usedGib"].(string); used == "" || used == "0" {
		t.Errorf("vol1's usedGib is %q right after its creation", used)
	}
	ep := netip.MustParseAddr("10.99.0.10")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The host, as root: what mkdir and chown do on its mount.
	host, err := nfs3.Mount(ctx, ep.String(), "/vol1", nfs3.Options{Auth: nfs3.Auth{Machine: "readme-host"}})
	if err != nil {
		t.Fatalf("mount vol1 from the host: %v", err)
	}
	defer host.Close()
	dir, err := host.Mkdir(ctx, host.Root, "alice", 0o755)
	if err != nil {
		t.Fatalf("mkdir alice as root on the host: %v", err)
	}
	uid := uint32(1000)
	if err := host.SetAttr(ctx, dir, nfs3.SetAttrs{UID: &uid, GID: &uid}); err != nil {
		t.Fatalf("chown 1000:1000 alice as root on the host: %v", err)
	}
	fh, err := host.Create(ctx, host.Root, "from-the-host", 0o644)
	if err == nil {
		_, err = host.Write(ctx, fh, []byte("root was here"), 0, nfs3.FileSync)
	}
	if err != nil {
		t.Fatalf("root on the host writing in vol1: %v", err)
	}

	// A client of the network.
	h := clienthost.New(t, s.bridge, netip.MustParsePrefix("10.99.0.130/24"))
	if err := h.NFS(3, 0, 0).Write(ep, "/vol1/from-a-client", []byte("x")); err == nil || !strings.Contains(err.Error(), "ACCES") {
		t.Errorf("root on a client writing at vol1's root: %v, want NFS3ERR_ACCES (squashed to nobody, root directory 0770)", err)
	}
	alice := h.NFS(3, 1000, 1000)
	if err := alice.Write(ep, "/vol1/alice/notes", []byte("alice's notes")); err != nil {
		t.Fatalf("uid 1000 on a client writing in alice/: %v", err)
	}
	if got, err := alice.Read(ep, "/vol1/alice/notes"); err != nil || string(got) != "alice's notes" {
		t.Fatalf("uid 1000 reading back alice/notes: %q %v", got, err)
	}
	if e, err := alice.Stat(ep, "/vol1/alice/notes"); err != nil || e.UID != 1000 {
		t.Fatalf("alice/notes: %+v %v, want owned by 1000", e, err)
	}
}
