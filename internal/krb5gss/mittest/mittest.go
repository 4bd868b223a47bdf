// Package mittest gives tests a real Kerberos peer: a throwaway MIT KDC on
// loopback, with its realm, database and keytabs in a temporary directory, and
// MIT's GSS-API (python3-gssapi, run as a subprocess) as the acceptor of a
// context. Nothing of the host's Kerberos configuration is read or written:
// every MIT tool runs with KRB5_CONFIG and KRB5_KDC_PROFILE of the test's own.
//
// Without the MIT tools (Debian's krb5-kdc, krb5-admin-server and
// python3-gssapi, which scripts/setup.sh --test installs) the tests skip,
// unless $BASIN_REQUIRE_MIT_KERBEROS is set, as make test sets it.
//
// Test code only; it imports nothing of Basin's.
package mittest

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/config"
)

// Realm is the test realm.
const Realm = "BASIN.TEST"

// Enctypes are the encryption types the KDC supports and clients ask for.
var Enctypes = []string{"aes256-cts-hmac-sha1-96", "aes128-cts-hmac-sha1-96", "aes256-cts-hmac-sha384-192", "aes128-cts-hmac-sha256-128"}

// python is Debian's interpreter, the one python3-gssapi is installed for (a
// python3 earlier on PATH may be another).
const python = "/usr/bin/python3"

//go:embed acceptor.py
var acceptorPy []byte

// KDC is a running MIT KDC.
type KDC struct {
	Dir  string
	Addr string // 127.0.0.1:port, TCP and UDP
	env  []string
}

// Start starts a KDC for Realm on a free loopback port; it stops when the test
// ends.
func Start(t *testing.T) *KDC {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("BASIN_REQUIRE_MIT_KERBEROS") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	dir := t.TempDir()
	addr, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	k := &KDC{Dir: dir, Addr: addr}
	k.env = append(os.Environ(),
		"KRB5_CONFIG="+filepath.Join(dir, "krb5.conf"),
		"KRB5_KDC_PROFILE="+filepath.Join(dir, "kdc.conf"),
		"KRB5RCACHETYPE=none",
		"KRB5CCNAME=MEMORY:mittest",
	)
	enctypes := strings.Join(Enctypes, " ")
	files := map[string]string{
		"krb5.conf": k.Krb5Conf(),
		"kdc.conf": fmt.Sprintf("[kdcdefaults]\n\tkdc_listen = %[1]s\n\tkdc_tcp_listen = %[1]s\n"+
			"[realms]\n\t%[2]s = {\n\t\tdatabase_name = %[3]s/principal\n\t\tkey_stash_file = %[3]s/stash\n"+
			"\t\tacl_file = %[3]s/kadm5.acl\n\t\tsupported_enctypes = %[4]s\n\t}\n"+
			"[logging]\n\tkdc = FILE:%[3]s/kdc.log\n\tdefault = FILE:%[3]s/kdc.log\n",
			addr, Realm, dir, strings.ReplaceAll(enctypes+" ", " ", ":normal ")),
		"kadm5.acl": "",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := k.run(ctx, "kdb5_util", "-r", Realm, "create", "-s", "-P", "master-"+hex.EncodeToString([]byte(dir))); err != nil {
		t.Fatal(err)
	}
	kdc := exec.Command("krb5kdc", "-n", "-r", Realm, "-P", filepath.Join(dir, "kdc.pid"))
	kdc.Env = k.env
	var stderr bytes.Buffer
	kdc.Stdout, kdc.Stderr = &stderr, &stderr
	if err := kdc.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { kdc.Wait(); close(exited) }() //nolint:errcheck // killed at cleanup
	t.Cleanup(func() {
		kdc.Process.Kill() //nolint:errcheck // it may have died
		<-exited
	})
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return k
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "kdc.log"))
			t.Fatalf("krb5kdc exited: %s\n%s", stderr.String(), log)
		case <-ctx.Done():
			t.Fatalf("krb5kdc does not listen on %s: %v", addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Available says why the MIT tools are missing, or returns nil.
func Available() error {
	for _, tool := range []string{"kdb5_util", "kadmin.local", "krb5kdc"} {
		if _, err := exec.LookPath(tool); err != nil {
			if _, err := os.Stat("/usr/sbin/" + tool); err != nil {
				return fmt.Errorf("MIT Kerberos's %s is missing (Debian's krb5-kdc and krb5-admin-server)", tool)
			}
		}
	}
	if out, err := exec.Command(python, "-c", "import gssapi").CombinedOutput(); err != nil {
		return fmt.Errorf("python3-gssapi is missing: %v: %s", err, out)
	}
	return nil
}

// freePort returns a loopback address whose port is free for TCP and UDP.
func freePort() (string, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err == nil {
			u.Close()
			return addr, nil
		}
	}
	return "", errors.New("no free loopback port for the KDC")
}

// Krb5Conf is a krb5.conf for the realm, for MIT's tools and gokrb5 alike,
// whose clients ask for the given encryption types (all of Enctypes if none).
func (k *KDC) Krb5Conf(enctypes ...string) string {
	if len(enctypes) == 0 {
		enctypes = Enctypes
	}
	list := strings.Join(enctypes, " ")
	return fmt.Sprintf("[libdefaults]\n\tdefault_realm = %[1]s\n\tdns_lookup_kdc = false\n\tdns_lookup_realm = false\n"+
		"\trdns = false\n\tudp_preference_limit = 1\n\tdefault_tkt_enctypes = %[3]s\n\tdefault_tgs_enctypes = %[3]s\n"+
		"\tpermitted_enctypes = %[3]s\n[realms]\n\t%[1]s = {\n\t\tkdc = %[2]s\n\t}\n", Realm, k.Addr, list)
}

func (k *KDC) run(ctx context.Context, argv ...string) (string, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = k.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, out)
	}
	return string(out), nil
}

// kadmin runs a kadmin.local query.
func (k *KDC) kadmin(t *testing.T, query string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := k.run(ctx, "kadmin.local", "-r", Realm, "-q", query)
	if err != nil {
		t.Fatal(err)
	}
	// kadmin.local exits 0 when a query fails.
	if strings.Contains(out, "while ") {
		t.Fatalf("kadmin.local %q: %s", query, out)
	}
}

// AddUser adds a principal with a password.
func (k *KDC) AddUser(t *testing.T, name, password string) {
	t.Helper()
	k.kadmin(t, fmt.Sprintf("addprinc -pw %s %s", password, name))
}

// AddService adds a service principal (such as "nfs/server.basin.test") with
// random keys of the given encryption types (all of Enctypes if none), and
// returns the path of a keytab that holds them.
func (k *KDC) AddService(t *testing.T, name string, enctypes ...string) string {
	t.Helper()
	if len(enctypes) == 0 {
		enctypes = Enctypes
	}
	e := strings.Join(enctypes, ":normal,") + ":normal"
	k.kadmin(t, fmt.Sprintf("addprinc -randkey -e %s %s", e, name))
	kt := filepath.Join(k.Dir, strings.ReplaceAll(name, "/", "_")+".keytab")
	k.kadmin(t, fmt.Sprintf("ktadd -norandkey -k %s %s", kt, name))
	return kt
}

// Client returns a gokrb5 client logged in as user, asking for the given
// encryption types (all of Enctypes if none): the KDC makes its session keys
// of the first it supports.
func (k *KDC) Client(t *testing.T, user, password string, enctypes ...string) *client.Client {
	t.Helper()
	cfg, err := config.NewFromString(k.Krb5Conf(enctypes...))
	if err != nil {
		t.Fatal(err)
	}
	cl := client.NewWithPassword(user, Realm, password, cfg, client.DisablePAFXFAST(true))
	if err := cl.Login(); err != nil {
		t.Fatalf("login as %s: %v", user, err)
	}
	t.Cleanup(cl.Destroy)
	return cl
}

// Acceptor is MIT's GSS-API accepting one context with a service's keytab.
type Acceptor struct {
	in  *bufio.Writer
	out *bufio.Scanner
}

// NewAcceptor starts MIT's acceptor with keytab; it ends with the test, or
// after a minute.
func (k *KDC) NewAcceptor(t *testing.T, keytab string) *Acceptor {
	t.Helper()
	script := filepath.Join(t.TempDir(), "acceptor.py")
	if err := os.WriteFile(script, acceptorPy, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	cmd := exec.CommandContext(ctx, python, script)
	cmd.Env = append(k.env, "KRB5_KTNAME=FILE:"+keytab)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait() //nolint:errcheck // it was told to stop
		cancel()
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("acceptor's stderr: %s", stderr.String())
		}
	})
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 16<<20)
	return &Acceptor{in: bufio.NewWriter(stdin), out: sc}
}

// ask sends one request and returns the answer's byte strings; an "err"
// answer is an error.
func (a *Acceptor) ask(cmd string, args ...[]byte) ([][]byte, error) {
	a.in.WriteString(cmd)
	for _, b := range args {
		a.in.WriteByte(' ')
		if len(b) == 0 {
			a.in.WriteByte('-')
		} else {
			a.in.WriteString(hex.EncodeToString(b))
		}
	}
	a.in.WriteByte('\n')
	if err := a.in.Flush(); err != nil {
		return nil, fmt.Errorf("acceptor: %w", err)
	}
	if !a.out.Scan() {
		return nil, fmt.Errorf("acceptor ended: %v", a.out.Err())
	}
	words := strings.Fields(a.out.Text())
	var res [][]byte
	for _, w := range words[1:] {
		if w == "-" {
			res = append(res, nil)
			continue
		}
		b, err := hex.DecodeString(w)
		if err != nil {
			return nil, fmt.Errorf("acceptor's answer %q: %w", a.out.Text(), err)
		}
		res = append(res, b)
	}
	if len(words) == 0 || words[0] != "ok" {
		if len(res) > 0 {
			return nil, fmt.Errorf("MIT GSS-API: %s", res[0])
		}
		return nil, fmt.Errorf("acceptor's answer %q", a.out.Text())
	}
	return res, nil
}

// Accept gives MIT the initiator's token and returns its reply (an AP-REP),
// the initiator's name as MIT sees it, and the context's flags.
func (a *Acceptor) Accept(token []byte) (reply []byte, initiator string, flags uint32, err error) {
	r, err := a.ask("accept", token)
	if err != nil {
		return nil, "", 0, err
	}
	if len(r) != 3 || len(r[2]) != 4 {
		return nil, "", 0, fmt.Errorf("acceptor: accept answered %d words", len(r))
	}
	return r[0], string(r[1]), uint32(r[2][0])<<24 | uint32(r[2][1])<<16 | uint32(r[2][2])<<8 | uint32(r[2][3]), nil
}

// VerifyMIC has MIT check the initiator's MIC token of msg.
func (a *Acceptor) VerifyMIC(msg, mic []byte) error {
	_, err := a.ask("verify", msg, mic)
	return err
}

// GetMIC has MIT make a MIC token of msg.
func (a *Acceptor) GetMIC(msg []byte) ([]byte, error) {
	r, err := a.ask("getmic", msg)
	if err != nil {
		return nil, err
	}
	return r[0], nil
}

// Wrap has MIT make a Wrap token of msg, sealed if conf.
func (a *Acceptor) Wrap(msg []byte, conf bool) ([]byte, error) {
	c := []byte{0}
	if conf {
		c[0] = 1
	}
	r, err := a.ask("wrap", c, msg)
	if err != nil {
		return nil, err
	}
	if (len(r[1]) == 1 && r[1][0] == 1) != conf {
		return nil, fmt.Errorf("MIT wrapped with encryption %v, asked %v", r[1], conf)
	}
	return r[0], nil
}

// Unwrap has MIT open the initiator's Wrap token; it returns the message and
// whether it was encrypted.
func (a *Acceptor) Unwrap(tok []byte) ([]byte, bool, error) {
	r, err := a.ask("unwrap", tok)
	if err != nil {
		return nil, false, err
	}
	return r[0], len(r[1]) == 1 && r[1][0] == 1, nil
}
