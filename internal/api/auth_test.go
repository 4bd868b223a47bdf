package api

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

func TestAuthentication(t *testing.T) {
	var st store.Store
	e := newEnv(t, func(o *Options) {
		st = o.Store
		o.Auth = iam.NewAuthenticator(iam.Options{Store: o.Store})
	})
	keyPath := filepath.Join(t.TempDir(), "key.json")
	if _, err := iam.BootstrapOwner(context.Background(), st, keyPath, "http://x/token", time.Now()); err != nil {
		t.Fatal(err)
	}
	// No token, a garbage token: 401 with a Bearer challenge, and nothing recorded.
	for _, tok := range []string{"", "garbage"} {
		e.token = tok
		r := e.fails("POST", loc+"/storagePools?storagePoolId=p1", map[string]any{"serviceLevel": 1, "capacityGib": "10",
			"network": "projects/p1/global/networks/default"}, 401, "UNAUTHENTICATED")
		if r.header.Get("WWW-Authenticate") == "" {
			t.Fatal("401 without WWW-Authenticate")
		}
	}
	var n int
	st.View(context.Background(), func(tx store.Tx) error {
		ops, _ := store.List[model.Operation](tx, store.KindOperation, "")
		pools, _ := store.List[model.Pool](tx, store.KindPool, "")
		n = len(ops) + len(pools)
		return nil
	})
	if n != 0 {
		t.Fatal("an unauthenticated request left a trace")
	}
	// The Go client signs with the key file and is let in.
	cl, err := client.New(e.srv.URL, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := cl.Do(context.Background(), "GET", "/v1/projects/p1/locations", nil, nil, &out); err != nil {
		t.Fatalf("signed request refused: %v", err)
	}
	// Health endpoints need no token.
	e.token = ""
	if r := e.probe("/healthz"); r.status != 200 {
		t.Fatalf("healthz = %d", r.status)
	}
	os.Remove(keyPath)
}
