package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/test/addc"
)

// addcAdmin is the DC's Administrator, the lab policy's administrator.
func addcAdmin(l *smbLab) addc.User {
	return addc.User{Name: l.dc.AdminUser, Password: l.dc.AdminPassword}
}

// TestSMBActiveDirectory: a real Samba AD DC beside a Basin server; an Active
// Directory policy created through the v1 API with the DC's delegated user and
// the domain's Administrator among its administrators; a pool using it; an SMB
// volume. The volume's mount options name its server (PREFIX-XXXX.realm), whose
// computer object is in the policy's OU and whose name resolves through the AD's
// DNS to the volume's endpoint. From a client host, with smbclient and go-smb2,
// NTLM and Kerberos: a domain user writes and reads back the same bytes, a wrong
// password is refused; once the administrator has narrowed the share root's ACL
// to the group shareusers, alice (a member) still reads and writes and bob (not
// one) is refused. Deleting the volume and the pool leaves the domain.
func TestSMBActiveDirectory(t *testing.T) {
	l := newSMBLab(t, map[string]any{"administrators": []string{"Administrator"}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sh := l.volume("docs", nil)

	// The computer object is in the policy's OU, and the server's name resolves
	// through the AD's DNS to the volume's endpoint.
	if ou, ok, err := l.dc.ComputerExists(ctx, sh.Machine); err != nil || !ok || !strings.EqualFold(ou, l.dc.OU) {
		t.Fatalf("computer %s: in %q, found %v, err %v; want it in %s", sh.Machine, ou, ok, err, l.dc.OU)
	}
	if addrs, err := l.dc.LookupA(ctx, sh.Server); err != nil || !slices.Contains(addrs, sh.Endpoint.String()) {
		t.Fatalf("%s resolves to %v (%v), want %s", sh.Server, addrs, err, sh.Endpoint)
	}

	// A domain user writes and reads back the same bytes; a wrong password is refused.
	dir := t.TempDir()
	data := make([]byte, 3<<20+12345)
	rand.Read(data)
	in, out := filepath.Join(dir, "in.bin"), filepath.Join(dir, "out.bin")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	alice := l.user("alice")
	if o, err := l.smbclient(ctx, sh, alice, "-m", "SMB3", "-c", "put "+in+" f.bin; get f.bin "+out); err != nil {
		t.Fatalf("smbclient as %s: %v\n%s", alice.Name, err, o)
	}
	got, err := os.ReadFile(out)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes (%v), want the %d written", len(got), err, len(data))
	}
	wrong := alice
	wrong.Password = "not-" + alice.Password
	if o, err := l.smbclient(ctx, sh, wrong, "-m", "SMB3", "-c", "ls"); err == nil || !strings.Contains(o, "LOGON_FAILURE") {
		t.Fatalf("a wrong password: %v\n%s", err, o)
	}

	// go-smb2, NTLM and Kerberos: the same bytes back.
	alice2 := []byte("alice over go-smb2 " + sh.Machine)
	for _, krb := range []bool{false, true} {
		dial, how := l.dialNTLM, "ntlm"
		if krb {
			dial, how = l.dialKrb5, "kerberos"
		}
		sess, err := dial(ctx, sh, alice)
		if err != nil {
			t.Fatalf("go-smb2 %s as alice: %v", how, err)
		}
		fs, err := sess.Mount(sh.Share)
		if err != nil {
			t.Fatalf("go-smb2 %s: mount: %v", how, err)
		}
		name := "go-" + how + ".txt"
		if err := fs.WriteFile(name, alice2, 0o644); err != nil {
			t.Fatalf("go-smb2 %s: write: %v", how, err)
		}
		if b, err := fs.ReadFile("f.bin"); err != nil || !bytes.Equal(b, data) {
			t.Fatalf("go-smb2 %s: read f.bin: %d bytes (%v), want the %d written by smbclient", how, len(b), err, len(data))
		}
		fs.Umount()
		sess.Logoff()
	}
	// smbclient with Kerberos reads what go-smb2 wrote.
	if o, err := l.smbclientKrb5(ctx, sh, alice, "-m", "SMB3", "-c", "get go-kerberos.txt "+out); err != nil {
		t.Fatalf("smbclient kerberos as alice: %v\n%s", err, o)
	}
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, alice2) {
		t.Fatalf("smbclient kerberos read %q (%v), want %q", got, err, alice2)
	}

	// Before any ACL, the root is open to every domain user (Everyone).
	bob := l.user("bob")
	if o, err := l.smbclient(ctx, sh, bob, "-m", "SMB3", "-c", "ls"); err != nil || !strings.Contains(o, "f.bin") {
		t.Fatalf("bob lists the share before its ACL is narrowed: %v\n%s", err, o)
	}
	// The policy's administrator narrows the root's ACL to shareusers (and
	// Administrators), as on Windows: take ownership, then set the DACL.
	admin := addcAdmin(l)
	root := `\`
	for _, args := range [][]string{
		{"-C", l.dc.Domain + `\` + admin.Name},
		{"--set", `ACL:BUILTIN\Administrators:ALLOWED/OI|CI/FULL,ACL:` + l.dc.Domain + `\shareusers:ALLOWED/OI|CI/FULL`},
	} {
		argv := append([]string{"//" + sh.Endpoint.String() + "/" + sh.Share, root, "-U", l.dc.Domain + `\` + admin.Name + "%" + admin.Password}, args...)
		// smbcacls exits 2 when the server's LSA could not look the names up.
		// Right after an instance starts that failed in about one CI run in
		// two (cause not found yet): it is retried for 10 s, and said.
		var o string
		var err error
		for try, end := 1, time.Now().Add(10*time.Second); ; try++ {
			o, err = l.h.Run(ctx, "smbcacls", argv...)
			var ee *exec.ExitError
			if err == nil || !errors.As(err, &ee) || ee.ExitCode() != 2 || time.Now().After(end) {
				if try > 1 {
					t.Logf("smbcacls %v: the server looked the names up at try %d", args[0], try)
				}
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("smbcacls %v as %s: %v\n%s", args[0], admin.Name, err, o)
		}
	}
	if o, err := l.h.Run(ctx, "smbcacls", "//"+sh.Endpoint.String()+"/"+sh.Share, root, "-U", l.dc.Domain+`\`+admin.Name+"%"+admin.Password); err != nil ||
		strings.Contains(o, "Everyone") || !strings.Contains(strings.ToLower(o), "shareusers") {
		t.Fatalf("the root's ACL after the change: %v\n%s", err, o)
	}
	// alice (in shareusers) still reads and writes, with either client.
	if o, err := l.smbclient(ctx, sh, alice, "-m", "SMB3", "-c", "put "+in+" g.bin; get go-ntlm.txt "+out); err != nil {
		t.Fatalf("alice after the ACL: %v\n%s", err, o)
	}
	sess, err := l.dialKrb5(ctx, sh, alice)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := sess.Mount(sh.Share)
	if err != nil {
		t.Fatalf("alice mounts after the ACL: %v", err)
	}
	if b, err := fs.ReadFile("g.bin"); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("alice reads g.bin after the ACL: %d bytes (%v)", len(b), err)
	}
	fs.Umount()
	sess.Logoff()
	// bob (not in it) is refused: listing, reading and writing.
	for _, cmd := range []string{"ls", "get f.bin " + out, "put " + in + " bob.bin"} {
		if o, err := l.smbclient(ctx, sh, bob, "-m", "SMB3", "-c", cmd); err == nil || !strings.Contains(o, "ACCESS_DENIED") {
			t.Fatalf("bob %q after the ACL: %v\n%s", cmd, err, o)
		}
	}
	if sess, err := l.dialNTLM(ctx, sh, bob); err != nil {
		t.Fatal(err)
	} else {
		fs, err := sess.Mount(sh.Share)
		if err == nil {
			_, err = fs.ReadFile("f.bin")
			if err == nil {
				t.Fatal("bob read f.bin through go-smb2 after the ACL")
			}
			fs.Umount()
		}
		sess.Logoff()
	}

	// The last pool's removal leaves the domain.
	mutate(t, l.c, "DELETE", loc+"/volumes/docs", nil)
	mutate(t, l.c, "DELETE", loc+"/storagePools/smb", nil)
	if _, ok, err := l.dc.ComputerExists(ctx, sh.Machine); err != nil || ok {
		t.Fatalf("computer %s still in the domain after the last pool went (err %v)", sh.Machine, err)
	}
}

// TestSMBPreviousVersions: on a SHOW_PREVIOUS_VERSIONS share, after two snapshots
// taken through the API, smbclient's allinfo lists both versions by their
// creation time and `get @GMT-…\file` returns each snapshot's content while the
// live file holds the newest; a deleted snapshot leaves the list.
func TestSMBPreviousVersions(t *testing.T) {
	l := newSMBLab(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sh := l.volume("pv", map[string]any{"smbSettings": []string{"SHOW_PREVIOUS_VERSIONS", "BROWSABLE"}})
	alice := l.user("alice")
	dir := t.TempDir()
	put := func(content string) {
		t.Helper()
		f := filepath.Join(dir, "hello.txt")
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if o, err := l.smbclient(ctx, sh, alice, "-m", "SMB3", "-c", "put "+f+" hello.txt"); err != nil {
			t.Fatalf("put %q: %v\n%s", content, err, o)
		}
	}
	get := func(path string) string {
		t.Helper()
		out := filepath.Join(dir, "out.txt")
		os.Remove(out)
		if o, err := l.smbclient(ctx, sh, alice, "-m", "SMB3", "-c", `get "`+path+`" `+out); err != nil {
			t.Fatalf("get %s: %v\n%s", path, err, o)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var gmts []string
	for i, content := range []string{"v1-content", "v2-content"} {
		put(content)
		id := fmt.Sprintf("s%d", i+1)
		mutate(t, l.c, "POST", loc+"/volumes/pv/snapshots?snapshotId="+id, map[string]any{})
		var snap client.Object
		if err := l.c.Do(ctx, "GET", loc+"/volumes/pv/snapshots/"+id, nil, nil, &snap); err != nil {
			t.Fatal(err)
		}
		created, err := time.Parse(time.RFC3339Nano, fmt.Sprint(snap["createTime"]))
		if err != nil {
			t.Fatalf("snapshot %s createTime %v: %v", id, snap["createTime"], err)
		}
		gmts = append(gmts, created.UTC().Format("@GMT-2006.01.02-15.04.05"))
		if i == 0 {
			time.Sleep(1100 * time.Millisecond) // versions are told apart by the second
		}
	}
	put("v3-content")

	o, err := l.smbclient(ctx, sh, alice, "-m", "SMB3", "-c", "allinfo hello.txt")
	if err != nil {
		t.Fatalf("allinfo: %v\n%s", err, o)
	}
	for _, g := range gmts {
		if !strings.Contains(o, g) {
			t.Fatalf("allinfo does not list %s:\n%s", g, o)
		}
	}
	if got := get(gmts[0] + `\hello.txt`); got != "v1-content" {
		t.Fatalf("%s\\hello.txt = %q, want v1-content", gmts[0], got)
	}
	if got := get(gmts[1] + `\hello.txt`); got != "v2-content" {
		t.Fatalf("%s\\hello.txt = %q, want v2-content", gmts[1], got)
	}
	if got := get("hello.txt"); got != "v3-content" {
		t.Fatalf("hello.txt = %q, want v3-content", got)
	}
	// A previous version is read-only.
	f := filepath.Join(dir, "hello.txt")
	if o, err := l.smbclient(ctx, sh, alice, "-m", "SMB3", "-c", `put `+f+` "`+gmts[0]+`\new.txt"`); err == nil && !strings.Contains(o, "NT_STATUS_") {
		t.Fatalf("wrote into a previous version:\n%s", o)
	}

	mutate(t, l.c, "DELETE", loc+"/volumes/pv/snapshots/s1", nil)
	o, err = l.smbclient(ctx, sh, alice, "-m", "SMB3", "-c", "allinfo hello.txt")
	if err != nil || strings.Contains(o, gmts[0]) || !strings.Contains(o, gmts[1]) {
		t.Fatalf("allinfo after deleting s1 (%v): want only %s:\n%s", err, gmts[1], o)
	}
}

// TestSMBDirectoryPolicy: storagePools:validateDirectoryService through the v1 API
// against the real DC — Empty for the lab's policy (site Branch); the domain's
// reason in plain words for a wrong password and for a user without rights on the
// OU, nothing joined and the pool untouched. A policy in use takes a new
// aesEncryption live: the machine account becomes AES-only while the same smbd
// keeps serving, and a Kerberos logon still works; a new OU is refused.
func TestSMBDirectoryPolicy(t *testing.T) {
	l := newSMBLab(t, map[string]any{"site": addc.SiteName})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	validate := func() error {
		t.Helper()
		var op client.Object
		if err := l.c.Do(ctx, "POST", loc+"/storagePools/smb:validateDirectoryService", nil, map[string]any{"directoryServiceType": "ACTIVE_DIRECTORY"}, &op); err != nil {
			t.Fatal(err)
		}
		done, err := l.c.Wait(ctx, op)
		if meta, _ := done["metadata"].(map[string]any); meta["verb"] != "validateDirectoryService" {
			t.Errorf("operation metadata %v", done["metadata"])
		}
		return err
	}
	if err := validate(); err != nil {
		t.Fatalf("validating the lab's policy: %v", err)
	}
	patch := func(mask string, body map[string]any) {
		t.Helper()
		mutate(t, l.c, "PATCH", loc+"/activeDirectories/ad1?updateMask="+mask, body)
	}
	alice := l.user("alice")
	for _, c := range []struct {
		user, password, want string
	}{
		{l.dc.Delegated.Name, "Not-" + l.dc.Delegated.Password, "the AD user name or password is wrong"},
		{alice.Name, alice.Password, "the AD user may not create computer accounts there (" + l.dc.OU + ")"},
	} {
		patch("username,password", map[string]any{"username": c.user, "password": c.password})
		err := validate()
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), c.password) {
			t.Errorf("validating as %s: %v; want %q (and no password)", c.user, err, c.want)
		}
	}
	patch("username,password", map[string]any{"username": l.dc.Delegated.Name, "password": l.dc.Delegated.Password})
	var pool client.Object
	if err := l.c.Do(ctx, "GET", loc+"/storagePools/smb", nil, nil, &pool); err != nil || pool["state"] != "READY" {
		t.Fatalf("pool after the validations: %v (%v)", pool["state"], err)
	}
	if _, ok, _ := l.dc.ComputerExists(ctx, "BASIN-CHECK"); ok {
		t.Fatal("a validation left a computer object")
	}

	// aesEncryption, live.
	sh := l.volume("docs", nil)
	_, before := daemonPIDs(l.s.dataDir, "smbd")
	enctypes := func() string {
		t.Helper()
		out, err := l.dc.Exec(ctx, "ldbsearch", "-H", filepath.Join(l.dc.Dir, "state", "private", "sam.ldb"), "-b", l.dc.BaseDN,
			"(sAMAccountName="+sh.Machine+"$)", "msDS-SupportedEncryptionTypes")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(line, "msDS-SupportedEncryptionTypes: "); ok {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	if e := enctypes(); e == "24" {
		t.Fatalf("enctypes %s before aesEncryption", e)
	}
	patch("aesEncryption", map[string]any{"aesEncryption": true})
	if e := enctypes(); e != "24" {
		t.Fatalf("machine account enctypes %q after aesEncryption, want 24 (AES only)", e)
	}
	if _, after := daemonPIDs(l.s.dataDir, "smbd"); !slices.Equal(before, after) || len(after) != 1 {
		t.Errorf("smbd %v, was %v: the update restarted it", after, before)
	}
	if o, err := l.smbclientKrb5(ctx, sh, alice, "-m", "SMB3", "-c", "ls"); err != nil {
		t.Fatalf("a Kerberos logon after aesEncryption: %v\n%s", err, o)
	}
	var op client.Object
	err := l.c.Do(ctx, "PATCH", loc+"/activeDirectories/ad1?updateMask=organizationalUnit", nil, map[string]any{"organizationalUnit": "OU=Elsewhere," + l.dc.BaseDN}, &op)
	if err == nil || !strings.Contains(err.Error(), "organizationalUnit cannot change") {
		t.Fatalf("a new OU for a policy in use: %v", err)
	}
}
