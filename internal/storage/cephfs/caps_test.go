package cephfs

import (
	"os"
	"strings"
	"testing"
)

// The caps docs/operations.md tells operators to give Basin's user are
// Caps's, word for word.
func TestCapsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	mon, mgr := Caps("cephfs", "basin")
	rmon, rosd := NFSRecoveryCaps("basin-nfs", "basin")
	for _, c := range []string{"mon '" + mon + "'", "mgr '" + mgr + "'", "client.basin-ganesha mon '" + rmon + "' osd '" + rosd + "'"} {
		if !strings.Contains(string(doc), c) {
			t.Errorf("docs/operations.md does not give %s", c)
		}
	}
}
