// Package client is a small Go client of Basin's REST API, used by the CLI, the load
// generator and end-to-end tests. Like the official Google clients it signs its own
// short-lived RS256 JWTs with a service-account key file. It imports nothing of
// Basin's server packages: resources travel as generic JSON objects.
package client

import (
	"bytes"
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Audience is the audience the official clients use; Basin accepts it.
const Audience = "https://netapp.googleapis.com/"

// KeyFile is the part of a service-account key file the client needs.
type KeyFile struct {
	Type         string `json:"type"`
	PrivateKeyID string `json:"private_key_id"`
	PrivateKey   string `json:"private_key"`
	ClientEmail  string `json:"client_email"`
}

// Client talks to one Basin endpoint.
type Client struct {
	base string
	http *http.Client
	key  *KeyFile
	priv *rsa.PrivateKey

	mu      sync.Mutex
	token   string
	expires time.Time
}

// New returns a client for endpoint (e.g. http://127.0.0.1:8780). keyFile may be ""
// for a server running with --insecure-no-auth.
func New(endpoint, keyFile string) (*Client, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("endpoint %q must be an http:// or https:// URL", endpoint)
	}
	c := &Client{base: strings.TrimRight(endpoint, "/"), http: &http.Client{Timeout: 60 * time.Second}}
	if keyFile == "" {
		return c, nil
	}
	data, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	var kf KeyFile
	if err := json.Unmarshal(data, &kf); err != nil {
		return nil, fmt.Errorf("key file %s: %w", keyFile, err)
	}
	block, _ := pem.Decode([]byte(kf.PrivateKey))
	if block == nil {
		return nil, fmt.Errorf("key file %s: private_key is not PEM", keyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", keyFile, err)
	}
	priv, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("key file %s: not an RSA key", keyFile)
	}
	c.key, c.priv = &kf, priv
	return c, nil
}

func (c *Client) bearer() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.token != "" && now.Before(c.expires.Add(-5*time.Minute)) {
		return c.token, nil
	}
	t := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.RegisteredClaims{
		Issuer: c.key.ClientEmail, Subject: c.key.ClientEmail, Audience: jwt.ClaimStrings{Audience},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour)),
	})
	t.Header["kid"] = c.key.PrivateKeyID
	s, err := t.SignedString(c.priv)
	if err != nil {
		return "", err
	}
	c.token, c.expires = s, now.Add(time.Hour)
	return s, nil
}

// Error is an API error (the body is Google APIs' {"error": {...}}, apiv1.ErrorBody).
type Error struct {
	HTTPStatus int
	Status     string
	Message    string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.HTTPStatus, e.Status, e.Message)
}

// Do calls method path (e.g. "/v1/projects/p/locations/l/volumes") and decodes the
// JSON answer into out (nil = discard).
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.key != nil {
		tok, err := c.bearer()
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var eb struct {
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
				Status  string `json:"status"`
			} `json:"error"`
		}
		if json.Unmarshal(data, &eb) == nil && eb.Error.Message != "" {
			return &Error{HTTPStatus: resp.StatusCode, Status: eb.Error.Status, Message: eb.Error.Message}
		}
		return &Error{HTTPStatus: resp.StatusCode, Message: strings.TrimSpace(string(data))}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// Object is a resource or operation as JSON.
type Object = map[string]any

// Wait polls the operation until it is done and returns it; a failed operation is
// returned together with an *OperationError.
func (c *Client) Wait(ctx context.Context, op Object) (Object, error) {
	delay := 100 * time.Millisecond
	for {
		if done, _ := op["done"].(bool); done {
			if e, ok := op["error"].(map[string]any); ok {
				code, _ := e["code"].(float64)
				msg, _ := e["message"].(string)
				return op, &OperationError{Code: int(code), Message: msg}
			}
			return op, nil
		}
		name, _ := op["name"].(string)
		if name == "" {
			return op, errors.New("operation has no name")
		}
		select {
		case <-ctx.Done():
			return op, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 2*time.Second)
		var next Object
		if err := c.Do(ctx, http.MethodGet, "/v1/"+name, nil, nil, &next); err != nil {
			return op, err
		}
		op = next
	}
}

// OperationError is a finished operation's error (a gRPC code).
type OperationError struct {
	Code    int
	Message string
}

func (e *OperationError) Error() string {
	return fmt.Sprintf("operation failed (code %d): %s", e.Code, e.Message)
}
