package e2e

// The TestSMBShare tests check what each smbSettings value does to a share, as
// clients see it (smbclient, smbcacls, go-smb2, smbtorture on the lab's client
// host) and as the server records it (smbstatus inside the Samba instance).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	smb2 "github.com/cloudsoda/go-smb2"

	"github.com/basin-nas/basin/internal/smb"
	"github.com/basin-nas/basin/test/addc"
)

// TestSMBShareEncryption: ENCRYPT_DATA refuses an SMB 2.1 client at tree connect
// (SMB 2.1 cannot encrypt) and serves SMB3; while go-smb2 sessions hold an
// encrypted and a plain share, the instance's smbstatus shows a cipher for the
// encrypted share's tree connect and "-" for the plain one.
func TestSMBShareEncryption(t *testing.T) {
	l := newSMBLab(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	enc := l.volume("enc", map[string]any{"smbSettings": []string{"ENCRYPT_DATA"}, "unixPermissions": "0777"})
	plain := l.volume("plain", map[string]any{"unixPermissions": "0777"})
	alice := l.user("alice")

	// SMB 2.1: refused on the encrypted share, served on the plain one.
	if o, err := l.shareTool(ctx, alice, "smbclient", unc(enc), "-m", "SMB2_10", "-c", "ls"); err == nil ||
		!regexp.MustCompile(`tree connect failed: NT_STATUS_ACCESS_DENIED`).MatchString(o) {
		t.Fatalf("SMB 2.1 on %s: err %v, want tree connect NT_STATUS_ACCESS_DENIED:\n%s", enc.Share, err, o)
	}
	if o, err := l.shareTool(ctx, alice, "smbclient", unc(plain), "-m", "SMB2_10", "-c", "ls"); err != nil {
		t.Fatalf("SMB 2.1 on %s: %v\n%s", plain.Share, err, o)
	}
	if o, err := l.shareTool(ctx, alice, "smbclient", unc(enc), "-m", "SMB3", "-c", "ls"); err != nil {
		t.Fatalf("SMB3 on %s: %v\n%s", enc.Share, err, o)
	}

	// Two go-smb2 sessions hold the shares open while smbstatus reads the tree
	// connects.
	for _, sh := range []smbShare{enc, plain} {
		sess, err := l.dialNTLM(ctx, sh, alice)
		if err != nil {
			t.Fatalf("go-smb2 session for %s: %v", sh.Share, err)
		}
		defer sess.Logoff()
		fs, err := sess.Mount(sh.Share)
		if err != nil {
			t.Fatalf("go-smb2 mount %s: %v", sh.Share, err)
		}
		defer fs.Umount()
		if err := fs.WriteFile("held.txt", []byte("held by "+sh.Share), 0o644); err != nil {
			t.Fatalf("go-smb2 write in %s: %v", sh.Share, err)
		}
	}
	var out string
	var encRows, plainRows []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		out, err = l.smbstatus(ctx, "-S")
		if err != nil {
			t.Fatalf("smbstatus: %v\n%s", err, out)
		}
		encRows, plainRows = tconEncryption(out, enc.Share), tconEncryption(out, plain.Share)
		if len(encRows) > 0 && len(plainRows) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("smbstatus -S inside the instance:\n%s", out)
	cipher := regexp.MustCompile(`^AES-(128|256)-(GCM|CCM)$`)
	if len(encRows) == 0 || slices.ContainsFunc(encRows, func(e string) bool { return !cipher.MatchString(e) }) {
		t.Errorf("tree connects of %s encrypted with %q, want an AES cipher each", enc.Share, encRows)
	}
	if len(plainRows) == 0 || slices.ContainsFunc(plainRows, func(e string) bool { return e != "-" }) {
		t.Errorf("tree connects of %s encrypted with %q, want \"-\" each", plain.Share, plainRows)
	}
}

// TestSMBShareEnumeration: on an ACCESS_BASED_ENUMERATION share a file alice
// alone may read is listed for alice and not for bob; on a share without it bob
// sees the file listed (and still cannot read it). A NON_BROWSABLE share is
// missing from the share list, where the BROWSABLE ones are, and still connects
// by name.
func TestSMBShareEnumeration(t *testing.T) {
	l := newSMBLab(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	abe := l.volume("abe", map[string]any{"smbSettings": []string{"ACCESS_BASED_ENUMERATION"}, "unixPermissions": "0777"})
	open := l.volume("open", map[string]any{"smbSettings": []string{"BROWSABLE"}, "unixPermissions": "0777"})
	hid := l.volume("hid", map[string]any{"smbSettings": []string{"NON_BROWSABLE"}, "unixPermissions": "0777"})
	alice, bob := l.user("alice"), l.user("bob")

	src := filepath.Join(t.TempDir(), "f.txt")
	if err := os.WriteFile(src, []byte("only for alice\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, sh := range []smbShare{abe, open} {
		if o, err := l.shareTool(ctx, alice, "smbclient", unc(sh), "-m", "SMB3", "-c", "put "+src+" secret.txt; put "+src+" public.txt"); err != nil {
			t.Fatalf("alice writes in %s: %v\n%s", sh.Share, err, o)
		}
	}
	// alice alone may read secret.txt: mode 0600 on the server (alice's uid owns
	// it, and with no NT ACL stored acl_xattr derives the ACL from the mode).
	// Setting an NT ACL over SMB (smbcacls --set) is refused today: smbd cannot
	// write the security.NTACL xattr without CAP_SYS_ADMIN.
	secrets, _ := filepath.Glob(filepath.Join(l.s.dataDir, "mounts", "*", "secret.txt"))
	if len(secrets) != 2 {
		t.Fatalf("secret.txt on the server: %v, want one in each of 2 volumes", secrets)
	}
	for _, f := range secrets {
		if err := os.Chmod(f, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, sh := range []smbShare{abe, open} {
		dst := filepath.Join(t.TempDir(), "x")
		if o, err := l.shareTool(ctx, bob, "smbclient", unc(sh), "-m", "SMB3", "-c", "get secret.txt "+dst); err == nil ||
			!strings.Contains(o, "NT_STATUS_ACCESS_DENIED") {
			t.Fatalf("bob reads %s/secret.txt: err %v, want NT_STATUS_ACCESS_DENIED:\n%s", sh.Share, err, o)
		}
		if o, err := l.shareTool(ctx, alice, "smbclient", unc(sh), "-m", "SMB3", "-c", "get secret.txt "+dst); err != nil {
			t.Fatalf("alice reads %s/secret.txt: %v\n%s", sh.Share, err, o)
		}
	}
	for _, c := range []struct {
		sh         smbShare
		u          addc.User
		wantSecret bool
	}{
		{abe, alice, true},
		{abe, bob, false},
		{open, alice, true},
		{open, bob, true},
	} {
		o, err := l.shareTool(ctx, c.u, "smbclient", unc(c.sh), "-m", "SMB3", "-c", "ls")
		if err != nil {
			t.Fatalf("%s lists %s: %v\n%s", c.u.Name, c.sh.Share, err, o)
		}
		if !listed(o, "public.txt") || listed(o, "secret.txt") != c.wantSecret {
			t.Errorf("%s lists %s: secret.txt listed %v (want %v), public.txt listed %v (want true):\n%s",
				c.u.Name, c.sh.Share, listed(o, "secret.txt"), c.wantSecret, listed(o, "public.txt"), o)
		}
	}

	// The share list (srvsvc NetShareEnumAll) from any of the instance's endpoints.
	for _, u := range []addc.User{alice, bob} {
		o, err := l.shareTool(ctx, u, "smbclient", "-L", "//"+hid.Endpoint.String(), "-g", "-m", "SMB3")
		if err != nil {
			t.Fatalf("%s lists shares: %v\n%s", u.Name, err, o)
		}
		t.Logf("smbclient -L -g as %s:\n%s", u.Name, o)
		for share, want := range map[string]bool{open.Share: true, abe.Share: true, hid.Share: false} {
			if got := regexp.MustCompile(`(?m)^Disk\|` + share + `\|`).MatchString(o); got != want {
				t.Errorf("%s lists shares: %s listed %v, want %v:\n%s", u.Name, share, got, want, o)
			}
		}
	}
	if o, err := l.shareTool(ctx, bob, "smbclient", unc(hid), "-m", "SMB3", "-c", "put "+src+" f.txt; ls"); err != nil || !listed(o, "f.txt") {
		t.Fatalf("bob in the hidden share by name: %v\n%s", err, o)
	}
}

// TestSMBShareSmbtorture runs Samba's own protocol tests against Basin shares:
// multichannel (channels bound to one session) on a share of default settings,
// durable handles (open, disconnect, reopen on a new connection) on a
// CONTINUOUSLY_AVAILABLE one.
func TestSMBShareSmbtorture(t *testing.T) {
	if _, err := exec.LookPath("smbtorture"); err != nil {
		t.Skip("no smbtorture (Debian package samba-testsuite; scripts/setup.sh --test installs it)")
	}
	l := newSMBLab(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	mc := l.volume("mc", map[string]any{"unixPermissions": "0777"})
	ca := l.volume("ca", map[string]any{"smbSettings": []string{"CONTINUOUSLY_AVAILABLE"}, "unixPermissions": "0777"})
	nool := l.volume("nool", map[string]any{"smbSettings": []string{"BROWSABLE"}, "unixPermissions": "0777"})
	alice := l.user("alice")
	// Two connections of one user are two smbd processes, which learn of each
	// other's opens through the instance's lock directory: a file held open
	// without FILE_SHARE_DELETE on one may not be deleted from the other.
	t.Run("share modes across connections", func(t *testing.T) {
		held := l.mount(ctx, mc, alice, mc.Share)
		f, err := held.OpenFile("held.txt", os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		other := l.mount(ctx, mc, alice, mc.Share)
		err = other.Remove("held.txt")
		var re *smb2.ResponseError
		if !errors.As(err, &re) || re.Code != 0xc0000043 { // STATUS_SHARING_VIOLATION
			t.Fatalf("delete from a second connection while the first holds the file open: %v, want a sharing violation", err)
		}
		if _, err := held.Stat("held.txt"); err != nil {
			t.Fatalf("the held file after the refused delete: %v", err)
		}
	})
	// A client names itself (its NTLM workstation name): Samba's usual
	// log.%m would make a file per name. The instance's logs are per daemon.
	t.Run("client-chosen names make no log files", func(t *testing.T) {
		before := l.sambaLogs()
		for i := range 20 {
			d := &smb2.Dialer{Initiator: &smb2.NTLMInitiator{User: alice.Name, Password: alice.Password, Domain: l.dc.Domain,
				Workstation: fmt.Sprintf("EVIL%02d", i)}}
			sess, err := l.dial(ctx, mc, d)
			if err != nil {
				t.Fatalf("session as workstation EVIL%02d: %v", i, err)
			}
			sess.Logoff()
		}
		for f := range l.sambaLogs() {
			if _, ok := before[f]; !ok {
				t.Errorf("a new log file %s after sessions with 20 workstation names", f)
			}
		}
	})
	// smbtorture reads a client smb.conf; an empty [global] keeps the host's out.
	conf := filepath.Join(t.TempDir(), "client.conf")
	if err := os.WriteFile(conf, []byte("[global]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		sh   smbShare
		test string
		pass bool
		// want are patterns the output must match, each at least as many times.
		want map[string]int
	}{
		// Samba binds up to 32 channels to a session.
		{"multichannel", mc, "smb2.multichannel.generic.num_channels", true,
			map[string]int{`(?m)^established transport2 \[#\d+\]$`: 32, `(?m)^bound session2 \[#\d+\] to session2 \[0\]$`: 32}},
		{"session bind", mc, "smb2.session.bind1", true, nil},
		{"durable v2 reopen", ca, "smb2.durable-v2-open.reopen1a", true, nil},
		{"durable reopen", ca, "smb2.durable-open.reopen1a", true, nil},
		// A durable handle rides on a batch oplock: a share without oplocks
		// grants none (why CONTINUOUSLY_AVAILABLE brings oplocks).
		{"no durable handle without oplocks", nool, "smb2.durable-open.reopen1a", false, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, err := l.shareTool(ctx, alice, "smbtorture", "-s", conf, unc(c.sh), c.test)
			t.Logf("smbtorture %s on %s: %v\n%s", c.test, c.sh.Share, err, o)
			last := c.test[strings.LastIndexByte(c.test, '.')+1:]
			ok := err == nil && regexp.MustCompile(`(?m)^success: `+regexp.QuoteMeta(last)+`$`).MatchString(o) &&
				!regexp.MustCompile(`(?m)^(failure|error): `).MatchString(o)
			if ok != c.pass {
				t.Fatalf("smbtorture %s on %s: passed %v, want %v", c.test, c.sh.Share, ok, c.pass)
			}
			for re, min := range c.want {
				if n := len(regexp.MustCompile(re).FindAllString(o, -1)); n < min {
					t.Errorf("smbtorture %s: %d lines match %s, want at least %d", c.test, n, re, min)
				}
			}
		})
	}
}

// sambaLogs is the set of the lab's Samba log files (log/ and var/log/samba/ of
// every instance).
func (l *smbLab) sambaLogs() map[string]bool {
	out := map[string]bool{}
	for _, glob := range []string{"log/*", "var/log/samba/*"} {
		files, _ := filepath.Glob(filepath.Join(l.s.dataDir, "sandboxes", "*", "smb", "*", glob))
		for _, f := range files {
			out[f] = true
		}
	}
	return out
}

// unc is the share's //endpoint/share for Samba's tools.
func unc(sh smbShare) string { return "//" + sh.Endpoint.String() + "/" + sh.Share }

// shareTool runs a Samba client tool (smbclient, smbcacls, smbtorture) on the
// client host as u, NTLM only: -U DOMAIN\user with the password on a pipe
// (PASSWD_FD), never in argv or the environment.
func (l *smbLab) shareTool(ctx context.Context, u addc.User, name string, args ...string) (string, error) {
	r, err := smb.PasswordPipe(u.Password)
	if err != nil {
		return "", err
	}
	defer r.Close()
	cmd := l.h.Command(ctx, name, append(args, "--use-kerberos=off", "-U", l.dc.Domain+`\`+u.Name)...)
	cmd.ExtraFiles = []*os.File{r}
	cmd.Env = append(os.Environ(), smb.PasswordEnv)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// listed reports whether smbclient's ls output names file.
func listed(out, file string) bool {
	return regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(file) + `\s+[A-Z]*\s+\d+\s`).MatchString(out)
}

// smbstatus runs smbstatus with args inside the lab's Samba instance: in the
// mount and network namespaces of its smbd, with the instance's smb.conf
// (<data dir>/sandboxes/<network>/smb/<id>/smb.conf).
func (l *smbLab) smbstatus(ctx context.Context, args ...string) (string, error) {
	confs, err := filepath.Glob(filepath.Join(l.s.dataDir, "sandboxes", "*", "smb", "*", "smb.conf"))
	if err != nil || len(confs) != 1 {
		return "", fmt.Errorf("want one Samba instance, found configurations %v (%v)", confs, err)
	}
	_, mains := daemonPIDs(confs[0], "smbd")
	if len(mains) == 0 {
		return "", fmt.Errorf("no smbd runs with %s", confs[0])
	}
	argv := append([]string{"-t", strconv.Itoa(mains[0]), "-m", "-n", "--", "smbstatus", "-s", confs[0]}, args...)
	out, err := exec.CommandContext(ctx, "nsenter", argv...).CombinedOutput()
	return string(out), err
}

// tconEncryption returns the Encryption column of the share's rows in
// `smbstatus -S` output (Service, pid, Machine, Connected at…, Encryption,
// Signing).
func tconEncryption(out, share string) []string {
	var enc []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || f[0] != share {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err == nil {
			enc = append(enc, f[len(f)-2])
		}
	}
	return enc
}
