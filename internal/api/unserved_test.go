package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// User-Agents as the clients send them. gcloudUA is what gcloud 528 sent Basin
// (googlecloudsdk/core/transport.py: the apitools client's "google-cloud-sdk",
// then MakeUserAgentString).
const (
	gcloudUA = "google-cloud-sdk gcloud/528.0.0 command/gcloud.netapp.kms-configs.list " +
		"invocation-id/7c5b1a336685447d961609ce4bbe1295 environment/None environment-version/None " +
		"client-os/LINUX client-os-ver/6.18.44 client-pltf-arch/x86_64 interactive/False " +
		"from-script/False python/3.12.10 term/xterm (Linux 6.18.44-fc-v657)"
	pythonUA = "python-requests/2.34.2"                // google-cloud-netapp over REST
	nodeUA   = "google-api-nodejs-client/9.3.1 (gzip)" // googleapis (googleapis-common)
	goUA     = "google-api-go-client/0.5"              // google.golang.org/api
)

func TestFromGcloud(t *testing.T) {
	for _, c := range []struct {
		ua   string
		want bool
	}{
		{gcloudUA, true},
		{"gcloud/528.0.0 command/gcloud.netapp.volumes.list invocation-id/x", true},
		{"google-cloud-sdk gcloud/528.0.0 command/None invocation-id/x", true},
		{"", false},
		{"Go-http-client/1.1", false},
		{pythonUA, false},
		{nodeUA, false},
		{goUA, false},
		{"gcloud-golang/0.1 command/x", false},           // cloud.google.com/go's old product
		{"google-cloud-sdk gcloud/528.0.0", false},       // no command/ after it
		{"gcloud/ command/gcloud.netapp", false},         // no version
		{"my-gcloud/1 command/gcloud.netapp", false},     // another product
		{"curl/8.5.0 (gcloud/528.0.0 command/x)", false}, // a comment, not products
	} {
		r := httptest.NewRequest(http.MethodGet, "/v1/projects/p1/locations", nil)
		r.Header.Set("User-Agent", c.ua)
		if got := fromGcloud(r); got != c.want {
			t.Errorf("fromGcloud(%q) = %v, want %v", c.ua, got, c.want)
		}
	}
}

// TestUnservedMethods: every v1 method Basin does not implement (and the
// metrics of a server that collects none) answers 501 UNIMPLEMENTED, the
// contract, to every client but gcloud; gcloud, whose HTTP layer (apitools)
// retries every 5xx for about 30 s before calling it a network problem, gets
// 400 FAILED_PRECONDITION with the same message. Both carry the ErrorInfo
// reason METHOD_NOT_IMPLEMENTED and no Retry-After (docs/api.md, "Statuses").
func TestUnservedMethods(t *testing.T) {
	e := newEnv(t)
	vars := map[string]string{}
	for k, v := range sampleVars {
		vars[k] = v
	}
	vars["operation"], vars["serviceAccount"], vars["key"] = "op1", "sa1", "k1"
	type call struct{ method, path, msg string }
	var calls []call
	for _, c := range routeCalls(t, e.api.routes, vars) {
		if c.route.Public == notBuilt {
			calls = append(calls, call{c.method, c.path, "is not implemented by Basin"})
		}
	}
	if len(calls) < 40 {
		t.Fatalf("only %d calls of unserved routes: the route table lost them?", len(calls))
	}
	calls = append(calls, call{http.MethodGet, loc + "/metrics", "metrics are not collected"})
	for _, c := range []struct {
		ua     string
		status int
		name   string
	}{
		{"", http.StatusNotImplemented, "UNIMPLEMENTED"},
		{pythonUA, http.StatusNotImplemented, "UNIMPLEMENTED"},
		{nodeUA, http.StatusNotImplemented, "UNIMPLEMENTED"},
		{goUA, http.StatusNotImplemented, "UNIMPLEMENTED"},
		{gcloudUA, http.StatusBadRequest, "FAILED_PRECONDITION"},
	} {
		e.ua = c.ua
		for _, k := range calls {
			var body any
			if k.method == http.MethodPost || k.method == http.MethodPatch {
				body = map[string]any{}
			}
			r := e.do(k.method, k.path, body)
			errObj, _ := r.body["error"].(map[string]any)
			if r.status != c.status || errObj["status"] != c.name || errObj["code"] != float64(c.status) {
				t.Errorf("%q: %s %s: %d %s, want %d %s", c.ua, k.method, k.path, r.status, r.raw, c.status, c.name)
				continue
			}
			if msg, _ := errObj["message"].(string); !strings.Contains(msg, k.msg) {
				t.Errorf("%q: %s %s: message %q, want %q", c.ua, k.method, k.path, msg, k.msg)
			}
			if !strings.Contains(r.raw, `"reason":"METHOD_NOT_IMPLEMENTED"`) || strings.Count(r.raw, `"reason"`) != 1 {
				t.Errorf("%q: %s %s: want the one reason METHOD_NOT_IMPLEMENTED: %s", c.ua, k.method, k.path, r.raw)
			}
			if ra := r.header.Get("Retry-After"); ra != "" {
				t.Errorf("%q: %s %s: Retry-After %q makes clients repeat it", c.ua, k.method, k.path, ra)
			}
		}
	}
}

// TestGcloudOtherErrorsUnchanged: the User-Agent changes only UNIMPLEMENTED; a
// failed precondition keeps its own reason, a 404 stays a 404.
func TestGcloudOtherErrorsUnchanged(t *testing.T) {
	e := newEnv(t)
	e.ua = gcloudUA
	e.pool("pool1", 2048, nil)
	r := e.fails("POST", loc+"/storagePools/pool1:switch", map[string]any{}, 400, "FAILED_PRECONDITION")
	if !strings.Contains(r.raw, `"reason":"FAILED_PRECONDITION"`) {
		t.Errorf("switch without replica: %s", r.raw)
	}
	e.fails("GET", loc+"/volumes/nope", nil, 404, "NOT_FOUND")
}
