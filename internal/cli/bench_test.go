package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/basin-nas/basin/internal/bench"
)

// The nfs engine's NFSv4.1 and Kerberos flags: what each gives, and the error
// naming the flag at fault.
func TestBenchNFSSecFlags(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	parse := func(args ...string) (bench.Engine, error) {
		t.Helper()
		p, err := parseArgs(append([]string{"--engine=nfs", "--url=nfs://srv.example.com/vol"}, args...), benchFlags())
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		_, e, err := jobFromFlags(p, getenv)
		return e, err
	}
	if e, err := parse(); err != nil {
		t.Fatal(err)
	} else if _, ok := e.(*bench.NFS); !ok {
		t.Fatalf("no --nfs-version: %T, want NFSv3", e)
	}
	e, err := parse("--nfs-version=4.1", "--nconnect=2", "--uid=1000", "--gid=100")
	if v4, ok := e.(*bench.NFS4); err != nil || !ok || v4.Sec != "" || v4.Conns != 2 || v4.UID != 1000 || v4.GID != 100 {
		t.Fatalf("4.1: %#v, %v", e, err)
	}
	env["BASIN_KRB5_PASSWORD"] = "s3cret"
	e, err = parse("--nfs-version=4.1", "--sec=krb5p", "--user=alice@CORP.EXAMPLE", "--krb5-conf=/tmp/k.conf", "--sec-principal=nfs/basin-1.corp.example")
	v4, _ := e.(*bench.NFS4)
	if err != nil || v4 == nil || v4.Sec != "krb5p" || v4.Krb5.User != "alice@CORP.EXAMPLE" || v4.Krb5.Password != "s3cret" ||
		v4.Krb5.Conf != "/tmp/k.conf" || v4.Krb5.Principal != "nfs/basin-1.corp.example" {
		t.Fatalf("krb5p: %#v, %v", e, err)
	}
	delete(env, "BASIN_KRB5_PASSWORD")
	if e, err = parse("--nfs-version=4.1", "--sec=krb5"); err != nil || e.(*bench.NFS4).Krb5.User != "" {
		t.Fatalf("krb5 from the credential cache: %#v, %v", e, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nfs-version=4"}, "--nfs-version"},
		{[]string{"--nfs-version=4.2"}, "--nfs-version"},
		{[]string{"--sec=krb5"}, "--sec krb5 needs --nfs-version 4.1"},
		{[]string{"--nfs-version=3", "--sec=krb5p"}, "--sec krb5p needs --nfs-version 4.1"},
		{[]string{"--nfs-version=4.1", "--sec=krb6"}, "--sec"},
		{[]string{"--nfs-version=4.1", "--keytab=/k"}, "--keytab is for --sec"},
		{[]string{"--nfs-version=4.1", "--sec=sys", "--sec-principal=nfs/x"}, "--sec-principal is for --sec"},
		{[]string{"--nfs-version=4.1", "--sec=krb5i", "--sec-principal=nfs"}, "--sec-principal"},
		{[]string{"--nfs-version=4.1", "--sec=krb5i", "--user=a@b@c"}, "--user"},
		{[]string{"--nfs-version=4.1", "--sec=krb5i", "--user=CORP\\alice"}, "--user"},
		{[]string{"--nfs-version=4.1", "--sec=krb5i", "--keytab=/k"}, "need --user"},
		{[]string{"--nfs-version=4.1", "--sec=krb5", "--user=alice", "--password=x"}, "$BASIN_KRB5_PASSWORD"},
		{[]string{"--nfs-version=4.1", "--user=alice"}, "--user is for --sec"},
		{[]string{"--nfs-version=4.1", "--nconnect=0"}, "--nconnect"},
	} {
		if _, err := parse(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
	// Through Main: a usage error (exit 2).
	var out, errb bytes.Buffer
	if code := Main([]string{"bench", "--engine=nfs", "--url=nfs://h/x", "--sec=krb5"}, Env{Stdout: &out, Stderr: &errb, Getenv: getenv}); code != 2 {
		t.Errorf("--sec krb5 over NFSv3: exit %d, want 2: %s", code, errb.String())
	}
}
