package api

import (
	"strings"
	"sync"
	"testing"
)

// stubHealth is the controller's health as the API sees it, set by the test.
type stubHealth struct {
	mu       sync.Mutex
	faults   map[string]string // storage key → words
	notReady string
}

func (h *stubHealth) VolumeFault(key string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.faults[key]
}

func (h *stubHealth) NotReady() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.notReady
}

func (h *stubHealth) set(key, words, notReady string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults = map[string]string{}
	if key != "" {
		h.faults[key] = words
	}
	h.notReady = notReady
}

// A volume whose storage failed is shown in ERROR with its words (in a get, a
// list and a filtered list), over what its record holds, and READY again when
// it is healthy; /readyz answers 503 with the reason meanwhile, /healthz 200.
func TestStorageFaultShowsAndUnreadies(t *testing.T) {
	health := &stubHealth{}
	e := newEnv(t, func(o *Options) { o.Ready = func() bool { return true }; o.Health = health })
	e.pool("pool1", 100, nil)
	e.volume("vol1", "pool1", 10, nil)
	e.volume("vol2", "pool1", 10, nil)
	key := e.volumeRecord("vol1").Key
	const words = "The volume's filesystem has turned read-only."
	health.set(key, words, "1 volume(s) in ERROR: storage read-only or reporting I/O errors")

	v := e.ok("GET", loc+"/volumes/vol1", nil)
	if v["state"] != "ERROR" || v["stateDetails"] != words {
		t.Fatalf("faulted volume: state %v, details %v", v["state"], v["stateDetails"])
	}
	if v := e.ok("GET", loc+"/volumes/vol2", nil); v["state"] != "READY" {
		t.Fatalf("healthy volume: %v", v["state"])
	}
	list := e.ok("GET", loc+"/volumes?filter=state%3DERROR", nil)
	vols, _ := list["volumes"].([]any)
	if len(vols) != 1 || !strings.HasSuffix(vols[0].(map[string]any)["name"].(string), "/vol1") {
		t.Fatalf("filter state=ERROR: %v", list)
	}
	if r := e.probe("/readyz"); r.status != 503 || r.raw != "not ready: 1 volume(s) in ERROR: storage read-only or reporting I/O errors\n" {
		t.Fatalf("readyz = %d %q", r.status, r.raw)
	}
	if r := e.probe("/healthz"); r.status != 200 {
		t.Fatalf("healthz = %d", r.status)
	}
	if rec := e.volumeRecord("vol1"); rec.State != "READY" {
		t.Fatalf("the record was changed: %s", rec.State)
	}

	health.set("", "", "")
	if v := e.ok("GET", loc+"/volumes/vol1", nil); v["state"] != "READY" || v["stateDetails"] != nil {
		t.Fatalf("repaired volume: state %v, details %v", v["state"], v["stateDetails"])
	}
	if r := e.probe("/readyz"); r.status != 200 {
		t.Fatalf("readyz after the repair = %d %q", r.status, r.raw)
	}
}

// While an operation runs on a volume, its state is the operation's, even if
// its storage failed.
func TestStorageFaultLeavesBusyStates(t *testing.T) {
	health := &stubHealth{}
	e := newEnv(t, func(o *Options) { o.Health = health })
	e.pool("pool1", 100, nil)
	e.volume("vol1", "pool1", 10, nil)
	v := e.volumeRecord("vol1")
	health.set(v.Key, "words", "x")
	v.State = "UPDATING"
	w := e.api.volumeToWire(v, nil)
	if w.State.String() != "UPDATING" {
		t.Fatalf("busy volume shown %v", w.State)
	}
}
