package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// Route is one method of the REST API: what requests it matches, what a caller
// needs to call it, and what serves it. The table of them (routes.go) is the only
// place that decides both dispatch and authorization; a request no route matches
// needs no permission because it does no work (it is answered 404, or 400 for a bad
// project or location).
type Route struct {
	// Method is the HTTP method, or "*" for a route that answers every method
	// alike (the methods Basin does not implement).
	Method string
	// Pattern is the URL path: "/"-separated segments, each a literal or a
	// {variable} matching any one segment; the last segment may end in ":verb".
	// A final "/**" matches any further segments and any verb (zero or more).
	Pattern string
	// Perm is the iam permission the caller needs on the route's {project}.
	Perm string
	// Public, instead of Perm, declares that the route needs no permission and
	// says why. The caller is authenticated all the same. A route must set exactly
	// one of Perm, Public and Admin: a table with a route that sets none is
	// refused (compileRoutes), so no route is open by omission.
	Public string
	// Admin, instead of Perm, makes the route the service administrator's alone
	// (Basin's owner account, iam.Principal.Owner) and says what it is: it spans
	// every project (the nodes), so no project's roles, roles/owner included,
	// grant it.
	Admin string
	// CreateID names the query parameter carrying the ID of the resource a create
	// makes; a denial then names that resource (path + "/" + ID).
	CreateID string
	// Handle serves the request, once the caller is authorized and the path's
	// project and location are known to be valid. vars holds the pattern's
	// variables.
	Handle func(s *Server, rq *request, vars pathVars)
}

// pathVars are the values of a pattern's {variables}.
type pathVars map[string]string

// parent is the location a collection lives in.
func (v pathVars) parent() parent { return parent{project: v["project"], location: v["location"]} }

// pattern is a compiled Route.Pattern.
type pattern struct {
	segs []string // a literal, or "" for a variable (named in vars)
	vars []string // the variable name of each segment, or ""
	verb string
	rest bool // ends in "/**"
}

func compilePattern(s string) (*pattern, error) {
	if !strings.HasPrefix(s, "/") {
		return nil, errors.New("does not start with /")
	}
	p := &pattern{}
	parts := strings.Split(s[1:], "/")
	if parts[len(parts)-1] == "**" {
		p.rest, parts = true, parts[:len(parts)-1]
	}
	if last := parts[len(parts)-1]; strings.Contains(last, ":") {
		i := strings.LastIndex(last, ":")
		parts[len(parts)-1], p.verb = last[:i], last[i+1:]
		if p.verb == "" || p.rest {
			return nil, errors.New("empty verb, or a verb before /**")
		}
	}
	for _, part := range parts {
		switch {
		case part == "" || strings.ContainsAny(part, "*:"):
			return nil, fmt.Errorf("bad segment %q", part)
		case strings.HasPrefix(part, "{") && strings.HasSuffix(part, "}"):
			name := part[1 : len(part)-1]
			if name == "" || strings.ContainsAny(name, "{}") || slices.Contains(p.vars, name) {
				return nil, fmt.Errorf("bad or repeated variable %q", part)
			}
			p.segs, p.vars = append(p.segs, ""), append(p.vars, name)
		case strings.ContainsAny(part, "{}"):
			return nil, fmt.Errorf("bad segment %q", part)
		default:
			p.segs, p.vars = append(p.segs, part), append(p.vars, "")
		}
	}
	return p, nil
}

// match reports whether the request path (segments, the last one's verb split off)
// matches, and the variables if it does. With prefix, only the pattern's segments
// need to match (the request may go on); the verb is then ignored.
func (p *pattern) match(segs []string, verb string, prefix bool) (pathVars, bool) {
	switch {
	case len(segs) < len(p.segs):
		return nil, false
	case prefix || p.rest:
	case len(segs) != len(p.segs) || verb != p.verb:
		return nil, false
	}
	var vars pathVars
	for i, lit := range p.segs {
		if name := p.vars[i]; name != "" {
			if vars == nil {
				vars = pathVars{}
			}
			vars[name] = segs[i]
		} else if segs[i] != lit {
			return nil, false
		}
	}
	return vars, true
}

// overlaps reports whether some request could match both patterns.
func (p *pattern) overlaps(q *pattern) bool {
	if !p.rest && q.rest {
		p, q = q, p
	}
	switch {
	case !p.rest: // neither ends in "**": same length, same verb
		if len(p.segs) != len(q.segs) || p.verb != q.verb {
			return false
		}
	case !q.rest: // only p does: q must reach past p's prefix
		if len(q.segs) < len(p.segs) {
			return false
		}
	}
	for i := range min(len(p.segs), len(q.segs)) {
		if p.vars[i] == "" && q.vars[i] == "" && p.segs[i] != q.segs[i] {
			return false
		}
	}
	return true
}

// compiledRoute is a Route with its pattern compiled.
type compiledRoute struct {
	Route
	pat *pattern
}

// router matches requests to the route table.
type router struct {
	routes []compiledRoute
}

// compileRoutes checks and compiles a route table. It refuses a route that neither
// names a permission nor declares itself Public (and one that does both), a
// permission iam does not know, a route with a permission outside a {project},
// malformed patterns, and two routes that could match the same request.
func compileRoutes(table []Route) (*router, error) {
	known := iam.Permissions()
	rt := &router{}
	var errs []error
	for _, r := range table {
		name := r.Method + " " + r.Pattern
		pat, err := compilePattern(r.Pattern)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("route %s: pattern: %w", name, err))
			continue
		case r.Perm == "" && r.Public == "" && r.Admin == "":
			errs = append(errs, fmt.Errorf("route %s: neither a permission nor Public nor Admin: every route must say what a caller needs", name))
		case (r.Perm != "") && (r.Public != "") || (r.Perm != "" || r.Public != "") && r.Admin != "":
			errs = append(errs, fmt.Errorf("route %s: both a permission and Public, or either and Admin", name))
		case r.Perm != "" && !slices.Contains(known, r.Perm):
			errs = append(errs, fmt.Errorf("route %s: unknown permission %q", name, r.Perm))
		case r.Perm != "" && !slices.Contains(pat.vars, "project"):
			errs = append(errs, fmt.Errorf("route %s: a permission is checked on a project, and the pattern has no {project}", name))
		case r.Handle == nil:
			errs = append(errs, fmt.Errorf("route %s: no handler", name))
		case r.Method == "":
			errs = append(errs, fmt.Errorf("route %s: no method", name))
		case !strings.HasPrefix(r.Pattern, "/v1/"):
			errs = append(errs, fmt.Errorf("route %s: the API serves /v1/ only", name))
		case r.CreateID != "" && r.Method != http.MethodPost:
			errs = append(errs, fmt.Errorf("route %s: CreateID on a method other than POST", name))
		}
		for _, o := range rt.routes {
			if (o.Method == r.Method || o.Method == "*" || r.Method == "*") && o.pat.overlaps(pat) {
				errs = append(errs, fmt.Errorf("route %s: overlaps route %s %s", name, o.Method, o.Pattern))
			}
		}
		rt.routes = append(rt.routes, compiledRoute{Route: r, pat: pat})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return rt, nil
}

// splitPath turns /v1/a/b/c:verb into its segments ("v1", "a", "b", "c") and the
// verb (the last segment's text after its last ':').
func splitPath(path string) ([]string, string) {
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	verb := ""
	if last := segs[len(segs)-1]; strings.Contains(last, ":") {
		i := strings.LastIndex(last, ":")
		segs[len(segs)-1], verb = last[:i], last[i+1:]
	}
	return segs, verb
}

// lookup returns the route matching the request, if any, and its variables.
func (rt *router) lookup(method string, segs []string, verb string) (*compiledRoute, pathVars) {
	for i := range rt.routes {
		r := &rt.routes[i]
		if r.Method != method && r.Method != "*" {
			continue
		}
		if vars, ok := r.pat.match(segs, verb, false); ok {
			return r, vars
		}
	}
	return nil, nil
}

// A scope is a check that applies to every request under a path prefix, routed or
// not, once the caller is authorized: a project name must be valid, a location
// served. They run in order; the first error is the answer.
type scope struct {
	pat   *pattern
	check func(s *Server, rq *request, vars pathVars) error
}

var scopes = []scope{
	{mustPattern("/v1/projects/{project}"), func(s *Server, rq *request, v pathVars) error {
		return checkProject(v["project"])
	}},
	{mustPattern("/v1/projects/{project}/locations/{location}"), func(s *Server, rq *request, v pathVars) error {
		const listSegs = 6 // v1 projects {project} locations - {collection}
		list := len(rq.segs) == listSegs && rq.verb == "" && rq.r.Method == http.MethodGet
		return s.checkLocation(v["project"], v["location"], list)
	}},
	{mustPattern("/v1/projects/{project}/locations/{location}/volumes/{volume}/snapshots"), func(s *Server, rq *request, v pathVars) error {
		return checkPathID("Volume", v["volume"])
	}},
}

// checkProject refuses a malformed project ID.
func checkProject(project string) error {
	if !projectRE.MatchString(project) {
		return model.Invalid("name", "invalid project %q", project)
	}
	return nil
}

// checkLocation refuses a location Basin does not serve. "-" lists across
// locations (GET …/locations/-/{collection}): it is valid only when list is.
func (s *Server) checkLocation(project, location string, list bool) error {
	if location == "-" {
		if !list {
			return model.Invalid("name", "location \"-\" is only valid when listing")
		}
	} else if !slices.Contains(s.opts.Locations, location) {
		return model.Errorf(model.ErrNotFound, "Location '%s' was not found", model.LocationName(project, location))
	}
	return nil
}

func mustPattern(s string) *pattern {
	p, err := compilePattern(s)
	if err != nil {
		panic(fmt.Sprintf("pattern %s: %v", s, err))
	}
	return p
}

// projectOf returns the project a request path names, for the audit log and
// authorization, and whether it names one (as /v1/projects/{project}/…).
func projectOf(segs []string) (string, bool) {
	v, ok := scopes[0].pat.match(segs, "", true)
	return v["project"], ok
}

// serveV1 answers an authenticated, rate-checked /v1/ request: it authorizes the
// matched route, runs the scope checks and the route's handler; a request no route
// matches is answered after the scope checks with 404 and does no work.
func (s *Server) serveV1(rq *request, r *compiledRoute, vars pathVars) {
	if r != nil {
		if err := s.authorize(rq); err != nil {
			s.writeError(rq, err)
			return
		}
	}
	for _, sc := range scopes {
		if v, ok := sc.pat.match(rq.segs, rq.verb, true); ok {
			if err := sc.check(s, rq, v); err != nil {
				s.writeError(rq, err)
				return
			}
		}
	}
	if r == nil {
		s.notFound(rq)
		return
	}
	r.Handle(s, rq, vars)
}

// authorize checks the caller's permission on the request's project, or that
// the caller is the service's administrator (an Admin route).
func (s *Server) authorize(rq *request) error {
	if s.opts.Auth == nil {
		return nil
	}
	if rq.admin {
		if rq.principal != nil && rq.principal.Owner {
			return nil
		}
		return model.Errorf(model.ErrPermissionDenied, "Only the administrator of this Basin service may call %s %s", rq.r.Method, rq.r.URL.Path)
	}
	return s.Authorize(rq.ctx, rq.principal, rq.project, rq.perm, rq.resource)
}

// Authorize checks that principal holds permission perm ("" = none needed) on
// project, for a call on resource (named in the denial). With authentication off
// (Options.Auth nil) every call is allowed.
func (s *Server) Authorize(ctx context.Context, principal *iam.Principal, project, perm, resource string) error {
	if s.opts.Auth == nil || perm == "" {
		return nil
	}
	var pol *model.IAMPolicy
	err := s.st.View(ctx, func(tx store.Tx) (err error) {
		pol, err = store.Get[model.IAMPolicy](tx, store.KindIAMPolicy, "projects/"+project)
		if errors.Is(err, model.ErrNotFound) {
			pol, err = nil, nil
		}
		return err
	})
	if err != nil {
		return err
	}
	if !iam.Allowed(principal, pol, perm) {
		return model.Errorf(model.ErrPermissionDenied, "Permission '%s' denied on resource '%s' (or it may not exist)", perm, resource)
	}
	return nil
}
