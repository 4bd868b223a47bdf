package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
)

// The web console's sign-in (docs/console.md). A caller, usually the owner through
// `basin console`, asks for a one-time sign-in link (POST /v1/consoleSignInLinks);
// its code travels in the link's fragment, which browsers never send to a server.
// The console posts the code to /console/signin once, and gets a console session
// token in exchange: random, kept here only as its SHA-256, valid for an hour, and
// worth exactly the permissions of the caller who made the link. Sessions live in
// memory: a restart signs every console out. A link and its session are bound to
// the key whose credential made the link (a link made from a session, to that
// session's key): deleting the key, its expiry, or disabling or deleting the
// account ends them at once (checked on every request and at the exchange), and
// enabling the account again revives none made before the disable (iam Recheck).

const (
	// signInLinkTTL is how long a sign-in link can be used (once).
	signInLinkTTL = 5 * time.Minute
	// consoleSessionTTL is how long a console session lasts.
	consoleSessionTTL = time.Hour
	// consoleTokenPrefix marks a console session token, which Basin checks itself
	// instead of passing it to the Authenticator.
	consoleTokenPrefix = "basin-console."
	// maxConsoleGrants bounds the links and sessions held in memory.
	maxConsoleGrants = 10000
)

// consoleGrant is what a sign-in code or a session token stands for.
type consoleGrant struct {
	email string
	// keyID is the key the link's maker authenticated with, and issued when the
	// first link of the chain was made: the grant dies with the key, and with a
	// disable of the account after issued.
	keyID   string
	issued  time.Time
	expires time.Time
	// sessionEnd, on a link made from a console session, is when that session
	// ends: the session the link is exchanged for ends then too (zero = no bound).
	sessionEnd time.Time
}

// consoleAuth holds the pending sign-in codes and the live sessions, by the SHA-256
// of the secret.
type consoleAuth struct {
	mu       sync.Mutex
	links    map[[32]byte]consoleGrant
	sessions map[[32]byte]consoleGrant
}

func newConsoleAuth() *consoleAuth {
	return &consoleAuth{links: map[[32]byte]consoleGrant{}, sessions: map[[32]byte]consoleGrant{}}
}

// add stores a new secret for g in m and returns it; it first drops expired entries,
// and refuses when too many are held.
func (c *consoleAuth) add(m map[[32]byte]consoleGrant, prefix string, g consoleGrant, now time.Time) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range m {
		if !now.Before(v.expires) {
			delete(m, k)
		}
	}
	if len(m) >= maxConsoleGrants {
		return "", model.Errorf(model.ErrResourceExhausted, "too many console sign-ins pending; try again later")
	}
	b := make([]byte, 32)
	rand.Read(b)
	secret := prefix + base64.RawURLEncoding.EncodeToString(b)
	m[sha256.Sum256([]byte(secret))] = g
	return secret, nil
}

// take returns the grant of a sign-in code and forgets the code: a code works once.
func (c *consoleAuth) take(code string, now time.Time) (consoleGrant, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := sha256.Sum256([]byte(code))
	g, ok := c.links[k]
	delete(c.links, k)
	return g, ok && now.Before(g.expires)
}

// session returns the grant of a live session token.
func (c *consoleAuth) session(token string, now time.Time) (consoleGrant, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.sessions[sha256.Sum256([]byte(token))]
	return g, ok && now.Before(g.expires)
}

func (c *consoleAuth) endSession(token string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.sessions, sha256.Sum256([]byte(token)))
}

// bearerToken is the token of an Authorization header, "" if none.
func bearerToken(r *http.Request) string { return bearerOf(r.Header.Get("Authorization")) }

// bearerOf is the token of an Authorization value ("Bearer TOKEN"), "" if none.
func bearerOf(authorization string) string {
	tok, _ := strings.CutPrefix(authorization, "Bearer ")
	return strings.TrimSpace(tok)
}

// authenticate verifies the request's credentials (authenticateValue).
func (s *Server) authenticate(r *http.Request) (*iam.Principal, error) {
	return s.authenticateValue(r.Context(), r.Header.Get("Authorization"))
}

// authenticateValue verifies an Authorization value, whatever transport carried
// it: a console session token here, anything else with the Authenticator.
func (s *Server) authenticateValue(ctx context.Context, authorization string) (*iam.Principal, error) {
	tok := bearerOf(authorization)
	if !strings.HasPrefix(tok, consoleTokenPrefix) {
		return s.opts.Auth.Authenticate(ctx, authorization)
	}
	g, ok := s.console.session(tok, s.now())
	if !ok {
		return nil, model.Errorf(model.ErrUnauthenticated, "console session unknown or expired")
	}
	p, err := s.recheckConsole(ctx, g)
	if err != nil {
		if errors.Is(err, model.ErrUnauthenticated) {
			s.console.endSession(tok) // dead for good
		}
		return nil, fmt.Errorf("console session of %s: %w", g.email, err)
	}
	return p, nil
}

// publicReason is what the holder of a refused console grant is told.
func publicReason(err error) string {
	var pub interface{ Public() string }
	if errors.As(err, &pub) && pub.Public() != "" {
		return pub.Public()
	}
	return "its key or account no longer allows it"
}

// keyRechecker is what console grants are checked against: the Authenticator's
// view of a key and its account now (iam.Authenticator.Recheck).
type keyRechecker interface {
	Recheck(ctx context.Context, keyID string, issued time.Time) (*iam.Principal, error)
}

// recheckConsole returns the principal of a console grant, or why the grant is
// dead: its key deleted or expired, its account disabled (now or since the grant
// was issued) or deleted.
func (s *Server) recheckConsole(ctx context.Context, g consoleGrant) (*iam.Principal, error) {
	rc, ok := s.opts.Auth.(keyRechecker)
	if !ok || g.keyID == "" {
		return nil, model.Errorf(model.ErrUnauthenticated, "console sessions need key-based authentication")
	}
	p, err := rc.Recheck(ctx, g.keyID, g.issued)
	if err != nil {
		return nil, err
	}
	if p.Email != g.email {
		return nil, model.Errorf(model.ErrUnauthenticated, "the key now belongs to another account")
	}
	return p, nil
}

// createSignInLink answers POST /v1/consoleSignInLinks: a one-time code that signs
// the console in as the caller. A link made from a console session ends when that
// session does, so links cannot stretch a session.
func (s *Server) createSignInLink(rq *request) {
	if rq.principal == nil {
		s.writeError(rq, model.Errorf(model.ErrFailedPrecondition, "authentication is off (--insecure-no-auth): open /console/ and sign in with any key file"))
		return
	}
	var req struct{}
	if _, err := s.readBody(rq, &req); err != nil {
		s.writeError(rq, err)
		return
	}
	now := s.now()
	if rq.principal.KeyID == "" {
		s.writeError(rq, model.Errorf(model.ErrFailedPrecondition, "sign-in links are made with a service-account key's credentials"))
		return
	}
	g := consoleGrant{email: rq.principal.Email, keyID: rq.principal.KeyID, issued: now, expires: now.Add(signInLinkTTL)}
	if tok := bearerToken(rq.r); strings.HasPrefix(tok, consoleTokenPrefix) {
		if sg, ok := s.console.session(tok, now); ok {
			g.issued = sg.issued
			g.sessionEnd = sg.expires
			if g.expires.After(sg.expires) {
				g.expires = sg.expires
			}
		}
	}
	code, err := s.console.add(s.console.links, "", g, now)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	rq.w.Header().Set("Cache-Control", "no-store")
	s.writeJSON(rq, http.StatusOK, map[string]string{"path": "/console/#signin=" + code,
		"expireTime": apiv1.FormatTime(g.expires), "principal": g.email})
}

// ConsoleSignIn serves POST /console/signin (the exchange of a sign-in link's code
// for a console session) and POST /console/signout (ending the caller's session).
// The daemon mounts it beside the console's pages. Only same-origin browser
// requests are taken.
func (s *Server) ConsoleSignIn() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serve(w, r, slog.LevelInfo, s.serveConsoleSignIn)
	})
}

func (s *Server) serveConsoleSignIn(rq *request) {
	r := rq.r
	rq.route = r.URL.Path
	if r.Method != http.MethodPost {
		rq.w.Header().Set("Allow", http.MethodPost)
		s.writeError(rq, model.Errorf(model.ErrNotFound, "Method %s %s is not defined by this API", r.Method, r.URL.Path))
		return
	}
	if err := checkSameOrigin(r); err != nil {
		s.writeError(rq, err)
		return
	}
	rq.w.Header().Set("Cache-Control", "no-store")
	if r.URL.Path == "/console/signout" {
		if tok := bearerToken(r); strings.HasPrefix(tok, consoleTokenPrefix) {
			s.console.endSession(tok)
		}
		s.writeJSON(rq, http.StatusOK, map[string]string{})
		return
	}
	var req struct {
		Code string `json:"code"`
	}
	body, err := io.ReadAll(http.MaxBytesReader(rq.w, r.Body, 4096))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil || req.Code == "" {
		s.writeError(rq, model.Invalid("code", "expected a JSON body {\"code\": \"…\"}"))
		return
	}
	now := s.now()
	g, ok := s.console.take(req.Code, now)
	if !ok {
		if ok, wait := s.authFailures.allow(clientKey(r.RemoteAddr)); !ok {
			s.tooMany(rq, wait, "Too many failed sign-ins; retry after "+wait.Round(time.Second).String())
			return
		}
		s.writeError(rq, model.Errorf(model.ErrUnauthenticated, "This sign-in link is unknown, used or expired: run basin console for a new one"))
		return
	}
	if _, err := s.recheckConsole(rq.ctx, g); err != nil {
		s.writeError(rq, model.Errorf(model.ErrUnauthenticated, "This sign-in link no longer works: %s", publicReason(err)))
		return
	}
	g.expires = now.Add(consoleSessionTTL)
	if !g.sessionEnd.IsZero() && g.sessionEnd.Before(g.expires) {
		g.expires = g.sessionEnd
	}
	tok, err := s.console.add(s.console.sessions, consoleTokenPrefix, g, now)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	rq.principal = &iam.Principal{Email: g.email}
	s.writeAudit(rq.ctx, &model.AuditEntry{ID: fmt.Sprintf("%019d-%s", now.UnixNano(), rq.id), Time: now.UTC(), Principal: g.email, Method: "basin.console.signIn",
		Resource: "console", Status: http.StatusOK, Outcome: "OK", RequestID: rq.id, Client: hostOf(r.RemoteAddr)})
	s.writeJSON(rq, http.StatusOK, map[string]any{"access_token": tok, "token_type": "Bearer",
		"expires_in": int(g.expires.Sub(now).Seconds()), "principal": g.email})
}
