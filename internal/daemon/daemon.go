// Package daemon is Basin's composition root: it builds the store, storage backend,
// identity, controller, metrics sampler, snapshot scheduler and API from a config,
// starts them in order, and stops them in reverse order. Only cmd/basin imports it.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	sdnotify "github.com/coreos/go-systemd/v22/daemon"

	"github.com/basin-nas/basin/internal/api"
	"github.com/basin-nas/basin/internal/config"
	"github.com/basin-nas/basin/internal/connlimit"
	"github.com/basin-nas/basin/internal/controller"
	"github.com/basin-nas/basin/internal/dataplane"
	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/metrics"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/qos"
	"github.com/basin-nas/basin/internal/runner"
	"github.com/basin-nas/basin/internal/schedule"
	"github.com/basin-nas/basin/internal/store"
	"github.com/basin-nas/basin/web"
)

// OwnerKeyFile is the owner's key file name under the data directory.
const OwnerKeyFile = "owner-key.json"

// Run serves until ctx is cancelled, then shuts down cleanly: HTTP drained, the
// running operation interrupted (it resumes on the next start), the database
// closed. The data plane — sandboxes, NFS and SMB daemons, endpoint addresses,
// traffic shaping, volume mounts and loop devices — goes on serving, for the
// next start to adopt; with cfg.TeardownOnExit it is taken down too (volumes
// unmounted, the store image detached, the bridges Basin made removed).
func Run(ctx context.Context, cfg config.Config, log *slog.Logger) (err error) {
	if err := cfg.Validate(); err != nil {
		return err
	}
	state, err := openState(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, state.Close()) }()
	st := state.store
	host, _ := os.Hostname()
	nodeID := cfg.NodeIDOrHost(host)
	// Several nodes share a PostgreSQL store: each serves the volumes placed
	// on it (internal/controller/cluster.go).
	_, cluster := state.store.(*store.Postgres)
	clusterNode := ""
	if cluster {
		clusterNode = nodeID
	}
	// One node ID, one node: refused here, before the host is touched, if a
	// process on another data directory is alive under it.
	token, err := nodeToken(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("node token: %w", err)
	}
	if err := claimNodeID(ctx, st, model.Node{ID: nodeID, APIURL: nodeURL(cfg), Instance: token}); err != nil {
		return err
	}

	// Volumes are mounted below shared mount points: sandboxes, whose mount
	// namespaces are slaves of the mounts directory, see volumes mounted after they
	// started; and every mount namespace made later (a sandbox, `ip netns exec`)
	// holds slave copies that go when Basin unmounts, instead of private copies
	// that would keep a deleted volume's loop device busy.
	run := runner.Exec{}
	// With failover the data plane dies with Basin: one left serving by a
	// crashed Basin would fence nothing, and go on answering at addresses
	// another node takes over.
	keep := !cfg.TeardownOnExit && !cfg.Failover
	for _, dir := range []string{filepath.Join(cfg.DataDir, "mounts"), filepath.Join(cfg.DataDir, "fs")} {
		if err := dataplane.ShareMounts(ctx, run, dir); err != nil {
			return err
		}
		defer func() {
			if !keep {
				err = errors.Join(err, dataplane.UnshareMounts(context.Background(), run, dir))
			}
		}()
	}

	mounts, err := mountLinkOf(cfg)
	if err != nil {
		return err
	}
	be, err := newStorage(cfg, mounts, log)
	if err != nil {
		return err
	}
	// The storage starts first: with failover it detaches what an earlier
	// Basin left mounted (over the mounts' link as it was), then the link is
	// made or checked.
	if err := be.Start(ctx); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	defer func() {
		if keep {
			be.Release() // volumes stay mounted: they are being served
			return
		}
		// Unmounting must happen even though ctx is already cancelled.
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stopErr := be.Stop(stopCtx)
		err = errors.Join(err, stopErr)
		if mounts != nil && stopErr == nil {
			// Only with nothing mounted: a ceph-fuse left in it would lose
			// its way to the cluster, and hang.
			rmCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = errors.Join(err, mounts.Remove(rmCtx))
		}
	}()
	if mounts != nil {
		if err := mounts.Ensure(ctx); err != nil {
			return err
		}
	} else if kept, err := dataplane.DropUnusedMountLink(ctx, cfg.DataDir, nil); err != nil {
		log.Warn("the volume mounts' link of an earlier start with --failover could not be removed", "err", err)
	} else if kept {
		log.Warn("the volume mounts' link of an earlier start with --failover is kept: volumes mounted through it are still served; a start after they are unmounted removes it")
	}
	// The volumes' space watcher (thin volumes grow as they fill; headroom a full
	// volume borrowed is given back), stopped before the volumes are unmounted.
	watchCtx, stopWatch := context.WithCancel(context.Background())
	watchDone := make(chan struct{})
	go func() { be.Run(watchCtx); close(watchDone) }() //nolint:errcheck // Run returns nil when cancelled
	defer func() { stopWatch(); <-watchDone }()

	dpNetworks := dataplaneNetworks(cfg)
	cephLink, err := cephLinkOf(ctx, cfg, be)
	if err != nil {
		return err
	}
	var fenceAddrs []string // failover: where this node's Ceph clients connect from
	if cephLink != nil && cfg.Failover {
		for _, p := range cephLink.Addrs {
			fenceAddrs = append(fenceAddrs, p.Addr().String())
		}
		if mounts != nil {
			fenceAddrs = append(fenceAddrs, mounts.Addr.Addr().String())
		}
		slices.Sort(fenceAddrs)
	}
	// What /metrics serves (--metrics-listen): Basin's health, counted through
	// hooks of the data plane, the controller and the API, and the volumes.
	reg, health := metricsRegistry()
	dp := dataplane.New(dataplane.Options{DataDir: cfg.DataDir, Networks: dpNetworks, NodeID: clusterNode, Ganesha: dataplane.Ganesha{Prefix: cfg.GaneshaPrefix},
		Logger: log.With("component", "dataplane"), OnRestart: health.DaemonRestarted,
		StuckRequestAfter: cfg.NFSStuckAfter, WedgedAfter: cfg.NFSWedgedAfter, OnStuckRequests: health.NFSStuckRequests,
		Detach: keep, Ceph: cephLink, TestKrb5ClockSkew: cfg.TestKrb5ClockSkew})
	if err := dp.Start(ctx); err != nil {
		return fmt.Errorf("data plane: %w", err)
	}
	defer func() {
		if keep {
			dp.Detach()
			log.Info("data plane left serving; the next start adopts it (basin teardown takes it down)")
			return
		}
		// Before storage stops: Ganesha holds the volumes open.
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = errors.Join(err, dp.Stop(stopCtx))
	}()
	var networks []model.Network
	for _, n := range cfg.Networks {
		networks = append(networks, model.Network{Name: n.Name, Prefix: n.Prefix, FirstEndpoint: n.FirstEndpoint, LastEndpoint: n.LastEndpoint})
	}

	var auth api.Authenticator
	if cfg.InsecureNoAuth {
		log.Warn("authentication is OFF (--insecure-no-auth): anyone who can reach " + cfg.Listen + " controls this Basin; use it only for local development")
	} else {
		auth = iam.NewAuthenticator(iam.Options{Store: st, Audiences: audiences(cfg), TokenKey: state.tokenKey})
	}

	if cfg.FaultStepDelay > 0 {
		log.Warn("fault injection: pausing before every storage step", "delay", cfg.FaultStepDelay)
	}
	var shaping *controller.QoS
	var tcCounters metrics.QoSSource // traffic control's counters, for the metrics
	if cfg.QoS {
		names := make([]string, len(cfg.Networks))
		for i, n := range cfg.Networks {
			names[i] = n.Name
		}
		// The driver's memory of each sandbox's tree outlives Basin: a Basin
		// started later adopts the running tree instead of rebuilding it.
		qosState := qos.StateDir(filepath.Join(cfg.DataDir, "qos"))
		driver := qos.New(log.With("component", "qos"), qosState)
		if cfg.QoSPassACKs {
			driver = qos.NewPassingACKs(log.With("component", "qos"), qosState)
		}
		shaping = &controller.QoS{Driver: driver, Link: dp.QoSLink,
			Networks: func() []string { return names }, Overhead: cfg.QoSWireOverhead,
			DefaultCapMibps: cfg.ProjectThroughputCapMibps, Limits: cfg.Limits}
		tcCounters = qosCounters{driver: driver, link: dp.QoSLink}
	} else {
		log.Warn("service levels are not enforced (--qos=false): every volume gets whatever bandwidth it can take")
	}
	if cfg.TestKrb5ClockSkew > 0 {
		log.Warn("test mode: Ganesha's Kerberos acceptor allows a clock skew other than 5 minutes", "skew", cfg.TestKrb5ClockSkew)
	}
	if cfg.TestResyncInterval > 0 {
		log.Warn("test mode: the controller resyncs and observes the storage's health more often", "interval", cfg.TestResyncInterval)
	}
	// Made below, called only once the controller runs: it audits the
	// storage's health changes and volumes' space notes.
	var srv *api.Server
	// A volume's space note (thin provisioning on a full store) goes on its state
	// details, into the log and the audit log.
	spaceNoted := func(ctx context.Context, v *model.Volume, note string) {
		var err error
		if note != "" {
			log.Warn("volume short of space", "volume", v.Name(), "note", note)
			err = model.Errorf(model.ErrResourceExhausted, "%s", note)
		} else {
			log.Info("volume no longer short of space", "volume", v.Name())
		}
		srv.AuditSystemCall(ctx, api.SystemCall{Principal: "basin:space-watcher", Project: v.Project, Method: "basin.volumes.space",
			Resource: v.Name(), Err: err})
	}
	// Failover: a node that may have lost its serving lease takes its data
	// plane off the networks at once (the controller calls fence from its
	// watchdog), then stops serving and exits with ErrFenced.
	fenced := make(chan error, 1)
	fence := func(why string) {
		go func() {
			fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := dp.Fence(fctx)
			if err != nil {
				log.Error("fence: take the data plane down", "err", err)
			}
			fenced <- fmt.Errorf("%w: %s", ErrFenced, why)
		}()
	}
	// A failover node starts a sandbox on every network (Manager.Warm; one
	// after another: the data plane starts one at a time), ~3 s each.
	standby := func(ctx context.Context) {
		for _, n := range networks {
			if err := dp.Warm(ctx, n.Name); err != nil && ctx.Err() == nil {
				log.Warn("start the sandbox of a network, ready for volumes moving here", "network", n.Name, "err", err)
			}
		}
	}
	ctrl := controller.New(controller.Options{NodeID: nodeID, Cluster: cluster, Failover: cfg.Failover, Fence: fence, Standby: standby, FenceAddrs: fenceAddrs, Store: st, Backend: be, DataPlane: controller.AdaptDataPlane(dp), Logger: log.With("component", "controller"),
		StepDelay: cfg.FaultStepDelay, QoS: shaping, SMB: dp, Kerberos: dp, Secrets: state.secrets, OperationDone: operationDone(health),
		Resync: cfg.TestResyncInterval, HealthInterval: cfg.TestResyncInterval, SpaceNoted: spaceNoted,
		OnHealthChange: func(ctx context.Context, ch controller.HealthChange) error {
			return srv.RecordSystemCall(ctx, healthAudit(ch))
		}})
	registerController(reg, ctrl)
	if r, ok := be.(storeReporter); ok {
		reg.MustRegister(newStoreCollector(r))
	}
	// Every volume's metrics, sampled every 10 s; 5-minute rollups in the store;
	// what a restart takes up (counters' readings, the ring's last hour) in
	// the data directory.
	sampler := metrics.New(metrics.Options{Targets: metricsTargets{st: st, node: clusterNode, limits: cfg.Limits, qos: cfg.QoS}, NFS: dp,
		SMB: smbIO{dp}, QoS: tcCounters, Capacity: backendUsage{be}, Clients: metrics.NetnsClients{PID: dp.GaneshaPID}, Store: st,
		StateDir: filepath.Join(cfg.DataDir, "metrics"), Logger: log.With("component", "metrics")})
	reg.MustRegister(sampler.Collector())
	var ready atomic.Bool
	syncWait := cfg.SyncWait
	if syncWait == 0 {
		syncWait = -1 // answer at once
	}
	rateLimit := cfg.RateLimit
	if rateLimit == 0 {
		rateLimit = -1 // 0 on the command line: no limit
	}
	// The store's space and volumes' usage, read fresh, back the overcommit guard,
	// the store's room for new volumes and shrink checks.
	var capacity api.Capacity = be
	failedAuthLimit := cfg.FailedAuthLimit
	if failedAuthLimit == 0 {
		failedAuthLimit = -1 // 0 on the command line: no limit
	}
	srv = api.New(api.Options{Store: st, Auth: auth, Operations: ctrl, Locations: cfg.Locations, Networks: networks, Limits: cfg.Limits,
		NodeID: nodeID, Cluster: cluster,
		Logger: log.With("component", "api"), Ready: ready.Load, Health: ctrl, SyncWait: syncWait, RateLimit: rateLimit, AuditLog: state.audit,
		Capacity: capacity, OvercommitRatio: cfg.OvercommitRatio, FailedAuthLimit: failedAuthLimit,
		Secrets: state.secrets, DefaultThroughputCapMibps: cfg.ProjectThroughputCapMibps,
		OnSettingsChanged: func(project, location string) { ctrl.KickQoS() }, Metrics: sampler, ObserveRequest: health.ObserveRequest,
		ObserveCall: health.ObserveCall})

	ln, err := listen(cfg)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	reg.MustRegister(connCollector(ln))
	httpSrv := newHTTPServer(cfg, newMux(srv), ln)
	// The same API over gRPC, when asked for (internal/grpcapi).
	var grpcSrv *grpcServer
	if cfg.GRPCListen != "" {
		if grpcSrv, err = serveGRPC(cfg, srv, log.With("component", "grpc"), time.Now()); err != nil {
			ln.Close()
			return fmt.Errorf("grpc listen: %w", err)
		}
	}
	// Prometheus' /metrics, on an address of its own when asked for.
	var metricsSrv *http.Server
	metricsDone := make(chan error, 1)
	if cfg.MetricsListen != "" {
		mln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			ln.Close()
			if grpcSrv != nil {
				grpcSrv.Stop(ctx)
			}
			return fmt.Errorf("metrics listen: %w", err)
		}
		metricsSrv = newMetricsServer(reg, log.With("component", "metrics"))
		go func() {
			err := metricsSrv.Serve(mln)
			if !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics http", "err", err) // the API goes on without it
			}
			metricsDone <- err
		}()
	}

	// Volumes' snapshot policies: scheduled snapshots recorded through the API's
	// own intent layer, carried out by the controller, audited as Basin's own calls.
	sched := schedule.New(schedule.Options{NodeID: nodeID, Store: st, Intents: srv.Intents(), Wake: ctrl.Wake, Clock: snapshotClock(cfg, log),
		Logger: log.With("component", "schedule"), Audit: func(ctx context.Context, e schedule.Event) {
			srv.AuditSystemCall(ctx, api.SystemCall{Principal: "basin:snapshot-scheduler", Project: e.Project, Method: e.Method,
				Resource: e.Resource, RequestID: e.Operation, Err: e.Err})
		}})

	ctrlCtx, stopCtrl := context.WithCancel(context.Background())
	var shared string
	if cfg.Failover {
		if shared, err = sharedStorage(ctx, be); err != nil {
			stopCtrl()
			return fmt.Errorf("--failover: %w", err)
		}
	}
	if err := registerNode(ctrlCtx, st, model.Node{ID: nodeID, APIURL: nodeURL(cfg), Instance: token, Networks: networks, SharedStorage: shared, FenceAddrs: fenceAddrs}, be.StoreSpace,
		log.With("component", "nodes")); err != nil {
		stopCtrl()
		return fmt.Errorf("register node: %w", err)
	}
	if pg, ok := state.store.(*store.Postgres); ok {
		// Another node recorded or finished an operation: look for work, and
		// answer the API calls waiting for it.
		go pg.Listen(ctrlCtx, ctrl.Changed, func(err error) { log.Warn("listen for other nodes' operations", "err", err) })
	}
	ctrlDone := make(chan error, 1)
	go func() { ctrlDone <- ctrl.Run(ctrlCtx) }()
	samplerDone := make(chan error, 1)
	go func() {
		// New SMB connections are placed between passes too: a short one
		// still counts for its share.
		watched := make(chan struct{})
		go func() { dp.WatchSMB(ctrlCtx); close(watched) }()
		err := sampler.Run(ctrlCtx)
		<-watched
		samplerDone <- err
	}()
	schedDone := make(chan error, 1)
	go func() {
		// After the operations a previous run left are resumed: a catch-up sees
		// their snapshots.
		select {
		case <-ctrl.Ready():
			schedDone <- sched.Run(ctrlCtx)
		case <-ctrlCtx.Done():
			schedDone <- nil
		}
	}()
	httpDone := make(chan error, 1)
	go func() { httpDone <- httpSrv.Serve(ln) }()
	log.Info("basin serving", "listen", cfg.Listen, "metrics_listen", cfg.MetricsListen, "grpc_listen", cfg.GRPCListen, "data_dir", cfg.DataDir, "locations", cfg.Locations)

	ctrlReady := ctrl.Ready()
	var fenceErr error
	for serving := true; serving; {
		select {
		case <-ctrlReady:
			ready.Store(true)
			ctrlReady = nil
			log.Info("ready")
			notifySystemd(log, sdnotify.SdNotifyReady)
		case <-ctx.Done():
			serving = false
		case err := <-fenced:
			// The data plane is down; what serves no more is unmounted too
			// (a ceph-fuse mount's caps would hold up the node taking over).
			keep = false
			log.Error("fenced: this node stopped serving; start it again once it reaches the database", "err", err)
			fenceErr = err
			serving = false
		case err := <-httpDone:
			stopCtrl()
			<-ctrlDone
			<-samplerDone
			<-schedDone
			if metricsSrv != nil {
				metricsSrv.Close()
			}
			if grpcSrv != nil {
				grpcSrv.Stop(ctx)
			}
			return fmt.Errorf("http: %w", err)
		}
	}

	// Shutdown, in reverse order of dependence: stop taking requests, stop the
	// controller and the metrics sampler (which stores its rollups in progress),
	// then (deferred) stop the data plane, unmount storage and close the store.
	log.Info("shutting down")
	notifySystemd(log, sdnotify.SdNotifyStopping)
	ready.Store(false)
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := httpSrv.Shutdown(shutCtx); err != nil {
		log.Warn("http shutdown", "err", err)
	}
	if grpcSrv != nil {
		grpcSrv.Stop(shutCtx) // its calls are audited through srv, closed below
	}
	if metricsSrv != nil {
		if err := metricsSrv.Shutdown(shutCtx); err != nil {
			log.Warn("metrics http shutdown", "err", err)
		}
		<-metricsDone
	}
	srv.Close() // writes the refused calls still being aggregated, before the store closes
	if cfg.Failover && fenceErr == nil {
		// The data plane goes while this node still holds its serving lease:
		// no other node takes its volumes before that lease lapses, and none
		// of its endpoints outlives it.
		fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := dp.Fence(fctx); err != nil {
			log.Warn("take the data plane down", "err", err)
		}
		cancel()
	}
	stopCtrl()
	if err := <-ctrlDone; err != nil {
		log.Warn("controller", "err", err)
	}
	if err := <-samplerDone; err != nil {
		log.Warn("metrics", "err", err)
	}
	if err := <-schedDone; err != nil {
		log.Warn("snapshot schedules", "err", err)
	}
	return fenceErr
}

// Teardown takes down the data plane a stopped Basin left serving on cfg's data
// directory: sandboxes and their daemons, endpoint addresses, the bridges Basin
// created, volume mounts, loop devices and the store's. The data stays; the
// next start mounts and serves it again. It refuses while a Basin serves the
// data directory.
func Teardown(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer unlock()
	dp := dataplane.New(dataplane.Options{DataDir: cfg.DataDir, Networks: dataplaneNetworks(cfg),
		Ganesha: dataplane.Ganesha{Prefix: cfg.GaneshaPrefix}, Logger: log.With("component", "dataplane")})
	if err := dp.Teardown(ctx); err != nil {
		// Nothing of the storage goes while a sandbox may still hold it.
		return fmt.Errorf("data plane: %w", err)
	}
	// The storage as far as it goes: each step is tried whatever the one before did.
	var errs []error
	if be, err := newStorage(cfg, nil, log); err != nil {
		errs = append(errs, err)
	} else if err := be.Teardown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("storage: %w", err))
	} else {
		// The volume mounts' namespace (failover), once nothing is mounted.
		errs = append(errs, dataplane.RemoveRecordedMountLink(ctx, cfg.DataDir, nil))
	}
	run := runner.Exec{}
	for _, dir := range []string{filepath.Join(cfg.DataDir, "mounts"), filepath.Join(cfg.DataDir, "fs")} {
		errs = append(errs, dataplane.UnshareMounts(ctx, run, dir))
	}
	return errors.Join(errs...)
}

// dataplaneNetworks are cfg's networks in the data plane's terms.
func dataplaneNetworks(cfg config.Config) []dataplane.Network {
	var out []dataplane.Network
	for _, n := range cfg.Networks {
		out = append(out, dataplane.Network{Name: n.Name, Bridge: n.Bridge, Prefix: n.Prefix, FirstEndpoint: n.FirstEndpoint, LastEndpoint: n.LastEndpoint})
	}
	return out
}

// healthAudit is the audit entry of a volume going into ERROR because its
// storage failed (basin.volumes.storageFailed, with the words its stateDetails
// show), or back (basin.volumes.storageRecovered).
func healthAudit(ch controller.HealthChange) api.SystemCall {
	c := api.SystemCall{Principal: "basin:storage-health", Project: ch.Project, Method: "basin.volumes.storageRecovered",
		Resource: ch.Volume, Time: ch.Time, Details: "The volume's storage is healthy again."}
	if ch.Reason != "" {
		c.Method, c.Details = "basin.volumes.storageFailed", ch.Details
	}
	return c
}

// snapshotClock is the snapshot scheduler's clock: the wall clock, or for tests a
// faster one (config.TestSnapshotClockSpeed).
func snapshotClock(cfg config.Config, log *slog.Logger) schedule.Clock {
	if cfg.TestSnapshotClockSpeed > 1 {
		log.Warn("test mode: snapshot schedules run on a clock faster than the wall clock", "speed", cfg.TestSnapshotClockSpeed)
		start := cfg.TestSnapshotClockStart
		if start.IsZero() {
			start = time.Now()
		}
		return schedule.Dilated{Start: start, Speed: cfg.TestSnapshotClockSpeed}
	}
	return schedule.RealClock{}
}

// listen opens cfg.Listen, holding at most cfg.HTTP.MaxConns connections at once
// and cfg.HTTP.MaxConnsPerSource from one client. It never lets a connection wait
// to be accepted: at a cap, the connection that has waited longest for a request
// is closed to make room (internal/connlimit). (A cap that made new connections
// wait in the kernel's accept queue, as netutil.LimitListener does, let 600
// connections that sent nothing hold every slot until the header timeout cut
// them, and every API call waited up to that timeout.)
func listen(cfg config.Config) (*connlimit.Listener, error) {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, err
	}
	return connlimit.New(ln, connlimit.Options{Max: cfg.HTTP.MaxConns, PerSource: cfg.HTTP.MaxConnsPerSource}), nil
}

// newMux puts the REST API and the probes side by side; Basin's own pages (the
// console) go beside them. Prometheus' /metrics is not here: it has a listener of
// its own (--metrics-listen, newMetricsServer). Anything else is the API's 404. (ServeMux answers a
// path that is not clean, like "//" or "/v1", with a redirect to its clean form.)
func newMux(a *api.Server) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/v1/", a)
	mux.Handle("/healthz", a.Healthz())
	mux.Handle("/readyz", a.Readyz())
	// The web console: its files, and the exchange of a sign-in link for a session.
	mux.Handle("/console/", web.Console())
	mux.Handle("/console/signin", a.ConsoleSignIn())
	mux.Handle("/console/signout", a.ConsoleSignIn())
	mux.Handle("/", a)
	return mux
}

// newHTTPServer returns the API's HTTP server, bounded by cfg.HTTP so that slow or
// idle clients cannot hold connections (and memory) for long. It tells ln which
// of its connections are busy with a request.
func newHTTPServer(cfg config.Config, h http.Handler, ln *connlimit.Listener) *http.Server {
	lim := cfg.HTTP
	write := lim.WriteTimeout
	if write == 0 {
		// From the end of the headers: the body, a handler that may wait
		// --sync-wait for its operation, and the answer.
		write = lim.ReadTimeout + max(cfg.SyncWait, 0) + 30*time.Second
	}
	return &http.Server{Handler: h, ReadHeaderTimeout: lim.ReadHeaderTimeout, ReadTimeout: lim.ReadTimeout,
		WriteTimeout: write, IdleTimeout: lim.IdleTimeout, MaxHeaderBytes: lim.MaxHeaderBytes, ConnState: ln.ConnState}
}
