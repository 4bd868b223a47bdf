// Command basin is Basin's single binary: `basin serve` runs the service; every other
// command is a client of its REST API (see `basin help`).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/basin-nas/basin/internal/cli"
	"github.com/basin-nas/basin/internal/config"
	"github.com/basin-nas/basin/internal/daemon"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		os.Exit(serve(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "teardown" {
		os.Exit(teardown(os.Args[2:]))
	}
	if len(os.Args) > 2 && os.Args[1] == "secrets" && os.Args[2] == "rotate" {
		os.Exit(rotateSecrets(os.Args[3:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "version" {
		fmt.Println("basin", version)
		return
	}
	os.Exit(cli.Main(os.Args[1:], cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Stdin: os.Stdin}))
}

var version = "dev"

// multiFlag collects a repeatable flag: its first value replaces the default,
// and the first on the command line replaces a config file's (startOver).
type multiFlag struct {
	vals    []string
	set     bool
	replace bool
	check   func(string) error // refuses a value, if set
}

func (m *multiFlag) String() string { return strings.Join(m.vals, ",") }
func (m *multiFlag) Set(v string) error {
	if m.check != nil {
		if err := m.check(v); err != nil {
			return err
		}
	}
	if !m.set || m.replace {
		m.vals, m.set, m.replace = nil, true, false
	}
	m.vals = append(m.vals, v)
	return nil
}

func (m *multiFlag) startOver() { m.replace = m.set }

// sizeFlag parses sizes like 64G, 64GiB, 512M or plain bytes.
type sizeFlag struct{ n *int64 }

func (s sizeFlag) String() string {
	if s.n == nil {
		return ""
	}
	return strconv.FormatInt(*s.n, 10)
}

func (s sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s.n = n
	return nil
}

// intSizeFlag is a sizeFlag for an int.
type intSizeFlag struct{ n *int }

func (s intSizeFlag) String() string {
	if s.n == nil {
		return ""
	}
	return strconv.Itoa(*s.n)
}

func (s intSizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	if n > math.MaxInt32 {
		return fmt.Errorf("size %q too large", v)
	}
	*s.n = int(n)
	return nil
}

// autoSizeFlag is a size that may be "auto" (0); "none" is -1 where allowed.
type autoSizeFlag struct {
	n        *int64
	zeroNone bool // "0" and "none" mean none (-1), not auto
}

func (s autoSizeFlag) String() string {
	switch {
	case s.n == nil || *s.n == 0:
		return "auto"
	case *s.n < 0:
		return "none"
	}
	return strconv.FormatInt(*s.n, 10)
}

func (s autoSizeFlag) Set(v string) error {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "auto":
		*s.n = 0
		return nil
	case "none":
		if s.zeroNone {
			*s.n = -1
			return nil
		}
	}
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	if n == 0 && s.zeroNone {
		n = -1
	}
	*s.n = n
	return nil
}

// gibFlag sets a byte count from a number of GiB (0: none, -1).
type gibFlag struct{ n *int64 }

func (g gibFlag) String() string {
	if g.n == nil || *g.n <= 0 {
		return ""
	}
	return strconv.FormatInt(*g.n>>30, 10)
}

func (g gibFlag) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > 1<<20 {
		return fmt.Errorf("invalid number of GiB %q", v)
	}
	if n == 0 {
		*g.n = -1
	} else {
		*g.n = n << 30
	}
	return nil
}

func parseSize(v string) (int64, error) {
	u := strings.ToUpper(strings.TrimSpace(v))
	u = strings.TrimSuffix(strings.TrimSuffix(u, "IB"), "B")
	mult := int64(1)
	if len(u) > 0 {
		if i := strings.IndexByte("KMGTP", u[len(u)-1]); i >= 0 {
			mult = int64(1) << (10 * (i + 1))
			u = u[:len(u)-1]
		}
	}
	n, err := strconv.ParseInt(u, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid size %q (use e.g. 64G)", v)
	}
	return n * mult, nil
}

// serveFlags defines the flags of basin serve on cfg; the repeatable --location
// and --network are collected apart, and --config only names a file.
func serveFlags(cfg *config.Config) (fs *flag.FlagSet, locs, nets *multiFlag) {
	fs = flag.NewFlagSet("basin serve", flag.ContinueOnError)
	fs.String(configFlag, "", "file of settings, one \"name = value\" line each, named as these flags without dashes (repeatable ones on a line per value); flags given here win over it")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for the database, owner key, store image and mount points")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "HTTP listen address")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", cfg.MetricsListen, "address of the Prometheus /metrics endpoint, unauthenticated (\"\" = none)")
	fs.StringVar(&cfg.GRPCListen, "grpc-listen", cfg.GRPCListen, "address of the v1 API over gRPC, TLS only (\"\" = none); the same authentication, permissions, audit and rate limits as --listen")
	fs.StringVar(&cfg.GRPCCertFile, "grpc-cert-file", cfg.GRPCCertFile, "with --grpc-listen: its certificate (PEM, the chain after it) (default: one Basin issues itself from a CA of its own, <data-dir>/grpc-ca.pem, which clients trust)")
	fs.StringVar(&cfg.GRPCKeyFile, "grpc-key-file", cfg.GRPCKeyFile, "with --grpc-cert-file: its private key (PEM)")
	locs = &multiFlag{vals: cfg.Locations}
	fs.Var(locs, "location", "location ID to serve (repeatable)")
	nets = &multiFlag{check: func(v string) error { _, err := config.ParseNetwork(v); return err }}
	fs.Var(nets, "network", "network as NAME=BRIDGE,CIDR[,FIRST-LAST] (repeatable; default: default=basin0,10.99.0.0/24); volumes' endpoints come from FIRST-LAST, by default the tenth address to the end of the subnet's lower half")
	fs.StringVar(&cfg.Store, "store", "", "existing directory to keep volume images in, best on btrfs or XFS (default: an image file under --data-dir); a postgres:// URL here is taken as --database")
	fs.StringVar(&cfg.Storage, "storage", cfg.Storage, "where volumes live: btrfs (the default: --store, or an image file under --data-dir), or an existing CephFS as cephfs://[ID@][FS][/GROUP][?conf=PATH&keyring=PATH][&nfs_recovery_pool=POOL…] (defaults: basin@cephfs/basin, /etc/ceph/ceph.conf, ceph.client.ID.keyring beside it; nfs_recovery_pool keeps NFSv4 state in RADOS; docs/operations.md)")
	fs.StringVar(&cfg.CephNetwork, "ceph-network", "", "with --storage cephfs://…: how the NFS sandboxes reach the cluster, BRIDGE,CIDR,FIRST-LAST: an existing bridge on its public network, its subnet, and the addresses the sandboxes take (one per --network, in order); without it CephFS volumes are served over SMB only")
	fs.StringVar(&cfg.NodeID, "node-id", "", "this node's name, a DNS label: the owner of the operations it runs (default: the host name's first label)")
	fs.StringVar(&cfg.PublicURL, "public-url", "", "URL clients reach the API at, e.g. a load balancer's https://basin.example.com/: an audience self-signed JWTs may name, and the owner key file's token_uri (default: http://<listen>/)")
	fs.StringVar(&cfg.SecretsKeyFile, "secrets-key-file", "", "file of the keys that seal stored secrets and sign access tokens; the same file on every node of a cluster, never made if missing (default: <data-dir>/secrets.key, made at the first start)")
	fs.StringVar(&cfg.Database, "database", "", "PostgreSQL database for the metadata, as a postgres:// URL (libpq's form; keep the password in a password file: PGPASSFILE or passfile=), shared by the nodes of a cluster (default: SQLite under --data-dir)")
	fs.StringVar(&cfg.GaneshaPrefix, "ganesha-prefix", cfg.GaneshaPrefix, "where scripts/setup.sh installed Basin's hardened NFS-Ganesha")
	fs.DurationVar(&cfg.NFSStuckAfter, "nfs-stuck-after", cfg.NFSStuckAfter, "an NFS request in flight longer than this is stuck: logged and counted (basin_nfs_stuck_requests_total)")
	fs.DurationVar(&cfg.NFSWedgedAfter, "nfs-wedged-after", cfg.NFSWedgedAfter, "restart a Ganesha that for this long finished no request and answered no NULL call")
	fs.Var(autoSizeFlag{n: &cfg.StoreSize}, "store-size", "size of the store image file, e.g. 64G; auto: the free space of --data-dir's filesystem less 256 MiB, at most 64G (the image is allocated in full when made)")
	fs.BoolVar(&cfg.InsecureNoAuth, "insecure-no-auth", false, "turn authentication off (local development only)")
	fs.DurationVar(&cfg.SyncWait, "sync-wait", cfg.SyncWait, "how long a mutating call waits for its operation before answering (0s: answer at once; clients then poll)")
	fs.IntVar(&cfg.RateLimit, "rate-limit", cfg.RateLimit, "requests per minute per principal (0: unlimited); over it, 429 with Retry-After")
	fs.Float64Var(&cfg.OvercommitRatio, "overcommit-ratio", cfg.OvercommitRatio, "the capacity of all pools together may reach this many times what the store holds for volumes; above 1, volumes are thin-provisioned")
	fs.Var(autoSizeFlag{n: &cfg.StoreReserve, zeroNone: true}, "store-reserve", "store space never given to volumes for good (the headroom a full volume borrows to take a snapshot), e.g. 2G; auto: 5% of the store, between 128M and 4G; none")
	fs.Var(gibFlag{&cfg.StoreReserve}, "store-reserve-gib", "the same as --store-reserve, in GiB (0: none)")
	fs.Var(autoSizeFlag{n: &cfg.ThinInitial}, "thin-initial", "with --overcommit-ratio above 1: the largest filesystem a volume starts with, 32M at least, e.g. 256M (it grows as it fills); auto: 1G")
	fs.BoolVar(&cfg.QoS, "qos", cfg.QoS, "hold every volume to its service level's throughput with traffic control (false: no shaping)")
	fs.Float64Var(&cfg.Limits.MinVolumeThroughput, "qos-floor-mibps", cfg.Limits.MinVolumeThroughput, "smallest throughput ceiling in MiB/s of a volume in an AUTO pool, however small it is")
	fs.Float64Var(&cfg.QoSWireOverhead, "qos-wire-overhead", cfg.QoSWireOverhead, "wire bytes allowed per byte of client payload (headers and acks), so that clients get their full limit")
	fs.BoolVar(&cfg.QoSPassACKs, "qos-pass-acks", cfg.QoSPassACKs, "let payload-less TCP ACKs pass the shaper by (limits are on payload; halves the packets it handles, no throughput gain measured)")
	fs.Float64Var(&cfg.ProjectThroughputCapMibps, "project-throughput-cap-mibps", cfg.ProjectThroughputCapMibps, "throughput cap in MiB/s each project's volumes in a location share, where the project's settings set none (0: no cap)")
	fs.IntVar(&cfg.FailedAuthLimit, "failed-auth-limit", cfg.FailedAuthLimit, "requests with missing or invalid credentials per minute per client address (0: unlimited); over it, 429 with Retry-After")
	fs.DurationVar(&cfg.HTTP.ReadHeaderTimeout, "http-read-header-timeout", cfg.HTTP.ReadHeaderTimeout, "time a client has to send a request's headers (a new connection's first request included)")
	fs.DurationVar(&cfg.HTTP.ReadTimeout, "http-read-timeout", cfg.HTTP.ReadTimeout, "time a client has to send a whole request, body included")
	fs.DurationVar(&cfg.HTTP.WriteTimeout, "http-write-timeout", cfg.HTTP.WriteTimeout, "time from a request's headers to the end of its answer (0: http-read-timeout + sync-wait + 30s)")
	fs.DurationVar(&cfg.HTTP.IdleTimeout, "http-idle-timeout", cfg.HTTP.IdleTimeout, "time a keep-alive connection may wait for its next request")
	fs.Var(intSizeFlag{&cfg.HTTP.MaxHeaderBytes}, "http-max-header-bytes", "largest request headers, e.g. 64K")
	fs.IntVar(&cfg.HTTP.MaxConns, "http-max-conns", cfg.HTTP.MaxConns, "connections open at once; at the cap, the one waiting longest for a request makes room")
	fs.IntVar(&cfg.HTTP.MaxConnsPerSource, "http-max-conns-per-source", cfg.HTTP.MaxConnsPerSource, "connections one client address (an IPv6 /64) may hold; at the cap, its own connection waiting longest for a request makes room")
	fs.BoolVar(&cfg.Failover, "failover", cfg.Failover, "with --database postgres://… and --storage cephfs://…: when a node is lost or drained (basin nodes drain), another node serves its volumes at the same endpoint addresses; each node fences itself (takes its data plane down and exits) when it cannot renew its serving lease for 6 s (docs/operations.md)")
	fs.BoolVar(&cfg.TeardownOnExit, "teardown-on-exit", cfg.TeardownOnExit, "on a clean stop, take the data plane down too (sandboxes, NFS and SMB daemons, endpoint addresses, volume mounts, loop devices, the bridges Basin created); by default it goes on serving and the next start adopts it")
	fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "debug, info, warn or error")
	fs.Int64Var(&cfg.Limits.MinVolumeGib, "min-volume-gib", cfg.Limits.MinVolumeGib, "smallest volume capacity in GiB")
	fs.Int64Var(&cfg.Limits.MaxVolumeGib, "max-volume-gib", cfg.Limits.MaxVolumeGib, "largest volume capacity in GiB")
	fs.Int64Var(&cfg.Limits.MinPoolGib, "min-pool-gib", cfg.Limits.MinPoolGib, "smallest pool capacity in GiB")
	fs.IntVar(&cfg.Limits.MaxSnapshotsPerVol, "max-snapshots", cfg.Limits.MaxSnapshotsPerVol, "snapshots per volume")
	fs.IntVar(&cfg.Limits.MaxExportRules, "max-export-rules", cfg.Limits.MaxExportRules, "export rules per volume")
	return fs, locs, nets
}

// serveConfig is the configuration of basin serve (and of basin teardown, name)
// from its command line and the config file that names (--config), applied
// first. The flag set prints its own errors and usage to stderr; other errors
// are returned.
func serveConfig(name string, args []string, stderr io.Writer) (config.Config, error) {
	newFlags := func(cfg *config.Config) (*flag.FlagSet, *multiFlag, *multiFlag) {
		*cfg = config.Default()
		cfg.GaneshaPrefix = config.GaneshaPrefixFor(exists)
		fs, locs, nets := serveFlags(cfg)
		fs.Init(name, flag.ContinueOnError)
		fs.SetOutput(stderr)
		return fs, locs, nets
	}
	var cfg config.Config
	fs, locs, nets := newFlags(&cfg)
	if err := fs.Parse(args); err != nil {
		return cfg, usageError{err}
	}
	if file := configFileArg(fs); file != "" {
		// Again from the defaults: the file first, the command line over it.
		fs, locs, nets = newFlags(&cfg)
		if err := applyConfigFile(fs, file); err != nil {
			return cfg, fmt.Errorf("--config: %w", err)
		}
		if err := fs.Parse(args); err != nil {
			return cfg, usageError{err}
		}
	}
	cfg.Locations = locs.vals
	if nets.set {
		cfg.Networks = nil
		for _, spec := range nets.vals {
			n, err := config.ParseNetwork(spec)
			if err != nil {
				return cfg, fmt.Errorf("--network: %w", err)
			}
			cfg.Networks = append(cfg.Networks, n)
		}
	}
	if err := cfg.Normalize(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// usageError is a command-line error the flag set has printed already.
type usageError struct{ error }

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// commandConfig is serveConfig for command name, an exit code when it fails.
func commandConfig(name string, args []string) (config.Config, int) {
	cfg, err := serveConfig(name, args, os.Stderr)
	if err != nil {
		var printed usageError
		if !errors.As(err, &printed) {
			fmt.Fprintln(os.Stderr, name+":", err)
		}
		return cfg, 2
	}
	return cfg, 0
}

func serve(args []string) int {
	cfg, code := commandConfig("basin serve", args)
	if code != 0 {
		return code
	}
	if d := os.Getenv("BASIN_FAULT_STEP_DELAY"); d != "" {
		delay, err := time.ParseDuration(d)
		if err != nil {
			fmt.Fprintln(os.Stderr, "basin serve: BASIN_FAULT_STEP_DELAY:", err)
			return 2
		}
		cfg.FaultStepDelay = delay
	}
	if v := os.Getenv("BASIN_TEST_SNAPSHOT_CLOCK_SPEED"); v != "" {
		speed, err := strconv.ParseFloat(v, 64)
		if err != nil || !(speed >= 1) || math.IsInf(speed, 0) {
			fmt.Fprintln(os.Stderr, "basin serve: BASIN_TEST_SNAPSHOT_CLOCK_SPEED: want a number of at least 1")
			return 2
		}
		cfg.TestSnapshotClockSpeed = speed
	}
	if v := os.Getenv("BASIN_TEST_SNAPSHOT_CLOCK_START"); v != "" {
		start, err := time.Parse(time.RFC3339Nano, v)
		if err != nil || time.Since(start) < 0 {
			fmt.Fprintln(os.Stderr, "basin serve: BASIN_TEST_SNAPSHOT_CLOCK_START: want an RFC 3339 time, not in the future")
			return 2
		}
		cfg.TestSnapshotClockStart = start
	}
	if d := os.Getenv("BASIN_TEST_RESYNC_INTERVAL"); d != "" {
		interval, err := time.ParseDuration(d)
		if err != nil || interval <= 0 {
			fmt.Fprintln(os.Stderr, "basin serve: BASIN_TEST_RESYNC_INTERVAL: want a positive duration")
			return 2
		}
		cfg.TestResyncInterval = interval
	}
	if d := os.Getenv("BASIN_TEST_KRB5_CLOCKSKEW"); d != "" {
		skew, err := time.ParseDuration(d)
		if err != nil || skew < time.Second || skew > 5*time.Minute {
			// At most MIT's default: a test may only shorten how long an
			// expired ticket is taken.
			fmt.Fprintln(os.Stderr, "basin serve: BASIN_TEST_KRB5_CLOCKSKEW: want a duration from 1s to 5m")
			return 2
		}
		cfg.TestKrb5ClockSkew = skew
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		fmt.Fprintln(os.Stderr, "basin serve: --log-level:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := daemon.Run(ctx, cfg, log); err != nil {
		log.Error("basin serve failed", "err", err)
		return 1
	}
	log.Info("stopped cleanly")
	return 0
}

// teardown is `basin teardown`: with serve's flags (the same data directory and
// networks), it takes down the data plane a stopped Basin left serving.
func teardown(args []string) int {
	cfg, code := commandConfig("basin teardown", args)
	if code != 0 {
		return code
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := daemon.Teardown(ctx, cfg, log); err != nil {
		log.Error("basin teardown failed", "err", err)
		return 1
	}
	log.Info("data plane taken down", "data_dir", cfg.DataDir)
	return 0
}

// rotateSecrets is basin secrets rotate: a new sealing key, every stored secret
// resealed under it (daemon.RotateSecretsKey), with Basin stopped.
func rotateSecrets(args []string) int {
	cfg, code := commandConfig("basin secrets rotate", args)
	if code != 0 {
		return code
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	oldID, newID, err := daemon.RotateSecretsKey(context.Background(), cfg, log)
	if err != nil {
		log.Error("basin secrets rotate failed", "err", err)
		return 1
	}
	log.Info("secrets key rotated: the key file's first key seals, the old one stays after it to open older backups; copy the file to every node",
		"old_key", oldID, "key", newID)
	return 0
}
