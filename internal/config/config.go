// Package config holds the configuration of `basin serve`: plain data with documented
// defaults and a Validate method. Flags are parsed in cmd/basin only.
package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/model"
)

// Config configures a Basin server.
type Config struct {
	// DataDir holds the database, the owner key, the store image and mount points.
	DataDir string
	// Listen is the HTTP listen address.
	Listen string
	// MetricsListen is the address of the Prometheus /metrics endpoint, a server of
	// its own without authentication (keep it on loopback or a monitoring
	// network); "" = none.
	MetricsListen string
	// GRPCListen is the address of the v1 API over gRPC (TLS, HTTP/2); "" =
	// none. It serves what Listen's REST API serves, on the same
	// authentication, permissions, audit and rate limits.
	GRPCListen string
	// GRPCCertFile and GRPCKeyFile are the gRPC listener's certificate (PEM,
	// the chain after the leaf) and key; both "" = a certificate Basin issues
	// itself from a CA of its own kept in DataDir (grpc-ca.pem is what clients
	// trust).
	GRPCCertFile, GRPCKeyFile string
	// Locations served (location IDs).
	Locations []string
	// Networks pools can use; each is a bridge and a subnet (default: one network
	// "default", bridge basin0, 10.99.0.0/24).
	Networks []Network
	// Store is an existing directory for volume images (best on btrfs or XFS, for
	// reflink clones); empty = a btrfs image file under DataDir.
	Store string
	// Storage selects the volumes' backend: "" or "btrfs" = btrfs (in Store);
	// a cephfs:// URL (ParseCephFS) = subvolumes of an existing CephFS.
	// Normalize accepts the URL as Store too (--store cephfs://…).
	Storage string
	// CephNetwork is how the NFS sandboxes reach the CephFS's cluster
	// (ParseCephNetwork's BRIDGE,CIDR,FIRST-LAST); "" = they do not, and
	// CephFS volumes are served over SMB only.
	CephNetwork string
	// Database is where the metadata lives: "" = the embedded SQLite database
	// under DataDir; a postgres:// or postgresql:// URL (libpq's form) = a
	// PostgreSQL database several Basin nodes can share. Keep its password out of
	// the URL (a command line is visible to every user): libpq's password file
	// ($PGPASSFILE, or passfile= in the URL) or $PGPASSWORD. Normalize accepts the
	// URL as Store too (--store postgres://…).
	Database string
	// NodeID names this node: the owner of the operations it runs, and later its
	// place in a cluster. A DNS label (lowercase letters, digits, '-'); "" = the
	// host name's first label (NodeIDOrHost).
	NodeID string
	// PublicURL is the URL clients reach the API at (a load balancer's, in front
	// of several nodes), e.g. https://basin.example.com/: the audience
	// self-signed JWTs may name beside the listen address's URLs, and the owner
	// key file's token_uri. "" = http://Listen/.
	PublicURL string
	// SecretsKeyFile is the file of the keys that seal stored secrets and sign
	// access tokens; "" = DataDir/secrets.key, made if missing. A file given here
	// is never made: every node of a cluster needs the same one.
	SecretsKeyFile string
	// GaneshaPrefix is where Basin's hardened NFS-Ganesha is installed.
	GaneshaPrefix string
	// NFSStuckAfter: an NFS request in flight longer than this is stuck: logged
	// and counted (default 30 s).
	NFSStuckAfter time.Duration
	// NFSWedgedAfter: a Ganesha that for this long finished no request and
	// answered no NULL call is restarted (default 60 s).
	NFSWedgedAfter time.Duration
	// StoreSize is the image file's size in bytes; 0 sizes it from the free space
	// of DataDir's filesystem (storage/btrfs).
	StoreSize int64
	// InsecureNoAuth turns authentication off (local development only).
	InsecureNoAuth bool
	// Limits are the API's validation bounds.
	Limits model.Limits
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// RateLimit is how many requests a principal may make per minute (negative:
	// unlimited).
	RateLimit int
	// FailedAuthLimit is how many requests with missing or invalid credentials a
	// client address may make per minute before they are answered 429 (0:
	// unlimited).
	FailedAuthLimit int
	// SyncWait is how long a mutating call waits for its operation to finish before
	// answering with it still running; 0 = always answer at once.
	SyncWait time.Duration
	// OvercommitRatio: the capacity of all pools on this node together may reach this
	// many times what the store holds for volumes (default 1.0: no overcommit, and
	// every volume's capacity allocated when it is made). Above 1, volumes are
	// thin-provisioned. Must be > 0.
	OvercommitRatio float64
	// StoreReserve is store space never given to volumes for good (the headroom a
	// full volume borrows for a snapshot, slack): 0 = 5 % of the store, between
	// 128 MiB and 4 GiB; negative = none.
	StoreReserve int64
	// ThinInitial is the largest filesystem a thin-provisioned volume starts with
	// (0: 1 GiB); it grows as it fills.
	ThinInitial int64
	// ProjectThroughputCapMibps is the throughput cap (MiB/s, read + write, client
	// payload) a project's volumes in a location share where the project's
	// settings set none (default 0: no cap). At most model.MaxThroughputCapMibps.
	ProjectThroughputCapMibps float64
	// QoS holds every volume to its service level with traffic control on its
	// network's sandbox (docs/architecture.md); off, nothing is shaped.
	QoS bool
	// QoSWireOverhead is the wire bytes traffic control allows per byte of
	// client payload (headers and acks: ~4.5 % at MTU 1500).
	QoSWireOverhead float64
	// QoSPassACKs lets payload-less TCP ACKs pass the shaper by (limits are on
	// payload; the shaper then moves about half the packets). Off by default: it
	// showed no throughput gain on NFS.
	QoSPassACKs bool
	// HTTP bounds the API's HTTP server.
	HTTP HTTPLimits
	// Failover (several nodes on PostgreSQL and one CephFS): each node holds a
	// serving lease and fences itself when it cannot renew it, and the volumes
	// of a lost or drained node are served by another (controller/failover.go).
	Failover bool
	// TeardownOnExit makes a clean stop take the data plane down with Basin:
	// sandboxes, daemons, endpoint addresses, volume mounts, loop devices and the
	// bridges Basin created. By default they outlive Basin and go on serving,
	// and the next start adopts them (docs/operations.md).
	TeardownOnExit bool
	// FaultStepDelay pauses the controller before every storage step; for crash
	// tests only (env BASIN_FAULT_STEP_DELAY).
	FaultStepDelay time.Duration
	// TestSnapshotClockSpeed, above 1, runs the snapshot scheduler's clock that
	// many times as fast as the wall clock (360: an hour in 10 s), so that a test
	// sees schedules run against real storage; for tests only (env
	// BASIN_TEST_SNAPSHOT_CLOCK_SPEED).
	TestSnapshotClockSpeed float64
	// TestSnapshotClockStart is where that clock starts running fast (default:
	// when basin serve starts); nodes of one cluster given the same start agree
	// on the time (env BASIN_TEST_SNAPSHOT_CLOCK_START, RFC 3339).
	TestSnapshotClockStart time.Time
	// TestResyncInterval, if set, is how often the controller re-applies desired
	// state and observes the storage's health (30 s and 10 s otherwise), so that
	// a test sees several passes; for tests only (env BASIN_TEST_RESYNC_INTERVAL).
	TestResyncInterval time.Duration
	// TestKrb5ClockSkew, if set, is the clock skew Ganesha's Kerberos
	// acceptor allows instead of MIT's default 5 minutes, which is also its
	// grace for an expired ticket, so that a test sees a ticket expire; for
	// tests only (env BASIN_TEST_KRB5_CLOCKSKEW).
	TestKrb5ClockSkew time.Duration
}

// HTTPLimits bound what one client can hold of the API's HTTP server.
type HTTPLimits struct {
	// ReadHeaderTimeout bounds reading a request's headers, and so how long a new
	// connection may stay silent (default 5 s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included (default 30 s).
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end of its
	// answer: reading the body, the handler (which may wait SyncWait for its
	// operation) and writing. 0 = ReadTimeout + SyncWait + 30 s.
	WriteTimeout time.Duration
	// IdleTimeout bounds how long a keep-alive connection waits for its next
	// request (default 1 min).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers (default 64 KiB).
	MaxHeaderBytes int
	// MaxConns is how many connections may be open at once (default 1024), and
	// MaxConnsPerSource how many of them one client address (an IPv6 /64) may
	// hold (default 64). At a cap, the connection waiting longest for a request
	// is closed to make room for the new one; a new one is refused only when every
	// connection counting against the cap is busy with a request
	// (internal/connlimit). No connection ever waits to be accepted.
	MaxConns, MaxConnsPerSource int
}

// Default returns the embedded defaults.
func Default() Config {
	return Config{
		Storage:         "btrfs",
		DataDir:         "/var/lib/basin",
		Listen:          "127.0.0.1:8780",
		Locations:       []string{"local"},
		Networks:        []Network{DefaultNetwork},
		GaneshaPrefix:   DefaultGaneshaPrefix,
		NFSStuckAfter:   30 * time.Second,
		NFSWedgedAfter:  60 * time.Second,
		Limits:          model.DefaultLimits(),
		QoS:             true,
		QoSWireOverhead: 1.025,
		LogLevel:        "info",
		SyncWait:        2 * time.Second,
		RateLimit:       1200,

		FailedAuthLimit: 60,
		HTTP: HTTPLimits{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: time.Minute,
			MaxHeaderBytes: 64 << 10, MaxConns: 1024, MaxConnsPerSource: 64},

		OvercommitRatio: 1.0,
	}
}

var (
	locationRE    = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	networkNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	nodeIDRE      = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

// NodeIDOrHost returns c.NodeID, or else the first label of host lowercased,
// with what a DNS label cannot hold made '-', or "local" if nothing is left.
func (c *Config) NodeIDOrHost(host string) string {
	if c.NodeID != "" {
		return c.NodeID
	}
	label, _, _ := strings.Cut(strings.ToLower(host), ".")
	id := strings.Trim(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, label), "-")
	if len(id) > 63 {
		id = strings.Trim(id[:63], "-")
	}
	if id == "" {
		return "local"
	}
	return id
}

// IsDatabaseURL reports whether v names a PostgreSQL database.
func IsDatabaseURL(v string) bool {
	return strings.HasPrefix(v, "postgres://") || strings.HasPrefix(v, "postgresql://")
}

// Normalize moves a database URL given as Store (--store postgres://…) to
// Database, where it belongs: Store names a directory, which no such URL is.
func (c *Config) Normalize() error {
	if IsCephFSURL(c.Store) {
		if c.Storage != "" && c.Storage != "btrfs" && c.Storage != c.Store {
			return errors.New("--store names a CephFS and --storage another; give one")
		}
		c.Storage, c.Store = c.Store, ""
		return nil
	}
	if !IsDatabaseURL(c.Store) {
		return nil
	}
	if c.Database != "" && c.Database != c.Store {
		return errors.New("--store names a database and --database another; give one")
	}
	c.Database, c.Store = c.Store, ""
	return nil
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	if c.Database != "" && !IsDatabaseURL(c.Database) {
		return errors.New("--database must be a postgres:// or postgresql:// URL (or empty, for the embedded SQLite database)")
	}
	if c.NodeID != "" && !nodeIDRE.MatchString(c.NodeID) {
		return fmt.Errorf("--node-id %q: use a DNS label: lowercase letters, digits and '-', at most 63", c.NodeID)
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
			return fmt.Errorf("--public-url %q: want http(s)://host[:port]/, without a path, query or user", c.PublicURL)
		}
	}
	if c.SecretsKeyFile != "" && !filepath.IsAbs(c.SecretsKeyFile) {
		return fmt.Errorf("--secrets-key-file must be an absolute path, got %q", c.SecretsKeyFile)
	}
	if IsDatabaseURL(c.Store) {
		return errors.New("--store names a database: Normalize it to --database first")
	}
	if c.Failover && (c.Database == "" || !IsCephFSURL(c.Storage)) {
		return errors.New("--failover needs several nodes on one PostgreSQL database (--database postgres://…) and CephFS storage (--storage cephfs://…): only then can another node serve a node's volumes")
	}
	if c.Failover && c.CephNetwork == "" {
		return errors.New("--failover needs --ceph-network: a lost node's clients of the cluster are cut off by their addresses there before another node serves its volumes")
	}
	if c.DataDir == "" || !filepath.IsAbs(c.DataDir) {
		return fmt.Errorf("--data-dir must be an absolute path, got %q", c.DataDir)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("--listen %q: %w", c.Listen, err)
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			return fmt.Errorf("--metrics-listen %q: %w", c.MetricsListen, err)
		}
		if c.MetricsListen == c.Listen {
			return fmt.Errorf("--metrics-listen %q is the API's --listen address", c.MetricsListen)
		}
	}
	if c.GRPCListen != "" {
		if _, _, err := net.SplitHostPort(c.GRPCListen); err != nil {
			return fmt.Errorf("--grpc-listen %q: %w", c.GRPCListen, err)
		}
		if c.GRPCListen == c.Listen || c.GRPCListen == c.MetricsListen {
			return fmt.Errorf("--grpc-listen %q is the address of another listener (--listen, --metrics-listen)", c.GRPCListen)
		}
	}
	if (c.GRPCCertFile == "") != (c.GRPCKeyFile == "") {
		return errors.New("--grpc-cert-file and --grpc-key-file go together: give both, or neither for a certificate Basin issues itself")
	}
	if c.GRPCCertFile != "" && c.GRPCListen == "" {
		return errors.New("--grpc-cert-file is for --grpc-listen, which is not given")
	}
	if len(c.Locations) == 0 {
		return errors.New("at least one --location is required")
	}
	seen := map[string]bool{}
	for _, l := range c.Locations {
		if !locationRE.MatchString(l) {
			return fmt.Errorf("--location %q: use lowercase letters, digits and hyphens, starting with a letter", l)
		}
		if seen[l] {
			return fmt.Errorf("--location %q given twice", l)
		}
		seen[l] = true
	}
	if len(c.Networks) == 0 {
		return errors.New("at least one --network is required")
	}
	names, bridges := map[string]bool{}, map[string]bool{}
	for _, n := range c.Networks {
		if !networkNameRE.MatchString(n.Name) {
			return fmt.Errorf("--network %q: names use letters, digits, '.', '_' and '-'", n.Name)
		}
		if names[n.Name] || bridges[n.Bridge] {
			return fmt.Errorf("--network %s=%s: name or bridge given twice", n.Name, n.Bridge)
		}
		names[n.Name], bridges[n.Bridge] = true, true
		if err := checkEndpointRange(n); err != nil {
			return fmt.Errorf("--network %s: endpoint range %s-%s: %w", n.Name, n.FirstEndpoint, n.LastEndpoint, err)
		}
	}
	if c.Store == "" && c.StoreSize != 0 && c.StoreSize < 1<<30 {
		return fmt.Errorf("--store-size must be at least 1 GiB (or auto), got %d bytes", c.StoreSize)
	}
	if !filepath.IsAbs(c.GaneshaPrefix) {
		return fmt.Errorf("--ganesha-prefix must be an absolute path, got %q", c.GaneshaPrefix)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--nfs-stuck-after", c.NFSStuckAfter}, {"--nfs-wedged-after", c.NFSWedgedAfter}} {
		if d.v < time.Second || d.v > 24*time.Hour {
			return fmt.Errorf("%s must be between 1s and 24h, got %v", d.flag, d.v)
		}
	}
	if c.Store != "" && !filepath.IsAbs(c.Store) {
		return fmt.Errorf("--store must be an absolute path, got %q", c.Store)
	}
	if err := c.validateStorage(); err != nil {
		return err
	}
	if c.Limits.MinVolumeGib <= 0 || c.Limits.MaxVolumeGib < c.Limits.MinVolumeGib {
		return fmt.Errorf("volume capacity bounds %d–%d GiB are invalid", c.Limits.MinVolumeGib, c.Limits.MaxVolumeGib)
	}
	if !(c.OvercommitRatio > 0) || math.IsInf(c.OvercommitRatio, 1) {
		return fmt.Errorf("--overcommit-ratio must be a number above 0, got %g", c.OvercommitRatio)
	}
	if c.ThinInitial != 0 && c.ThinInitial < 32<<20 {
		return fmt.Errorf("--thin-initial must be at least 32 MiB, got %d bytes", c.ThinInitial)
	}
	if v := c.QoSWireOverhead; !(v >= 1 && v <= 2) {
		return fmt.Errorf("--qos-wire-overhead %v must be between 1 and 2", v)
	}
	if v := c.Limits.MinVolumeThroughput; !(v >= 0 && v <= c.Limits.MaxVolumeThroughput) {
		return fmt.Errorf("--qos-floor-mibps %v must be between 0 and the largest volume ceiling (%v)", v, c.Limits.MaxVolumeThroughput)
	}
	if v := c.ProjectThroughputCapMibps; !(v >= 0 && v <= model.MaxThroughputCapMibps) {
		return fmt.Errorf("--project-throughput-cap-mibps must be between 0 (no cap) and %d, got %g", model.MaxThroughputCapMibps, v)
	}
	h := c.HTTP
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--http-read-header-timeout", h.ReadHeaderTimeout}, {"--http-read-timeout", h.ReadTimeout}, {"--http-idle-timeout", h.IdleTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("%s must be positive, got %v", d.flag, d.v)
		}
	}
	if h.WriteTimeout < 0 || (h.WriteTimeout > 0 && h.WriteTimeout <= h.ReadTimeout+c.SyncWait) {
		return fmt.Errorf("--http-write-timeout %v must exceed --http-read-timeout plus --sync-wait (%v), or be 0 for the default", h.WriteTimeout, h.ReadTimeout+c.SyncWait)
	}
	if h.MaxHeaderBytes < 4<<10 {
		return fmt.Errorf("--http-max-header-bytes must be at least 4 KiB, got %d", h.MaxHeaderBytes)
	}
	if h.MaxConns < 1 {
		return fmt.Errorf("--http-max-conns must be at least 1, got %d", h.MaxConns)
	}
	if h.MaxConnsPerSource < 1 || h.MaxConnsPerSource > h.MaxConns {
		return fmt.Errorf("--http-max-conns-per-source must be between 1 and --http-max-conns (%d), got %d", h.MaxConns, h.MaxConnsPerSource)
	}
	if c.Limits.MinPoolGib <= 0 {
		return fmt.Errorf("minimum pool capacity %d GiB is invalid", c.Limits.MinPoolGib)
	}
	return nil
}

// checkEndpointRange checks that a network's endpoint range lies in its subnet and
// leaves out the network, host and broadcast addresses.
func checkEndpointRange(n Network) error {
	f, l, p := n.FirstEndpoint, n.LastEndpoint, n.Prefix.Masked()
	if !f.IsValid() || !l.IsValid() || l.Less(f) {
		return errors.New("want FIRST-LAST, FIRST not above LAST")
	}
	if !p.Addr().Is4() {
		return errors.New("the subnet is not IPv4")
	}
	b := p.Addr().As4()
	v := (uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])) | (uint32(1)<<(32-p.Bits()) - 1)
	broadcast := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	for _, a := range []netip.Addr{f, l} {
		if !p.Contains(a) || a == p.Addr() || a == n.HostAddr() || a == broadcast {
			return fmt.Errorf("%s must be inside %s and not its network, host or broadcast address", a, p)
		}
	}
	return nil
}

// CephFS returns the CephFS Storage names, if it names one.
func (c *Config) CephFS() (CephFS, bool) {
	if !IsCephFSURL(c.Storage) {
		return CephFS{}, false
	}
	cf, err := ParseCephFS(c.Storage)
	return cf, err == nil
}

// validateStorage checks --storage and the btrfs flags that mean nothing on CephFS.
func (c *Config) validateStorage() error {
	switch {
	case c.Storage == "" || c.Storage == "btrfs":
		if c.CephNetwork != "" {
			return errors.New("--ceph-network is for CephFS storage (--storage cephfs://…)")
		}
		return nil
	case !IsCephFSURL(c.Storage):
		return fmt.Errorf("--storage %q: want btrfs or a cephfs:// URL", c.Storage)
	}
	if _, err := ParseCephFS(c.Storage); err != nil {
		return err
	}
	if c.CephNetwork != "" {
		cn, err := ParseCephNetwork(c.CephNetwork)
		if err != nil {
			return err
		}
		if _, err := cn.Addrs(c.Networks); err != nil {
			return err
		}
		if c.Failover {
			if _, err := cn.MountAddr(c.Networks); err != nil {
				return err
			}
		}
		for _, n := range c.Networks {
			if n.Bridge == cn.Bridge || n.Prefix.Overlaps(cn.Prefix) {
				return fmt.Errorf("--ceph-network %s: shares its bridge or subnet with --network %s: tenants would reach the cluster", c.CephNetwork, n.Name)
			}
		}
	}
	// Quotas on CephFS hold no space back: nothing to size, reserve or thin out.
	for _, f := range []struct {
		flag string
		set  bool
	}{{"--store", c.Store != ""}, {"--store-size", c.StoreSize != 0}, {"--store-reserve", c.StoreReserve != 0}, {"--thin-initial", c.ThinInitial != 0}} {
		if f.set {
			return fmt.Errorf("%s is for btrfs storage; --storage names a CephFS", f.flag)
		}
	}
	return nil
}
