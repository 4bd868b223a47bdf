package daemon

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/basin-nas/basin/internal/storage/btrfs"
)

// storeReporter is what the store's metrics read (btrfs.Backend).
type storeReporter interface {
	StoreReport(ctx context.Context) (btrfs.StoreReport, error)
}

// storeCollector serves the node store's space on /metrics, read at each scrape:
// what pools may commit, what volumes were promised and given, what the store
// keeps, and basin_store_short_bytes, the early warning of thin provisioning (what
// volumes were promised beyond what the store can still give; 0 when every promise
// can be kept).
type storeCollector struct {
	store storeReporter
	descs map[string]*prometheus.Desc
}

func newStoreCollector(s storeReporter) *storeCollector {
	c := &storeCollector{store: s, descs: map[string]*prometheus.Desc{}}
	for name, help := range map[string]string{
		"size":        "Size of the node's store filesystem.",
		"usable":      "What storage pools may commit at an overcommit ratio of 1: the store less its own overhead, its metadata room and its reserve.",
		"free":        "Free space in the store filesystem.",
		"allocatable": "What volumes may still be given: free space less what the store keeps (metadata room, reserve, clones' copy-on-write debt).",
		"reserve":     "The store's reserve (--store-reserve): the headroom full volumes borrow to take snapshots.",
		"shared":      "Clones' copy-on-write debt: bytes of volume images shared with another, kept free for their rewrite.",
		"promised":    "Sum of the volumes' capacities.",
		"provisioned": "Sum of the sizes of the volumes' filesystems (less than promised only with thin provisioning).",
		"short":       "What thin-provisioned volumes were promised beyond what the store can still give them; above 0, some will refuse writes before their capacity.",
	} {
		c.descs[name] = prometheus.NewDesc("basin_store_"+name+"_bytes", help, nil, nil)
	}
	c.descs["thin"] = prometheus.NewDesc("basin_store_thin", "1 when volumes are thin-provisioned (--overcommit-ratio above 1).", nil, nil)
	return c
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	r, err := c.store.StoreReport(context.Background())
	if err != nil {
		return // nothing rather than wrong numbers; the log has the store's troubles
	}
	for name, v := range map[string]int64{"size": r.SizeBytes, "usable": r.UsableBytes, "free": r.FreeBytes, "allocatable": r.AllocatableBytes,
		"reserve": r.ReserveBytes, "shared": r.SharedBytes, "promised": r.PromisedBytes, "provisioned": r.ProvisionedBytes, "short": r.ShortBytes} {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.GaugeValue, float64(v))
	}
	thin := 0.0
	if r.Thin {
		thin = 1
	}
	ch <- prometheus.MustNewConstMetric(c.descs["thin"], prometheus.GaugeValue, thin)
}
