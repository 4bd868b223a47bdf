package dataplane

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// recRunner records the commands it is given and runs none.
type recRunner struct {
	mu   sync.Mutex
	argv [][]string
}

func (r *recRunner) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.argv = append(r.argv, append([]string{name}, args...))
	return nil, nil
}

// holderProc is a sandbox holder that is only a pid.
type holderProc struct{ pid int }

func (p holderProc) Pid() int             { return p.pid }
func (holderProc) Wait() error            { return nil }
func (holderProc) Signal(os.Signal) error { return nil }

// Each start of Ganesha renders the sandbox's recorded Kerberos identity:
// NFS_KRB5 and IdmapConf in ganesha.conf, an idmapd.conf that maps no
// principal by name, nsswitch.conf asking winbind, and the instance's
// winbindd socket directory bound at libwbclient's path in the sandbox;
// without one, none of it (and no command runs for it).
func TestGaneshaStartRendersKerberos(t *testing.T) {
	run := &recRunner{}
	_, sb := fakeSandbox(t, run, &fakeBus{exports: map[uint64]string{}})
	sb.dir = t.TempDir()
	sb.holder = holderProc{pid: 4242}
	if err := os.Mkdir(filepath.Join(sb.dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(sb.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if err := sb.prepareGanesha(); err != nil {
		t.Fatal(err)
	}
	if c := read("ganesha.conf"); !strings.Contains(c, "Active_krb5 = false;") || strings.Contains(c, "IdmapConf") {
		t.Fatalf("without Kerberos:\n%s", c)
	}
	if n := read("etc/nsswitch.conf"); strings.Contains(n, "winbind") {
		t.Fatalf("nsswitch.conf without Kerberos: %s", n)
	}
	if len(run.argv) != 0 {
		t.Fatalf("commands without Kerberos: %q", run.argv)
	}

	inst := filepath.Join(sb.dir, "smb", "s1", "winbindd")
	k := NFSKerberos{Principal: "nfs/basin-1a2b.basin.test@BASIN.TEST", Keytab: filepath.Join(sb.dir, "smb", "s1", "private", "krb5.keytab"),
		Winbind: inst}
	if err := writeJSON(sb.krb5File(), k); err != nil {
		t.Fatal(err)
	}
	if err := sb.prepareGanesha(); err != nil {
		t.Fatal(err)
	}
	c := read("ganesha.conf")
	for _, want := range []string{"\tPrincipalName = \"nfs@basin-1a2b.basin.test\";\n", "\tKeytabPath = \"" + k.Keytab + "\";\n",
		"\tActive_krb5 = true;\n", "\tIdmapConf = \"" + sb.idmapConf() + "\";\n"} {
		if !strings.Contains(c, want) {
			t.Errorf("ganesha.conf lacks %q:\n%s", want, c)
		}
	}
	if got := read("idmapd.conf"); got != "[General]\nDomain = basin.test\nLocal-Realms = BASIN.TEST\n[Translation]\nMethod = nsswitch\nGSS-Methods = static\n" {
		t.Errorf("idmapd.conf:\n%s", got)
	}
	// MIT's default clock skew (5 minutes) unless a test sets its own.
	if got := read("krb5.conf"); !strings.Contains(got, "default_realm = BASIN.TEST\n") || !strings.Contains(got, "dns_canonicalize_hostname = false\n") ||
		strings.Contains(got, "clockskew") {
		t.Errorf("krb5.conf:\n%s", got)
	}
	sb.krb5ClockSkew = 5 * time.Second
	if err := sb.prepareKrb5(); err != nil {
		t.Fatal(err)
	}
	if got := read("krb5.conf"); !strings.Contains(got, "\tclockskew = 5\n") {
		t.Errorf("krb5.conf with a test's clock skew:\n%s", got)
	}
	sb.krb5ClockSkew = 0
	if err := sb.prepareKrb5(); err != nil {
		t.Fatal(err)
	}
	run.argv = run.argv[:1]
	if n := read("etc/nsswitch.conf"); !strings.HasPrefix(n, "passwd: files winbind\ngroup: files winbind\n") {
		t.Errorf("nsswitch.conf with Kerberos: %s", n)
	}
	if st, err := os.Stat(sb.krb5RcacheDir()); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("replay cache directory: %v %v", st, err)
	}
	if len(run.argv) != 1 || run.argv[0][0] != "nsenter" || !strings.Contains(strings.Join(run.argv[0], " "), "-t 4242 -m") ||
		run.argv[0][len(run.argv[0])-1] != inst {
		t.Fatalf("bind commands: %q", run.argv)
	}
	env := strings.Join(sb.ganeshaEnv(), " ")
	if !strings.Contains(env, "KRB5_CONFIG="+sb.krb5Conf()) || !strings.Contains(env, "KRB5RCACHEDIR="+sb.krb5RcacheDir()) {
		t.Errorf("Ganesha's environment: %s", env)
	}

	// Kerberos off again: the bind goes, nsswitch.conf is files only.
	os.Remove(sb.krb5File())
	if err := sb.prepareGanesha(); err != nil {
		t.Fatal(err)
	}
	if len(run.argv) != 2 || run.argv[1][len(run.argv[1])-1] != "" {
		t.Fatalf("unbind commands: %q", run.argv)
	}
	if n := read("etc/nsswitch.conf"); strings.Contains(n, "winbind") {
		t.Fatalf("nsswitch.conf after Kerberos: %s", n)
	}
}
