package dataplane

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestCephConfCacheBounds: the sandbox's ceph.conf keeps the cluster's
// settings and bounds each export's object cache, with readahead and dirty
// data inside it (readahead as large as the cache, Ceph's default, thrashed it:
// docs/benchmarks.md).
func TestCephConfCacheBounds(t *testing.T) {
	sb := &sandbox{dir: t.TempDir(), ceph: &CephLink{Conf: "[global]\n\tfsid = 3f0c\n\tmon_host = [v2:10.99.83.2:3300]\n"}}
	if err := sb.writeCephConf(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(sb.cephConfPath())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), sb.ceph.Conf) {
		t.Errorf("the cluster's settings are not kept:\n%s", data)
	}
	client := map[string]int64{}
	section := ""
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section != "[client]" {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			client[strings.TrimSpace(k)] = n
		}
	}
	size := client["client_oc_size"]
	if size == 0 || size > 64<<20 {
		t.Fatalf("client_oc_size %d: want a bound of at most 64 MiB per export", size)
	}
	for _, k := range []string{"client_readahead_max_bytes", "client_oc_max_dirty"} {
		if v, ok := client[k]; !ok || v == 0 || v > size/2 {
			t.Errorf("%s = %d (set: %v): want at most half the cache (%d)", k, v, ok, size/2)
		}
	}
	if d, m := client["client_oc_target_dirty"], client["client_oc_max_dirty"]; d == 0 || d > m {
		t.Errorf("client_oc_target_dirty %d above client_oc_max_dirty %d", d, m)
	}
}
