package smb

import (
	"bytes"
	"crypto/rand"
	"regexp"
	"testing"
)

func TestMachineName(t *testing.T) {
	for _, tc := range []struct {
		name, prefix string
		rnd          []byte
		want         string
	}{
		{"lower case prefix", "basin", []byte{0x3f, 0x2a}, "BASIN-3F2A"},
		{"ten characters", "basinpre10", []byte{0xab, 0xcd}, "BASINPRE10-ABCD"},
		{"one character", "x", []byte{0, 1}, "X-0001"},
		{"hyphen and digits", "nas-01", []byte{0xff, 0xff}, "NAS-01-FFFF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MachineName(tc.prefix, bytes.NewReader(tc.rnd))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("MachineName(%q) = %q, want %q", tc.prefix, got, tc.want)
			}
			if len(got) > MaxNetBIOSName {
				t.Fatalf("%q is longer than %d", got, MaxNetBIOSName)
			}
			if err := validateMachineName("machineName", got); err != nil {
				t.Fatalf("its own name refused: %v", err)
			}
		})
	}
}

func TestMachineNameRandom(t *testing.T) {
	re := regexp.MustCompile(`^BASIN-[0-9A-F]{4}$`)
	seen := map[string]bool{}
	for range 20 {
		n, err := MachineName("basin", rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		if !re.MatchString(n) {
			t.Fatalf("%q", n)
		}
		seen[n] = true
	}
	if len(seen) < 2 {
		t.Fatalf("20 names from crypto/rand were all %v", seen)
	}
}

func TestMachineNameShortRandom(t *testing.T) {
	if _, err := MachineName("basin", bytes.NewReader([]byte{1})); err == nil {
		t.Fatal("a 1-byte random source gave a name")
	}
}

func TestValidateNetBIOSPrefix(t *testing.T) {
	for _, tc := range []struct {
		name, prefix string
		ok           bool
	}{
		{"plain", "basin", true},
		{"ten", "abcdefghij", true},
		{"digits and letters", "1nas", true},
		{"inner hyphen", "a-b", true},
		{"empty", "", false},
		{"eleven", "abcdefghijk", false},
		{"leading hyphen", "-nas", false},
		{"all digits", "12345", false},
		{"underscore", "na_s", false},
		{"dot", "na.s", false},
		{"space", "na s", false},
		{"newline", "nas\n", false},
		{"non ascii", "näs", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateNetBIOSPrefix(tc.prefix)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantField(t, err, "netBiosPrefix")
			if _, err := MachineName(tc.prefix, rand.Reader); err == nil {
				t.Fatal("MachineName accepted it")
			}
		})
	}
}
