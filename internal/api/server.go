// Package api serves Basin's REST API: the NetApp Volumes v1 wire format (docs/api.md) on
// /v1/, and the /healthz and /readyz probes as handlers of their own (Healthz,
// Readyz) that the daemon mounts beside it. It authenticates every /v1/ request,
// validates input before writing anything, records intent and an operation in one
// transaction, wakes the controller, and maps errors to HTTP/gRPC statuses in one
// place (errors.go).
//
// A tour: routes.go is the route table, every method with the permission it needs
// (or why it needs none) and its handler; router.go matches requests to it, checks
// the permission and the project and location a path names, and refuses at New a
// table with a route that says nothing about permissions. The handlers live with
// their resources (pools.go, volumes.go, snapshots.go, ads.go, operations.go,
// iamapi.go, locations.go, settings.go for the Basin-only project settings and
// metrics.go for the Basin-only volume, pool and location metrics);
// audit.go and limits.go record and limit calls.
//
// It depends on model, apiv1, store, iam and secret (to seal secrets before they are
// stored), on the controller only through the small Operations interface and on the
// storage backend only through Capacity; it never touches the data plane.
package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/intent"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/secret"
	"github.com/basin-nas/basin/internal/store"
)

// Authenticator verifies an Authorization header value.
type Authenticator interface {
	Authenticate(ctx context.Context, header string) (*iam.Principal, error)
}

// Sealer seals a secret for storage, bound to aad (where it belongs); see
// internal/secret.
type Sealer interface {
	Seal(plaintext, aad string) (string, error)
}

// Operations is what the API needs of the controller.
type Operations interface {
	// Wake asks for pending operations to be run.
	Wake()
	// WaitDone waits for an operation to finish, until ctx ends.
	WaitDone(ctx context.Context, name string) bool
	// MoveVolumes asks for the volumes' hostings to be planned now: a node
	// was drained or undrained.
	MoveVolumes()
}

// Health is the storage's health as the controller observes it (without the
// database, which may be on the failing disk).
type Health interface {
	// VolumeFault returns why the storage of the volume with storage key cannot
	// be trusted with writes, in words for its users; "" if it can.
	VolumeFault(key string) string
	// NotReady returns in a few words, naming no volume, why the node should not
	// be given new work; "" if it may.
	NotReady() string
}

// Options configures a Server.
type Options struct {
	Store store.Store
	// Auth verifies tokens; nil disables authentication (--insecure-no-auth). If it
	// is also a TokenIssuer, /token exchanges assertions for access tokens.
	Auth       Authenticator
	Operations Operations
	// Locations served; default ["local"].
	Locations []string
	// Networks pools may name; default one network "default" on 10.99.0.0/24. A
	// network without an endpoint range gets model.DefaultEndpoints.
	Networks []model.Network
	// NodeID is this node's ID; Cluster says the store is shared by several
	// nodes (intent.Options): volumes are placed among them, and a volume
	// whose node is down shows so.
	NodeID  string
	Cluster bool
	Limits  model.Limits
	Logger  *slog.Logger
	// Now returns the current time; nil = time.Now.
	Now func() time.Time
	// SyncWait is how long a mutating call waits for its operation before answering
	// with it still running; fast operations (most) are answered done. Default 2 s;
	// negative = answer at once.
	SyncWait time.Duration
	// Ready reports whether the service can take requests (for /readyz).
	Ready func() bool
	// Health is what the controller last observed of the storage's health: a
	// volume whose storage failed is shown in ERROR with its words, and /readyz
	// fails while any does. nil = volumes show their records' state.
	Health Health
	// RateLimit is how many requests a principal (or, unauthenticated, an address)
	// may make per minute; 0 = 1200, negative = unlimited.
	RateLimit int
	// FailedAuthLimit is how many requests with missing or invalid credentials an
	// address may make per minute before they are answered 429 (checked after
	// authentication, so valid tokens from that address still work); 0 = 60,
	// negative = unlimited.
	FailedAuthLimit int
	// RefusalAuditInterval: unauthenticated and rate-limited calls are audited (and
	// logged) in aggregate, at most one entry per client address or principal per
	// interval, carrying the count; 0 = 1 minute.
	RefusalAuditInterval time.Duration
	// AuditLog receives one JSON line per mutating or refused call; nil = none
	// (entries are still kept in the store).
	AuditLog io.Writer
	// Secrets seals secrets before they are stored (the AD join password); nil = a
	// key made here and never stored, so sealed values cannot be opened after the
	// process exits (for tests).
	Secrets Sealer
	// Capacity reads the node store's space and volumes' usage; nil = no capacity
	// guard (pools are not checked against the store, volumes not against its
	// free space, shrinks against the last observed usage).
	Capacity Capacity
	// OvercommitRatio: Σ capacity of all pools on the node may reach this many times
	// the store's size; 0 = 1.0.
	OvercommitRatio float64
	// DefaultThroughputCapMibps is a project's throughput cap (MiB/s, per project
	// and location) where its settings set none; 0 = no cap.
	DefaultThroughputCapMibps float64
	// OnSettingsChanged, if set, is called after a project's settings changed.
	OnSettingsChanged func(project, location string)
	// Metrics answers volume metrics queries; nil = none collected (the metrics
	// route answers 501).
	Metrics Metrics
	// ObserveRequest, if set, is called once per request answered (the API's and
	// the probes'), with its method, route (the route table's pattern,
	// RouteUnmatched for a request no route matches, or the probe's path: never
	// the request's own path), status code and duration (internal/metrics.Health).
	ObserveRequest func(method, route string, code int, d time.Duration)
	// ObserveCall, if set, is called once per call of another transport
	// answered (Call.End), with the transport's method name (gRPC: the full
	// method name), the canonical code answered ("OK", "NOT_FOUND", …) and
	// the call's duration from Begin (internal/metrics.Health).
	ObserveCall func(method, code string, d time.Duration)
}

// RouteUnmatched is the route of requests no route matches (ObserveRequest).
const RouteUnmatched = "unmatched"

// Server is the HTTP handler.
type Server struct {
	opts   Options
	st     store.Store
	log    *slog.Logger
	now    func() time.Time
	limits *limiter
	// authFailures limits requests with invalid credentials, per address.
	authFailures *limiter
	refusals     *refusals
	auditMu      sync.Mutex
	// intent records intents (see intents()).
	intent     *intent.Service
	intentOnce sync.Once
	routes     *router
	// console holds the web console's sign-in links and sessions (console.go).
	console *consoleAuth
	// nodes caches the nodes' records for volumeToWire (nodes.go).
	nodes nodeCache
}

// New returns a Server serving the route table (routes.go). It panics if the table
// is malformed, or has a route that neither names a permission nor is declared
// Public: the API does not start with a route open by omission.
func New(opts Options) *Server { return newServer(opts, apiRoutes) }

func newServer(opts Options, table []Route) *Server {
	routes, err := compileRoutes(table)
	if err != nil {
		panic(fmt.Sprintf("api: route table: %v", err))
	}
	if len(opts.Locations) == 0 {
		opts.Locations = []string{"local"}
	}
	opts.Networks = model.NetworksOrDefault(opts.Networks)
	if opts.Limits == (model.Limits{}) {
		opts.Limits = model.DefaultLimits()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.SyncWait == 0 {
		opts.SyncWait = 2 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.RateLimit == 0 {
		opts.RateLimit = 1200
	}
	if opts.OvercommitRatio <= 0 || math.IsNaN(opts.OvercommitRatio) {
		opts.OvercommitRatio = 1
	}
	if opts.Secrets == nil {
		opts.Secrets = secret.NewEphemeral()
	}
	if opts.FailedAuthLimit == 0 {
		opts.FailedAuthLimit = 60
	}
	if opts.RefusalAuditInterval <= 0 {
		opts.RefusalAuditInterval = time.Minute
	}
	s := &Server{opts: opts, st: opts.Store, log: log, now: opts.Now,
		limits: newLimiter(opts.RateLimit), authFailures: newLimiter(opts.FailedAuthLimit), routes: routes,
		console: newConsoleAuth()}
	s.refusals = &refusals{s: s, interval: opts.RefusalAuditInterval, keys: map[string]*refusalState{}}
	if opts.Cluster && opts.Store != nil {
		s.nodes.start(s)
	}
	return s
}

// request is one API call in flight.
type request struct {
	w         http.ResponseWriter
	r         *http.Request
	ctx       context.Context
	q         url.Values
	principal *iam.Principal
	// refusedAs is the account a refused credential names verifiably (signed
	// with its key: a disabled account's token), for the audit log and the log;
	// principal stays nil.
	refusedAs string
	id        string
	status    int
	err       error // the error answered, for the audit log
	// aggregate marks a refused call (unauthenticated, rate-limited) that is audited
	// and logged only in aggregate; reason is why, for the log.
	aggregate bool
	reason    string
	// project, perm and resource say what the call is: its project, the permission
	// it needs ("" = none) and the resource it acts on.
	project, perm, resource string
	// admin: the route is the service administrator's (Route.Admin).
	admin bool
	// segs and verb are the URL path's segments ("v1", "projects", …) and the
	// ":verb" split off the last one.
	segs []string
	verb string
	// route is the matched route's pattern, or a probe's path; "" = unmatched.
	route string
	// rpc describes a call of another transport (Call); r and w are then nil.
	rpc *rpcCall
}

// rpcCall is what the audit needs of a call of another transport than REST.
type rpcCall struct {
	method, remote string
	read           bool
}

// remote is the caller's address.
func (rq *request) remote() string {
	if rq.rpc != nil {
		return rq.rpc.remote
	}
	return rq.r.RemoteAddr
}

const maxBody = 1 << 20

// ServeHTTP implements http.Handler: it serves /v1/ and the token endpoint
// (/token, token.go), and answers anything else 404.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == iam.TokenPath {
		s.serve(w, r, slog.LevelInfo, s.serveToken)
		return
	}
	s.serve(w, r, slog.LevelInfo, s.serveAPI)
}

// serve runs h for one request: it gives the request an ID, recovers a panic into a
// 500, and logs the request at level (refused calls at debug: they are logged in
// aggregate, see refusals).
func (s *Server) serve(w http.ResponseWriter, r *http.Request, level slog.Level, h func(*request)) {
	start := time.Now()
	rq := &request{w: w, r: r, ctx: r.Context(), id: newID(8)}
	w.Header().Set("X-Request-Id", rq.id)
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("panic serving request", "panic", p, "path", r.URL.Path, "request_id", rq.id)
			s.writeError(rq, fmt.Errorf("internal error (request %s)", rq.id))
		}
		principal := rq.refusedAs
		if rq.principal != nil {
			principal = rq.principal.Email
		}
		level := level
		if rq.aggregate {
			level = slog.LevelDebug
		}
		took := time.Since(start)
		s.log.Log(r.Context(), level, "request", "method", r.Method, "path", r.URL.Path, "status", rq.status,
			"principal", principal, "request_id", rq.id, "remote", r.RemoteAddr, "duration", took.Round(time.Microsecond))
		if s.opts.ObserveRequest != nil {
			route, code := rq.route, rq.status
			if route == "" {
				route = RouteUnmatched
			}
			if code == 0 {
				code = http.StatusOK // nothing written: net/http answers 200
			}
			s.opts.ObserveRequest(r.Method, route, code, took)
		}
	}()
	h(rq)
}

// serveAPI authenticates a /v1/ request, matches it to the route table, and
// authorizes and serves it (serveV1).
func (s *Server) serveAPI(rq *request) {
	r := rq.r
	if !strings.HasPrefix(r.URL.Path, "/v1/") {
		s.writeError(rq, model.Errorf(model.ErrNotFound, "The requested URL %s was not found on this server", r.URL.Path))
		return
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		s.writeError(rq, model.Invalid("query", "malformed query string: %v", err))
		return
	}
	// $alt=json;enum-encoding=int (sent by the Python client) is accepted; Basin
	// answers with enum names, which every client parses (docs/api.md, "Wire format").
	rq.q = q
	rq.segs, rq.verb = splitPath(r.URL.Path)
	route, vars := s.routes.lookup(r.Method, rq.segs, rq.verb)
	var inProject bool
	if rq.project, inProject = projectOf(rq.segs); inProject {
		rq.resource = strings.Join(rq.segs[1:], "/")
	}
	if route != nil {
		rq.route = route.Pattern
		rq.perm, rq.admin = route.Perm, route.Admin != ""
		if id := q.Get(route.CreateID); route.CreateID != "" && id != "" {
			rq.resource += "/" + id
		}
	}
	defer s.audit(rq)
	if err := checkSameOrigin(r); err != nil {
		rq.aggregate, rq.reason = true, "cross-origin"
		s.writeError(rq, err)
		return
	}
	if s.opts.Auth != nil {
		p, err := s.authenticate(r)
		if err != nil {
			s.authFailed(rq, err)
			return
		}
		rq.principal = p
	}
	if s.rateLimited(rq) {
		return
	}
	s.serveV1(rq, route, vars)
}

// readBody decodes the JSON body into out and returns the fields present.
func (s *Server) readBody(rq *request, out any) (map[string]bool, error) {
	body, err := io.ReadAll(http.MaxBytesReader(rq.w, rq.r.Body, maxBody))
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		return nil, model.Invalid("body", "is larger than 1 MiB (%d bytes)", maxBody)
	}
	if err != nil {
		// A network error (the read timeout, a reset): the detail is for the log.
		s.log.Debug("request body not read", "err", err, "request_id", rq.id)
		return nil, model.Invalid("body", "could not be read completely (sent too slowly, or the connection failed)")
	}
	return decodeBody(body, out)
}

// decodeBody decodes a JSON request body into out and returns the fields
// present; a malformed one is INVALID_ARGUMENT naming the field.
func decodeBody(body []byte, out any) (map[string]bool, error) {
	present, err := apiv1.Decode(body, out)
	if err != nil {
		var fe *apiv1.FieldError
		if errors.As(err, &fe) {
			field := fe.Field
			if field == "" {
				field = "body"
			}
			return nil, model.Invalid(field, "%s", fe.Msg)
		}
		return nil, model.Invalid("body", "%v", err)
	}
	return present, nil
}

// marshal encodes v as the API answers: compact JSON without HTML escaping (mount
// instructions carry "&&").
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func (s *Server) writeJSON(rq *request, status int, v any) {
	b, err := marshal(v)
	if err != nil {
		s.log.Error("encode response", "err", err, "request_id", rq.id)
		s.writeError(rq, fmt.Errorf("encode response: %w", err))
		return
	}
	rq.status = status
	rq.w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	rq.w.WriteHeader(status)
	rq.w.Write(b)
}

type parent struct{ project, location string }

func (p parent) name() string { return model.LocationName(p.project, p.location) }

func (s *Server) notFound(rq *request) {
	s.writeError(rq, model.Errorf(model.ErrNotFound, "Method %s %s is not defined by this API", rq.r.Method, rq.r.URL.Path))
}

func (s *Server) unimplemented(rq *request) {
	s.writeError(rq, Unimplemented(rq.r.Method+" "+rq.r.URL.Path))
}

var (
	projectRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	idRE      = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)
)

// checkPathID validates an ID taken from the URL path of a get/update/delete: a
// malformed one cannot exist.
func checkPathID(kind, id string) error {
	if !idRE.MatchString(id) {
		return model.Errorf(model.ErrNotFound, "%s '%s' was not found", kind, id)
	}
	return nil
}

func newID(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func parseTime(s string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}

// Close writes what is still pending (refused calls being aggregated). Call it after
// the HTTP server has shut down.
func (s *Server) Close() error {
	s.refusals.close()
	s.nodes.close()
	return nil
}
