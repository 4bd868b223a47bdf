// Package pkg tests Basin's Debian packages (scripts/deb.sh, packaging/deb):
// the systemd unit and maintainer scripts as files (here, without root), and
// the packages' whole life on this machine, install, start, upgrade under a
// client's I/O, remove and purge (pkg_test.go, as root).
package pkg

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const repo = "../.."

// unit is what the test reads of a systemd unit's [Service] section.
type unit struct {
	execStart    []string
	env          []string
	caps         []string // CapabilityBoundingSet, as written (CAP_…)
	noNewPrivs   bool
	typ          string
	killMode     string
	notifyAccess string
	timeoutStart time.Duration
	timeoutStop  time.Duration
	all          map[string][]string // every setting of every section, by name
}

// parseUnit reads a unit file the way the test needs it: ExecStart split on
// blanks (the unit uses no quoting), Environment's assignments, and the rest by
// name. Continuation lines are not used by Basin's unit and not supported.
func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{all: map[string][]string{}}
	sc := bufio.NewScanner(f)
	section := ""
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		if strings.HasPrefix(line, "[") {
			section = strings.Trim(line, "[]")
			continue
		}
		if strings.HasSuffix(line, `\`) {
			t.Fatalf("%s: continuation lines are not supported: %q", path, line)
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: not a setting: %q", path, line)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		u.all[k] = append(u.all[k], v)
		if section != "Service" {
			continue
		}
		switch k {
		case "ExecStart":
			u.execStart = strings.Fields(v)
		case "Environment":
			u.env = append(u.env, strings.Fields(v)...)
		case "CapabilityBoundingSet":
			u.caps = append(u.caps, strings.Fields(v)...)
		case "NoNewPrivileges":
			u.noNewPrivs = v == "yes" || v == "true"
		case "Type":
			u.typ = v
		case "KillMode":
			u.killMode = v
		case "NotifyAccess":
			u.notifyAccess = v
		case "TimeoutStartSec":
			u.timeoutStart = parseSystemdTime(t, v)
		case "TimeoutStopSec":
			u.timeoutStop = parseSystemdTime(t, v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	// systemd's defaults (DefaultTimeoutStartSec, DefaultTimeoutStopSec).
	if u.timeoutStart == 0 {
		u.timeoutStart = 90 * time.Second
	}
	if u.timeoutStop == 0 {
		u.timeoutStop = 90 * time.Second
	}
	return u
}

// parseSystemdTime reads the time spans Basin's unit uses (10min, 2min, 90s).
func parseSystemdTime(t *testing.T, v string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(strings.NewReplacer("min", "m").Replace(v))
	if err != nil {
		t.Fatalf("time span %q: %v", v, err)
	}
	return d
}

// TestUnit holds basin.service to what the service needs: notify readiness,
// restarts that stop Basin's own process only, no option that would give it a
// mount namespace of its own (its mounts must be the host's, for the next
// Basin to find), and a capability bounding set that holds every capability
// its daemons keep.
func TestUnit(t *testing.T) {
	u := parseUnit(t, filepath.Join(repo, "packaging/deb/basin.service"))
	if want := []string{"/usr/bin/basin", "serve", "--config", "/etc/basin/basin.conf"}; !slices.Equal(u.execStart, want) {
		t.Errorf("ExecStart %q, want %q", u.execStart, want)
	}
	if u.typ != "notify" || u.notifyAccess != "main" || u.killMode != "process" {
		t.Errorf("Type=%s NotifyAccess=%s KillMode=%s, want notify, main, process", u.typ, u.notifyAccess, u.killMode)
	}
	if got := u.all["Restart"]; !slices.Equal(got, []string{"on-failure"}) {
		t.Errorf("Restart=%v, want on-failure", got)
	}
	for _, k := range []string{"StandardOutput", "StandardError"} {
		if got := u.all[k]; !slices.Equal(got, []string{"journal"}) {
			t.Errorf("%s=%v, want journal", k, got)
		}
	}
	// Options that run the service in namespaces of its own (mount, above all),
	// or filter its devices (loop devices are made at run time).
	for _, k := range []string{"ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "PrivateMounts", "PrivateNetwork",
		"PrivateUsers", "PrivateIPC", "ReadWritePaths", "ReadOnlyPaths", "InaccessiblePaths", "ExecPaths", "NoExecPaths",
		"TemporaryFileSystem", "BindPaths", "BindReadOnlyPaths", "MountFlags", "MountAPIVFS", "RootDirectory", "RootImage",
		"ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups", "ProtectClock",
		"ProtectHostname", "ProtectProc", "ProcSubset", "DynamicUser", "NetworkNamespacePath", "RestrictNamespaces",
		"RestrictSUIDSGID", "DevicePolicy", "DeviceAllow", "StateDirectory", "RuntimeDirectory", "CacheDirectory",
		"LogsDirectory", "ConfigurationDirectory", "User", "Group"} {
		if v, ok := u.all[k]; ok {
			t.Errorf("%s=%v: no namespacing, device filtering or other user for Basin", k, v)
		}
	}
	// Every capability a daemon keeps must be in Basin's bounding set, or
	// setpriv cannot give it.
	src := ""
	for _, f := range []string{"internal/dataplane/sandbox.go", "internal/dataplane/smbinstance.go"} {
		b, err := os.ReadFile(filepath.Join(repo, f))
		if err != nil {
			t.Fatal(err)
		}
		src += string(b)
	}
	sets := regexp.MustCompile(`(?m)^\s*(\w+Caps)\s*=\s*"([^"]*)"`).FindAllStringSubmatch(src, -1)
	if len(sets) < 5 {
		t.Fatalf("found %d capability sets in internal/dataplane, want the daemons' five or more", len(sets))
	}
	for _, s := range sets {
		for _, c := range strings.Split(s[2], ",") {
			if name, ok := strings.CutPrefix(c, "+"); ok && !slices.Contains(u.caps, "CAP_"+strings.ToUpper(name)) {
				t.Errorf("%s keeps %s, which CapabilityBoundingSet lacks", s[1], name)
			}
		}
	}
	// And what Basin itself does.
	for _, c := range []string{"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_SYS_CHROOT", "CAP_SETPCAP", "CAP_SYS_PTRACE", "CAP_KILL"} {
		if !slices.Contains(u.caps, c) {
			t.Errorf("CapabilityBoundingSet lacks %s", c)
		}
	}
	if !u.noNewPrivs {
		t.Error("NoNewPrivileges is off")
	}
}

// TestUnitVerifies runs systemd-analyze verify on the unit (offline; it needs
// no running systemd). It checks that ExecStart's binary exists: here a
// stand-in takes /usr/bin/basin's place, and the root test verifies the
// installed unit as it is.
func TestUnitVerifies(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze is not installed (the systemd package; scripts/setup.sh --test installs it)")
	}
	data, err := os.ReadFile(filepath.Join(repo, "packaging/deb/basin.service"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "basin")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "basin.service")
	if err := os.WriteFile(file, []byte(strings.ReplaceAll(string(data), "/usr/bin/basin ", bin+" ")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("systemd-analyze", "verify", file).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestMaintainerScripts: the scripts parse as POSIX sh, and call
// deb-systemd-invoke only where systemd runs.
func TestMaintainerScripts(t *testing.T) {
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		path := filepath.Join(repo, "packaging/deb/basin."+s)
		if out, err := exec.Command("sh", "-n", path).CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", s, err, out)
		}
		st, err := os.Stat(path)
		if err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("%s is not executable: %v", s, err)
		}
		data, _ := os.ReadFile(path)
		depth, guard := 0, 0 // if-nesting, and the depth of the systemd test's if (0: none)
		for _, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			switch {
			case strings.HasPrefix(line, "if "):
				depth++
				if guard == 0 && strings.Contains(line, "-d /run/systemd/system") {
					guard = depth
				}
			case line == "fi" || strings.HasPrefix(line, "elif ") || line == "else":
				if guard == depth {
					guard = 0
				}
				if line == "fi" {
					depth--
				}
			case strings.HasPrefix(line, "deb-systemd-invoke") && guard == 0:
				t.Errorf("%s calls deb-systemd-invoke outside an `if [ -d /run/systemd/system ]`: %s", s, line)
			}
		}
	}
}
