package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/secret"
	"github.com/basin-nas/basin/internal/store"
)

// forms returns s and the encodings it could hide in: base64 (standard and URL,
// at every alignment inside a longer encoded value) and hex.
func forms(s string) []string {
	out := []string{s, hex.EncodeToString([]byte(s)), strings.ToUpper(hex.EncodeToString([]byte(s)))}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		for pad := range 3 {
			e := enc.EncodeToString(append(bytes.Repeat([]byte{'x'}, pad), s...))
			// Drop the blocks the padding or the end of the value touch.
			out = append(out, e[4:len(e)-4])
		}
	}
	return out
}

// The AD password is stored sealed only: not in the database or its WAL, the audit
// log, the server log, an operation record or an API response, in any encoding;
// the sealed value opens to it, and only for its own resource.
func TestADPasswordSealedAtRest(t *testing.T) {
	box, err := secret.New(bytes.Repeat([]byte{42}, secret.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	logs, audit := &bytes.Buffer{}, &bytes.Buffer{}
	e := newEnv(t, func(o *Options) {
		o.Secrets = box
		o.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
		o.AuditLog = lockedWriter{&mu, audit}
	})
	const pw1, pw2 = "Zebra-Quokka-7731-Secret", "Walrus-Ibex-5520-Hidden"
	var answers []string
	call := func(method, path string, body any) map[string]any {
		t.Helper()
		r := e.do(method, path, body)
		answers = append(answers, r.raw)
		if r.status != 200 {
			t.Fatalf("%s %s: %d %s", method, path, r.status, r.raw)
		}
		if op, ok := r.body["name"].(string); ok && strings.Contains(op, "/operations/") {
			e.wait(r.body)
			answers = append(answers, e.do("GET", "/v1/"+op, nil).raw)
		}
		return r.body
	}
	ad := loc + "/activeDirectories/ad1"
	call("POST", loc+"/activeDirectories?activeDirectoryId=ad1", map[string]any{"domain": "corp.example.com", "dns": "10.0.0.2",
		"netBiosPrefix": "nas", "username": "admin", "password": pw1})
	call("PATCH", ad+"?updateMask=password", map[string]any{"password": pw2})
	call("PATCH", ad+"?updateMask=description", map[string]any{"description": "d"})
	call("PATCH", ad, map[string]any{"site": "s", "password": pw2})
	call("GET", ad, nil)
	call("GET", loc+"/activeDirectories", nil)
	call("GET", loc+"/operations", nil)
	e.pool("pool1", 10, map[string]any{"activeDirectory": "projects/p1/locations/us-east4/activeDirectories/ad1"})

	// The stored record holds only the sealed form, which opens to the last password
	// for this resource only, and not once tampered with.
	var rec *model.ActiveDirectory
	var ops [][]byte
	e.st.View(context.Background(), func(tx store.Tx) (err error) {
		if rec, err = store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, "projects/p1/locations/us-east4/activeDirectories/ad1"); err != nil {
			return err
		}
		ops, err = tx.List(store.KindOperation, "")
		return err
	})
	if got, err := box.Open(rec.PasswordSealed, rec.PasswordAAD()); err != nil || got != pw2 {
		t.Fatalf("stored password opens to %q, %v", got, err)
	}
	if _, err := box.Open(rec.PasswordSealed, "projects/p1/locations/us-east4/activeDirectories/ad2#password"); err == nil {
		t.Fatal("the sealed password opens for another resource")
	}
	tampered := []byte(rec.PasswordSealed)
	tampered[len(tampered)-3] ^= 1
	if _, err := box.Open(string(tampered), rec.PasswordAAD()); err == nil {
		t.Fatal("a tampered sealed password opened")
	}

	// Every operation record, with its Prev and Response decoded.
	var opText []string
	for _, raw := range ops {
		var op model.Operation
		json.Unmarshal(raw, &op)
		opText = append(opText, string(raw), string(op.Prev), string(op.Response))
	}
	db, _ := os.ReadFile(e.db)
	wal, _ := os.ReadFile(e.db + "-wal")
	if len(wal) == 0 {
		t.Fatal("no WAL to inspect")
	}
	mu.Lock()
	defer mu.Unlock()
	places := map[string]string{"database": string(db), "WAL": string(wal), "audit log": audit.String(), "server log": logs.String(),
		"operation records": strings.Join(opText, "\n"), "API answers": strings.Join(answers, "\n")}
	for where, text := range places {
		for _, pw := range []string{pw1, pw2} {
			for _, f := range forms(pw) {
				if strings.Contains(text, f) {
					t.Errorf("%s contain the password (as %q)", where, f)
				}
			}
		}
	}
	for _, a := range answers {
		if strings.Contains(a, "sealed:") || strings.Contains(a, "passwordSealed") || strings.Contains(a, `"password"`) {
			t.Errorf("an API answer carries the password field or its sealed form: %s", a)
		}
	}
}
