package jsonline

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// The test binary is its own helper when BASIN_JSONLINE_HELPER is set: it
// answers each request {"n": N} with {"n": N, "pid": its pid}; {"die": true}
// exits without an answer, {"sleep": ms} sleeps first; "notready" in the
// variable makes it say it is not ready, "dieonce" makes it die on its first
// request if the file the variable names after it does not exist yet.
func TestMain(m *testing.M) {
	if mode, ok := os.LookupEnv("BASIN_JSONLINE_HELPER"); ok {
		helper(mode)
		return
	}
	os.Exit(m.Run())
}

func helper(mode string) {
	if mode == "notready" {
		fmt.Fprintln(os.Stderr, "cannot connect")
		fmt.Println(`{"ready": false}`)
		os.Exit(1)
	}
	fmt.Println(`{"ready": true}`)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var req struct {
			N     int  `json:"n"`
			Die   bool `json:"die"`
			Sleep int  `json:"sleep"`
		}
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			os.Exit(2)
		}
		if req.Die {
			fmt.Fprintln(os.Stderr, "helper says: dying")
			os.Exit(3)
		}
		if f, ok := strings.CutPrefix(mode, "dieonce:"); ok {
			if _, err := os.Stat(f); err != nil {
				os.WriteFile(f, nil, 0o600) //nolint:errcheck
				os.Exit(3)
			}
		}
		time.Sleep(time.Duration(req.Sleep) * time.Millisecond)
		fmt.Printf("{\"n\": %d, \"pid\": %d}\n", req.N, os.Getpid())
	}
}

type answer struct {
	N, Pid int
}

func newHelper(t *testing.T, mode string) *Helper {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := &Helper{Name: "test helper", Argv: []string{"/usr/bin/env", "BASIN_JSONLINE_HELPER=" + mode, exe}}
	t.Cleanup(h.Close)
	return h
}

// Requests go to one process, in order, each answered by its own line.
func TestCallKeepsOneProcess(t *testing.T) {
	h := newHelper(t, "")
	ctx := context.Background()
	pid := 0
	for n := range 20 {
		var a answer
		if err := h.Call(ctx, map[string]int{"n": n}, &a); err != nil {
			t.Fatal(err)
		}
		if a.N != n {
			t.Fatalf("request %d answered as %d", n, a.N)
		}
		if pid == 0 {
			pid = a.Pid
		} else if a.Pid != pid {
			t.Fatalf("request %d went to process %d, the others to %d", n, a.Pid, pid)
		}
	}
}

// A helper killed between calls is replaced by the next call; one that dies
// under a call has the call sent once more, to a new process.
func TestCallRestartsTheHelper(t *testing.T) {
	h := newHelper(t, "dieonce:"+t.TempDir()+"/died")
	ctx := context.Background()
	var a answer
	if err := h.Call(ctx, map[string]int{"n": 1}, &a); err != nil || a.N != 1 {
		t.Fatalf("a call whose helper died under it: %+v, %v", a, err)
	}
	first := a.Pid
	h.Kill()
	if err := h.Call(ctx, map[string]int{"n": 2}, &a); err != nil || a.N != 2 {
		t.Fatalf("after the helper was killed: %+v, %v", a, err)
	}
	if a.Pid == first {
		t.Fatalf("answered by the killed process %d", first)
	}
	// A request that kills every helper it meets fails, after one retry,
	// saying what the helper said (once).
	if err := h.Call(ctx, map[string]bool{"die": true}, &a); err == nil || strings.Count(err.Error(), "helper says: dying") != 1 {
		t.Fatalf("a request that no helper answers: %v", err)
	}
	if err := h.Call(ctx, map[string]int{"n": 3}, &a); err != nil || a.N != 3 {
		t.Fatalf("after a failed call: %+v, %v", a, err)
	}
}

// A call cut short by its context returns at once and stops the helper,
// whose late answer can then not be taken for the next call's.
func TestCallCutShort(t *testing.T) {
	h := newHelper(t, "")
	ctx := context.Background()
	var a answer
	if err := h.Call(ctx, map[string]int{"n": 1}, &a); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := h.Call(short, map[string]int{"n": 2, "sleep": 60000}, &a); err == nil {
		t.Fatal("a call ran past its deadline")
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("a cut-short call returned after %v", d)
	}
	if err := h.Call(ctx, map[string]int{"n": 3}, &a); err != nil || a.N != 3 {
		t.Fatalf("after a cut-short call: %+v, %v", a, err)
	}
}

// A helper that cannot get ready is an error carrying what it said.
func TestCallNotReady(t *testing.T) {
	h := newHelper(t, "notready")
	var a answer
	err := h.Call(context.Background(), map[string]int{"n": 1}, &a)
	if err == nil || !strings.Contains(err.Error(), "cannot connect") || !strings.Contains(err.Error(), "test helper") {
		t.Fatalf("a helper that is not ready: %v", err)
	}
}
