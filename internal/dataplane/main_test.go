package dataplane

import (
	"os"
	"testing"

	"github.com/basin-nas/basin/test/addc"
)

// TestMain removes the AD DC templates the root tests' DCs were copied from.
func TestMain(m *testing.M) {
	code := m.Run()
	addc.RemoveTemplates()
	os.Exit(code)
}
