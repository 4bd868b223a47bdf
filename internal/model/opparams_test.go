package model

import (
	"encoding/json"
	"testing"
)

// Operations stored by an earlier Basin (params as a map of strings) resume with the
// same meaning; the current form round-trips.
func TestOpParamsVersions(t *testing.T) {
	var op Operation
	if err := json.Unmarshal([]byte(`{"id":"o","params":{"started":"1","swapped":"1","snapshot":"s1","sourceKey":"vk","sourceSnapshot":"s0"}}`), &op); err != nil {
		t.Fatal(err)
	}
	want := OpParams{Version: OpParamsVersion, SourceKey: "vk", SourceSnapshot: "s0", Snapshot: "s1", Started: true, Reverted: true}
	if op.Params != want {
		t.Fatalf("version 0 read as %+v, want %+v", op.Params, want)
	}
	b, err := json.Marshal(op)
	if err != nil {
		t.Fatal(err)
	}
	var back Operation
	if err := json.Unmarshal(b, &back); err != nil || back.Params != want {
		t.Fatalf("round trip: %+v, %v (%s)", back.Params, err, b)
	}
	var fresh Operation
	if err := json.Unmarshal([]byte(`{"id":"o"}`), &fresh); err != nil || fresh.Params != (OpParams{}) {
		t.Fatalf("no params: %+v, %v", fresh.Params, err)
	}
	if err := json.Unmarshal([]byte(`{"params":{"v":1,"started":"yes"}}`), &fresh); err == nil {
		t.Fatal("a malformed current form was accepted")
	}
}
