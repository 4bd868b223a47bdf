package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
)

// TokenIssuer exchanges a JWT-bearer assertion for an access token (iam.Exchange).
type TokenIssuer interface {
	Exchange(ctx context.Context, assertion string, tokenURIs []string) (*iam.AccessToken, error)
}

// maxTokenBody bounds a token request: an assertion is about 1 KiB.
const maxTokenBody = 64 << 10

// tokenResponse is the OAuth 2.0 access token response (RFC 6749 §5.1).
type tokenResponse struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int64  `json:"expires_in"`
}

// oauthError is the OAuth 2.0 error response (RFC 6749 §5.2).
type oauthError struct {
	Error       string `json:"error"`
	Description string `json:"error_description,omitempty"`
}

// serveToken answers POST /token, the OAuth 2.0 JWT-bearer grant (RFC 7523) of
// Google's auth libraries: a form with grant_type and assertion, answered with an
// access token or an OAuth error (400; 405 for another method, 429 over a rate
// limit). A refused request counts against its address's --failed-auth-limit and
// is audited in aggregate; an issued token is audited under its account's project
// (never the token itself), and its account's requests count against
// --rate-limit.
func (s *Server) serveToken(rq *request) {
	rq.route = iam.TokenPath
	rq.perm = iam.PermGetAccessToken
	rq.resource = strings.TrimPrefix(iam.TokenPath, "/")
	defer s.audit(rq)
	issuer, _ := s.opts.Auth.(TokenIssuer)
	if issuer == nil {
		s.tokenRefused(rq, http.StatusNotFound, &iam.GrantError{Code: iam.ErrInvalidRequest,
			Description: "this Basin runs without authentication (--insecure-no-auth) and issues no tokens"})
		return
	}
	if rq.r.Method != http.MethodPost {
		rq.w.Header().Set("Allow", http.MethodPost)
		s.tokenRefused(rq, http.StatusMethodNotAllowed, &iam.GrantError{Code: iam.ErrInvalidRequest, Description: "the token endpoint takes POST only"})
		return
	}
	form, gerr := readTokenForm(rq)
	if gerr != nil {
		s.tokenRefused(rq, http.StatusBadRequest, gerr)
		return
	}
	tok, err := issuer.Exchange(rq.ctx, form.Get("assertion"), tokenURIs(rq.r))
	var ge *iam.GrantError
	if errors.As(err, &ge) {
		s.tokenRefused(rq, http.StatusBadRequest, ge)
		return
	}
	if err != nil {
		s.log.Error("token exchange", "err", err, "request_id", rq.id)
		s.writeOAuth(rq, http.StatusInternalServerError, fmt.Errorf("token exchange: %w", err),
			oauthError{Error: "server_error", Description: "internal error; see the server log for request " + rq.id})
		return
	}
	rq.principal = &tok.Principal
	rq.project = tok.Project
	rq.resource = "projects/" + tok.Project + "/serviceAccounts/" + tok.Principal.Email + "/keys/" + tok.KeyID
	if ok, wait := s.limits.allow(tok.Principal.Email); !ok {
		s.tokenThrottled(rq, wait, fmt.Sprintf("%s may make %d requests per minute; retry after %s",
			tok.Principal.Email, s.limits.perMinute, wait.Round(time.Second)))
		return
	}
	rq.w.Header().Set("Cache-Control", "no-store")
	rq.w.Header().Set("Pragma", "no-cache")
	s.writeJSON(rq, http.StatusOK, tokenResponse{AccessToken: tok.Token, TokenType: "Bearer", ExpiresIn: int64(tok.ExpiresIn / time.Second)})
}

// readTokenForm reads a token request's form: form-encoded, grant_type the
// JWT-bearer grant, no parameter twice.
func readTokenForm(rq *request) (url.Values, *iam.GrantError) {
	if ct, _, err := mime.ParseMediaType(rq.r.Header.Get("Content-Type")); err != nil || ct != "application/x-www-form-urlencoded" {
		return nil, &iam.GrantError{Code: iam.ErrInvalidRequest, Description: "the body must be application/x-www-form-urlencoded"}
	}
	body, err := io.ReadAll(http.MaxBytesReader(rq.w, rq.r.Body, maxTokenBody))
	if err != nil {
		return nil, &iam.GrantError{Code: iam.ErrInvalidRequest, Description: fmt.Sprintf("the body could not be read whole (at most %d bytes)", maxTokenBody)}
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, &iam.GrantError{Code: iam.ErrInvalidRequest, Description: "the body is not a valid form"}
	}
	for k, v := range form {
		if len(v) > 1 {
			return nil, &iam.GrantError{Code: iam.ErrInvalidRequest, Description: "parameter " + k + " is given more than once"}
		}
	}
	switch gt := form.Get("grant_type"); gt {
	case "":
		return nil, &iam.GrantError{Code: iam.ErrInvalidRequest, Description: "grant_type is required (" + iam.GrantTypeJWTBearer + ")"}
	case iam.GrantTypeJWTBearer:
		return form, nil
	default:
		return nil, &iam.GrantError{Code: iam.ErrUnsupportedGrantType, Description: fmt.Sprintf("grant_type %q is not supported; Basin takes %s", gt, iam.GrantTypeJWTBearer)}
	}
}

// tokenURIs are the URLs under which a client reached the token endpoint, which its
// assertion's aud may name (Go's oauth2 puts the key file's token_uri there).
func tokenURIs(r *http.Request) []string {
	return []string{"http://" + r.Host + iam.TokenPath, "https://" + r.Host + iam.TokenPath}
}

// tokenRefused answers a refused token request with its OAuth error, or 429 once
// the address is over the failed-authentication limit. It is audited in
// aggregate, as a refused API call is.
func (s *Server) tokenRefused(rq *request, status int, ge *iam.GrantError) {
	rq.aggregate = true
	rq.reason = ge.Error()
	if ok, wait := s.authFailures.allow(clientKey(rq.r.RemoteAddr)); !ok {
		s.tokenThrottled(rq, wait, fmt.Sprintf("too many refused requests from %s; retry after %s", hostOf(rq.r.RemoteAddr), wait.Round(time.Second)))
		return
	}
	kind := model.ErrInvalid
	if ge.Code == iam.ErrInvalidGrant || ge.Code == iam.ErrInvalidScope {
		kind = model.ErrUnauthenticated
	}
	s.writeOAuth(rq, status, model.Errorf(kind, "%s", ge.Description), oauthError{Error: ge.Code, Description: ge.Description})
}

// tokenThrottled answers 429 with Retry-After, in the error Google's token
// endpoint uses.
func (s *Server) tokenThrottled(rq *request, wait time.Duration, msg string) {
	retryAfter(rq, wait)
	s.writeOAuth(rq, http.StatusTooManyRequests, model.Errorf(model.ErrResourceExhausted, "%s", msg),
		oauthError{Error: "rate_limit_exceeded", Description: msg})
}

// writeOAuth sends an OAuth error body; err is what the audit log records.
func (s *Server) writeOAuth(rq *request, status int, err error, body oauthError) {
	rq.err = err
	rq.w.Header().Set("Cache-Control", "no-store")
	s.writeJSON(rq, status, body)
}
