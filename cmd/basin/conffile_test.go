package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/config"
)

// writeConf writes a config file and returns its path.
func writeConf(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "basin.conf")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConfigFile(t *testing.T) {
	path := writeConf(t, `# a comment
   # an indented comment

data-dir = /srv/basin
listen=127.0.0.1:9000
metrics-listen = ""
sync-wait = 0s
qos = false
store-size = 100G
location = east
location = west
network = a=br-a,10.99.1.0/24
network = b=br-b,10.99.2.0/24,10.99.2.2-10.99.2.9
log-level = "debug"
`)
	cfg, err := serveConfig("basin serve", []string{"--config", path}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DataDir != "/srv/basin" || cfg.Listen != "127.0.0.1:9000" || cfg.MetricsListen != "" || cfg.SyncWait != 0 || cfg.QoS ||
		cfg.StoreSize != 100<<30 || cfg.LogLevel != "debug" {
		t.Errorf("settings not applied: %+v", cfg)
	}
	if !slices.Equal(cfg.Locations, []string{"east", "west"}) {
		t.Errorf("locations %v, want both lines", cfg.Locations)
	}
	if len(cfg.Networks) != 2 || cfg.Networks[0].Bridge != "br-a" || cfg.Networks[1].LastEndpoint.String() != "10.99.2.9" {
		t.Errorf("networks %+v, want both lines", cfg.Networks)
	}
	// What is not in the file keeps its default.
	if def := config.Default(); cfg.RateLimit != def.RateLimit || cfg.HTTP != def.HTTP {
		t.Errorf("defaults changed: %+v", cfg)
	}

	// The command line wins, wherever --config is on it; a repeatable flag
	// given there replaces the file's values instead of adding to them.
	cfg, err = serveConfig("basin serve", []string{"--listen", "127.0.0.1:9100", "--config=" + path, "--network", "c=br-c,10.99.3.0/24",
		"--qos=true", "--sync-wait", "5s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:9100" || !cfg.QoS || cfg.SyncWait != 5*time.Second || cfg.DataDir != "/srv/basin" {
		t.Errorf("command line did not win: %+v", cfg)
	}
	if len(cfg.Networks) != 1 || cfg.Networks[0].Name != "c" {
		t.Errorf("networks %+v, want the command line's only", cfg.Networks)
	}
	if !slices.Equal(cfg.Locations, []string{"east", "west"}) {
		t.Errorf("locations %v, want the file's", cfg.Locations)
	}
	// Two flags setting one field (store-reserve, store-reserve-gib): the
	// command line's wins whichever the file named.
	path = writeConf(t, "store-reserve = 2G\n")
	if cfg, err = serveConfig("basin serve", []string{"--config", path, "--store-reserve-gib", "3"}, io.Discard); err != nil || cfg.StoreReserve != 3<<30 {
		t.Errorf("store reserve %d, %v; want the command line's 3 GiB", cfg.StoreReserve, err)
	}
}

func TestConfigFileErrors(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    []string // in the error
	}{
		{"listen = :1\n\nlisten-addr = :2\n", []string{":3:", `unknown setting "listen-addr"`}},
		{"--listen = :2\n", []string{":1:", `unknown setting "--listen"`}},
		{"# fine\nrate-limit = lots\n", []string{":2:", "rate-limit", `"lots"`}},
		{"qos = maybe\n", []string{":1:", "qos", `"maybe"`}},
		{"store-size = 12X\n", []string{":1:", "store-size", "12X"}},
		{"location = a\nnetwork = nonsense\n", []string{":2:", "network", `"nonsense"`}},
		{"listen\n", []string{":1:", "name = value"}},
		{"= 1\n", []string{":1:", "name = value"}},
		{"listen = :1\nlisten = :2\n", []string{":2:", "listen", "line 1"}},
		{"config = /etc/other.conf\n", []string{":1:", "config cannot be set"}},
	} {
		path := writeConf(t, tc.content)
		_, err := serveConfig("basin serve", []string{"--config", path}, io.Discard)
		if err == nil {
			t.Errorf("%q: accepted", tc.content)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not say %q", tc.content, err, w)
			}
		}
		if !strings.Contains(err.Error(), path) {
			t.Errorf("%q: error %q does not name the file", tc.content, err)
		}
	}
	if _, err := serveConfig("basin serve", []string{"--config", "/nonexistent/basin.conf"}, io.Discard); err == nil || !strings.Contains(err.Error(), "/nonexistent/basin.conf") {
		t.Errorf("missing file: %v", err)
	}
}

// Every flag of basin serve may be set in a config file, by its name.
func TestConfigFileTakesEveryFlag(t *testing.T) {
	var cfg config.Config
	fs, _, _ := serveFlags(&cfg)
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == configFlag {
			return
		}
		var probe config.Config
		pfs, _, _ := serveFlags(&probe)
		err := applyConfig(pfs, "test.conf", strings.NewReader(f.Name+" = "+f.DefValue+"\n"))
		if err != nil && strings.Contains(err.Error(), "unknown setting") {
			t.Errorf("%s: %v", f.Name, err)
		}
	})
}

// The package's /etc/basin/basin.conf names every setting, each commented out
// at its default but ganesha-prefix, which names the package's Ganesha; read
// as it is, and with every documented default uncommented, it gives basin
// serve's defaults.
func TestPackagedConfigFile(t *testing.T) {
	const path = "../../packaging/deb/basin.conf"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	setting := regexp.MustCompile(`(?m)^(# )?([a-z][a-z0-9-]*) =( (.*))?$`)
	documented := map[string]bool{}
	uncommented := ""
	for _, m := range setting.FindAllStringSubmatch(string(data), -1) {
		documented[m[2]] = true
		if m[1] == "" && m[2] != "ganesha-prefix" {
			t.Errorf("%s is set, not commented out", m[2])
		}
		if m[4] != "" {
			uncommented += m[2] + " = " + m[4] + "\n"
		}
	}
	var cfg config.Config
	fs, _, _ := serveFlags(&cfg)
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != configFlag && !documented[f.Name] {
			t.Errorf("basin.conf does not document %s", f.Name)
		}
	})
	for name := range documented {
		if fs.Lookup(name) == nil {
			t.Errorf("basin.conf documents %s, which basin serve does not take", name)
		}
	}
	want := config.Default()
	want.GaneshaPrefix = config.PackagedGaneshaPrefix
	got, err := serveConfig("basin serve", []string{"--config", path}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("basin.conf as shipped gives\n%+v\nwant\n%+v", got, want)
	}
	got, err = serveConfig("basin serve", []string{"--config", writeConf(t, uncommented)}, io.Discard)
	if err != nil {
		t.Fatalf("basin.conf with its defaults uncommented: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("basin.conf's documented defaults give\n%+v\nwant\n%+v", got, want)
	}
}
